#!/usr/bin/env bash
# State-read benchmark, one run on this machine: neve (verified proofs,
# fetched through from geth, then served from its node store) against geth
# on the same keys — the `balance` and `storage` workloads (half at random
# tail heights, half at `latest`) and the seeds' read mix — then the node
# store held at a small budget under a key set ten times larger.
#
#   scripts/bench-state.sh                 # ~200 blocks of ~60 transactions
#   BLOCKS=100 CONNS=1,16 scripts/bench-state.sh
set -euo pipefail
BLOCKS=${BLOCKS:-200}
TPS=${TPS:-1000}
CONNS=${CONNS:-1,4,16,64}
source "$(dirname "$0")/lib.sh"

start_geth_dev
grow_chain "$BLOCKS" "$TPS"
chain=$(head_of "$geth_url")
NP=$(free_port); SP=$(free_port)
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$NP" \
  --data-dir "$work/neve" >"$work/neve.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "http://127.0.0.1:$NP")" -ge "$chain" ]; do sleep 0.1; done

out=${OUT:-bench-results/state}
mkdir -p "$out"
"$neve" bench --target "neve=http://127.0.0.1:$NP" --target "geth=$geth_url" \
  --workload balance --workload storage --workload mix:seeds-read \
  --conns "$CONNS" --pool 2000 --warmup 1 --duration 4 --out "$out"
echo "neve state after the run: $(curl -s "http://127.0.0.1:$NP/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"

# The node store at its budget: 256 KiB against a pool of 2,000 keys over
# the whole tail (about ten times what it holds).
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$SP" \
  --data-dir "$work/small" --state-cache-bytes 262144 >"$work/small.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "http://127.0.0.1:$SP")" -ge "$chain" ]; do sleep 0.1; done
"$neve" bench --target "neve-256k=http://127.0.0.1:$SP" --workload balance --conns 16 --pool 2000 \
  --warmup 1 --duration 4 --out "$out/small" | tail -4 || true
echo "neve (256 KiB budget) state: $(curl -s "http://127.0.0.1:$SP/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])')"
