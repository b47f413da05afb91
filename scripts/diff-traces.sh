#!/usr/bin/env bash
# Random traces of a busy chain's tail asked of neve and of geth at once:
# every tracer and option neve runs, by block number and hash, by
# transaction, and as traced calls at a block or `latest` (half of them
# at a transaction index, some past the block's); each answer must equal
# geth's. Found what fixed cases had not (a `txIndex` past the head's
# transactions was a 421 where geth answers an error). Exits 1 on a
# difference; a 421 is reported, not failed (the node's to answer).
#
#   scripts/diff-traces.sh [COUNT] [DEPTH]     # defaults 300 and 60
#   SEED=7 CLIENTS=6 scripts/diff-traces.sh 1000 8
source "$(dirname "$0")/lib.sh"
count=${1:-300}
depth=${2:-60}
export BUSY_PERIOD=${BUSY_PERIOD:-2} BUSY_TPS=${BUSY_TPS:-400}
follow_busy_chain $((count + 900))
# Blocks of the load's full rate, as deep as asked.
start=$(head_of "$geth_url")
until [ "$(head_of "$geth_url")" -ge $((start + depth)) ]; do sleep 1; done
python3 "$repo/scripts/trace_diff.py" "$url" "$geth_url" "$count" "$depth" \
  --seed "${SEED:-1}" --clients "${CLIENTS:-6}"
