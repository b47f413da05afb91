#!/usr/bin/env bash
# The main job on a fresh machine: builds neve and the pinned geth, starts a
# local geth dev chain on 127.0.0.1, feeds it traffic with `neve load`, has
# neve mirror it, and prints a side-by-side table of neve, geth and a
# static-file ceiling (nginx serving neve's own answers): same blocks, same
# requests, same load generator. A demo-sized `neve bench --suite headline`;
# scripts/bench-headline.sh runs the full one. Extra arguments go to
# `neve bench`.
set -euo pipefail
cd "$(dirname "$0")/.."
export NEVE_TOOLS_DIR=${NEVE_TOOLS_DIR:-$PWD/.tools}
scripts/install-tools.sh geth
scripts/install-deps.sh
cargo build --release --locked -p neve
"${CARGO_TARGET_DIR:-target}/release/neve" bench --suite headline \
  --blocks 400 --avalanchego-seconds 0 --conns 1,4,16 --warmup 0.5 --duration 3 \
  --workload randblock --workload randblock-full --workload receipt --workload logs \
  --out bench-results/demo "$@"
