#!/usr/bin/env bash
# Ten indexers tracing every block of a growing chain with callTracer and
# prestateTracer (scripts/indexers.py), through neve and straight at geth,
# in one run on a chain of busy blocks:
#   - requests a second the indexers got while they had blocks to trace
#     (spread over the BEHIND blocks behind the tip; STAGGER=0 starts all
#     at the oldest, in lockstep), and their latencies;
#   - the node's CPU per trace request: geth's utime + stime over the run,
#     less what it spends over as long with no indexers (sealing, the load,
#     neve following), divided by the traces answered;
#   - the first trace of a block nobody asked before (cold memo, cold
#     witness) through neve against geth's, one at a time: newest first
#     (nothing held for any), then newer blocks oldest first (each one's
#     parent traced just before, as an indexer following the chain does);
#   - each block's witness bytes beside the block's own;
#   - the ceiling: the node's witnesses alone, as many as neve fetched
#     while its indexers were behind (what that catch-up waits for at least).
#
#   scripts/bench-indexers.sh [SECONDS]        # per run; default 30
#   INDEXERS=10 BEHIND=20 BUSY_PERIOD=2 BUSY_TPS=400 scripts/bench-indexers.sh
source "$(dirname "$0")/lib.sh"
seconds=${1:-30}
indexers=${INDEXERS:-10}
behind=${BEHIND:-20}
export BUSY_PERIOD=${BUSY_PERIOD:-2} BUSY_TPS=${BUSY_TPS:-400}
py="python3 $repo/scripts/indexers.py"

follow_busy_chain $((seconds * 5 + 600))
# Blocks of the load's full rate behind the tip before anything is traced.
start=$(head_of "$geth_url")
until [ "$(head_of "$geth_url")" -ge $((start + behind)) ]; do sleep 1; done
cpu() { awk '{print $14 + $15}' "/proc/$geth_pid/stat"; }
seconds_of() { python3 -c "print(($2 - $1) / $(getconf CLK_TCK))"; }

before=$(cpu); sleep "$seconds"; idle=$(seconds_of "$before" "$(cpu)")
echo "geth's CPU with no indexers: ${idle}s over ${seconds}s"
for target in "neve=$url" "geth=$geth_url"; do
  IFS== read -r name target_url <<<"$target"
  before=$(cpu)
  $py run "$target_url" "$seconds" "$indexers" "$behind" >"$work/indexers-$name.json"
  used=$(seconds_of "$before" "$(cpu)")
  python3 - "$work/indexers-$name.json" "$name" "$used" "$idle" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
name, used, idle = sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
extra = max(0.0, used - idle)
r["node_cpu_s"], r["node_cpu_us_per_trace"] = round(extra, 3), round(1e6 * extra / max(1, r["ok"]), 1)
json.dump(r, open(sys.argv[1], "w"))
print(f"{name}: {r['ok']} traces ({r['421']} 421, {r['error']} errors), "
      f"{r['rps_while_behind']} req/s while behind ({r['busy_seconds']}s), "
      f"p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms; node CPU {extra:.2f}s, "
      f"{r['node_cpu_us_per_trace']} µs per trace")
PY
done
python3 - "$work/indexers-neve.json" "$work/indexers-geth.json" <<'PY'
import json, sys
n, g = (json.load(open(p)) for p in sys.argv[1:])
print(f"ratio: {n['rps_while_behind'] / max(g['rps_while_behind'], 1e-9):.1f}x geth's req/s; "
      f"node CPU per trace through neve {100 * n['node_cpu_us_per_trace'] / max(g['node_cpu_us_per_trace'], 1e-9):.2f}% of direct")
PY
# The ceiling of neve's catch-up as it takes state from the node: the
# node's witnesses alone, as many as neve fetched while its indexers had
# blocks to trace, four at a time as neve asks them (of the newest blocks,
# the node's caches warm now: a low floor, so a high ceiling).
witnessed=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["witnesses_while_behind"] or 0)' \
  "$work/indexers-neve.json")
if [ "$witnessed" -gt 0 ]; then
  $py witnesses "$geth_url" "$witnessed" 4 >"$work/witnesses.json"
  python3 - "$work/indexers-neve.json" "$work/indexers-geth.json" "$work/witnesses.json" <<'PY'
import json, sys
n, g, w = (json.load(open(p)) for p in sys.argv[1:])
ceiling = n['ok_behind'] / max(w['seconds'], 1e-9)
print(f"ceiling: the node's {w['blocks']} witnesses alone (as many as neve fetched while "
      f"behind; {w['failed']} failed) take {w['seconds']}s, so {n['ok_behind']} answers at most "
      f"{ceiling:.1f} req/s ({ceiling / max(g['rps_while_behind'], 1e-9):.1f}x geth's; neve at "
      f"{100 * n['rps_while_behind'] / max(ceiling, 1e-9):.0f}% of it)")
PY
fi
# Blocks nobody traced: the ones sealed from here on.
start=$(head_of "$geth_url")
until [ "$(head_of "$geth_url")" -ge $((start + 8)) ]; do sleep 1; done
$py cold "$url" "$geth_url" 6 >"$work/cold.json"
# Then newer blocks nobody traced, oldest first: each one's parent was
# traced just before it (the first one's excepted).
start=$(head_of "$geth_url")
until [ "$(head_of "$geth_url")" -ge $((start + 7)) ]; do sleep 1; done
$py cold "$url" "$geth_url" 6 up >"$work/cold-up.json"
$py sizes "$url" 12 >"$work/sizes.json"
python3 - "$work/cold.json" "$work/cold-up.json" "$work/sizes.json" <<'PY'
import json, sys
cold, up, sizes = (json.load(open(p)) for p in sys.argv[1:])
for name, c in (("nothing held", cold), ("its parent traced", up)):
    for b in c["blocks"]:
        print(f"  cold block {b['block']} ({name}): neve {b['neve_ms']} ms ({b['neve_status']}), "
              f"geth {b['geth_ms']} ms, geth's witness {b['witness_ms']} ms")
    print(f"cold trace p50, {name}: neve {c['neve_p50_ms']} ms, geth {c['geth_p50_ms']} ms "
          f"(geth's witness alone {c['witness_p50_ms']} ms; {c['neve_421']} 421)")
print(f"witness: {sizes['witness_bytes_per_block']} bytes a block as served, the block's "
      f"{sizes['block_bytes_per_block']} ({sizes['ratio']}x, {sizes['blocks']} blocks)")
PY
curl -s "$url/metrics" | grep -E '^neve_trace_|^neve_state_witness|^neve_state_post|^neve_state_fetch|^neve_state_upstream' | sed 's/^/  /'
