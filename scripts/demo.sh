#!/usr/bin/env bash
# The main job on a fresh machine: builds neve and the pinned geth, then
# `neve demo`: a local geth dev chain on 127.0.0.1 fed with traffic, neve
# following it on a printed address (127.0.0.1:8645), example calls with
# their answers, a table of neve against geth on the same blocks, and neve
# following on until Ctrl-C. Extra arguments go to `neve demo` (--seconds,
# --listen, --duration, --out). scripts/bench-headline.sh runs the full
# comparison (avalanchego and a static-file ceiling included).
set -euo pipefail
cd "$(dirname "$0")/.."
export NEVE_TOOLS_DIR=${NEVE_TOOLS_DIR:-$PWD/.tools}
scripts/install-tools.sh geth
scripts/install-deps.sh
cargo build --release --locked -p neve
exec "${CARGO_TARGET_DIR:-target}/release/neve" demo "$@"
