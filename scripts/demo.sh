#!/usr/bin/env bash
# The main job on a fresh machine: builds neve and the pinned nodes, starts a
# local geth dev chain on 127.0.0.1, feeds it traffic with `neve load` and
# shows the chain growing. Extra arguments go to `neve demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-tools.sh
cargo build --release --locked -p neve
exec "${CARGO_TARGET_DIR:-target}/release/neve" demo "$@"
