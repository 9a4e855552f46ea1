# Sourced by scripts/cluster-up.sh and scripts/cluster-down.sh: where the one-node cluster
# keeps its state and which addresses it uses. Everything a run creates is under $NODE_DIR
# (default .updatestream/node in the checkout) except containerd's image store, which lives in
# the cache directory so images survive a `cluster-down`.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_dir=${UPDATESTREAM_CACHE_DIR:-$HOME/.cache/updatestream}
bin_dir=$cache_dir/bin
NODE_DIR=${UPDATESTREAM_NODE_DIR:-$repo/.updatestream/node}
NODE_NAME=updatestream-node
# The pod network: a bridge of our own with a private range nothing else on the machine uses.
# The API server, kubelet and the test servers listen on the bridge address; the Service range
# is never routed (no kube-proxy), only its first address is forwarded to the API server.
BRIDGE=usnode0
POD_CIDR=10.77.0.0/24
BRIDGE_IP=10.77.0.1
SERVICE_CIDR=10.78.0.0/24
KUBERNETES_SERVICE_IP=10.78.0.1
APISERVER_PORT=6443
CHAIN=UPDATESTREAM-NODE
CONTAINERD_ROOT=$cache_dir/containerd
PKI=$NODE_DIR/pki
RUN=$NODE_DIR/run
LOGS=$NODE_DIR/logs
KUBELET_ROOT=$NODE_DIR/kubelet
CONTAINERD_ADDRESS=$RUN/containerd.sock
KUBECONFIG_ADMIN=$NODE_DIR/kubeconfig
# What kubelet and the bridge plugin change on the host: saved by up, restored by down.
SYSCTLS=(net.ipv4.ip_forward vm.overcommit_memory kernel.panic kernel.panic_on_oops)
# Directories kubelet creates outside its root dir: removed by down when up found them absent.
OUTSIDE_DIRS=(/var/lib/kubelet /var/log/containers /var/log/pods /usr/libexec/kubernetes
  /var/lib/cni /run/containerd)
export PATH=$bin_dir:$PATH
