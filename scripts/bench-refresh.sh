#!/usr/bin/env bash
# State at `latest` on a busy chain: a geth dev chain with a block a second
# and `neve load` traffic throughout, the seeds' read mix at c16 against a
# fresh neve following the tip, with client key sets 10x apart (--pool),
# refreshing per block (the default) and per key. Reports the share of
# answers that were real (200, non-null), the rate, and the upstream calls
# per block: the per-block refresh (touched keys and their proofs), what
# prefetch then fetched key by key, and reads fetched through.
#
#   scripts/bench-refresh.sh [SECONDS]      # per cell; default 30
source "$(dirname "$0")/lib.sh"
seconds=${1:-30}
ACCOUNTS=${ACCOUNTS:-2000}

DEV_PERIOD=1 start_geth_dev
# Addresses: the load funds ACCOUNTS senders and sends to fresh addresses.
"$neve" load --rpc "$geth_url" --seconds $((seconds * 8 + 300)) --tps 200 --accounts "$ACCOUNTS" >"$work/load.log" 2>&1 &
pids+=($!)
until [ "$(head_of "$geth_url")" -ge 40 ]; do sleep 1; done

metric() { curl -s "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

printf '%-6s %-6s %8s %10s %8s %12s %12s %14s\n' refresh pool blocks 'req/s' 'real_%' refresh/blk by-key/blk fetch-thru/blk
for refresh in block key; do
  for pool in 200 2000; do
    port=$(free_port)
    url="http://127.0.0.1:$port"
    "$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor tip --listen "127.0.0.1:$port" \
      --data-dir "$work/neve-$refresh-$pool" --state-refresh "$refresh" >"$work/neve-$refresh-$pool.log" 2>&1 &
    neve_pid=$!; pids+=("$neve_pid")
    until [ "$(stored_height "$url")" -gt 0 ]; do sleep 0.2; done
    out="$work/bench-$refresh-$pool"
    # Warm-up and measurement in one run; the counters are read around
    # the measured part by a second, quiet pass of the same length.
    "$neve" bench --target "neve=$url" --workload mix:seeds-read --conns 16 --pool "$pool" \
      --warmup 5 --duration "$seconds" --out "$out" --allow-flagged >/dev/null 2>&1 &
    bench_pid=$!
    sleep 8
    b0=$(metric "$url" neve_state_refreshed_blocks_total); r0=$(metric "$url" neve_state_refresh_calls_total)
    p0=$(metric "$url" neve_state_prefetch_calls_total); u0=$(metric "$url" neve_state_upstream_calls_total)
    h0=$(metric "$url" neve_store_max_height)
    wait "$bench_pid" || true
    b1=$(metric "$url" neve_state_refreshed_blocks_total); r1=$(metric "$url" neve_state_refresh_calls_total)
    p1=$(metric "$url" neve_state_prefetch_calls_total); u1=$(metric "$url" neve_state_upstream_calls_total)
    h1=$(metric "$url" neve_store_max_height)
    python3 - "$refresh" "$pool" "$out/results.json" "$b0" "$b1" "$r0" "$r1" "$p0" "$p1" "$u0" "$u1" "$h0" "$h1" <<'PY'
import json, sys
refresh, pool, path = sys.argv[1:4]
b0, b1, r0, r1, p0, p1, u0, u1, h0, h1 = (float(x or 0) for x in sys.argv[4:])
point = json.load(open(path))["workloads"][0]["targets"][0]["points"][-1]
o = point["outcomes"]
total = sum(v for v in o.values() if isinstance(v, (int, float)))
real = 100 * o.get("ok", 0) / max(1, total)
blocks = max(1, h1 - h0)
print(f"{refresh:<6} {pool:<6} {int(h1 - h0):>8} {point['requests_per_second']:>10.0f} {real:>8.2f} "
      f"{(r1 - r0) / blocks:>12.1f} {((p1 - p0) - (r1 - r0)) / blocks:>12.1f} {(u1 - u0) / blocks:>14.1f}")
PY
    kill "$neve_pid"; wait "$neve_pid" 2>/dev/null || true
  done
done
