#!/usr/bin/env bash
# Stops the one-node cluster scripts/cluster-up.sh started and undoes what it changed on the
# host: pods stopped through kubelet (so CNI releases their addresses), leftover containers
# killed through containerd, every process stopped by the pid up recorded (and containerd's
# shims by theirs), mounts under the node's directories unmounted, the bridge deleted, the
# firewall rules and chains the node added removed, the sysctls restored, the cgroups and the
# directories kubelet created outside its root removed. Safe to run twice. Logs of the last run
# stay in .updatestream/node-logs.
set -uo pipefail
# shellcheck source=scripts/cluster-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster-env.sh"

if [ ! -d "$NODE_DIR/pids" ]; then
  echo "no node running (no $NODE_DIR/pids)"
  exit 0
fi

pid_of() { cat "$NODE_DIR/pids/$1" 2>/dev/null; }
alive() { local pid; pid=$(pid_of "$1") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }

stop() { # name: SIGTERM, then SIGKILL after 15 s
  local pid i
  pid=$(pid_of "$1") || return 0
  kill -TERM "$pid" 2>/dev/null || { rm -f "$NODE_DIR/pids/$1"; return 0; }
  for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null && echo "killed $1 ($pid) after 15 s"
  rm -f "$NODE_DIR/pids/$1"
}

k() { kubectl --kubeconfig "$KUBECONFIG_ADMIN" --request-timeout=10s "$@"; }
c() { ctr --address "$CONTAINERD_ADDRESS" -n k8s.io "$@"; }

drain_pods() { # let kubelet stop the pods itself, so CNI and the mounts are released cleanly
  alive kubelet && alive kube-apiserver || return 0
  stop kube-controller-manager
  stop kube-scheduler
  k delete pods --all --all-namespaces --grace-period=2 --wait=false >/dev/null 2>&1
  local deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ]; do
    [ -z "$(c tasks ls -q 2>/dev/null)" ] && return 0
    sleep 1
  done
  echo "pods still running after 60 s; killing their containers"
}

kill_containers() {
  alive containerd || return 0
  local id
  for id in $(c tasks ls -q 2>/dev/null); do c tasks kill -s SIGKILL "$id" >/dev/null 2>&1; done
  sleep 1
  for id in $(c tasks ls -q 2>/dev/null); do c tasks delete -f "$id" >/dev/null 2>&1; done
  for id in $(c containers ls -q 2>/dev/null); do c containers delete "$id" >/dev/null 2>&1; done
}

stop_shims() { # containerd's shims outlive it: stop those serving our socket, by pid
  local pid
  for pid in $(pgrep -f containerd-shim-runc-v2); do
    if tr '\0' ' ' </proc/"$pid"/cmdline 2>/dev/null | grep -qF -- "$CONTAINERD_ADDRESS"; then
      kill -KILL "$pid" 2>/dev/null
    fi
  done
}

unmount_all() { # everything mounted under our directories, deepest first
  local mount
  awk '{print $5}' /proc/self/mountinfo | grep -E "^($NODE_DIR|$CONTAINERD_ROOT|/var/lib/kubelet)/" |
    sort -r | while read -r mount; do umount -l "$mount" 2>/dev/null; done
}

firewall() { # remove what the node added: our chain, kubelet's KUBE-* and the CNI plugins' CNI-*
  local cmd table rule chain
  for cmd in iptables ip6tables; do
    for table in filter nat mangle; do
      $cmd -t "$table" -S 2>/dev/null | grep '^-A' | grep -E -- "KUBE-|CNI-|$CHAIN" |
        while read -r rule; do eval "$cmd -t $table ${rule/-A/-D}"; done
      for chain in $($cmd -t "$table" -S 2>/dev/null | awk '$1=="-N"{print $2}' |
        grep -E "^(KUBE-|CNI-|$CHAIN)"); do
        $cmd -t "$table" -F "$chain"
        $cmd -t "$table" -X "$chain"
      done
    done
  done
}

host_state() {
  local line dir hierarchy
  ip link del "$BRIDGE" 2>/dev/null
  firewall
  while IFS= read -r line; do sysctl -q -w "$line" >/dev/null; done <"$NODE_DIR/sysctls"
  for hierarchy in /sys/fs/cgroup/*/; do
    [ -d "$hierarchy/kubepods" ] && find "$hierarchy/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  while IFS= read -r dir; do [ -n "$dir" ] && rm -rf "$dir"; done <"$NODE_DIR/created-dirs"
}

started=$SECONDS
drain_pods
stop kubelet
kill_containers
stop containerd
stop_shims
for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$name"; done
unmount_all
host_state
if ! diff -q <(iptables -S) "$NODE_DIR/iptables.before" >/dev/null ||
  ! diff -q <(iptables -t nat -S) "$NODE_DIR/iptables-nat.before" >/dev/null; then
  echo "cluster-down: the firewall differs from before cluster-up:" >&2
  diff <(iptables -S) "$NODE_DIR/iptables.before" >&2
  diff <(iptables -t nat -S) "$NODE_DIR/iptables-nat.before" >&2
  exit 1
fi
rm -rf "$repo/.updatestream/node-logs"
mkdir -p "$repo/.updatestream"
mv "$LOGS" "$repo/.updatestream/node-logs" 2>/dev/null
rm -rf "$NODE_DIR"
echo "node stopped and host restored in $((SECONDS - started))s"
