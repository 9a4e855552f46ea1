#!/usr/bin/env bash
# Builds kube-apiserver, kubectl, etcd and helm, and the one-node cluster's kubelet,
# kube-controller-manager and kube-scheduler, from the pinned Go modules under tools/ into
# ${UPDATESTREAM_CACHE_DIR:-~/.cache/updatestream}/bin, once. Each module has a stamp keyed by
# the hash of its go.mod and go.sum (and of the build recipe below); when every stamp matches,
# the script prints one line and exits. Concurrent runs wait for each other on a lock file.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache_dir=${UPDATESTREAM_CACHE_DIR:-$HOME/.cache/updatestream}
bin_dir=$cache_dir/bin
# Bump when the flags or the way a binary is produced change, so old builds are redone.
recipe="v2 -trimpath -ldflags=-s -w -p 2"

# shellcheck source=scripts/go-env.sh
source "$repo/scripts/go-env.sh"
go_cmd=$(find_go build-kube-tools 1.26)

# module directory -> "binary=package ..." it produces
declare -A targets=(
  [kube]="kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver kubectl=k8s.io/kubernetes/cmd/kubectl"
  [etcd]="etcd=go.etcd.io/etcd/server/v3"
  [helm]="helm=helm.sh/helm/v3/cmd/helm"
  [node]="kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager
    kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler kubelet=k8s.io/kubernetes/cmd/kubelet"
)
# The node's binaries come from the same module (and k8s.io/kubernetes version) as the API
# server; they have a stamp of their own so they can be built alone: `build-kube-tools.sh node`.
declare -A module_dirs=([kube]=kube [etcd]=etcd [helm]=helm [node]=kube)
if [ $# -gt 0 ]; then modules=("$@"); else modules=(kube etcd helm node); fi
for module in "${modules[@]}"; do
  [ -n "${module_dirs[$module]:-}" ] || {
    echo "build-kube-tools: unknown module '$module' (kube, etcd, helm or node)" >&2
    exit 2
  }
done

module_hash() {
  local dir=${module_dirs[$1]}
  { echo "$recipe"; cat "$repo/tools/$dir/go.mod" "$repo/tools/$dir/go.sum"; } | sha256sum | cut -c1-16
}

up_to_date() {
  local module=$1 spec
  [ "$(cat "$bin_dir/.stamp-$module" 2>/dev/null)" = "$(module_hash "$module")" ] || return 1
  for spec in ${targets[$module]}; do
    [ -x "$bin_dir/${spec%%=*}" ] || return 1
  done
}

all_up_to_date() {
  local module
  for module in "${modules[@]}"; do up_to_date "$module" || return 1; done
}

if all_up_to_date; then
  echo "kube tools up to date in $bin_dir (${modules[*]})"
  exit 0
fi

mkdir -p "$bin_dir"
exec 9>"$cache_dir/.build-kube-tools.lock"
if ! flock -n 9; then
  echo "build-kube-tools: another build is running, waiting for it"
  flock 9
fi

# Version of a module as pinned in a tools/ go.mod.
pinned() { awk -v m="$2" '$1 == m { print $2; exit }' "$repo/tools/$1/go.mod"; }

ldflags_for() {
  local module=$1 flags="-s -w" v
  case $module in
    kube | node)
      v=$(pinned kube k8s.io/kubernetes)
      local major=${v#v}; major=${major%%.*}
      local minor=${v#v*.}; minor=${minor%%.*}
      local pkg
      for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
        flags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit="
      done
      ;;
    helm)
      v=$(pinned helm helm.sh/helm/v3)
      flags+=" -X helm.sh/helm/v3/internal/version.version=$v"
      flags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
      # Helm reports the Kubernetes version it was built against (its client libraries).
      v=$(pinned helm k8s.io/client-go)
      local kminor=${v#v*.}; kminor=${kminor%%.*}
      flags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1"
      flags+=" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$kminor"
      flags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1"
      flags+=" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$kminor"
      ;;
  esac
  echo "$flags"
}

export GOCACHE=${UPDATESTREAM_GOCACHE:-$cache_dir/go-build}
export GOFLAGS="-mod=mod -buildvcs=false"
started=$SECONDS
echo "building kube tools into $bin_dir with $("$go_cmd" version | cut -d' ' -f3) (GOCACHE=$GOCACHE)"
for module in "${modules[@]}"; do
  if up_to_date "$module"; then
    echo "  tools/$module: up to date"
    continue
  fi
  flags=$(ldflags_for "$module")
  for spec in ${targets[$module]}; do
    name=${spec%%=*} pkg=${spec#*=}
    t0=$SECONDS
    echo "  building $name from $pkg ..."
    (cd "$repo/tools/${module_dirs[$module]}" &&
      nice -n 10 "$go_cmd" build -p 2 -trimpath -ldflags="$flags" -o "$bin_dir/.$name.tmp" "$pkg")
    mv -f "$bin_dir/.$name.tmp" "$bin_dir/$name"
    echo "  built $name in $((SECONDS - t0))s"
  done
  module_hash "$module" >"$bin_dir/.stamp-$module"
done
echo "kube tools built in $((SECONDS - started))s: $bin_dir"
