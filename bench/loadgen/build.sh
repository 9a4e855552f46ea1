#!/usr/bin/env bash
# Builds the C load generator into the cache directory, once per hash of its sources, and
# prints the binary's path. Needs a C compiler and Debian's libmariadb-dev, libssl-dev and
# libxxhash-dev (`make system-deps` installs them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${UPDATESTREAM_CACHE_DIR:-$HOME/.cache/updatestream}"
key="$(cat "$here"/build.sh "$here"/*.h "$here"/*.c | sha256sum | cut -c1-16)"
out="$cache/loadgen/$key"

if [ ! -x "$out/loadgen" ]; then
  for header in mariadb/mysql.h openssl/des.h xxhash.h; do
    if [ ! -e "/usr/include/$header" ]; then
      echo "cannot build the load generator: /usr/include/$header is missing;" \
        "run 'make system-deps' (libmariadb-dev, libssl-dev, libxxhash-dev)" >&2
      exit 1
    fi
  done
  mkdir -p "$out"
  tmp="$(mktemp "$out/.loadgen.XXXXXX")"
  trap 'rm -f "$tmp"' EXIT
  # shellcheck disable=SC2046  # mariadb_config prints several flags
  cc -O2 -g -Wall -Wextra -Werror -std=gnu11 $(mariadb_config --cflags) -o "$tmp" \
    "$here"/*.c $(mariadb_config --libs) -lcrypto -lxxhash -lpthread
  chmod 755 "$tmp"
  mv "$tmp" "$out/loadgen"
  trap - EXIT
fi
echo "$out/loadgen"
