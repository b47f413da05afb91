#!/usr/bin/env bash
# Ten indexers tracing every block of a growing chain with callTracer and
# prestateTracer (scripts/indexers.py), through neve and straight at geth,
# in one run on a chain of busy blocks:
#   - requests a second the indexers got while they had blocks to trace
#     (spread over the BEHIND blocks behind the tip; STAGGER=0 starts all
#     at the oldest, in lockstep), and their latencies;
#   - the node's CPU per trace request: geth's utime + stime over the run,
#     less what it spends with no indexers (sealing, the load, neve
#     following) on as many transactions sealed, divided by the traces
#     answered; the no-indexer rate is taken before and after the runs,
#     and each alone gives the spread printed beside the figure;
#   - what CPU taken beside the node costs it by itself, the bound on
#     what the figure above can tell under load: geth with no indexers
#     while a process that asks it nothing (`indexers.py burn`) takes the
#     CPU neve (past its following) and the indexers took in each run, at
#     the same moments; its CPU per transaction sealed against the idle
#     windows', and that difference over the run's transactions;
#   - the same on a quiet node (the load paused), where the node's own
#     work no longer hides what neve asks of it;
#   - the first trace of a block nobody asked before (cold memo, cold
#     witness) through neve against geth's, one at a time: newest first
#     (nothing held for any), then newer blocks oldest first (each one's
#     parent traced just before, as an indexer following the chain does);
#   - one transaction's trace nobody asked before, the first, the middle
#     or the last of a block, through neve against geth's (and the
#     witnesses neve fetched for them);
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
# CPU ticks of the processes named, those still running.
cpu_of() { local ticks=0 pid; for pid in "$@"; do
  ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0))); done; echo $ticks; }
# Every 0.25 s until killed: seconds and the CPU ticks of PIDs.
sample() { local out=$1; shift
  while :; do echo "$(date +%s.%N) $(cpu_of "$@")"; sleep 0.25; done >"$out"; }
seconds_of() { python3 -c "print(($2 - $1) / $(getconf CLK_TCK))"; }

# A window of the node's work: its CPU seconds and head at each end.
mark() { echo "$(cpu) $(head_of "$geth_url")"; }
window() { # NAME START_MARK END_MARK
  read -r c0 h0 <<<"$2"; read -r c1 h1 <<<"$3"
  $py sealed "$geth_url" "$h0" "$h1" | python3 -c '
import json, sys
w = json.load(sys.stdin); w["cpu_s"] = float(sys.argv[1]); w["seconds"] = float(sys.argv[2])
print(json.dumps(w))' "$(seconds_of "$c0" "$c1")" "$4" >"$work/window-$1.json"
}
n0=$(cpu_of "$neve_pid")
m0=$(mark); sleep "$seconds"; m1=$(mark); window idle-before "$m0" "$m1" "$seconds"
following=$(python3 -c "print(($(cpu_of "$neve_pid") - $n0) / $(getconf CLK_TCK) / $seconds)")
for target in "neve=$url" "geth=$geth_url"; do
  IFS== read -r name target_url <<<"$target"
  m0=$(mark)
  $py run "$target_url" "$seconds" "$indexers" "$behind" >"$work/indexers-$name.json" &
  indexers_pid=$!
  sample "$work/cpu-$name" "$neve_pid" "$indexers_pid" &
  sampler=$!; pids+=("$sampler")
  wait "$indexers_pid"
  kill "$sampler"
  m1=$(mark); window "$name" "$m0" "$m1" "$seconds"
done
m0=$(mark); sleep "$seconds"; m1=$(mark); window idle-after "$m0" "$m1" "$seconds"
# The node with no indexers beside the CPU each run took (neve's past
# its following, the indexers'), at the same moments of the window.
for name in neve geth; do
  python3 - "$work/cpu-$name" "$following" "$(getconf CLK_TCK)" >"$work/profile-$name" <<'PY'
import sys
rows = [tuple(map(float, line.split())) for line in open(sys.argv[1]) if len(line.split()) == 2]
following, tick = float(sys.argv[2]), float(sys.argv[3])
for (t0, c0), (t1, c1) in zip(rows, rows[1:]):
    print(f"{t1 - rows[0][0]:.3f} {max(0.0, (c1 - c0) / tick - following * (t1 - t0)):.4f}")
