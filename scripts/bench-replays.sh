#!/usr/bin/env bash
# A replay's CPU over state neve holds, two builds alternated on the same
# full blocks of a busy chain, with the node and its load paused while
# measured, so the replays are all that runs:
#   - a busy chain (follow_busy_chain), and BLOCKS of its full blocks
#     (500 transactions or more) past block FROM (default 80: the load's
#     token transfers, after its setup's plain transfers) chosen once;
#   - per pair, each build in turn (NEVE_BIN's, then OTHER's): a fresh
#     neve from just below those blocks; each block traced once with
#     callTracer (its state fetched); the node and the load stopped; then
#     each block traced again under callTracer and prestateTracer, ROUNDS
#     times, each under a timeout never asked before (a fresh memo key, so
#     a replay over held state each; scripts/indexers.py replays);
#   - neve's CPU (utime + stime) per replay, and the replays' p50.
#
#   NEVE_BIN=<this build> scripts/bench-replays.sh OTHER_BIN [BLOCKS] [PAIRS] [ROUNDS]
source "$(dirname "$0")/lib.sh"
other=$(realpath "$1")
blocks=${2:-8}
pairs=${3:-3}
rounds=${4:-2}
export BUSY_PERIOD=${BUSY_PERIOD:-2} BUSY_TPS=${BUSY_TPS:-400}
py="python3 $repo/scripts/indexers.py"
follow_busy_chain 3600
# Only the builds measured run neve from here.
kill "$neve_pid"
count_of() { rpc "$geth_url" "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_getBlockTransactionCountByNumber\",\"params\":[\"$(printf 0x%x "$1")\"]}" |
  python3 -c 'import json,sys; print(int(json.load(sys.stdin)["result"],16))'; }
# The newest run of BLOCKS full blocks past FROM.
from=${FROM:-80}
until [ "$(head_of "$geth_url")" -gt $((from + blocks)) ]; do sleep 1; done
first=0
until [ "$first" -gt 0 ]; do
  sleep "$BUSY_PERIOD"
  tip=$(head_of "$geth_url") run=0
  for ((n = tip - 1; n > from; n--)); do
    if [ "$(count_of "$n")" -ge 500 ]; then run=$((run + 1)); else run=0; fi
    if [ "$run" -ge "$blocks" ]; then first=$n; break; fi
    [ "$n" -lt $((tip - 4 * blocks)) ] && break
  done
done
echo "blocks $first..$((first + blocks - 1)), $(count_of "$first")+ transactions each"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
measure() { # NAME BIN
  local port serving c0 c1
  port=$(free_port)
  serving="http://127.0.0.1:$port"
  "$2" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor $((first - 1)) --listen "127.0.0.1:$port" \
    --data-dir "$work/neve-$1-$port" >"$work/neve-$1-$port.log" 2>&1 &
  local pid=$!
  until [ "$(stored_height "$serving")" -ge $((first + blocks)) ]; do sleep 0.2; done
  $py replays "$serving" "$first" "$blocks" 0 >/dev/null
  sleep 2
  kill -STOP "$load_pid" "$geth_pid"
  sleep 1
  c0=$(cpu "$pid")
  $py replays "$serving" "$first" "$blocks" "$rounds" >"$work/replays.json"
  c1=$(cpu "$pid")
  kill -CONT "$geth_pid" "$load_pid"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 - "$work/replays.json" "$1" "$((c1 - c0))" "$(getconf CLK_TCK)" <<'PY'
import json, sys
r, name, ticks, hz = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
print(f"{name}: {r['replays']} replays ({r['failed']} failed), p50 {r['p50_ms']} ms, "
      f"mean {r['mean_ms']} ms, neve's CPU {1e3 * ticks / hz / max(1, r['replays']):.2f} ms a replay")
PY
}
for ((i = 0; i < pairs; i++)); do
  measure this "$neve"
  measure other "$other"
done
