#!/usr/bin/env bash
# Hardening measurements, one run on this machine, on a geth dev chain of
# large blocks (one block a second under ~1,250 transactions a second):
#
#  1. memory: neve's anonymous RSS (peak, sampled every 50 ms) while it
#     backfills the chain from geth, while a second neve mirrors the first
#     from genesis, and after serving full blocks at c16;
#  2. serving while ingesting: wrk randblock c16 p99 on a mirror while it
#     backfills from the first neve (fetches, verification with sender
#     recovery, store appends, all at full speed), against the same
#     requests on the same mirror once idle; and the same below saturation
#     (each connection waits 2 ms between answer and request, ~6,000
#     req/s), which is what a mirror with headroom sees. Each round runs
#     twice: "shared", every thread free to run on every CPU, and "split",
#     the mirror started with --serve-cpus 0 --ingest-cpus LAST (the last
#     CPU), wrk on CPU 0 beside the serving workers and the first neve on
#     the last CPU beside ingest.
#
#   scripts/bench-hardening.sh
#   LOAD_SECONDS=60 TPS=800 scripts/bench-hardening.sh
set -euo pipefail
LOAD_SECONDS=${LOAD_SECONDS:-100}
TPS=${TPS:-1250}
ROUNDS=${ROUNDS:-3}
export DEV_PERIOD=${DEV_PERIOD:-1}
source "$(dirname "$0")/lib.sh"

start_geth_dev
echo "growing the chain: neve load at $TPS tx/s for $LOAD_SECONDS s, a block a second …" >&2
"$neve" load --rpc "$geth_url" --seconds "$LOAD_SECONDS" --tps "$TPS" --accounts 64 2>/dev/null | sed -n 2p >&2
chain=$(head_of "$geth_url")
txs=$(rpc "$geth_url" "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_getBlockTransactionCountByNumber\",\"params\":[\"0x$(printf %x $((chain / 2)))\"]}" |
  python3 -c 'import json,sys; print(int(json.load(sys.stdin)["result"],16))')

# 1. Backfill from geth.
AP=$(free_port)
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$AP" --data-dir "$work/a" >"$work/a.log" 2>&1 &
a=$!; pids+=("$a")
sample_peak "$a" "$work/a.rss" & pids+=($!)
until [ "$(stored_height "http://127.0.0.1:$AP")" -ge "$chain" ]; do sleep 0.05; done
backfill_peak=$(peak_mib "$work/a.rss")
sleep 2
a_idle=$(now_mib "$a")

# 1b. Bootstrap from the first neve.
BP=$(free_port)
"$neve" serve --mirror-from "http://127.0.0.1:$AP" --floor 0 --ws-url none --listen "127.0.0.1:$BP" --data-dir "$work/b" >"$work/b.log" 2>&1 &
b=$!; pids+=("$b")
sample_peak "$b" "$work/b.rss" & pids+=($!)
until curl -s "http://127.0.0.1:$BP/health" >/dev/null; do sleep 0.01; done
t0=$(date +%s.%N)
until [ "$(stored_height "http://127.0.0.1:$BP")" -ge "$chain" ]; do sleep 0.02; done
t1=$(date +%s.%N)
mirror_peak=$(peak_mib "$work/b.rss")
mirror_rate=$(python3 -c "import sys; print(f'{($chain + 1) / ($t1 - $t0):.0f}')")
how=$(grep -q 'bootstrapped from /blocks' "$work/b.log" && echo "bootstrapped over /blocks" || echo "fetched block by block: fewer than 128 behind")
kill "$b"

# 1c. Serving full blocks at c16 from the first.
"$neve" bench --target "a=http://127.0.0.1:$AP" --workload randblock-full --conns 16 --duration 5 --warmup 1 --out "$work/serve" >/dev/null 2>&1
a_served=$(now_mib "$a")

# 2. randblock c16 on a mirror bootstrapping, then idle: the same requests
# (hashes-only blocks 0..31, which the mirror stores first).
randblock_lua
# The first neve stands in for an upstream on another machine: from here on
# it serves the mirror's fetches at the lowest priority, so the rounds
# measure the mirror's own ingest against its serving, not the upstream's
# work on the same two cores (every thread: nice is per thread on Linux).
for task in /proc/"$a"/task/*; do renice -n 19 -p "${task##*/}" >/dev/null; done
results=()
last_cpu=$(($(nproc) - 1))
all_cpus=$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)
for round in $(seq "$ROUNDS"); do
 for layout in shared split; do
  CP=$(free_port)
  rm -rf "$work/c"
  if [ "$layout" = split ]; then
    placement=(--serve-cpus 0 --ingest-cpus "$last_cpu"); on_serving=(taskset -c 0)
    taskset -a -p -c "$last_cpu" "$a" >/dev/null
  else
    placement=(); on_serving=()
    taskset -a -p -c "$all_cpus" "$a" >/dev/null
  fi
  "$neve" serve "${placement[@]}" --mirror-from "http://127.0.0.1:$AP" --floor 0 --ws-url none --listen "127.0.0.1:$CP" --data-dir "$work/c" >"$work/c.log" 2>&1 &
  c=$!; pids+=("$c")
  until [ "$(stored_height "http://127.0.0.1:$CP")" -ge 31 ]; do sleep 0.01; done
  busy=$("${on_serving[@]}" wrk -c16 -t2 -d2s --latency -s "$work/rand.lua" "http://127.0.0.1:$CP/" | wrk_p99_ms)
  paced_busy=$("${on_serving[@]}" wrk -c16 -t2 -d2s --latency -s "$work/paced.lua" "http://127.0.0.1:$CP/" | wrk_p99_ms)
  at_end=$(stored_height "http://127.0.0.1:$CP")
  until [ "$(stored_height "http://127.0.0.1:$CP")" -ge "$chain" ]; do sleep 0.05; done
  sleep 1
  idle=$("${on_serving[@]}" wrk -c16 -t2 -d2s --latency -s "$work/rand.lua" "http://127.0.0.1:$CP/" | wrk_p99_ms)
  paced_idle=$("${on_serving[@]}" wrk -c16 -t2 -d2s --latency -s "$work/paced.lua" "http://127.0.0.1:$CP/" | wrk_p99_ms)
  results+=("$busy $idle $at_end $paced_busy $paced_idle $layout")
  kill "$c"; wait "$c" 2>/dev/null || true
 done
done

echo "chain: $((chain + 1)) blocks, ~$txs transactions in the middle one"
echo "anonymous RSS: backfill from geth peak $backfill_peak MiB, $a_idle MiB once caught up; mirroring that neve peak $mirror_peak MiB ($mirror_rate blocks/s, $how); after randblock-full c16 ${a_served} MiB"
for r in "${results[@]}"; do
  set -- $r
  python3 -c "import sys; b,i,e,c,pb,pi=map(float,sys.argv[1:7]); print(f'{sys.argv[7]:>6}: randblock c16 p99 while bootstrapping {b:.2f} ms, idle {i:.2f} ms: {b/i:.2f}x; paced {pb:.2f} ms against {pi:.2f} ms: {pb/pi:.2f}x (the mirror had {int(e)} of {int(c)+1} blocks when wrk ended)')" "$1" "$2" "$3" "$chain" "$4" "$5" "$6"
done
