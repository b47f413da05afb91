#!/usr/bin/env bash
# Ingest benchmark, one run on this machine: backfill from geth over
# loopback, neve→neve bootstrap from /blocks, and live lag from geth's
# newHeads to neve's (the block servable and announced).
#
#   scripts/bench-ingest.sh                 # ~600 blocks of ~60 transactions
#   BLOCKS=300 scripts/bench-ingest.sh
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
BLOCKS=${BLOCKS:-600}
TPS=${TPS:-2100}
export NEVE_TOOLS_DIR=${NEVE_TOOLS_DIR:-$repo/.tools}
scripts/install-tools.sh geth >&2
scripts/install-deps.sh >&2
cargo build --release --locked -p neve >&2
neve="${CARGO_TARGET_DIR:-$repo/target}/release/neve"

work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rpc() { curl -s -H 'content-type: application/json' -d "$2" "$1"; }
height() { curl -s "$1/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["blocks"]["max_contiguous_height"] or 0)' 2>/dev/null || echo 0; }
now() { python3 -c 'import time; print(time.time())'; }
GP=$(free_port); GW=$(free_port); GA=$(free_port); AP=$(free_port); BP=$(free_port)
geth_url="http://127.0.0.1:$GP"

"$NEVE_TOOLS_DIR/geth" --dev --dev.period 0 --dev.gaslimit 60000000 --state.scheme hash --gcmode archive \
  --datadir "$work/geth" --http --http.addr 127.0.0.1 --http.port "$GP" --http.api eth,net,web3,debug,txpool \
  --ws --ws.addr 127.0.0.1 --ws.port "$GW" --ws.api eth,net,web3 --authrpc.addr 127.0.0.1 --authrpc.port "$GA" \
  --nodiscover --maxpeers 0 --port 0 --ipcdisable --txpool.globalslots=200000 --txpool.accountslots=20000 \
  --txpool.globalqueue=50000 --txpool.accountqueue=5000 --rpc.txfeecap=0 >"$work/geth.log" 2>&1 &
pids+=($!)
until rpc "$geth_url" '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' | grep -q result; do sleep 0.2; done
head() { python3 -c 'import json,sys; print(int(json.load(sys.stdin)["result"],16))' <<<"$(rpc "$geth_url" '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}')"; }
while [ "$(head)" -lt "$BLOCKS" ]; do "$neve" load --rpc "$geth_url" --seconds 10 --tps "$TPS" --accounts 64 2>/dev/null | sed -n 2p >&2; done
chain=$(head)

# Backfill: from the first answer of /health to the store reaching the head.
"$neve" serve --upstream "$geth_url" --ws-url "ws://127.0.0.1:$GW" --floor 0 --listen "127.0.0.1:$AP" --data-dir "$work/a" >"$work/a.log" 2>&1 &
pids+=($!)
until curl -s "http://127.0.0.1:$AP/health" >/dev/null; do sleep 0.01; done
t0=$(now)
until [ "$(height "http://127.0.0.1:$AP")" -ge "$chain" ]; do sleep 0.02; done
t1=$(now)
bytes=$(curl -s "http://127.0.0.1:$AP/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["storage"]["bytes"])')

# Bootstrap: another neve from the first; the mirror logs its own rate.
"$neve" serve --mirror-from "http://127.0.0.1:$AP" --floor 0 --listen "127.0.0.1:$BP" --data-dir "$work/b" >"$work/b.log" 2>&1 &
pids+=($!)
until [ "$(height "http://127.0.0.1:$BP")" -ge "$chain" ]; do sleep 0.02; done
bootstrap=$(grep 'bootstrapped from /blocks' "$work/b.log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g')

# Live lag while blocks keep coming.
"$neve" load --rpc "$geth_url" --seconds 12 --tps 40 --accounts 4 >/dev/null 2>&1 &
lag=$(node tests/clients/lag.mjs "ws://127.0.0.1:$GW" "ws://127.0.0.1:$AP" 10)
wait $! 2>/dev/null || true

python3 - "$chain" "$t0" "$t1" "$bytes" "$bootstrap" "$lag" <<'PY'
import json, re, sys
chain, t0, t1, size, bootstrap, lag = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5], json.loads(sys.argv[6])
seconds = t1 - t0
print(f"chain: {chain + 1} blocks, {size / 1e6:.1f} MB stored")
print(f"backfill from geth: {(chain + 1) / seconds:.0f} blocks/s, {size / seconds / 1e6:.1f} MB/s ({seconds:.2f} s, fsync per 64-block append)")
fields = dict(re.findall(r'(\w+)=("?[\d.]+"?)', bootstrap))
print(f"neve→neve bootstrap: {fields.get('blocks_per_second', '?').strip(chr(34))} blocks/s, {fields.get('mb_per_second', '?').strip(chr(34))} MB/s over /blocks ({fields.get('blocks', '?')} blocks)")
print(f"live lag geth newHeads → neve newHeads: p50 {lag['p50_ms']} ms, p99 {lag['p99_ms']} ms, max {lag['max_ms']} ms over {lag['blocks']} blocks")
PY