PY
  m0=$(mark)
  $py burn "$work/profile-$name" >"$work/burn-$name.json"
  m1=$(mark); window "beside-$name" "$m0" "$m1" "$seconds"
done
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
w = {k: json.load(open(f"{work}/window-{k}.json"))
     for k in ("idle-before", "idle-after", "neve", "geth", "beside-neve", "beside-geth")}
def rate(*names):
    return sum(w[k]["cpu_s"] for k in names) / max(1, sum(w[k]["transactions"] for k in names))
for k in ("idle-before", "idle-after"):
    print(f"geth with no indexers ({k[5:]}): {w[k]['cpu_s']:.2f}s CPU over {w[k]['seconds']:.0f}s, "
          f"{w[k]['transactions']} transactions sealed in {w[k]['blocks']} blocks, "
          f"{1e3 * rate(k):.3f} ms a transaction")
for name in ("neve", "geth"):
    path = f"{work}/indexers-{name}.json"
    r = json.load(open(path))
    used, sealed = w[name]["cpu_s"], w[name]["transactions"]
    extra = {k: max(0.0, used - rate(*k) * sealed)
             for k in (("idle-before", "idle-after"), ("idle-before",), ("idle-after",))}
    per = {k: 1e6 * v / max(1, r["ok"]) for k, v in extra.items()}
    both = ("idle-before", "idle-after")
    r["node_cpu_s"], r["node_cpu_us_per_trace"] = round(extra[both], 3), round(per[both], 1)
    r["node_cpu_us_per_trace_spread"] = [round(min(per.values()), 1), round(max(per.values()), 1)]
    json.dump(r, open(path, "w"))
    beside = f"beside-{name}"
    burnt = json.load(open(f"{work}/burn-{name}.json"))
    print(f"geth with no indexers beside the CPU the {name} run took ({burnt['asked_s']:.2f}s, "
          f"{burnt['cpu_s']:.2f}s of it taken by a process asking it nothing): "
          f"{w[beside]['cpu_s']:.2f}s CPU, {w[beside]['transactions']} "
          f"transactions sealed, {1e3 * rate(beside):.3f} ms a transaction, "
          f"{100 * (rate(beside) / rate(*both) - 1):+.1f}% against the idle windows' "
          f"({rate(*both) * sealed * (rate(beside) / rate(*both) - 1):+.2f}s on the run's transactions)")
    print(f"{name}: {r['ok']} traces ({r['421']} 421, {r['error']} errors), "
          f"{r['rps_while_behind']} req/s while behind ({r['busy_seconds']}s), "
          f"p50 {r['p50_ms']} ms p99 {r['p99_ms']} ms; node CPU {used:.2f}s with "
          f"{sealed} transactions sealed, {extra[both]:.2f}s past sealing them, "
          f"{r['node_cpu_us_per_trace']} µs per trace "
          f"({r['node_cpu_us_per_trace_spread'][0]}-{r['node_cpu_us_per_trace_spread'][1]} "
          f"by either idle window alone)")
