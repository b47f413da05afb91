#!/usr/bin/env bash
# Calls head to head on a busy chain: a geth dev chain sealing a block a
# second with `neve load` traffic throughout (a token and its holders), a
# neve following the tip, and `neve bench` against both in one run: the
# `call` workload (at `latest`, a third each: the token's balanceOf of one
# of the chain's senders, an allowance between two, a transfer simulated
# from one to another), `estimate` (the transfer, estimated), and the Ethereum
# mainnet method mix (eth_call first), at c1 and c16. Prints neve bench's
# table and the share of neve's answers that were real (not 421).
#
#   scripts/bench-calls.sh [SECONDS]      # per cell; default 10
#   NEVE_ARGS="--call-memo-bytes 0" scripts/bench-calls.sh   # every call run
source "$(dirname "$0")/lib.sh"
seconds=${1:-10}

follow_busy_chain $((seconds * 12 + 300))
out=${OUT:-$work/bench}
"$neve" bench --target "neve=$url" --target "geth=$geth_url" \
  --workload call --workload estimate --workload mix:eth-mainnet \
  --conns 1,16 --warmup "$seconds" --duration "$seconds" --out "$out" --allow-flagged
python3 - "$out/results.json" <<'PY'
import json, sys
for run in json.load(open(sys.argv[1]))["workloads"]:
    for target in run["targets"]:
        for point in target["points"]:
            o = point["outcomes"]
            total = sum(v for k, v in o.items() if isinstance(v, (int, float)) and k != "status_421")
            real = 100 * o.get("ok", 0) / max(1, total)
            print(f"{run['workload']:<16} {target['target']['name']:<5} c{point['conns']:<3} "
                  f"{point['requests_per_second']:>9.0f} req/s  p99 {point['latency']['p99_ms']:.2f} ms  real {real:.2f} %")
PY
