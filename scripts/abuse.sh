#!/usr/bin/env bash
# Abuse campaign against a live neve following geth (see scripts/abuse.py):
# slowloris, clients that never read, 10,000 idle connections, batch bombs,
# deep nesting, huge numbers, invalid UTF-8 — one at a time, while a
# well-behaved client's p99 and neve's anonymous RSS are measured.
#
#   scripts/abuse.sh                  # 8 s per abuse
#   SECONDS_EACH=20 scripts/abuse.sh
#   ABUSER_NICE=19 scripts/abuse.sh   # abusers yield the CPU, as if remote
#   CLIENT_RATE=0 scripts/abuse.sh    # no per-client budget
#   ONLY=blocks scripts/abuse.sh      # the abuses whose name holds the text
#
# Abusers connect from 127.0.0.2, the good client from 127.0.0.1, and neve
# runs with --client-rate CLIENT_RATE (default 20,000 units a second per
# address), as where it faces its clients directly.
set -euo pipefail
SECONDS_EACH=${SECONDS_EACH:-8}
CLIENT_RATE=${CLIENT_RATE:-20000}
source "$(dirname "$0")/lib.sh"
# 10,000 idle connections need that many descriptors on both sides.
ulimit -n "$(ulimit -Hn)"

start_geth_dev
grow_chain 60 600
chain=$(head_of "$geth_url")
P=$(free_port)
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$P" \
  --data-dir "$work/neve" --max-connections 16384 --client-rate "$CLIENT_RATE" >"$work/neve.log" 2>&1 &
pid=$!; pids+=("$pid")
until [ "$(stored_height "http://127.0.0.1:$P")" -ge "$chain" ]; do sleep 0.05; done
python3 scripts/abuse.py "127.0.0.1:$P" "$pid" "$chain" "$SECONDS_EACH" || {
  echo "abuse.py failed; neve $(kill -0 "$pid" 2>/dev/null && echo "still runs" || echo "is gone"); its log ends:" >&2
  tail -20 "$work/neve.log" >&2; exit 1
}
