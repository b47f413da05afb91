#!/usr/bin/env bash
# neve's CPU per answered request, two builds side by side: both follow one
# busy geth dev chain (a block a second, 200 tx/s), and `neve bench` asks
# each in turn, open loop at RATE req/s over 16 connections, ROUNDS times
# alternated. CPU is the serving process's (/proc, user + system), so the
# load generator's share and the box's other work are left out: steadier
# than req/s at saturation on a shared 2-core machine for A/B of small
# per-request costs.
#
#   A_BIN=/path/to/old/neve B_BIN=/path/to/new/neve scripts/bench-cpu-ab.sh
#   WL=randblock RATE=20000 ROUNDS=6 DUR=10 A_BIN=… B_BIN=… scripts/bench-cpu-ab.sh
#   WL=simulate RATE=5000 NEVE_ARGS="--call-memo-bytes 0" A_BIN=… B_BIN=… scripts/bench-cpu-ab.sh
source "$(dirname "$0")/lib.sh"
: "${A_BIN:?A_BIN names a neve build}" "${B_BIN:?B_BIN names a neve build}"
A_BIN=$(realpath "$A_BIN"); B_BIN=$(realpath "$B_BIN")
DEV_PERIOD=1 start_geth_dev
"$neve" load --rpc "$geth_url" --seconds 3600 --tps 200 --accounts 2000 >"$work/load.log" 2>&1 &
pids+=($!)
until [ "$(head_of "$geth_url")" -ge 40 ]; do sleep 1; done
declare -A port pid
for t in a b; do
  bin=$A_BIN; [ $t = b ] && bin=$B_BIN
  port[$t]=$(free_port)
  "$bin" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:${port[$t]}" \
    --data-dir "$work/n$t" ${NEVE_ARGS:-} >"$work/n$t.log" 2>&1 &
  pid[$t]=$!; pids+=($!)
done
for t in a b; do
  until [ "$(stored_height "http://127.0.0.1:${port[$t]}")" -ge "$(head_of "$geth_url")" ]; do sleep 0.2; done
done
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
ticks=$(getconf CLK_TCK)
for round in $(seq "${ROUNDS:-4}"); do
  for t in a b; do
    before=$(cpu_ticks "${pid[$t]}")
    "$neve" bench --target "$t=http://127.0.0.1:${port[$t]}" --workload "${WL:-call}" \
      --rates "${RATE:-30000}" --open-conns 16 --warmup 0 --duration "${DUR:-8}" \
      --out "$work/$t$round" --allow-flagged >/dev/null 2>&1
    after=$(cpu_ticks "${pid[$t]}")
    python3 - "$work/$t$round/results.json" "$before" "$after" "$ticks" "$t" "$round" <<'PY'
import json, sys
path, before, after, ticks, target, round_ = sys.argv[1:]
point = json.load(open(path))["workloads"][0]["targets"][0]["points"][0]
answered = point["outcomes"].get("ok", 0)
cpu_us = (float(after) - float(before)) / float(ticks) * 1e6
print(f"{target} round {round_}: {cpu_us / max(1, answered):.2f} µs CPU per answered request ({answered} answered)")
PY
  done
done
