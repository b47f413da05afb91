#!/usr/bin/env bash
# Installs the Debian packages neve's tests and benchmarks use, if missing:
#   promtool (prometheus) — checks and unit-tests deploy/prometheus/alerts.yml,
#   wrk — load for the wrk comparison test and the benchmark scripts,
#   nginx-light — the static-file ceiling in benchmarks, and the front end
#     (deploy/nginx) in the front-end test,
#   fonts-dejavu-core — text in `neve bench`'s PNG plots,
#   openssl — the CA and certificates the TLS tests make at test time,
#   podman — builds the OCI image (deploy/oci) in the packaging test,
#   chromium — the headless browser of the CORS test.
#   ethers, viem (npm) — the real client libraries in tests/clients.
#   cryo (PyPI, with polars, pyarrow, pandas) — paradigm's indexer, in a
#     virtual environment at tests/clients/.venv.
# Idempotent; needs root (or sudo) only when a Debian package is missing.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -d "$repo/tests/clients/node_modules/ethers" ] || [ ! -d "$repo/tests/clients/node_modules/viem" ]; then
  echo "[install-deps] npm install in tests/clients" >&2
  (cd "$repo/tests/clients" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi

venv="$repo/tests/clients/.venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import cryo, polars, pyarrow, pandas' 2>/dev/null; then
  echo "[install-deps] cryo in tests/clients/.venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    cryo==0.3.2 polars==2.1.0 pyarrow==26.0.1 pandas==3.1.1 >/dev/null
fi

need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v nginx >/dev/null 2>&1 || need+=(nginx-light)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v podman >/dev/null 2>&1 || need+=(podman)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "[install-deps] installing ${need[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
