#!/usr/bin/env bash
# State at `latest` on a busy chain: a geth dev chain with a block a second
# and `neve load` traffic throughout, the seeds' read mix at c16 against a
# fresh neve following the tip, with client key sets 10x apart (--pool),
# refreshing per block (the default) and per key. Reports the share of
# answers that were real (200, non-null), the rate, and the upstream calls
# per block: the per-block refresh (touched keys and their proofs), what
# prefetch then fetched key by key, and reads fetched through. Then the
# same mix against geth directly (its rate and CPU per request, against
# geth's CPU per request neve answered), and through a neve mirroring the
# neve (the mirror's calls per block go to the neve, none to geth).
#
#   scripts/bench-refresh.sh [SECONDS]      # per cell; default 30
#   REFRESHES=block POOLS=2000 ACCOUNTS=10000 scripts/bench-refresh.sh 20   # the default cell only
source "$(dirname "$0")/lib.sh"
seconds=${1:-30}
ACCOUNTS=${ACCOUNTS:-2000}

DEV_PERIOD=1 start_geth_dev
# Addresses: the load funds ACCOUNTS senders and sends to fresh addresses.
"$neve" load --rpc "$geth_url" --seconds $((seconds * 8 + 300)) --tps 200 --accounts "$ACCOUNTS" >"$work/load.log" 2>&1 &
pids+=($!)
until [ "$(head_of "$geth_url")" -ge 40 ]; do sleep 1; done

metric() { curl -s "$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }
# geth's CPU time so far, in clock ticks (user + system).
geth_ticks() { awk '{print $14 + $15}' "/proc/$geth_pid/stat"; }
rate_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['workloads'][0]['targets'][0]['points'][-1]['requests_per_second'])" "$1/results.json"; }
p99_of() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['workloads'][0]['targets'][0]['points'][-1]['latency']['p99_ms'])" "$1/results.json"; }

printf '%-6s %-6s %8s %10s %8s %12s %12s %14s %8s\n' refresh pool blocks 'req/s' 'real_%' refresh/blk by-key/blk fetch-thru/blk shed/blk
for refresh in ${REFRESHES:-block key}; do
  for pool in ${POOLS:-200 2000}; do
    port=$(free_port)
    url="http://127.0.0.1:$port"
    "$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor tip --listen "127.0.0.1:$port" \
      --data-dir "$work/neve-$refresh-$pool" --state-refresh "$refresh" >"$work/neve-$refresh-$pool.log" 2>&1 &
    neve_pid=$!; pids+=("$neve_pid")
    until [ "$(stored_height "$url")" -gt 0 ]; do sleep 0.2; done
    out="$work/bench-$refresh-$pool"
    # A warm-up as long as the measurement, so the key set is read once
    # before it; the counters are read around the measured part.
    "$neve" bench --target "neve=$url" --workload mix:seeds-read --conns 16 --pool "$pool" \
      --warmup "$seconds" --duration "$seconds" --out "$out" --allow-flagged >/dev/null 2>&1 &
    bench_pid=$!
    sleep $((seconds + 3))
    b0=$(metric "$url" neve_state_refreshed_blocks_total); r0=$(metric "$url" neve_state_refresh_calls_total)
    p0=$(metric "$url" neve_state_prefetch_calls_total); u0=$(metric "$url" neve_state_upstream_calls_total)
    d0=$(metric "$url" neve_state_fetch_shed_total)
    h0=$(metric "$url" neve_store_max_height); g0=$(geth_ticks); t0=$(date +%s.%N)
    wait "$bench_pid" || true
    g1=$(geth_ticks); t1=$(date +%s.%N)
    if [ "$refresh-$pool" = block-2000 ]; then
      neve_rate=$(rate_of "$out"); neve_p99=$(p99_of "$out")
      neve_geth_ticks_per_s=$(python3 -c "print(($g1 - $g0) / ($t1 - $t0))")
      keep_url=$url; keep_pid=$neve_pid
    fi
    b1=$(metric "$url" neve_state_refreshed_blocks_total); r1=$(metric "$url" neve_state_refresh_calls_total)
    p1=$(metric "$url" neve_state_prefetch_calls_total); u1=$(metric "$url" neve_state_upstream_calls_total)
    d1=$(metric "$url" neve_state_fetch_shed_total)
    h1=$(metric "$url" neve_store_max_height)
    python3 - "$refresh" "$pool" "$out/results.json" "$b0" "$b1" "$r0" "$r1" "$p0" "$p1" "$u0" "$u1" "$h0" "$h1" "$d0" "$d1" <<'PY'
import json, sys
refresh, pool, path = sys.argv[1:4]
b0, b1, r0, r1, p0, p1, u0, u1, h0, h1, d0, d1 = (float(x or 0) for x in sys.argv[4:])
point = json.load(open(path))["workloads"][0]["targets"][0]["points"][-1]
o = point["outcomes"]
total = sum(v for k, v in o.items() if k != 'status_421' and isinstance(v, (int, float)))  # a 421 is also a 4xx
real = 100 * o.get("ok", 0) / max(1, total)
blocks = max(1, h1 - h0)
print(f"{refresh:<6} {pool:<6} {int(h1 - h0):>8} {point['requests_per_second']:>10.0f} {real:>8.2f} "
      f"{(r1 - r0) / blocks:>12.1f} {((p1 - p0) - (r1 - r0)) / blocks:>12.1f} {(u1 - u0) / blocks:>14.1f} {(d1 - d0) / blocks:>8.1f}")
