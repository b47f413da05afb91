#!/usr/bin/env bash
# A wallet's preview head to head while the chain grows: a geth dev chain
# sealing a block a second with `neve load` traffic throughout (a token and
# its holders), a neve following the tip, and `neve bench`'s `simulate`
# workload (eth_simulateV1 at `latest`: one block of 1-3 calls on the
# token, an approval, a transfer and a balance read, transfers traced)
# against both in one run, at c1 and c16. Then each server's CPU per
# simulation (its utime + stime from /proc over a run at c16 against it
# alone, divided by the answers).
#
#   scripts/bench-simulate.sh [SECONDS]      # per cell; default 10
#   NEVE_ARGS="--call-memo-bytes 0" scripts/bench-simulate.sh   # every one run
#   WORKLOADS="call simulate" scripts/bench-simulate.sh        # beside eth_call
source "$(dirname "$0")/lib.sh"
seconds=${1:-10}

follow_busy_chain $((seconds * 8 + 300))
out=${OUT:-$work/bench}
workloads=()
for w in ${WORKLOADS:-simulate}; do workloads+=(--workload "$w"); done
"$neve" bench --target "neve=$url" --target "geth=$geth_url" "${workloads[@]}" \
  --conns 1,16 --warmup "$seconds" --duration "$seconds" --out "$out" --allow-flagged
for target in "neve=$url=$neve_pid" "geth=$geth_url=$geth_pid"; do
  IFS== read -r name target_url pid <<<"$target"
  cpu_per_answer "$name" "$target_url" "$pid" simulate "$seconds"
done
curl -s "$url/metrics" | grep -E '^neve_calls_(total|refused_total)|^neve_state_fetch' | sed 's/^/  /'
