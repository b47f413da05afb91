#!/usr/bin/env bash
# A replay's CPU over state neve holds, two builds alternated on the same
# full blocks of a busy chain, with the node and its load paused while
# measured, so the replays are all that runs:
#   - a busy chain (follow_busy_chain), and BLOCKS of its full blocks
#     (500 transactions or more) past block FROM (default 80: the load's
#     token transfers, after its setup's plain transfers) chosen once;
#   - per pair, each build in turn, the first build alternating (this,
#     other, then other, this, ...): a fresh neve from just below those
#     blocks, caught up to the tip; each block traced once with callTracer
#     and prestateTracer (its state fetched); the node and the load
#     stopped, and neve let settle (its CPU still for a second); then each
#     block traced again under both tracers, ROUNDS times, each under a
#     timeout never asked before (a fresh memo key, so a replay over held
#     state each; scripts/indexers.py replays);
#   - neve's CPU (utime + stime) per replay, and the replays' p50. A run
#     with a failed answer, a memo hit, an answer made alongside or a
#     witness fetched in its window is refused, not printed.
#
#   NEVE_BIN=<this build> scripts/bench-replays.sh OTHER_BIN [BLOCKS] [PAIRS] [ROUNDS]
# Relative to where the script was started (lib.sh moves to the repo).
other=$(realpath "${1:?usage: NEVE_BIN=<this build> $0 OTHER_BIN [BLOCKS] [PAIRS] [ROUNDS]}")
[ -x "$other" ] || { echo "$1 is not an executable" >&2; exit 1; }
source "$(dirname "$0")/lib.sh"
blocks=${2:-8}
pairs=${3:-3}
rounds=${4:-2}
from=${FROM:-80}
export BUSY_PERIOD=${BUSY_PERIOD:-2} BUSY_TPS=${BUSY_TPS:-400}
indexers() { python3 "$repo/scripts/indexers.py" "$@"; }
follow_busy_chain 3600
# Only the builds measured run neve from here.
kill "$neve_pid"; wait "$neve_pid" 2>/dev/null || true
count_of() { rpc "$geth_url" "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_getBlockTransactionCountByNumber\",\"params\":[\"$(printf 0x%x "$1")\"]}" |
  python3 -c 'import json,sys; print(int(json.load(sys.stdin)["result"],16))'; }
# The newest run of BLOCKS full blocks past FROM, within ten minutes.
deadline=$((SECONDS + 600))
until [ "$(head_of "$geth_url")" -gt $((from + blocks)) ]; do sleep 1; done
first=0
until [ "$first" -gt 0 ]; do
  [ "$SECONDS" -lt "$deadline" ] || { echo "no $blocks blocks of 500 transactions in a row past $from" >&2; exit 1; }
  sleep "$BUSY_PERIOD"
  tip=$(head_of "$geth_url") run=0
  for ((n = tip - 1; n > from; n--)); do
    if [ "$(count_of "$n")" -ge 500 ]; then run=$((run + 1)); else run=0; fi
    if [ "$run" -ge "$blocks" ]; then first=$n; break; fi
    [ "$n" -lt $((tip - 4 * blocks)) ] && break
  done
done
echo "blocks $first..$((first + blocks - 1)), $(count_of "$first") to $(count_of $((first + blocks - 1))) transactions at the ends"
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# The counters that show an answer was not a replay of this window's own.
not_replays() {
  curl -s "$1/metrics" | awk '/^(neve_trace_memo_hits_total|neve_trace_answers_along_total|neve_state_witnesses_fetched_total) / {s += $2} END {print s + 0}'
}
measure() { # NAME BIN
  local port serving c0 c1 before after settled
  port=$(free_port)
  serving="http://127.0.0.1:$port"
  "$2" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor $((first - 1)) --listen "127.0.0.1:$port" \
    --data-dir "$work/neve-$1-$port" >"$work/neve-$1-$port.log" 2>&1 &
  local pid=$!
  pids+=("$pid")
  local until=$((SECONDS + 300))
  until [ "$(stored_height "$serving")" -ge "$(head_of "$geth_url")" ]; do
    if ! kill -0 "$pid" 2>/dev/null || [ "$SECONDS" -ge "$until" ]; then
      echo "$1: neve did not catch up:" >&2; tail -5 "$work/neve-$1-$port.log" >&2; exit 1
    fi
    sleep 0.2
  done
  indexers replays "$serving" "$first" "$blocks" 0 >"$work/warm.json" || exit 1
  python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))["failed"])' "$work/warm.json" ||
    { echo "$1: a warm-up trace failed" >&2; exit 1; }
  kill -STOP "$load_pid" "$geth_pid"
  # Settled: what neve was fetching or storing is done.
  settled=$((SECONDS + 30))
  c0=$(cpu "$pid"); sleep 1; c1=$(cpu "$pid")
  while [ "$c0" != "$c1" ] && [ "$SECONDS" -lt "$settled" ]; do c0=$c1; sleep 1; c1=$(cpu "$pid"); done
  before=$(not_replays "$serving")
  c0=$(cpu "$pid")
  indexers replays "$serving" "$first" "$blocks" "$rounds" >"$work/replays.json"
  local ran=$?
  c1=$(cpu "$pid")
  after=$(not_replays "$serving")
  kill -CONT "$geth_pid" "$load_pid"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  [ "$ran" -eq 0 ] || { echo "$1: the replays did not run" >&2; exit 1; }
  python3 - "$work/replays.json" "$1" "$((c1 - c0))" "$(getconf CLK_TCK)" "$((after - before))" <<'PY' || exit 1
import json, sys
r, name, ticks, hz = json.load(open(sys.argv[1])), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
others = int(float(sys.argv[5]))
if r["failed"] or others:
    sys.exit(f"{name}: refused: {r['failed']} failed, {others} memo hits, answers along or witnesses in the window")
print(f"{name}: {r['replays']} replays, p50 {r['p50_ms']} ms, mean {r['mean_ms']} ms, "
      f"neve's CPU {1e3 * ticks / hz / r['replays']:.2f} ms a replay")
PY
}
for ((i = 0; i < pairs; i++)); do
  if ((i % 2 == 0)); then
    measure this "$neve"; measure other "$other"
  else
    measure other "$other"; measure this "$neve"
  fi
done