PY
    [ "$refresh-$pool" = block-2000 ] || { kill "$neve_pid"; wait "$neve_pid" 2>/dev/null || true; }
  done
done

# geth directly, the same mix and key set.
out="$work/bench-geth"
g0=$(geth_ticks); t0=$(date +%s.%N)
"$neve" bench --target "geth=$geth_url" --workload mix:seeds-read --conns 16 --pool 2000 \
  --warmup "$seconds" --duration "$seconds" --out "$out" --allow-flagged >/dev/null 2>&1 || true
g1=$(geth_ticks); t1=$(date +%s.%N)
geth_rate=$(rate_of "$out"); geth_p99=$(p99_of "$out")
python3 - "$neve_rate" "$geth_rate" "$neve_geth_ticks_per_s" "$g0" "$g1" "$t0" "$t1" "$neve_p99" "$geth_p99" <<'PY'
import sys
neve_rate, geth_rate, behind_ticks_s, g0, g1, t0, t1, neve_p99, geth_p99 = map(float, sys.argv[1:])
direct_ticks_s = (g1 - g0) / (t1 - t0)
# Both include geth's own work (sealing, the load's transactions); the
# share per request is what each target's requests added over that.
print(f"geth directly: {geth_rate:.0f} req/s, p99 {geth_p99:.2f} ms; neve (block refresh, pool 2000): "
      f"{neve_rate:.0f} req/s = {neve_rate / geth_rate:.1f}x, p99 {neve_p99:.2f} ms")
print(f"geth CPU: {direct_ticks_s:.1f} ticks/s while benched directly, {behind_ticks_s:.1f} ticks/s behind neve "
      f"(per request: {direct_ticks_s / geth_rate * 1e3:.3f} vs {behind_ticks_s / neve_rate * 1e3:.3f} ms-ticks, "
      f"{100 * (behind_ticks_s / neve_rate) / (direct_ticks_s / geth_rate):.1f} % of direct, geth's own block work included)")
PY

# A neve mirroring that neve: the mirror's refresh goes to it.
mport=$(free_port); murl="http://127.0.0.1:$mport"
"$neve" serve --mirror-from "$keep_url" --floor tip --listen "127.0.0.1:$mport" --data-dir "$work/mirror" >"$work/mirror.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "$murl")" -gt 0 ]; do sleep 0.2; done
out="$work/bench-mirror"
"$neve" bench --target "mirror=$murl" --workload mix:seeds-read --conns 16 --pool 2000 \
  --warmup "$seconds" --duration "$seconds" --out "$out" --allow-flagged >/dev/null 2>&1 &
bench_pid=$!
sleep $((seconds + 3))
b0=$(metric "$murl" neve_state_refreshed_blocks_total); r0=$(metric "$murl" neve_state_refresh_calls_total)
p0=$(metric "$murl" neve_state_prefetch_calls_total); u0=$(metric "$murl" neve_state_upstream_calls_total)
h0=$(metric "$murl" neve_store_max_height); s0=$(metric "$keep_url" neve_state_refresh_calls_total)
wait "$bench_pid" || true
b1=$(metric "$murl" neve_state_refreshed_blocks_total); r1=$(metric "$murl" neve_state_refresh_calls_total)
p1=$(metric "$murl" neve_state_prefetch_calls_total); u1=$(metric "$murl" neve_state_upstream_calls_total)
h1=$(metric "$murl" neve_store_max_height); s1=$(metric "$keep_url" neve_state_refresh_calls_total)
python3 - "$out/results.json" "$b0" "$b1" "$r0" "$r1" "$p0" "$p1" "$u0" "$u1" "$h0" "$h1" "$s0" "$s1" <<'PY'
import json, sys
b0, b1, r0, r1, p0, p1, u0, u1, h0, h1, s0, s1 = (float(x or 0) for x in sys.argv[2:])
point = json.load(open(sys.argv[1]))["workloads"][0]["targets"][0]["points"][-1]
o = point["outcomes"]
total = sum(v for k, v in o.items() if k != 'status_421' and isinstance(v, (int, float)))  # a 421 is also a 4xx
blocks = max(1, h1 - h0)
print(f"mirror of the neve, pool 2000: {point['requests_per_second']:.0f} req/s, {100 * o.get('ok', 0) / max(1, total):.2f} % real; "
      f"per block: {(r1 - r0) / blocks:.1f} refresh calls to its neve, {((p1 - p0) - (r1 - r0)) / blocks:.1f} key by key, "
      f"{(u1 - u0) / blocks:.1f} fetched through; its neve's own refresh calls per block meanwhile: {(s1 - s0) / blocks:.1f}")
PY
