#!/usr/bin/env bash
# Installs the Debian packages the tests, benchmarks and demo need, only when missing:
# the servers (MariaDB, memcached, Prometheus, etcd) and what the one-node Kubernetes cluster
# and its image need (containerd, runc, the CNI plugins, iptables, conntrack, buildah,
# mmdebstrap, a static libc for the pause program), and the C libraries the benchmarks' load
# generator builds with (MariaDB Connector/C, OpenSSL, xxHash). Services are never started by
# the install (policy-rc.d), the tests and scripts/cluster-up.sh start their own.
set -euo pipefail

need=()
command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || need+=(mariadb-server)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
command -v memcached >/dev/null 2>&1 || [ -x /usr/bin/memcached ] || need+=(memcached)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || need+=(etcd-server)
[ -x /usr/bin/containerd ] || need+=(containerd)
[ -x /usr/sbin/runc ] || need+=(runc)
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
[ -x /usr/sbin/iptables ] || need+=(iptables)
[ -x /usr/sbin/conntrack ] || need+=(conntrack)
command -v buildah >/dev/null 2>&1 || need+=(buildah)
command -v mmdebstrap >/dev/null 2>&1 || need+=(mmdebstrap)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -n "$(find /usr/lib -name libc.a -print -quit 2>/dev/null)" ] || need+=(libc6-dev)
[ -e /usr/include/mariadb/mysql.h ] || need+=(libmariadb-dev)
[ -e /usr/include/openssl/des.h ] || need+=(libssl-dev)
[ -e /usr/include/xxhash.h ] || need+=(libxxhash-dev)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

echo "installing Debian packages: ${need[*]}"
created_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
  $sudo chmod +x /usr/sbin/policy-rc.d
  created_policy=1
fi
cleanup() { if [ "$created_policy" = 1 ]; then $sudo rm -f /usr/sbin/policy-rc.d; fi; }
trap cleanup EXIT

$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}"
