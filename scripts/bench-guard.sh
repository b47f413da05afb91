#!/usr/bin/env bash
# CI's performance guard: a short head-to-head of neve against geth on a
# demo-sized chain, failing when neve falls under a floor.
#
# A geth dev chain on 127.0.0.1 (archive, a block per transaction batch)
# grown by `neve load` into a few dozen blocks of ~1,000+ transactions, a
# neve following it, then one `neve bench` run against both for every
# workload it has for what neve serves, at 1 and 16 connections. Prints
# neve's req/s over geth's beside the floors below, and neve's anonymous
# memory (RssAnon: its peak while serving the workloads, and while
# backfilling the chain before them) beside its caps; exits 1 when a ratio
# is under its floor, a cell measured the reject path, or the memory is
# over a cap. A benchmark CI runs, not a
# timed test: a few minutes on 2 cores.
#
#   scripts/bench-guard.sh [--out DIR]      # default: a new temporary directory
#   NEVE_BIN=path/to/neve scripts/bench-guard.sh   # a neve already built
#
# DIR gets results.json, results.md and the plots of `neve bench`,
# guard.txt / guard.json (the table below), neve's RssAnon samples
# (rss-anon-kib.txt), its /metrics and /health after the runs, and the
# logs of neve and geth.
# BLOCKS, DURATION, WARMUP and POOL resize the run (defaults below);
# NEVE_SERVE_ARGS adds flags to `neve serve` (for an experiment);
# CEILING=1 adds nginx serving geth's answers from files, the machine's
# ceiling for sending the same bytes, reported beside (no floor).
set -euo pipefail

# Floors: neve's req/s over geth's on the same requests, under which the
# guard fails. Set from runs on the project's 2-core machine (2026-11-26:
# this build twice beside the previous main twice, alternated, chains of
# 780-1,340 transactions a block), a third to a quarter of the lowest
# healthy ratio, so a noisy machine (the load generator and both servers
# share the cores) does not trip them while the regression they are here
# for does: the previous main measured tx and receipts at 0.11-0.19x and
# the seeds' mix at 1.1-5.6x, neve's heap at 223-292 MiB. At c1 neve's
# latency moves 3-4x from run to run (where the scheduler puts the client
# and the server), so c1 floors are lower: 0.8 for small answers, whose
# healthy c1 ratios are 1.5-2.2x (a second round on 2026-11-26 measured
# 0.91x and 1.08x in runs where the host had evicted the store's pages and
# every read went to the disk, since fixed). Recalibrate from guard.txt
# when the machine or the chain changes.
declare -A FLOOR=(
  # Hashes-only blocks (~90 KB answers): this build 7.2-7.4x at c1,
  # 17-18x at c16.
  [randblock/1]=2 [randblock/16]=4
  # Full blocks (~1 MB): geth encodes each answer, neve sends stored
  # bytes; 13-14x at c1, 19-20x at c16.
  [randblock-full/1]=3 [randblock-full/16]=4
  # A transaction by hash (~0.8 KB): 1.8x at c1, 4.0-4.1x at c16 (the
  # load generator's core the limit there); the previous main 0.14-0.19x.
  [tx/1]=0.8 [tx/16]=2
  # A receipt (~1.3 KB): 1.8-1.9x, 4.1-4.2x; the previous main 0.11-0.15x.
  [receipt/1]=0.8 [receipt/16]=2
  # A block's receipts (~1.6 MB): 20-21x at c1, 22-23x at c16.
  [block-receipts/1]=4 [block-receipts/16]=4
  # 10-block windows of the token's logs (~2.7 MB): 37-48x.
  [logs/1]=6 [logs/16]=6
  # State, from verified proofs held after the first read (~100 B):
  # 1.9-2.0x at c1 and 3.8-4.3x at c16, the client's CPU the limit there.
  # The tightest floors here.
  [balance/1]=0.8 [balance/16]=2
  [storage/1]=0.8 [storage/16]=2
  # The seeds' read mix (balances, head polling, blocks, logs, and 8 %
  # transactions and receipts): 7.5-8.9x at c1, 17-23x at c16 on chains
  # of ~1,300-transaction blocks, 2.7x and 7.8x on one of ~750 (geth's
  # head polling is cheaper on small blocks); the previous main 1.1-2.7x
  # and 1.3-5.6x.
  [mix:seeds-read/1]=2 [mix:seeds-read/16]=5
  # eth_call, a token transfer simulated at `latest` (revm over verified
  # state, on the call threads): 1.4x at c1 and 2.8x at c16 against geth
  # on a chain sealing a block a second under load (scripts/bench-calls.sh,
  # 2026-11-26); the floors guard against calls falling back to the node's
  # cost or to 421s (the reject path fails the cell on its own).
  [call/1]=0.5 [call/16]=1
  # eth_simulateV1, a wallet's preview at `latest` (one block of 1-3
  # calls on the token, transfers traced: a block assembled, its state
  # root from the verified trie): 2.0x at c1 and 8.8x at c16 against geth
  # on a chain sealing a block a second under load, 136 us of neve's CPU
  # a simulation against geth's 2,187 (scripts/bench-simulate.sh,
  # 2026-11-28). The floors guard against previews falling back to the
  # node's cost.
  [simulate/1]=0.5 [simulate/16]=2
  # Traces: `trace-block` (an indexer's: a block traced whole with
  # callTracer or prestateTracer) 134.8x at c1 and 278.5x at c16, and
  # `trace-tx` (an explorer's: a popular transaction with callTracer)
  # 4.9x and 7.8x, on this guard's chain (2026-11-28); served from the
  # traces' memo after the pool's first pass, whose cold replays fetch
  # each block's witness. The floors guard against traces falling back to
  # a replay (or the node) per request.
  [trace-block/1]=20 [trace-block/16]=40
  [trace-tx/1]=1 [trace-tx/16]=2
)
# WORKLOADS="…" narrows the run (an A/B against a build that predates a
# workload); the default is every workload with a floor.
read -ra WORKLOADS <<<"${WORKLOADS:-randblock randblock-full tx receipt block-receipts logs balance storage mix:seeds-read call simulate trace-block trace-tx}"
CONNS=(1 16)

