#!/usr/bin/env bash
# Builds the Vitess programs the local Vitess cluster runs (vtctld, vtctldclient, vtgate,
# vttablet, mysqlctl), and the module's own programs under tools/vitess/cmd (vstream-client),
# from the Go module pinned in tools/vitess/go.mod into
# ${UPDATESTREAM_CACHE_DIR:-~/.cache/updatestream}/vitess/<version>/bin, once, with the
# machine's Go. The directory holds a stamp keyed by the hash of go.mod, go.sum, the module's
# own Go sources and the build recipe below; when it matches, the script prints one line and
# exits. Concurrent runs wait for each other on a lock file. Prints the binary directory last.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
module_dir=$repo/tools/vitess
cache_dir=${UPDATESTREAM_CACHE_DIR:-$HOME/.cache/updatestream}
# Bump when the flags or the way a binary is produced change, so old builds are redone.
recipe="v1 -trimpath -ldflags=-s -w -p 2"
packages=(
  vitess.io/vitess/go/cmd/vtctld
  vitess.io/vitess/go/cmd/vtctldclient
  vitess.io/vitess/go/cmd/vtgate
  vitess.io/vitess/go/cmd/vttablet
  vitess.io/vitess/go/cmd/mysqlctl
)

# shellcheck source=scripts/go-env.sh
source "$repo/scripts/go-env.sh"
go_cmd=$(find_go build-vitess 1.26.8)

# shellcheck source=scripts/vitess-env.sh
source "$repo/scripts/vitess-env.sh"
version=$VITESS_VERSION
[ -n "$version" ] || {
  echo "build-vitess: tools/vitess/go.mod pins no vitess.io/vitess version" >&2
  exit 1
}
bin_dir=$VITESS_BIN_DIR

module_hash() {
  {
    echo "$recipe"
    cat "$module_dir/go.mod" "$module_dir/go.sum"
    find "$module_dir" -name '*.go' -type f | sort | xargs -r cat
  } | sha256sum | cut -c1-16
}

binaries() {
  local pkg
  for pkg in "${packages[@]}"; do echo "${pkg##*/}"; done
  # the module's own main packages (one directory each under tools/vitess/cmd)
  if [ -d "$module_dir/cmd" ]; then
    find "$module_dir/cmd" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort
  fi
}

up_to_date() {
  local name
  [ "$(cat "$bin_dir/.stamp" 2>/dev/null)" = "$(module_hash)" ] || return 1
  for name in $(binaries); do
    [ -x "$bin_dir/$name" ] || return 1
  done
}

if up_to_date; then
  echo "vitess $version up to date in $bin_dir" >&2
  echo "$bin_dir"
  exit 0
fi

mkdir -p "$bin_dir"
exec 9>"$cache_dir/.build-vitess.lock"
if ! flock -n 9; then
  echo "build-vitess: another build is running, waiting for it" >&2
  flock 9
  if up_to_date; then
    echo "$bin_dir"
    exit 0
  fi
fi

export GOCACHE=${UPDATESTREAM_GOCACHE:-$cache_dir/go-build}
export GOFLAGS="-mod=readonly -buildvcs=false"
started=$SECONDS
echo "building vitess $version into $bin_dir with $("$go_cmd" version | cut -d' ' -f3)" \
  "(GOCACHE=$GOCACHE)" >&2
tmp_dir=$(mktemp -d "$bin_dir/.build.XXXXXX")
trap 'rm -rf "$tmp_dir"' EXIT
own=()
if [ -d "$module_dir/cmd" ]; then own=(./cmd/...); fi
(cd "$module_dir" &&
  nice -n 10 "$go_cmd" build -p 2 -trimpath -ldflags="-s -w" -o "$tmp_dir/" \
    "${packages[@]}" "${own[@]}")
for name in $(binaries); do
  mv -f "$tmp_dir/$name" "$bin_dir/$name"
done
module_hash >"$bin_dir/.stamp"
echo "vitess $version built in $((SECONDS - started))s: $(binaries | tr '\n' ' ')" >&2
echo "$bin_dir"
