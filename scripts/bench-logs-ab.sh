#!/usr/bin/env bash
# eth_getLogs A/B against the static ceiling: another neve binary (a previous
# build, say) and the current one each follow the same geth dev chain, and
# `neve bench --workload logs` measures both and nginx serving the same
# answers from files, rounds alternating which neve goes first.
#
#   scripts/bench-logs-ab.sh OTHER_NEVE [BLOCKS [TPS [ROUNDS]]]
#   DEV_PERIOD=1 scripts/bench-logs-ab.sh /path/to/old/neve 300 600 3
#
# DEV_PERIOD=0 (the default) seals a block per transaction batch, as the
# demo's chain; DEV_PERIOD=1 with TPS ~600 gives blocks of ~600 transactions,
# whose 10-block log windows answer about 1 MB. WORKLOADS (default "logs")
# names others to check alongside, e.g. WORKLOADS="logs randblock receipt".
# Prints one line per round, workload and target: req/s at c1 and c16 and
# each as a ratio of the ceiling's; then each neve's range and median of
# those ratios over the rounds.
set -euo pipefail
other=$(realpath "${1:?usage: $0 OTHER_NEVE [BLOCKS [TPS [ROUNDS]]]}")
BLOCKS=${2:-600}
TPS=${3:-2100}
ROUNDS=${4:-3}
DURATION=${DURATION:-5}
WORKLOADS=${WORKLOADS:-logs}
source "$(dirname "$0")/lib.sh"

start_geth_dev
grow_chain "$BLOCKS" "$TPS"
chain=$(head_of "$geth_url")

# Both neves follow geth; each stores the chain as its own build does.
declare -A url
for name in other current; do
  bin=$([ "$name" = other ] && echo "$other" || echo "$neve")
  port=$(free_port)
  "$bin" serve --upstream "$geth_url" --ws-url none --floor 0 --listen "127.0.0.1:$port" \
    --data-dir "$work/$name" >"$work/$name.log" 2>&1 &
  pids+=($!)
  url[$name]="http://127.0.0.1:$port"
done
for name in other current; do
  until [ "$(stored_height "${url[$name]}")" -ge "$chain" ]; do sleep 0.2; done
done
# On-disk bytes (segments are sized up front, sparse: not their apparent size).
echo "store bytes per block: other $(( $(du -s -B1 "$work/other" | cut -f1) / (chain + 1) )), current $(( $(du -s -B1 "$work/current" | cut -f1) / (chain + 1) ))"

# The ceiling: nginx, one single-process instance per core on one port, as
# the headline suite runs it.
mkdir -p "$work/ceiling"
start_nginx_ceiling "$work/ceiling"

for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) -eq 1 ]; then order=(current other); else order=(other current); fi
  targets=()
  for name in "${order[@]}"; do targets+=(--target "$name=${url[$name]}"); done
  workloads=()
  for w in $WORKLOADS; do workloads+=(--workload "$w"); done
  "$neve" bench "${targets[@]}" --ceiling "nginx=$ceiling_url" --ceiling-dir "$work/ceiling" \
    "${workloads[@]}" --conns 1,16 --warmup 1 --duration "$DURATION" --out "$work/round$round" >/dev/null
  python3 - "$work/round$round/results.json" "$round" <<'EOF'
import json, sys
results = json.load(open(sys.argv[1]))
for run in results["workloads"]:
    rates = {t["target"]["name"]: {p["conns"]: p["requests_per_second"] for p in t["points"]} for t in run["targets"]}
    body = {t["target"]["name"]: t["points"][-1]["mean_body_bytes"] for t in run["targets"]}
    ceiling = rates["nginx"]
    for name, r in rates.items():
        print(f"round {sys.argv[2]} {run['workload']:10} {name:8} c1 {r[1]:8.0f} req/s ({r[1] / ceiling[1]:.2f}x)  "
              f"c16 {r[16]:8.0f} req/s ({r[16] / ceiling[16]:.2f}x)  answers {body[name] / 1024:.1f} KiB")
EOF
done

# One round is one sample on a shared machine: the summary is each neve's
# range and median of its ratio to the ceiling over all rounds.
python3 - "$work" "$ROUNDS" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
ratios = {}
for round in range(1, rounds + 1):
    for run in json.load(open(f"{work}/round{round}/results.json"))["workloads"]:
        rates = {t["target"]["name"]: {p["conns"]: p["requests_per_second"] for p in t["points"]} for t in run["targets"]}
        for name, r in rates.items():
            for conns in (1, 16):
                ratios.setdefault((run["workload"], name, conns), []).append(r[conns] / rates["nginx"][conns])
print(f"over {rounds} rounds, ratio to the ceiling (min-max, median):")
for (workload, name, conns), values in sorted(ratios.items()):
    if name != "nginx":
        print(f"  {workload:14} {name:8} c{conns:<3} {min(values):.2f}-{max(values):.2f}x  median {statistics.median(values):.2f}x")
EOF
