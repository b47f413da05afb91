#!/usr/bin/env bash
# The headline comparison on this machine, one command: a geth archive dev
# chain of 2,000+ blocks and an avalanchego local C-chain, both fed by
# `neve load`, a neve mirroring each, nginx serving the same answers from
# disk as the ceiling, and the full connection sweep on each pair. Writes
# bench-results/ (tables, results.json, plots, summary.md). About 30 min on
# 2 cores. Extra arguments go to `neve bench --suite headline`.
set -euo pipefail
cd "$(dirname "$0")/.."
export NEVE_TOOLS_DIR=${NEVE_TOOLS_DIR:-$PWD/.tools}
scripts/install-tools.sh
scripts/install-deps.sh
cargo build --release --locked -p neve
exec "${CARGO_TARGET_DIR:-target}/release/neve" bench --suite headline \
  --workload randblock --workload randblock-full --workload receipt --workload logs --workload mix:block-tail \
  --out bench-results "$@"
