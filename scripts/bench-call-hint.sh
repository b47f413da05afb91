#!/usr/bin/env bash
# Cold calls two ways, on a busy dev chain (a block a second, a token and
# 2,000 holders): neve's rounds (run, fetch what the run missed as one
# batch of proofs, run again) timed whole through neve, against the hint
# issue 34 asks to weigh: the upstream's eth_createAccessList (the node
# executes the call) and then one batch of proofs of what it lists, timed
# as fetches only (a lower bound: neve's own runs are not counted). Each
# call is a transfer simulated from a holder to another at a height of the
# tail nobody asked about, so its state is not held. The memo is off.
#
#   scripts/bench-call-hint.sh
source "$(dirname "$0")/lib.sh"
DEV_PERIOD=1 start_geth_dev
"$neve" load --rpc "$geth_url" --seconds 300 --tps 200 --accounts 2000 >"$work/load.log" 2>&1 &
pids+=($!)
until [ "$(head_of "$geth_url")" -ge 60 ]; do sleep 1; done
port=$(free_port)
url="http://127.0.0.1:$port"
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$port" \
  --data-dir "$work/neve" --call-memo-bytes 0 >"$work/neve.log" 2>&1 &
pids+=($!)
until [ "$(stored_height "$url")" -ge "$(head_of "$geth_url")" ]; do sleep 0.2; done
python3 - "$geth_url" "$url" <<'PY'
import json, sys, time, random, urllib.request, statistics
geth, neve = sys.argv[1], sys.argv[2]
def post(url, body):
    t = time.perf_counter()
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            status, data = r.status, json.load(r)
    except urllib.error.HTTPError as e:
        status, data = e.code, None
    return status, data, (time.perf_counter() - t) * 1000
def rpc(url, method, params):
    return post(url, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
head = int(rpc(geth, "eth_blockNumber", [])[1]["result"], 16)
logs = rpc(geth, "eth_getLogs", [{"fromBlock": "0x1", "toBlock": hex(head), "topics": ["0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"]}])[1]["result"]
token = logs[0]["address"]
holders = sorted({"0x" + l["topics"][1][26:] for l in logs})
random.seed(7)
random.shuffle(holders)
rounds, hint, hint_calls = [], [], []
ok = 0
n = min(60, len(holders) // 2)
for i in range(n):
    h1, h2 = holders[2 * i], holders[2 * i + 1]
    data = "0xa9059cbb" + h2[2:].rjust(64, "0") + "1".rjust(64, "0")
    call = {"from": h1, "to": token, "input": data}
    # neve: a height of the tail nobody asked about (cold state), through its rounds
    at = hex(random.randint(head // 2, head - 2))
    status, answer, ms = rpc(neve, "eth_call", [call, at])
    if status == 200:
        ok += 1
        rounds.append(ms)
    # the hint: the node executes the call once, then one batch of proofs at another cold height
    at2 = hex(random.randint(head // 2, head - 2))
    s1, al, ms1 = rpc(geth, "eth_createAccessList", [call, at2])
    if "result" not in al: print(al); continue
    batch = [{"jsonrpc": "2.0", "id": k, "method": "eth_getProof", "params": [e["address"], e["storageKeys"], at2]}
             for k, e in enumerate(al["result"]["accessList"])]
    batch.append({"jsonrpc": "2.0", "id": 99, "method": "eth_getProof", "params": [h1, [], at2]})
    s2, _, ms2 = post(geth, batch)
    hint.append(ms1 + ms2)
    hint_calls.append(ms1)
q = lambda xs, p: sorted(xs)[min(len(xs) - 1, int(p * len(xs)))]
print(f"cold calls: {n}; neve answered {ok} within the fetch timeout")
print(f"rounds (neve, whole call): p50 {q(rounds,.5):.2f} ms  p90 {q(rounds,.9):.2f} ms  mean {statistics.mean(rounds):.2f} ms")
print(f"hint (createAccessList + one proof batch, fetch only): p50 {q(hint,.5):.2f} ms  p90 {q(hint,.9):.2f} ms  mean {statistics.mean(hint):.2f} ms; createAccessList alone p50 {q(hint_calls,.5):.2f} ms")
PY
curl -s "$url/metrics" | grep -E "^neve_calls_total|^neve_call_duration_seconds_(sum|count)"
