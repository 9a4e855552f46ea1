#!/usr/bin/env bash
# Starts a one-node Kubernetes cluster on this machine (must run as root): etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, containerd and kubelet, each started
# here and recorded by pid under $NODE_DIR/pids for scripts/cluster-down.sh. Pods live on a
# bridge of our own ($BRIDGE, $POD_CIDR) that nothing routes out of; what the node changes on
# the host (sysctls, firewall rules, directories) is recorded so `down` can undo it.
# Prints the admin kubeconfig's path at the end; `make cluster-down` stops it all.
set -euo pipefail
# shellcheck source=scripts/cluster-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"
# shellcheck source=scripts/cluster-pki.sh
source "$repo/scripts/cluster-pki.sh"

fail() { echo "cluster-up: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "must run as root (it creates a bridge, firewall rules and cgroups)"
for tool in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd; do
  [ -x "$bin_dir/$tool" ] || fail "$bin_dir/$tool is missing: run \`make kube-tools\` first"
done
for tool in containerd ctr /usr/sbin/runc /usr/lib/cni/bridge iptables; do
  command -v "$tool" >/dev/null || fail "$tool is missing: run \`make system-deps\` first"
done
if [ -e "$NODE_DIR/pids" ]; then
  fail "a node seems to run already ($NODE_DIR/pids exists): run \`make cluster-down\` first"
fi
if ip -o addr show | grep -qF " $BRIDGE_IP/" || ip route show | grep -qF "${POD_CIDR%/*}"; then
  fail "$POD_CIDR is already in use on this machine; set another range in scripts/cluster-env.sh"
fi

rm -rf "$NODE_DIR"
mkdir -p "$NODE_DIR/pids" "$RUN" "$LOGS" "$KUBELET_ROOT" "$NODE_DIR/cni/net.d" "$CONTAINERD_ROOT"
started=$SECONDS

record_host_state() {
  local name dir
  for name in "${SYSCTLS[@]}"; do echo "$name=$(sysctl -n "$name")"; done >"$NODE_DIR/sysctls"
  for dir in "${OUTSIDE_DIRS[@]}"; do [ -e "$dir" ] || echo "$dir"; done >"$NODE_DIR/created-dirs"
  iptables -S >"$NODE_DIR/iptables.before"
  iptables -t nat -S >"$NODE_DIR/iptables-nat.before"
}

start() { # name command...: runs it in its own session, logs to $LOGS/name.log
  local name=$1
  shift
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$NODE_DIR/pids/$name"
  echo "$name" >>"$NODE_DIR/start-order"
}

wait_for() { # what seconds command...
  local what=$1 seconds=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "cluster-up: $what did not come up within ${seconds}s; the end of its log:" >&2
      tail -n 20 "$LOGS/$what.log" >&2 || true
      exit 1
    fi
    sleep 0.3
  done
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

network() {
  ip link add "$BRIDGE" type bridge
  ip addr add "$BRIDGE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  echo "$BRIDGE" >"$NODE_DIR/bridge"
  # Pods reach the bridge address and each other, nothing else; the kubernetes Service's
  # address is forwarded to the API server (what kube-proxy would do for this one Service).
  iptables -N "$CHAIN"
  iptables -A "$CHAIN" -s "$POD_CIDR" -d "$POD_CIDR" -j RETURN
  iptables -A "$CHAIN" -s "$POD_CIDR" -j DROP
  iptables -I INPUT 1 -j "$CHAIN"
  iptables -I FORWARD 1 -j "$CHAIN"
  iptables -t nat -N "$CHAIN"
  iptables -t nat -A "$CHAIN" -s "$POD_CIDR" -d "$KUBERNETES_SERVICE_IP" -p tcp --dport 443 \
    -j DNAT --to-destination "$BRIDGE_IP:$APISERVER_PORT"
  iptables -t nat -I PREROUTING 1 -j "$CHAIN"
  echo "nameserver $BRIDGE_IP" >"$NODE_DIR/resolv.conf"
  cat >"$NODE_DIR/cni/net.d/10-updatestream.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "updatestream-node", "plugins": [
  {"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
   "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": "$NODE_DIR/cni/ipam",
            "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$BRIDGE_IP"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
EOF
}

control_plane() {
  local etcd_port peer_port
  etcd_port=$(free_port)
  peer_port=$(free_port)
  echo "http://127.0.0.1:$etcd_port" >"$NODE_DIR/etcd-url"
  start etcd "$bin_dir/etcd" --data-dir "$NODE_DIR/etcd" --unsafe-no-fsync \
    --listen-client-urls "http://127.0.0.1:$etcd_port" \
    --advertise-client-urls "http://127.0.0.1:$etcd_port" \
    --listen-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
    --initial-cluster "default=http://127.0.0.1:$peer_port"
  start kube-apiserver "$bin_dir/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address "$BRIDGE_IP" --advertise-address "$BRIDGE_IP" \
    --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --kubelet-client-certificate "$PKI/admin.crt" --kubelet-client-key "$PKI/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --authorization-mode Node,RBAC \
    --service-account-issuer "https://kubernetes.default.svc" \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --enable-admission-plugins NodeRestriction
  wait_for kube-apiserver 60 kubectl --kubeconfig "$KUBECONFIG_ADMIN" get --raw /readyz
  start kube-controller-manager "$bin_dir/kube-controller-manager" \
    --kubeconfig "$PKI/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$PKI/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$PKI/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --controllers '*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-route'
  start kube-scheduler "$bin_dir/kube-scheduler" \
    --kubeconfig "$PKI/scheduler.kubeconfig" \
    --authentication-kubeconfig "$PKI/scheduler.kubeconfig" \
    --authorization-kubeconfig "$PKI/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false
}

containerd_up() {
  sed -e "s#@ROOT@#$CONTAINERD_ROOT#; s#@STATE@#$NODE_DIR/containerd#; s#@SOCKET@#$CONTAINERD_ADDRESS#" \
    -e "s#@CNI_CONF@#$NODE_DIR/cni/net.d#; s#@PAUSE@#localhost/updatestream-pause:1.0.0#" \
    "$repo/scripts/node/containerd.toml" >"$NODE_DIR/containerd.toml"
  start containerd containerd --config "$NODE_DIR/containerd.toml"
  wait_for containerd 30 ctr --address "$CONTAINERD_ADDRESS" version
  CONTAINERD_ADDRESS=$CONTAINERD_ADDRESS "$repo/scripts/build-image.sh" pause
}

kubelet_up() {
  sed -e "s#@CA@#$PKI/ca.crt#; s#@SOCKET@#$CONTAINERD_ADDRESS#; s#@NODE_IP@#$BRIDGE_IP#" \
    -e "s#@RESOLV@#$NODE_DIR/resolv.conf#; s#@LOGS@#$NODE_DIR/pod-logs#" \
    "$repo/scripts/node/kubelet.yaml" >"$NODE_DIR/kubelet.yaml"
  start kubelet "$bin_dir/kubelet" --config "$NODE_DIR/kubelet.yaml" \
    --kubeconfig "$PKI/node.kubeconfig" --root-dir "$KUBELET_ROOT" \
    --hostname-override "$NODE_NAME" --node-ip "$BRIDGE_IP"
  wait_for kubelet 60 kubectl --kubeconfig "$KUBECONFIG_ADMIN" wait --for=condition=Ready \
    "node/$NODE_NAME" --timeout=1s
}

record_host_state
network
make_pki
control_plane
containerd_up
kubelet_up
# what a shell needs to use the node: its kubeconfig, and the kubectl and helm built for it
# first on PATH (an older kubectl of the system may not talk to a v1.36 API server)
printf 'export KUBECONFIG=%s\nexport PATH=%s:$PATH\n' "$KUBECONFIG_ADMIN" "$bin_dir" \
  >"$NODE_DIR/env"
echo "node $NODE_NAME Ready in $((SECONDS - started))s;" \
  "export KUBECONFIG=$KUBECONFIG_ADMIN PATH=$bin_dir:\$PATH"