# neve's state budget (--state-cache-bytes), set here rather than left at
# its 256 MiB default so the memory cap below means something: the issue's
# bound is 64 MiB of anonymous memory plus the state budget. The answers
# the memos keep are added as /metrics counts them after the runs
# (neve_call_memo_bytes, neve_trace_memo_bytes), each at most its budget
# below: what the run asked neve to keep, not a leak. Without them the
# cap failed a run whose chain was large enough (58,183 transactions) for
# the block traces' answers to fill ~40 MiB of the traces' memo
# (2026-12-02); 21.6 MiB on a chain of ~40,000. The traces' budget is its
# default: at 64 MiB a chain of 80,599 transactions (the guard's chain
# varies with the machine's pace) outgrew it, and trace-block fell to a
# replay per request (273 req/s at c1, under its floor).
STATE_BUDGET_MIB=32
ANON_CAP_MIB=$((64 + STATE_BUDGET_MIB))
CALL_MEMO_MIB=16
TRACE_MEMO_MIB=128
# Witnesses kept for mirrors (--witness-bytes), within the 64 MiB: the
# traces' cold replays put the nodes in the state budget either way. At
# its 64 MiB default the serving peak measured 78.4 MiB with every
# workload (2026-11-28), too near the cap on a chain of bigger blocks.
WITNESS_BUDGET_MIB=16
# The backfill before the benchmark is ingest, not a serving workload: a
# burst of ~1,300-transaction blocks measured 60-128 MiB of anonymous
# memory at its peak (2026-11-26, 12 MiB ingest buffer), handed back once
# caught up. Its own cap catches an ingest regression (the previous main
# held 116-119 MiB after backfilling and kept it) without failing on the
# burst's noise.
BACKFILL_CAP_MIB=192

# The chain: one round of `neve load` (10 s) into geth sealing a block per
# batch gives ~40 blocks of ~1,250 transactions; a cap far above what geth
# takes, so it is the node that sets the pace and the blocks are big.
BLOCKS=${BLOCKS:-32}
LOAD_TPS=20000
# Per cell: short, since the floors are far below the margins. The pool is
# the distinct requests per workload, each answered once by every target
# before its cells (unmeasured): small, as geth takes up to ~60 ms an
# answer here (10-block log windows).
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
POOL=${POOL:-200}
# Bounds on waiting for neve (backfill of the chain, sender recovery of
# every transaction included).
CATCH_UP_SECONDS=300

out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    *) echo "usage: $0 [--out DIR]" >&2; exit 2 ;;
  esac
done
# Made and resolved before lib.sh moves to the repository and before its
# cleanup, which removes only its own work directory.
if [ -z "$out" ]; then out=$(mktemp -d -t neve-bench-guard.XXXXXX); fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

source "$(dirname "$0")/lib.sh"
# A signal ends the script through exit, so lib.sh's EXIT trap stops
# everything it started.
trap 'exit 130' INT
trap 'exit 143' TERM
started=$SECONDS

