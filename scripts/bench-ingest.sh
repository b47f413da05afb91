#!/usr/bin/env bash
# Ingest benchmark, one run on this machine: backfill from geth over
# loopback, neve→neve bootstrap from /blocks, and live lag from geth's
# newHeads to neve's (the block servable and announced).
#
#   scripts/bench-ingest.sh                 # ~600 blocks of ~60 transactions
#   BLOCKS=300 scripts/bench-ingest.sh
set -euo pipefail
BLOCKS=${BLOCKS:-600}
TPS=${TPS:-2100}
source "$(dirname "$0")/lib.sh"
now() { python3 -c 'import time; print(time.time())'; }

start_geth_dev
grow_chain "$BLOCKS" "$TPS"
chain=$(head_of "$geth_url")
AP=$(free_port); BP=$(free_port)

# Backfill: from the first answer of /health to the store reaching the head.
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$AP" --data-dir "$work/a" >"$work/a.log" 2>&1 &
pids+=($!)
until curl -s "http://127.0.0.1:$AP/health" >/dev/null; do sleep 0.01; done
t0=$(now)
until [ "$(stored_height "http://127.0.0.1:$AP")" -ge "$chain" ]; do sleep 0.02; done
t1=$(now)
bytes=$(curl -s "http://127.0.0.1:$AP/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["storage"]["bytes"])')

# Bootstrap: another neve from the first; the mirror logs its own rate.
"$neve" serve --mirror-from "http://127.0.0.1:$AP" --floor 0 --listen "127.0.0.1:$BP" --data-dir "$work/b" >"$work/b.log" 2>&1 &
pids+=($!)
# It times itself: wait for its log line rather than poll it while it works.
wait_for_log "$work/b.log" 'bootstrapped from /blocks'
bootstrap=$(grep 'bootstrapped from /blocks' "$work/b.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')

# Live lag while blocks keep coming.
"$neve" load --rpc "$geth_url" --seconds 12 --tps 40 --accounts 4 >/dev/null 2>&1 &
lag=$(node tests/clients/lag.mjs "$geth_ws" "ws://127.0.0.1:$AP" 10)
wait $! 2>/dev/null || true

python3 - "$chain" "$t0" "$t1" "$bytes" "$bootstrap" "$lag" <<'PY'
import json, re, sys
chain, t0, t1, size, bootstrap, lag = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], json.loads(sys.argv[6])
seconds = t1 - t0
print(f"chain: {chain + 1} blocks, {size / 1e6:.1f} MB stored")
print(f"backfill from geth: {(chain + 1) / seconds:.0f} blocks/s, {size / seconds / 1e6:.1f} MB/s ({seconds:.2f} s, fsync per 64-block append)")
fields = dict(re.findall(r'(\w+)=("?[\d.]+"?)', bootstrap))
field = lambda name: fields.get(name, '?').strip(chr(34))
print(f"neve→neve bootstrap: {field('blocks_per_second')} blocks/s, {field('mb_per_second')} MB/s over /blocks ({field('blocks')} blocks in {field('seconds')} s: "
      f"appending waited {field('verify_wait_seconds')} s for verified batches and spent {field('storing_seconds')} s storing; "
      f"the reader, alongside, waited {field('reading_seconds')} s for the source)")
print(f"live lag geth newHeads → neve newHeads: p50 {lag['p50_ms']} ms, p99 {lag['p99_ms']} ms, max {lag['max_ms']} ms over {lag['blocks']} blocks")
PY
