#!/usr/bin/env bash
# The main job on a fresh machine: builds neve and the pinned geth, starts a
# local geth dev chain on 127.0.0.1, feeds it traffic with `neve load`, has
# neve mirror it, and prints a short side-by-side table (neve, geth and a
# static-file ceiling, same blocks, same wrk). A demo-sized run of
# scripts/bench-serve.sh; set BLOCKS / SECONDS_PER_RUN for a larger one.
set -euo pipefail
cd "$(dirname "$0")/.."
BLOCKS=${BLOCKS:-400} SECONDS_PER_RUN=${SECONDS_PER_RUN:-3} exec scripts/bench-serve.sh