start_geth_dev
grow_chain "$BLOCKS" "$LOAD_TPS"
chain=$(head_of "$geth_url")
# Block sizes vary a lot when geth seals per batch: the chain is described
# by its mean and largest block, asked in one batch.
chain_shape=$(rpc "$geth_url" "$(python3 -c 'import json,sys; print(json.dumps([{"jsonrpc":"2.0","id":h,"method":"eth_getBlockTransactionCountByNumber","params":[hex(h)]} for h in range(int(sys.argv[1]) + 1)]))' "$chain")" |
  python3 -c 'import json,sys; n=[int(a["result"],16) for a in json.load(sys.stdin)]; print(f"{len(n)} blocks, {sum(n)} transactions: {sum(n)/len(n):.0f} a block, {sum(x >= 1000 for x in n)} blocks of 1,000+, the largest {max(n)}")')
echo "chain: $chain_shape ($((SECONDS - started)) s so far)" >&2

port=$(free_port)
neve_url="http://127.0.0.1:$port"
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$port" \
  --data-dir "$work/neve" --state-cache-bytes "${STATE_BUDGET_MIB}MiB" \
  --witness-bytes "${WITNESS_BUDGET_MIB}MiB" --call-memo-bytes "${CALL_MEMO_MIB}MiB" \
  --trace-memo-bytes "${TRACE_MEMO_MIB}MiB" ${NEVE_SERVE_ARGS:-} >"$work/neve.log" 2>&1 &
neve_pid=$!; pids+=("$neve_pid")
sample_peak "$neve_pid" "$work/rss" &
pids+=($!)

deadline=$((SECONDS + CATCH_UP_SECONDS))
until [ "$(stored_height "$neve_url")" -ge "$chain" ]; do
  kill -0 "$neve_pid" 2>/dev/null || { echo "neve exited:" >&2; tail -20 "$work/neve.log" >&2; exit 1; }
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "neve did not store the chain in $CATCH_UP_SECONDS s:" >&2; tail -20 "$work/neve.log" >&2; exit 1
  fi
  sleep 0.2
done
# Holding the head: `latest` answered, not 421.
until [ "$(head_of "$neve_url" 2>/dev/null || echo -1)" -ge "$chain" ]; do
  if [ "$SECONDS" -ge "$deadline" ]; then echo "neve does not answer latest = $chain" >&2; exit 1; fi
  sleep 0.2
done
backfill_samples=$(wc -l <"$work/rss")
echo "neve holds the head ($((SECONDS - started)) s so far); benchmarking …" >&2

workload_args=()
for w in "${WORKLOADS[@]}"; do workload_args+=(--workload "$w"); done
ceiling_args=()
if [ "${CEILING:-0}" = 1 ]; then
  mkdir -p "$work/ceiling"
  start_nginx_ceiling "$work/ceiling"
  ceiling_args=(--ceiling "static=$ceiling_url" --ceiling-dir "$work/ceiling")
fi
conns=$(IFS=,; echo "${CONNS[*]}")
# --allow-flagged: a flagged cell (the reject path) is reported and failed
# below with the rest, not by bench's own exit before the table is printed.
"$neve" bench --target "neve=$neve_url" --target "geth=$geth_url" "${workload_args[@]}" \
  "${ceiling_args[@]}" --conns "$conns" --pool "$POOL" --warmup "$WARMUP" --duration "$DURATION" \
  --out "$out" --allow-flagged >"$out/bench.txt"
after_kb=$(rss_anon_kb "$neve_pid")
# neve's own account of the run (store reads, state cache, memory), for
# telling a regression's cause from the outside.
curl -s "$neve_url/metrics" >"$out/neve-metrics.txt" || true
curl -s "$neve_url/health" >"$out/neve-health.json" || true
cp "$work/neve.log" "$work/geth.log" "$out/"
cp "$work/rss" "$out/rss-anon-kib.txt"

floors=()
for key in "${!FLOOR[@]}"; do floors+=("$key=${FLOOR[$key]}"); done
set +e
python3 - "$out" "$work/rss" "$backfill_samples" "$after_kb" "$ANON_CAP_MIB" "$STATE_BUDGET_MIB" \
  "$BACKFILL_CAP_MIB" "$chain_shape" "${WORKLOADS[*]}" "${CONNS[*]}" "$CALL_MEMO_MIB" "$TRACE_MEMO_MIB" \
  "${floors[@]}" <<'PY'
import json, sys
out, rss_file, backfill_samples, after_kb, cap_mib, budget_mib, backfill_cap, chain, workloads, conns = sys.argv[1:11]
memo_budgets = {"neve_call_memo_bytes": float(sys.argv[11]) * 2**20,
                "neve_trace_memo_bytes": float(sys.argv[12]) * 2**20}
floors = {}
for spec in sys.argv[13:]:
    key, value = spec.rsplit("=", 1)
    floors[key] = float(value)
results = json.load(open(f"{out}/results.json"))
points = {}
for run in results["workloads"]:
    for target in run["targets"]:
        for p in target["points"]:
            if p["rate"] is None:
                points[(run["workload"], target["target"]["name"], p["conns"])] = p

