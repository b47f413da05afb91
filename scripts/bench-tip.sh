#!/usr/bin/env bash
# Head-to-servable latency: the time from the upstream announcing a block
# (geth's newHeads) to neve answering `latest` with it, at idle and under a
# saturating read load of `latest` blocks (wrk, 16 connections), with
# `--latest-grace-ms 0` (421 until the block is stored) and the default
# grace; plus the share of those `latest` reads answered 421. A geth dev
# chain with a block a second and `neve load` traffic throughout.
#
#   scripts/bench-tip.sh [SECONDS]     # per cell; default 30
#   NEVE_BIN=/path/to/other/neve GRACES=none scripts/bench-tip.sh   # another build, no grace flag
source "$(dirname "$0")/lib.sh"
seconds=${1:-30}
neve=${NEVE_BIN:-$neve}

DEV_PERIOD=1 start_geth_dev
"$neve" load --rpc "$geth_url" --seconds $((seconds * 6 + 120)) --tps 200 --accounts 64 >/dev/null 2>&1 &
pids+=($!)
sleep 5

cat >"$work/latest.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = '{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["latest",false]}'
LUA

printf '%-12s %-6s %8s %8s %8s %10s %12s\n' grace load blocks p50_ms p99_ms wrk_req/s latest_421_%
for grace in ${GRACES:-0 500ms}; do
  port=$(free_port)
  flag=(--latest-grace-ms "$grace")
  [ "$grace" = none ] && flag=()
  "$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor tip --listen "127.0.0.1:$port" \
    --data-dir "$work/neve-$grace" "${flag[@]}" >"$work/neve-$grace.log" 2>&1 &
  neve_pid=$!; pids+=("$neve_pid")
  until [ "$(stored_height "http://127.0.0.1:$port")" -gt 0 ]; do sleep 0.2; done
  sleep 3
  for load in idle c16; do
    if [ "$load" = c16 ]; then
      wrk -t2 -c16 -d"${seconds}s" -s "$work/latest.lua" "http://127.0.0.1:$port/" >"$work/wrk.txt" 2>&1 &
      wrk_pid=$!
    fi
    lag=$(node scripts/head-lag.mjs "$geth_ws" "http://127.0.0.1:$port/" "$seconds")
    rate=- share=-
    if [ "$load" = c16 ]; then
      wait "$wrk_pid"
      rate=$(awk '/Requests\/sec/ {print $2}' "$work/wrk.txt")
      total=$(awk '/requests in/ {print $1}' "$work/wrk.txt")
      non2xx=$(awk '/Non-2xx/ {print $5}' "$work/wrk.txt")
      share=$(python3 -c "print(f'{100 * ${non2xx:-0} / max(1, $total):.2f}')")
    fi
    python3 - "$grace" "$load" "$lag" "$rate" "$share" <<'PY'
import json, sys
grace, load, lag, rate, share = sys.argv[1:]
l = json.loads(lag)
print(f"{grace:<12} {load:<6} {l['blocks']:>8} {l['p50_ms']!s:>8} {l['p99_ms']!s:>8} {rate:>10} {share:>12}")
PY
  done
  kill "$neve_pid"; wait "$neve_pid" 2>/dev/null || true
done
