#!/usr/bin/env bash
# Tracing head to head while the chain grows: a geth dev chain sealing a
# block a second with `neve load` traffic throughout (a token and its
# holders), a neve following the tip, and `neve bench`'s trace workloads
# against both in one run, at c1 and c16: `trace-block` (an indexer's: a
# block of the range traced whole with callTracer or prestateTracer) and
# `trace-tx` (an explorer's: debug_traceTransaction with callTracer of one
# of the range's popular transactions). Then each server's CPU per trace
# (its utime + stime from /proc over a run at c16 against it alone,
# divided by the answers), and how neve answered them (memo, replays,
# fetches).
#
#   scripts/bench-trace.sh [SECONDS]                      # per cell; default 10
#   NEVE_ARGS="--trace-memo-bytes 0" scripts/bench-trace.sh   # every trace replayed
#   WORKLOADS="trace-block" scripts/bench-trace.sh           # one workload
source "$(dirname "$0")/lib.sh"
seconds=${1:-10}

follow_busy_chain $((seconds * 12 + 300))
out=${OUT:-$work/bench}
workloads=()
for w in ${WORKLOADS:-trace-block trace-tx}; do workloads+=(--workload "$w"); done
"$neve" bench --target "neve=$url" --target "geth=$geth_url" "${workloads[@]}" \
  --conns 1,16 --warmup "$seconds" --duration "$seconds" --out "$out" --allow-flagged
for w in ${WORKLOADS:-trace-block trace-tx}; do
  for target in "neve=$url=$neve_pid" "geth=$geth_url=$geth_pid"; do
    IFS== read -r name target_url pid <<<"$target"
    cpu_per_answer "$name" "$target_url" "$pid" "$w" "$seconds"
  done
done
curl -s "$url/metrics" | grep -E '^neve_trace_|^neve_calls_(total|refused_total)|^neve_state_fetch' | sed 's/^/  /'
