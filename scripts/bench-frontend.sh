#!/usr/bin/env bash
# Through the shipped front end (deploy/nginx/neve.conf): req/s and latency
# of `neve bench` through nginx with geth alone behind it, with one neve
# mirror, and with two (B mirroring A), all on the same geth dev chain and
# the same machine. Misses (421) go on to geth in every case. Then the
# node's CPU per client request: geth's CPU time (/proc) over the first
# workload at the highest concurrency, through one mirror and alone.
#
#   scripts/bench-frontend.sh
#   WORKLOADS="mix:seeds-read randblock" CONNS=1,16 scripts/bench-frontend.sh
#   WORKLOADS=mix:eth-mainnet scripts/bench-frontend.sh
#   CEILING=1 WORKLOADS=mix:eth-mainnet CONNS=16 scripts/bench-frontend.sh
#
# CEILING=1 adds the front end's own ceiling: the same nginx in front of a
# backend that costs nothing (an nginx answering every request with one
# fixed result), what no mirror behind it can beat.
set -euo pipefail
WORKLOADS=${WORKLOADS:-"mix:seeds-read randblock"}
CONNS=${CONNS:-1,16}
source "$(dirname "$0")/lib.sh"

start_geth_dev
grow_chain 1000 800
chain=$(head_of "$geth_url")
AP=$(free_port); BP=$(free_port)
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$AP" --data-dir "$work/a" >"$work/a.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "http://127.0.0.1:$AP")" -ge "$chain" ]; do sleep 0.1; done
"$neve" serve --mirror-from "http://127.0.0.1:$AP" --floor 0 --listen "127.0.0.1:$BP" --data-dir "$work/b" >"$work/b.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "http://127.0.0.1:$BP")" -ge "$chain" ]; do sleep 0.1; done

# front NAME SERVER…: nginx with the shipped config, these mirrors, geth as
# the full node; prints its URL.
front() {
  local name=$1 dir="$work/nginx-$1" port
  shift
  port=$(free_port)
  mkdir -p "$dir/neve"
  {
    echo "upstream neve_mirrors { zone neve_mirrors 64k;"
    for server in "$@"; do echo "  server $server max_fails=1 fail_timeout=5s;"; done
    echo "  keepalive 64; }"
    echo "upstream full_node { server ${geth_url#http://}; keepalive 16; }"
  } >"$dir/neve/upstreams.conf"
  echo "listen 127.0.0.1:$port;" >"$dir/neve/listen.conf"
  cat >"$dir/nginx.conf" <<CONF
user root; pid $dir/nginx.pid; error_log $dir/error.log; worker_processes auto;
events { worker_connections 4096; }
http { access_log off; client_body_temp_path $dir/body; proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fcgi; uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  include $repo/deploy/nginx/neve.conf; }
CONF
  nginx -e "$dir/error.log" -c "$dir/nginx.conf"
  echo "$dir/nginx.pid" >>"$work/nginx-pids"
  until curl -s -o /dev/null "http://127.0.0.1:$port/"; do sleep 0.05; done
  echo "http://127.0.0.1:$port"
}
trap 'while read -r p; do kill "$(cat "$p")" 2>/dev/null || true; done <"$work/nginx-pids" 2>/dev/null; cleanup' EXIT

geth_only=$(front geth "${geth_url#http://}")
one=$(front one "127.0.0.1:$AP")
two=$(front two "127.0.0.1:$AP" "127.0.0.1:$BP")
args=()
for w in $WORKLOADS; do args+=(--workload "$w"); done
if [ "${CEILING:-0}" = 1 ]; then
  FP=$(free_port); dir="$work/free"; mkdir -p "$dir"
  cat >"$dir/nginx.conf" <<CONF
user root; pid $dir/nginx.pid; error_log $dir/error.log; worker_processes auto;
events { worker_connections 4096; }
http { access_log off; keepalive_requests 1000000; client_body_temp_path $dir/body; proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fcgi; uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  server { listen 127.0.0.1:$FP; location = / { default_type application/json; return 200 '{"jsonrpc":"2.0","id":1,"result":"0xffffffff"}'; } } }
CONF
  nginx -e "$dir/error.log" -c "$dir/nginx.conf"
  echo "$dir/nginx.pid" >>"$work/nginx-pids"
  free=$(front free "127.0.0.1:$FP")
  # Its one answer is no node's: flagged, and kept.
  args+=(--target "free-backend=$free" --compare free-backend:geth-alone --allow-flagged)
fi
"$neve" bench --target "two-mirrors=$two" --target "one-mirror=$one" --target "geth-alone=$geth_only" \
  --compare two-mirrors:geth-alone --compare one-mirror:geth-alone \
  "${args[@]}" --conns "$CONNS" --warmup 1 --duration 5 --out "${OUT:-bench-results/frontend}"
# The share of the mirrors' calls they answered themselves (a 421 goes on
# to geth through the front end).
for port in "$AP" "$BP"; do
  curl -s "http://127.0.0.1:$port/metrics" | python3 -c '
import re, sys
counts = {}
for line in sys.stdin:
    m = re.match(r"neve_rpc_requests_total\{method=\"[^\"]*\",outcome=\"(\w+)\"\} (\d+)", line)
    if m:
        counts[m.group(1)] = counts.get(m.group(1), 0) + int(m.group(2))
total = sum(counts.values())
answered = 100 * (total - counts.get("miss", 0)) / max(1, total)
print(f"mirror on port '"$port"': {total} calls, answered {answered:.2f} % ({counts})")'
done

# The node's CPU per client request through one mirror, against serving
# the same requests alone: what the mirror takes off the node.
cpu_of() { awk '{print $14 + $15}' "/proc/$geth_pid/stat"; }
ticks=$(getconf CLK_TCK)
first=${WORKLOADS%% *}
top=${CONNS##*,}
declare -A per_request
for target in "one-mirror=$one" "geth-alone=$geth_only"; do
  name=${target%%=*}
  before=$(cpu_of)
  "$neve" bench --target "$target" --workload "$first" --conns "$top" --warmup 0 --duration 5 \
    --out "$work/cpu-$name" >/dev/null 2>&1
  after=$(cpu_of)
  requests=$(python3 -c '
import json, sys
point = json.load(open(sys.argv[1]))["workloads"][0]["targets"][0]["points"][0]
print(sum(v for k, v in point["outcomes"].items() if isinstance(v, (int, float)) and k != "status_421"))' "$work/cpu-$name/results.json")
  per_request[$name]=$(python3 -c "print(($after - $before) / $ticks / max(1, $requests) * 1e6)")
  printf 'geth CPU, %s c%s via %s: %.1f µs per client request (%s requests)\n' \
    "$first" "$top" "$name" "${per_request[$name]}" "$requests"
done
python3 -c "print(f'node CPU per client request through one mirror: {100 * ${per_request[one-mirror]} / max(1e-9, ${per_request[geth-alone]}):.2f} % of serving it alone')"
