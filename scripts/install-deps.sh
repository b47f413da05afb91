#!/usr/bin/env bash
# Installs the Debian packages neve's tests and benchmarks use, if missing:
#   promtool (prometheus) — checks /metrics in a test,
#   wrk — load for `scripts/bench-serve.sh`,
#   nginx-light — the static-file ceiling in benchmarks.
# Idempotent; needs root (or sudo) only when something is missing.
set -euo pipefail

need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || need+=(nginx-light)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "[install-deps] installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
