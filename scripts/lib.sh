# Shared by the benchmark scripts: sourced, not run. Builds neve and the
# pinned geth, cleans up on exit, and starts and grows a geth dev chain with
# the same flags as neve-devnet's GethDev (archive, loopback only).
# NEVE_BIN names a neve already built (another build to measure, or one CI
# built before): then nothing is compiled.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Relative to where the script was started, not to the repository.
[ -z "${NEVE_BIN:-}" ] || NEVE_BIN=$(realpath "$NEVE_BIN")
cd "$repo"
export NEVE_TOOLS_DIR=${NEVE_TOOLS_DIR:-$repo/.tools}
scripts/install-tools.sh geth >&2
scripts/install-deps.sh >&2
if [ -n "${NEVE_BIN:-}" ]; then
  neve=$NEVE_BIN
  [ -x "$neve" ] || { echo "NEVE_BIN=$NEVE_BIN is not an executable" >&2; exit 1; }
else
  # Always asked, not only when the binary is missing: a target directory
  # kept between runs (CI's) holds an older commit's neve, and cargo
  # rebuilds nothing when it is current.
  cargo build --release --locked -p neve >&2
  neve="${CARGO_TARGET_DIR:-$repo/target}/release/neve"
fi

work=$(mktemp -d)
pids=()
cleanup() {
  # A process stopped (the load, paused by a bench) takes its SIGTERM on
  # SIGCONT; otherwise the wait below would wait for ever.
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; kill -CONT "$pid" 2>/dev/null || true; done
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  # BENCH_KEEP=DIR keeps the run's logs (neve's, the load's) for a look after.
  if [ -n "${BENCH_KEEP:-}" ]; then mkdir -p "$BENCH_KEEP" && cp "$work"/*.log "$BENCH_KEEP"/ 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rpc() { curl -s -H 'content-type: application/json' -d "$2" "$1"; }
head_of() { python3 -c 'import json,sys; print(int(json.load(sys.stdin)["result"],16))' <<<"$(rpc "$1" '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}')"; }
# Light enough to poll while timing neve: no interpreter started per call.
stored_height() {
  local h
  h=$(curl -s "$1/health" | grep -o '"max_contiguous_height": *[0-9]*' | grep -o '[0-9]*$')
  echo "${h:-0}"
}

# wait_for_log FILE TEXT [SECONDS]: until FILE holds TEXT; fails after
# SECONDS (default 120) with the file's last lines.
wait_for_log() {
  local limit=${3:-120}
  local deadline=$((SECONDS + limit))
  until grep -q "$2" "$1"; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "no '$2' in $1 after $limit s:" >&2; tail -5 "$1" >&2; return 1
    fi
    sleep 0.05
  done
}

# start_geth_dev: sets geth_url, geth_ws and geth_pid. DEV_PERIOD (seconds
# between blocks, default 0: a block per transaction batch) sizes blocks.
start_geth_dev() {
  local http ws auth
  http=$(free_port); ws=$(free_port); auth=$(free_port)
  # The devnet crate's chain: released forks only (Osaka), the dev key funded.
  : >"$work/password"
  "$NEVE_TOOLS_DIR/geth" --datadir "$work/geth" account import --password "$work/password" "$repo/crates/devnet/dev.key" >/dev/null 2>&1
  "$NEVE_TOOLS_DIR/geth" --datadir "$work/geth" --state.scheme hash init "$repo/crates/devnet/dev-genesis.json" >/dev/null 2>&1
  "$NEVE_TOOLS_DIR/geth" --dev --password "$work/password" --dev.period "${DEV_PERIOD:-0}" --dev.gaslimit 60000000 --state.scheme hash --gcmode archive \
    --datadir "$work/geth" --http --http.addr 127.0.0.1 --http.port "$http" --http.api eth,net,web3,debug,txpool \
    --ws --ws.addr 127.0.0.1 --ws.port "$ws" --ws.api eth,net,web3 --authrpc.addr 127.0.0.1 --authrpc.port "$auth" \
    --nodiscover --maxpeers 0 --port 0 --ipcdisable --txpool.globalslots=200000 --txpool.accountslots=20000 \
    --txpool.globalqueue=50000 --txpool.accountqueue=5000 --rpc.txfeecap=0 >"$work/geth.log" 2>&1 &
  geth_pid=$!; pids+=("$geth_pid")
  geth_url="http://127.0.0.1:$http"; geth_ws="ws://127.0.0.1:$ws"
  until rpc "$geth_url" '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}' | grep -q result; do sleep 0.2; done
}

# follow_busy_chain SECONDS: a geth dev chain sealing a block a second
# (BUSY_PERIOD) with `neve load` traffic (a token and its holders; BUSY_TPS
# transactions a second, 200 by default) for SECONDS, and a neve
# following its tip (NEVE_ARGS added), caught up; sets url, neve_pid and
# load_pid.
follow_busy_chain() {
  DEV_PERIOD=${BUSY_PERIOD:-1} start_geth_dev
  "$neve" load --rpc "$geth_url" --seconds "$1" --tps "${BUSY_TPS:-200}" --accounts 2000 >"$work/load.log" 2>&1 &
  load_pid=$!; pids+=("$load_pid")
  until [ "$(head_of "$geth_url")" -ge 40 ]; do sleep 1; done
  local port
  port=$(free_port)
  url="http://127.0.0.1:$port"
  "$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$port" \
    --data-dir "$work/neve" ${NEVE_ARGS:-} >"$work/neve.log" 2>&1 &
  neve_pid=$!
  pids+=("$neve_pid")
  until [ "$(stored_height "$url")" -ge "$(head_of "$geth_url")" ]; do sleep 0.2; done
}

# cpu_per_answer NAME URL PID WORKLOAD SECONDS: `neve bench` of WORKLOAD
# at c16 against URL alone for SECONDS; prints the server's (PID) CPU,
# utime + stime from /proc, per answer.
cpu_per_answer() {
  local name=$1 target_url=$2 pid=$3 workload=$4 seconds=$5 before after answered
  local out="$work/cpu-$name-$workload"
  before=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  "$neve" bench --target "$name=$target_url" --workload "$workload" --conns 16 --warmup 0 \
    --duration "$seconds" --out "$out" >/dev/null 2>&1
  after=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  answered=$(python3 -c '
import json, sys
point = json.load(open(sys.argv[1]))["workloads"][0]["targets"][0]["points"][0]
print(point["outcomes"].get("ok", 0))' "$out/results.json")
  python3 -c "print(f'$workload $name: {($after - $before) / $(getconf CLK_TCK) / max(1, $answered) * 1e6:.1f} µs CPU per answer ($answered answered)')"
}

# grow_chain BLOCKS TPS: neve load until geth's head reaches BLOCKS.
grow_chain() {
  echo "growing a chain of $1+ blocks with neve load at $2 tx/s …" >&2
  while [ "$(head_of "$geth_url")" -lt "$1" ]; do
    "$neve" load --rpc "$geth_url" --seconds 10 --tps "$2" --accounts 64 2>/dev/null | sed -n 2p >&2
  done
}

# randblock_lua: writes $work/rand.lua, wrk requests for hashes-only blocks
# 0..31 (seeded), and $work/paced.lua, the same with each connection
# waiting 2 ms between an answer and its next request.
randblock_lua() {
  cat >"$work/rand.lua" <<'LUA'
math.randomseed(7)
request = function()
  local body = string.format('{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x%x",false]}', math.random(0, 31))
  return wrk.format("POST", "/", {["Content-Type"] = "application/json"}, body)
end
LUA
  { cat "$work/rand.lua"; echo 'delay = function() return 2 end'; } >"$work/paced.lua"
}

# rss_anon_kb PID: its anonymous resident memory (the heap, which the
# kernel cannot reclaim; not the mapped store's cached pages), in KiB.
rss_anon_kb() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# sample_peak PID FILE: appends RssAnon every 50 ms to FILE until PID ends
# (or this sampler is killed).
sample_peak() { while kill -0 "$1" 2>/dev/null; do rss_anon_kb "$1" >>"$2"; sleep 0.05; done; }
# peak_mib FILE: the largest sample in FILE, in MiB; now_mib PID: RssAnon now.
peak_mib() { sort -n "$1" | tail -1 | awk '{printf "%.0f", $1/1024}'; }
now_mib() { awk -v kb="$(rss_anon_kb "$1")" 'BEGIN {printf "%.0f", kb/1024}'; }

# wrk_p99_ms: the p99 of wrk --latency output on stdin, in milliseconds.
wrk_p99_ms() {
  awk '/^ +99%/ {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else {sub(/s/,"",v); v*=1000}; print v}'
}

# nginx serving "$1" on a free loopback port as the static-file ceiling, as
# `neve bench --suite headline` runs it: one single-process instance per
# core sharing the port (reuseport), each a direct child. Sets ceiling_url.
start_nginx_ceiling() {
  local root=$1 port cores i dir
  port=$(free_port)
  cores=$(nproc)
  for i in $(seq "$cores"); do
    dir="$work/nginx-$i"; mkdir -p "$dir"
    cat >"$dir/nginx.conf" <<CONF
daemon off; master_process off; pid $dir/nginx.pid; error_log $dir/error.log;
events { worker_connections 4096; }
http { access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000;
  client_body_temp_path $dir/body; proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fcgi; uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  server { listen 127.0.0.1:$port reuseport; location / { root $root; default_type application/json; } } }
CONF
    /usr/sbin/nginx -e "$dir/error.log" -c "$dir/nginx.conf" &
    pids+=($!)
  done
  ceiling_url="http://127.0.0.1:$port"
  until curl -s -o /dev/null "$ceiling_url/"; do sleep 0.05; done
}
