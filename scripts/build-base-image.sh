#!/usr/bin/env bash
# Makes the base images the Dockerfile builds on when official images cannot be pulled: a
# Debian bookworm root filesystem made with mmdebstrap from this machine's apt sources, split
# into two tars kept in ${UPDATESTREAM_CACHE_DIR:-~/.cache/updatestream}/images:
#
#   bookworm-base.tar  Python 3.11, tini, procps and the JRE's shared libraries and settings
#                      (/usr/lib/jvm/java-17-openjdk-amd64 links to /opt/java/openjdk)
#   bookworm-jre.tar   only /opt/java/openjdk: the Java 17 runtime the Dockerfile copies
#
# and imports them into buildah's storage as localhost/updatestream-base:bookworm and
# localhost/updatestream-jre:bookworm. A stamp keyed by the package list, the apt sources and
# this recipe makes a second run a no-op (about 95 s cold on two cores, 444 MB).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/buildah-env.sh
source "$repo/scripts/buildah-env.sh"

packages="python3,python3-venv,openjdk-17-jre-headless,tini,procps,passwd,ca-certificates"
recipe="v1 minbase $packages jre-split"
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
image_dir=$cache_dir/images
stamp=$image_dir/.stamp-bookworm
key=$({ echo "$recipe"; cat "$sources"; } | sha256sum | cut -c1-16)

images_present() {
  bah inspect --type image "$BASE_IMAGE" >/dev/null 2>&1 &&
    bah inspect --type image "$JRE_IMAGE" >/dev/null 2>&1
}

if [ "$(cat "$stamp" 2>/dev/null)" = "$key" ] && images_present; then
  echo "base images up to date ($BASE_IMAGE, $JRE_IMAGE)"
  exit 0
fi

mkdir -p "$image_dir"
exec 8>"$image_dir/.build-base.lock"
flock 8
started=$SECONDS
if [ "$(cat "$stamp" 2>/dev/null)" != "$key" ]; then
  work=$(mktemp -d "$image_dir/.rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  echo "making a Debian bookworm root filesystem with mmdebstrap from $sources ..."
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    --customize-hook='chroot "$1" java -version' \
    bookworm "$work/rootfs" "$sources"
  root=$work/rootfs
  # The JRE moves to where the Dockerfile copies it from; the base keeps a link to it.
  mkdir -p "$work/jre/opt/java"
  mv "$root/usr/lib/jvm/java-17-openjdk-amd64" "$work/jre/opt/java/openjdk"
  ln -s /opt/java/openjdk "$root/usr/lib/jvm/java-17-openjdk-amd64"
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/dev/*
  tar -C "$root" --numeric-owner -cf "$image_dir/bookworm-base.tar" .
  tar -C "$work/jre" --numeric-owner -cf "$image_dir/bookworm-jre.tar" .
  echo "$key" >"$stamp"
  echo "root filesystem made in $((SECONDS - started))s: $(du -sh "$image_dir/bookworm-base.tar" | cut -f1) base, $(du -sh "$image_dir/bookworm-jre.tar" | cut -f1) JRE"
fi

import() { # tar image
  local container
  container=$(bah from scratch)
  bah add "$container" "$1" / >/dev/null
  bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash "$container"
  bah commit --quiet --rm "$container" "$2" >/dev/null
  echo "imported $2"
}
import "$image_dir/bookworm-base.tar" "$BASE_IMAGE"
import "$image_dir/bookworm-jre.tar" "$JRE_IMAGE"
echo "base images ready in $((SECONDS - started))s"
