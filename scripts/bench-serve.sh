#!/usr/bin/env bash
# Serving benchmark, one run on this machine: neve vs geth vs a static-file
# ceiling (nginx serving neve's own response bodies from disk), all with the
# same wrk, the same blocks and the same load box.
#
#   scripts/bench-serve.sh                  # 2,000+ blocks, 10 s per cell
#   BLOCKS=500 SECONDS_PER_RUN=3 scripts/bench-serve.sh
#
# Workloads: eth_getBlockByNumber (random height, false / true),
# eth_getTransactionReceipt (random transaction), eth_getLogs by the token's
# address over a random 10-block window. Connections: 1 and 16. A run that
# sees any non-200 status, JSON-RPC error or null result is flagged: it
# measured the reject path, not the work.
set -euo pipefail
BLOCKS=${BLOCKS:-2000}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-10}
TPS=${TPS:-2200}
source "$(dirname "$0")/lib.sh"

start_geth_dev
grow_chain "$BLOCKS" "$TPS"
chain_head=$(head_of "$geth_url")
NP=$(free_port); SP=$(free_port)
neve_url="http://127.0.0.1:$NP"
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$NP" \
  --data-dir "$work/store" >"$work/neve.log" 2>&1 &
neve_pid=$!; pids+=($neve_pid)
until [ "$(stored_height "$neve_url")" -ge "$chain_head" ]; do sleep 0.2; done

# Workloads from the chain itself: heights, transaction hashes, the token.
mkdir -p "$work/static"
python3 - "$neve_url" "$chain_head" "$work" <<'PY'
import json, random, sys, urllib.request
url, head, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def call(method, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    return urllib.request.urlopen(urllib.request.Request(url, body, {"content-type": "application/json"})).read()
random.seed(7)
heights = random.sample(range(1, head + 1), min(1000, head))
txs = []
for h in heights[:300]:
    txs += json.loads(call("eth_getBlockByNumber", [hex(h), False]))["result"]["transactions"][:3]
logs = json.loads(call("eth_getLogs", [{"fromBlock": hex(max(1, head - 50)), "toBlock": hex(head)}]))["result"]
token = logs[0]["address"]
# The ceiling serves neve's own answers for 200 of the heights as files.
sizes = {"false": [], "true": []}
for h in heights[:200]:
    for full in ("false", "true"):
        body = call("eth_getBlockByNumber", [hex(h), full == "true"])
        sizes[full].append(len(body))
        open(f"{work}/static/b_{full}_{h}.json", "wb").write(body)
lua = lambda name, items: f"local {name} = {{" + ",".join(items) + "}\n"
with open(f"{work}/data.lua", "w") as f:
    f.write(lua("heights", ['"%s"' % hex(h) for h in heights]))
    f.write(lua("txs", ['"%s"' % t for t in txs]))
    f.write(lua("static_heights", [str(h) for h in heights[:200]]))
    f.write(f'local token = "{token}"\nlocal head = {head}\n')
with open(f"{work}/sizes", "w") as f:
    f.write("%d %d %d\n" % (sum(sizes["false"]) // 200, sum(sizes["true"]) // 200, len(txs)))
PY

for workload in block_false block_true receipt logs static_false static_true; do
  cat "$work/data.lua" - >"$work/$workload.lua" <<LUA
local workload = "$workload"
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) bad = 0; math.randomseed(os.time() + math.random(1000)) end
local function post(body) return wrk.format("POST", "/", {["Content-Type"] = "application/json"}, body) end
function request()
  if workload == "block_false" or workload == "block_true" then
    local full = workload == "block_true" and "true" or "false"
    return post('{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["' .. heights[math.random(#heights)] .. '",' .. full .. ']}')
  elseif workload == "receipt" then
    return post('{"jsonrpc":"2.0","id":1,"method":"eth_getTransactionReceipt","params":["' .. txs[math.random(#txs)] .. '"]}')
  elseif workload == "logs" then
    local from = math.random(1, head - 10)
    return post(string.format('{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x%x","toBlock":"0x%x","address":"%s"}]}', from, from + 9, token))
  else
    local full = workload == "static_true" and "true" or "false"
    return wrk.format("GET", "/b_" .. full .. "_" .. static_heights[math.random(#static_heights)] .. ".json")
  end
end
function response(status, headers, body)
  local head = body:sub(1, 64)
  if status ~= 200 or head:find('"error"', 1, true) or head:find('"result":null', 1, true) then bad = bad + 1 end
end
function done(summary, latency, requests)
  local rejected = 0
  for _, t in ipairs(threads) do rejected = rejected + t:get("bad") end
  io.write(string.format("RESULT %.0f %.3f %.3f %d\n", summary.requests / (summary.duration / 1e6),
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, rejected + summary.errors.status))
end
LUA
done

cat >"$work/nginx.conf" <<NGINX
worker_processes 2;
pid $work/nginx.pid;
error_log $work/nginx.err;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:$SP; location / { root $work/static; default_type application/json; } } }
NGINX
nginx -c "$work/nginx.conf"

run() { # target-url workload conns → "rps p50 p99 rejected"
  local threads=$(( $3 < 2 ? 1 : 2 ))
  wrk -t "$threads" -c "$3" -d "${SECONDS_PER_RUN}s" -s "$work/$2.lua" "$1" | awk '/^RESULT/ {print $2, $3, $4, $5}'
}

read -r size_false size_true _ <"$work/sizes"
echo
echo "chain: $chain_head blocks; bodies: hashes-only ~$size_false B, full ~$size_true B; $SECONDS_PER_RUN s per cell; $(nproc) cores"
echo
printf '| workload | conns | neve req/s | neve p50 ms | geth req/s | geth p50 ms | static req/s | neve/geth | neve/static |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
flags=""
for workload in block_false block_true receipt logs; do
  for conns in 1 16; do
    read -r n_rps n_p50 _ n_bad <<<"$(run "$neve_url" "$workload" "$conns")"
    read -r g_rps g_p50 _ g_bad <<<"$(run "$geth_url" "$workload" "$conns")"
    s_rps="-"; ratio_s="-"
    case $workload in block_false|block_true)
      read -r s_rps _ _ _ <<<"$(run "http://127.0.0.1:$SP" "static_${workload#block_}" "$conns")"
      ratio_s=$(python3 -c "print(f'{$n_rps/$s_rps:.2f}')");;
    esac
    ratio=$(python3 -c "print(f'{$n_rps/max($g_rps,1):.1f}x')")
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$workload" "$conns" "$n_rps" "$n_p50" "$g_rps" "$g_p50" "$s_rps" "$ratio" "$ratio_s"
    [ "$n_bad" = 0 ] || flags+="  neve $workload c$conns: $n_bad rejected/null answers (reject path measured!)\n"
    [ "$g_bad" = 0 ] || flags+="  geth $workload c$conns: $g_bad rejected/null answers\n"
  done
done
mib() { awk -v k="$1:" '$1 == k {printf "%d", $2 / 1024}' "/proc/$2/status"; }
echo
echo "RSS after the runs: neve $(mib VmRSS "$neve_pid") MiB (anonymous $(mib RssAnon "$neve_pid") MiB, mapped store files $(mib RssFile "$neve_pid") MiB); geth $(mib VmRSS "$geth_pid") MiB"
[ -z "$flags" ] && echo "every answer was a 200 with a result" || printf "FLAGGED:\n$flags"
