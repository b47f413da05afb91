#!/usr/bin/env bash
# Soak: neve follows a geth dev chain that keeps growing while 16 readers
# keep it saturated, for SECONDS (default 3600); prints anonymous RSS every
# 10 s, the read rate and any unexpected answer, and ends with a
# differential sample against geth. The test suite runs the same test for
# two minutes.
#
#   scripts/soak.sh            # an hour
#   scripts/soak.sh 600        # ten minutes
set -euo pipefail
cd "$(dirname "$0")/.."
export NEVE_TOOLS_DIR=${NEVE_TOOLS_DIR:-$PWD/.tools}
scripts/install-tools.sh geth >&2
NEVE_SOAK_SECONDS=${1:-3600} cargo test --release --locked -p neve --test soak -- --nocapture 2>&1 |
  grep -E '^soak|test result|panicked|unexpected|grew'
