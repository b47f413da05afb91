#!/usr/bin/env bash
# Bootstrap A/B: another neve binary (a previous build, say) and the current
# one mirror the same source over /blocks, alternating, on one chain.
#
#   scripts/bench-bootstrap-ab.sh OTHER_NEVE [BLOCKS [TPS [ROUNDS]]]
#   scripts/bench-bootstrap-ab.sh /path/to/old/neve 600 2100 4
#   SIDE=source scripts/bench-bootstrap-ab.sh /path/to/old/neve   # the two
#     builds serve /blocks (each its own store of the chain); the current
#     build mirrors from each in turn
set -euo pipefail
other=$(realpath "${1:?usage: $0 OTHER_NEVE [BLOCKS [TPS [ROUNDS]]]}")
BLOCKS=${2:-600}
TPS=${3:-2100}
ROUNDS=${4:-4}
source "$(dirname "$0")/lib.sh"

start_geth_dev
grow_chain "$BLOCKS" "$TPS"
chain=$(head_of "$geth_url")
AP=$(free_port); BP=$(free_port)
"$neve" serve --upstream "$geth_url" --ws-url none --floor 0 --listen "127.0.0.1:$AP" --data-dir "$work/a" >"$work/a.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "http://127.0.0.1:$AP")" -ge "$chain" ]; do sleep 0.1; done
OP=$AP
if [ "${SIDE:-mirror}" = source ]; then
  OP=$(free_port)
  "$other" serve --upstream "$geth_url" --ws-url none --floor 0 --listen "127.0.0.1:$OP" --data-dir "$work/o" >"$work/o.log" 2>&1 &
  pids+=($!)
  until [ "$(stored_height "http://127.0.0.1:$OP")" -ge "$chain" ]; do sleep 0.1; done
fi

for _ in $(seq "$ROUNDS"); do
  for bin in "$other" "$neve"; do
    rm -rf "$work/b"
    if [ "${SIDE:-mirror}" = source ]; then
      # The current build mirrors; the sources differ.
      source_port=$([ "$bin" = "$neve" ] && echo "$AP" || echo "$OP")
      mirror_bin=$neve
    else
      source_port=$AP
      mirror_bin=$bin
    fi
    "$mirror_bin" serve --mirror-from "http://127.0.0.1:$source_port" --floor 0 --listen "127.0.0.1:$BP" --data-dir "$work/b" >"$work/b.log" 2>&1 &
    mirror=$!; pids+=("$mirror")
    # Each mirror times itself: wait for its log line rather than poll it.
    wait_for_log "$work/b.log" 'bootstrapped from /blocks'
    kill -INT "$mirror"; wait "$mirror" || true
    line=$(grep 'bootstrapped from /blocks' "$work/b.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')
    rate=$(grep -oE 'blocks_per_second="?[0-9]+' <<<"$line" | grep -oE '[0-9]+$')
    mbs=$(grep -oE 'mb_per_second="?[0-9.]+' <<<"$line" | grep -oE '[0-9.]+$')
    echo "$([ "$bin" = "$neve" ] && echo current || echo other) $rate blocks/s $mbs MB/s ($((chain + 1)) blocks)"
  done
done