PY
python3 - "$work/indexers-neve.json" "$work/indexers-geth.json" <<'PY'
import json, sys
n, g = (json.load(open(p)) for p in sys.argv[1:])
share = lambda a, b: 100 * a / max(b, 1e-9)
lo, hi = n["node_cpu_us_per_trace_spread"], g["node_cpu_us_per_trace_spread"]
print(f"ratio: {n['rps_while_behind'] / max(g['rps_while_behind'], 1e-9):.1f}x geth's req/s; "
      f"node CPU per trace through neve {share(n['node_cpu_us_per_trace'], g['node_cpu_us_per_trace']):.2f}% of direct "
      f"({share(lo[0], hi[1]):.2f}-{share(lo[1], hi[0]):.2f}% by either idle window alone)")
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
# The node's CPU per trace through neve on a quiet node, where it can be
# told from the node's own work: the load paused (blocks keep coming,
# empty once the pool drains), the node's CPU over as long alone, then
# the indexers through neve over the blocks sealed since neve's run (full
# ones, none of them traced through neve), per trace answered while
# behind; against the direct figure above, which stands well clear of
# the node's own work under load.
kill -STOP "$load_pid"
sleep $((3 * BUSY_PERIOD))
m0=$(mark); sleep "$seconds"; m1=$(mark); window quiet "$m0" "$m1" "$seconds"
neve_end=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["end_tip"])' "$work/indexers-neve.json")
quiet_behind=$(( $(head_of "$url") - neve_end ))
m0=$(mark)
$py run "$url" "$seconds" "$indexers" "$quiet_behind" >"$work/indexers-quiet.json"
m1=$(mark); window neve-quiet "$m0" "$m1" "$seconds"
kill -CONT "$load_pid"
python3 - "$work" "$quiet_behind" <<'PY'
import json, sys
work, behind = sys.argv[1], int(sys.argv[2])
quiet, ran = (json.load(open(f"{work}/window-{k}.json")) for k in ("quiet", "neve-quiet"))
r, g = (json.load(open(f"{work}/indexers-{k}.json")) for k in ("quiet", "geth"))
extra = max(0.0, ran["cpu_s"] - quiet["cpu_s"])
per = 1e6 * extra / max(1, r["ok_behind"])
print(f"quiet node (load paused): geth alone {quiet['cpu_s']:.2f}s CPU over {quiet['seconds']:.0f}s "
      f"({quiet['transactions']} transactions sealed); with ten indexers through neve over the "
      f"{behind} blocks since neve's run ({r['ok_behind']} traces while behind, "
      f"{r['ok']} in all, {r['421']} 421) {ran['cpu_s']:.2f}s, {extra:.2f}s past it: "
      f"{per:.1f} µs per trace, {100 * per / max(g['node_cpu_us_per_trace'], 1e-9):.2f}% of direct")
PY
# Blocks nobody traced: the ones sealed from here on.
start=$(head_of "$geth_url")
until [ "$(head_of "$geth_url")" -ge $((start + 8)) ]; do sleep 1; done
$py cold "$url" "$geth_url" 6 >"$work/cold.json"
# Then newer blocks nobody traced, oldest first: each one's parent was
# traced just before it (the first one's excepted).
start=$(head_of "$geth_url")
until [ "$(head_of "$geth_url")" -ge $((start + 7)) ]; do sleep 1; done
$py cold "$url" "$geth_url" 6 up >"$work/cold-up.json"
# Then one transaction each of blocks nobody traced: the first, the
# middle, the last of a block in turn.
start=$(head_of "$geth_url")
until [ "$(head_of "$geth_url")" -ge $((start + 13)) ]; do sleep 1; done
$py cold-tx "$url" "$geth_url" 12 >"$work/cold-tx.json"
$py sizes "$url" 12 >"$work/sizes.json"
python3 - "$work/cold.json" "$work/cold-up.json" "$work/sizes.json" "$work/cold-tx.json" <<'PY'
import json, sys
cold, up, sizes, tx = (json.load(open(p)) for p in sys.argv[1:])
for name, c in (("nothing held", cold), ("its parent traced", up)):
    for b in c["blocks"]:
        print(f"  cold block {b['block']} ({name}): neve {b['neve_ms']} ms ({b['neve_status']}), "
              f"geth {b['geth_ms']} ms, geth's witness {b['witness_ms']} ms")
    print(f"cold trace p50, {name}: neve {c['neve_p50_ms']} ms, geth {c['geth_p50_ms']} ms "
          f"(geth's witness alone {c['witness_p50_ms']} ms; {c['neve_421']} 421)")
for b in tx["blocks"]:
    print(f"  cold transaction, {b['place']} of block {b['block']} ({b['transactions']}): "
          f"neve {b['neve_ms']} ms ({b['neve_status']}), geth {b['geth_ms']} ms, "
          f"{b['witnesses']} witness fetched")
for place in ("first", "middle", "last"):
    t = tx[place]
    print(f"cold transaction trace p50, the {place} of a block: neve {t['neve_p50_ms']} ms, "
          f"geth {t['geth_p50_ms']} ms ({t['witnesses']} witnesses for {t['traces']} traces)")
print(f"witness: {sizes['witness_bytes_per_block']} bytes a block as served, the block's "
      f"{sizes['block_bytes_per_block']} ({sizes['ratio']}x, {sizes['blocks']} blocks)")
PY
curl -s "$url/metrics" | grep -E '^neve_trace_|^neve_state_witness|^neve_state_post|^neve_state_fetch|^neve_state_upstream' | sed 's/^/  /'