rows, failed = [], 0
for workload in workloads.split():
    for c in map(int, conns.split()):
        n, g = points.get((workload, "neve", c)), points.get((workload, "geth", c))
        floor = floors.get(f"{workload}/{c}")
        row = {"workload": workload, "conns": c, "floor": floor}
        if n is None or g is None or floor is None:
            row["status"] = "FAIL (no measurement or no floor)"
        else:
            row["neve_rps"], row["geth_rps"] = n["requests_per_second"], g["requests_per_second"]
            row["ratio"] = row["neve_rps"] / row["geth_rps"] if row["geth_rps"] > 0 else None
            flags = [f"{who}: {p.get('reject_path') or p.get('client_bound')}"
                     for who, p in (("neve", n), ("geth", g)) if p.get("reject_path") or p.get("client_bound")]
            if flags:
                # Only real answers count: a rate of 421s or errors says nothing.
                row["status"] = "FAIL (flagged: " + "; ".join(flags) + ")"
            elif row["ratio"] is None or row["ratio"] < floor:
                row["status"] = "FAIL"
            else:
                row["status"] = "ok"
        failed += row["status"] != "ok"
        rows.append(row)

samples = [int(line) for line in open(rss_file) if line.strip().isdigit()]
b = int(backfill_samples)
kib = lambda k: k / 1024
# The answers the memos hold, as neve counts them, each at most its budget;
# a page not read counts nothing (the cap stays the stricter one).
memo_bytes = 0
try:
    for line in open(f"{out}/neve-metrics.txt"):
        name, _, value = line.partition(" ")
        if name in memo_budgets:
            memo_bytes += min(float(value), memo_budgets[name])
except (OSError, ValueError):
    pass
memory = {
    "peak_mib": kib(max(samples, default=0)),
    "backfill_peak_mib": kib(max(samples[:b], default=0)),
    "serving_peak_mib": kib(max(samples[b:], default=0)),
    "after_runs_mib": kib(int(after_kb or 0)),
    "cap_mib": float(cap_mib) + memo_bytes / 2**20,
    "state_budget_mib": float(budget_mib),
    "memos_mib": memo_bytes / 2**20,
    "backfill_cap_mib": float(backfill_cap),
}
# Every serving workload under the cap; the backfill before them under its own.
memory["status"] = "ok" if (samples and memory["serving_peak_mib"] <= memory["cap_mib"]
                            and memory["backfill_peak_mib"] <= memory["backfill_cap_mib"]) else "FAIL"
failed += memory["status"] != "ok"

fmt = lambda v, spec: "-" if v is None else format(v, spec)
lines = [f"neve vs geth on a chain of {chain}; "
         f"{results['duration_seconds']:g} s per cell after {results['warmup_seconds']:g} s warm-up",
         f"{'workload':<16} {'conns':>5} {'neve req/s':>11} {'geth req/s':>11} {'ratio':>8} {'floor':>6}  status"]
for r in rows:
    lines.append(f"{r['workload']:<16} {r['conns']:>5} {fmt(r.get('neve_rps'), '11.0f')} {fmt(r.get('geth_rps'), '11.0f')} "
                 f"{fmt(r.get('ratio'), '7.2f')}x {fmt(r['floor'], '5.1f')}x  {r['status']}")
static = [(r, points.get((r["workload"], "static", r["conns"]))) for r in rows]
for r, s in static:
    if s and r.get("neve_rps"):
        lines.append(f"  {r['workload']:<16} c{r['conns']:<3} against nginx serving the same answers from files: "
                     f"{s['requests_per_second']:.0f} req/s, neve {r['neve_rps'] / s['requests_per_second']:.2f}x")
m = memory
lines.append(f"neve anonymous memory (RssAnon): serving peak {m['serving_peak_mib']:.1f} MiB, "
             f"{m['after_runs_mib']:.1f} MiB after the runs, cap {m['cap_mib']:.0f} MiB (64 + state budget "
             f"{m['state_budget_mib']:.0f} + memos' answers {m['memos_mib']:.1f}); backfill peak {m['backfill_peak_mib']:.1f} MiB, cap "
             f"{m['backfill_cap_mib']:.0f} MiB  {m['status']}")
lines.append("bench guard: " + ("ok" if failed == 0 else f"FAIL ({failed} over the line)"))
text = "\n".join(lines)
print(text)
open(f"{out}/guard.txt", "w").write(text + "\n")
json.dump({"chain": chain, "cells": rows, "memory": memory, "failed": failed},
          open(f"{out}/guard.json", "w"), indent=2)
sys.exit(1 if failed else 0)
PY
status=$?
set -e
echo "took $((SECONDS - started)) s; results in $out" >&2
exit "$status"
