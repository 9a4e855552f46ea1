#!/usr/bin/env bash
# Builds the node's images with buildah and loads them into the node's containerd, never
# pulling anything:
#
#   pause  the sandbox image: docker/pause/pause.c built with `gcc -static`, FROM scratch
#   app    the UpdateStream image from the Dockerfile, on the Debian base images of
#          scripts/build-base-image.sh (PYTHON_IMAGE / JRE_IMAGE build arguments), with
#          `vtctldclient` from the Vitess that `make vitess-tools` built (the build context
#          `vitess`: its bin directory, of the version tools/vitess/go.mod pins)
#
# Usage: build-image.sh [pause|app|all] (default all). The app image is tagged
# localhost/updatestream:dev-<hash of the build context and of vtctldclient>, so it is rebuilt
# only when an input changes; its name is written to <cache>/images/app.ref. When the node's
# containerd runs (CONTAINERD_ADDRESS, default .updatestream/node/run/containerd.sock), each
# image it does not hold yet is exported (`buildah push ... docker-archive:`) and imported
# with `ctr -n k8s.io images import`.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/buildah-env.sh
source "$repo/scripts/buildah-env.sh"
# shellcheck source=scripts/vitess-env.sh
source "$repo/scripts/vitess-env.sh"
what=${1:-all}
image_dir=$cache_dir/images
address=${CONTAINERD_ADDRESS:-$repo/.updatestream/node/run/containerd.sock}
mkdir -p "$image_dir"
exec 7>"$image_dir/.build-image.lock"
flock 7

present() { bah inspect --type image "$1" >/dev/null 2>&1; }

build_pause() {
  present "$PAUSE_IMAGE" && return 0
  local work
  work=$(mktemp -d)
  gcc -static -Os -s -o "$work/pause" "$repo/docker/pause/pause.c"
  bah bud --quiet --pull=never --runtime /usr/sbin/runc --network host \
    -f "$repo/docker/pause/Containerfile" -t "$PAUSE_IMAGE" "$work" >/dev/null
  rm -rf "$work"
  echo "built $PAUSE_IMAGE"
}

# What the build contexts hold: the .dockerignore's allow-list (`!path`), hashed file by file,
# and the Vitess version with the digest of the one program the image takes from it.
context_hash() {
  local allowed
  mapfile -t allowed < <(sed -n 's#^!\(.*[^/]\)/\{0,1\}$#\1#p' "$repo/.dockerignore")
  {
    (cd "$repo" && find Dockerfile .dockerignore "${allowed[@]}" -type f \
      ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' \
      ! -path '*/.mypy_cache/*' ! -path '*/.ruff_cache/*' -print0 |
      sort -z | xargs -0 sha256sum)
    echo "vitess $VITESS_VERSION"
    (cd "$VITESS_BIN_DIR" && sha256sum vtctldclient)
  } | sha256sum | cut -c1-12
}

# The operator runs vtctldclient to follow a Keyspace's Vitess cluster (spec.vitess).
require_vtctldclient() {
  [ -x "$VITESS_BIN_DIR/vtctldclient" ] && return 0
  echo "build-image: no vtctldclient of Vitess ${VITESS_VERSION:-(unknown version)} in" \
    "$VITESS_BIN_DIR; run \`make vitess-tools\` first" >&2
  exit 1
}

build_app() {
  require_vtctldclient
  "$repo/scripts/build-base-image.sh"
  APP_IMAGE=localhost/updatestream:dev-$(context_hash)
  echo "$APP_IMAGE" >"$image_dir/app.ref"
  if present "$APP_IMAGE"; then
    echo "image up to date: $APP_IMAGE"
    return 0
  fi
  local t0=$SECONDS host_config=()
  # The build steps download the locked wheels with the machine's own pip settings and CA
  # bundle (a proxy that re-signs TLS needs its CA); mounted for the build only, not in a layer.
  [ -f /etc/pip.conf ] && host_config+=(--volume /etc/pip.conf:/etc/pip.conf:ro)
  [ -f /etc/ssl/certs/ca-certificates.crt ] &&
    host_config+=(--volume /etc/ssl/certs/ca-certificates.crt:/etc/ssl/certs/ca-certificates.crt:ro)
  # No layer cache (--layers): buildah 1.28 reused a cached `COPY . ./` layer for a changed
  # context. The image is only built when the context's hash changes, and pip's cache mount
  # keeps it quick. Working containers a failed or interrupted build left in this storage
  # (ours alone, and the lock above serialises builds) are removed first.
  bah rm --all >/dev/null
  echo "building $APP_IMAGE ..."
  bah bud --quiet --pull=never --runtime /usr/sbin/runc --network host "${host_config[@]}" \
    --build-arg "PYTHON_IMAGE=$BASE_IMAGE" --build-arg "JRE_IMAGE=$JRE_IMAGE" \
    --build-context "vitess=$VITESS_BIN_DIR" -t "$APP_IMAGE" "$repo" >/dev/null
  echo "built $APP_IMAGE in $((SECONDS - t0))s"
  # bud leaves the container of a stage it only copied from (jre) mounted: remove it, and the
  # storage's own mount of its overlay directory, so a build leaves no mount behind.
  bah rm --all >/dev/null
  if mountpoint -q "$BUILDAH_ROOT/overlay"; then umount "$BUILDAH_ROOT/overlay"; fi
  # Older builds of the app image are of no use: keep the cache to one (about 1.8 GB).
  local old
  for old in $(bah images --format '{{.Name}}:{{.Tag}}' | grep '^localhost/updatestream:dev-' |
    grep -vxF "$APP_IMAGE"); do
    bah rmi "$old" >/dev/null 2>&1 || true
  done
}

load() { # image
  [ -S "$address" ] || return 0
  if ctr --address "$address" -n k8s.io images ls -q | grep -qxF "$1"; then return 0; fi
  local t0=$SECONDS archive="$image_dir/.load.tar"
  rm -f "$archive"
  bah push --quiet "$1" "docker-archive:$archive:$1"
  ctr --address "$address" -n k8s.io images import "$archive" >/dev/null
  rm -f "$archive"
  echo "loaded $1 into the node's containerd in $((SECONDS - t0))s"
  local old
  for old in $(ctr --address "$address" -n k8s.io images ls -q | grep '^localhost/updatestream:dev-' |
    grep -vxF "$1"); do
    # --sync: the old image's layers and snapshots are collected now, not left behind
    ctr --address "$address" -n k8s.io images rm --sync "$old" >/dev/null
  done
  # The CRI plugin also names each image it sees by its id (`sha256:<config digest>`); once the
  # tag is gone that name alone holds the old image's layers (1.8 GB a build), so it goes too.
  local tagged
  tagged=$(ctr --address "$address" -n k8s.io images ls | awk 'NR > 1 && $1 !~ /^sha256:/ {print $3}')
  for old in $(ctr --address "$address" -n k8s.io images ls |
    awk -v tagged="$tagged" 'BEGIN { n = split(tagged, t, "\n"); for (i = 1; i <= n; i++) keep[t[i]] = 1 }
      NR > 1 && $1 ~ /^sha256:/ && !($3 in keep) {print $1}'); do
    ctr --address "$address" -n k8s.io images rm --sync "$old" >/dev/null
  done
}

case $what in
  pause) build_pause; load "$PAUSE_IMAGE" ;;
  app) build_app; load "$APP_IMAGE" ;;
  all) build_pause; load "$PAUSE_IMAGE"; build_app; load "$APP_IMAGE" ;;
  *) echo "build-image.sh: unknown image '$what' (pause, app or all)" >&2; exit 2 ;;
esac
