#!/usr/bin/env bash
# The smallest end-to-end run that exists today: two real MariaDB shards, live traffic with a
# ledger, a live split of -80 into -40,40-80 under that traffic, then a check that every
# committed change is on the shard its vindex says. The streaming job and the operator join
# this run as they land; see README.md.
set -euo pipefail

dir=${DEMO_DIR:-.updatestream/demo}
bin=${BIN:-.venv/bin}
rate=${DEMO_RATE:-200}
seconds=${DEMO_SECONDS:-40}
ledger="$dir/ledger.jsonl"

cleanup() {
  if [ -n "${traffic_pid:-}" ] && kill -0 "$traffic_pid" 2>/dev/null; then
    kill "$traffic_pid" 2>/dev/null || true
    wait "$traffic_pid" 2>/dev/null || true
  fi
  if [ "${DEMO_KEEP:-0}" != 1 ]; then
    "$bin/updatestream" devcluster down --dir "$dir" >/dev/null || true
  fi
}
trap cleanup EXIT

echo "== start two shards (-80, 80-) in $dir"
"$bin/updatestream" devcluster down --dir "$dir" --purge >/dev/null 2>&1 || true
"$bin/updatestream" devcluster up --shards=-80,80- --dir "$dir"

echo "== live traffic: $rate row changes/s for ${seconds}s, ledger in $ledger"
"$bin/updatestream" devcluster traffic --rate "$rate" --duration "$seconds" \
  --ledger "$ledger" --dir "$dir" &
traffic_pid=$!
sleep 5

echo "== live split: -80 -> -40,40-80"
"$bin/updatestream" devcluster reshard --from=-80 --to=-40,40-80 --dir "$dir"

wait "$traffic_pid"
traffic_pid=""

echo "== serving shards after the split"
"$bin/updatestream" devcluster status --dir "$dir"

echo "== verify the ledger against the serving shards"
"$bin/updatestream" devcluster check --ledger "$ledger" --dir "$dir"
