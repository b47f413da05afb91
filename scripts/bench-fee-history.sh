#!/usr/bin/env bash
# eth_feeHistory over 1,024 blocks, neve against geth on the same chain: a
# geth dev chain grown past 1,100 blocks with `neve load` traffic, a neve
# following it from genesis, then one client asking each in turn for the
# newest 1,024 blocks' fee history, without percentiles and with five. For
# each: the first answer's time (cold: nothing of the range kept), then
# SECONDS of repeats, one at a time: requests a second, and the server's
# CPU per request (its utime + stime over the run, from /proc). Answers
# are checked equal to geth's first.
#
#   scripts/bench-fee-history.sh [SECONDS]   # per cell; default 5
source "$(dirname "$0")/lib.sh"
seconds=${1:-5}

start_geth_dev
grow_chain 1100 400
port=$(free_port)
url="http://127.0.0.1:$port"
"$neve" serve --upstream "$geth_url" --ws-url "$geth_ws" --floor 0 --listen "127.0.0.1:$port" \
  --data-dir "$work/neve" >"$work/neve.log" 2>&1 &
neve_pid=$!
pids+=("$neve_pid")
until [ "$(stored_height "$url")" -ge "$(head_of "$geth_url")" ]; do sleep 0.2; done
# Wait for calls (the chain's rules) to be answered.
until rpc "$url" '{"jsonrpc":"2.0","id":1,"method":"eth_feeHistory","params":["0x1","latest",[]]}' | grep -q result; do sleep 0.2; done

python3 - "$url" "$neve_pid" "$geth_url" "$geth_pid" "$seconds" <<'PY'
import http.client, json, os, sys, time, urllib.parse

neve_url, neve_pid, geth_url, geth_pid, seconds = sys.argv[1:6]
seconds = float(seconds)
ticks = os.sysconf("SC_CLK_TCK")

def cpu(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks

def connect(url):
    parsed = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(parsed.hostname, parsed.port)

def ask(conn, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_feeHistory", "params": params})
    conn.request("POST", "/", body, {"content-type": "application/json"})
    answer = conn.getresponse()
    data = answer.read()
    return answer.status, json.loads(data)

# Pinned to one newest block, so both answer the same range.
head = ask(connect(geth_url), [1, "latest", []])[1]["result"]["oldestBlock"]
cases = [("no percentiles", []), ("5 percentiles", [10, 25, 50, 75, 90])]
print(f"eth_feeHistory of 1,024 blocks ending at {int(head, 16)}; {seconds:.0f} s a cell, one request at a time")
print(f"{'case':<16} {'target':<5} {'first ms':>9} {'req/s':>8} {'CPU ms/req':>11}")
for name, percentiles in cases:
    params = ["0x400", head, percentiles]
    expected = None
    for target, url, pid in [("geth", geth_url, geth_pid), ("neve", neve_url, neve_pid)]:
        conn = connect(url)
        started = time.perf_counter()
        status, first = ask(conn, params)
        first_ms = (time.perf_counter() - started) * 1000
        if status != 200 or "result" not in first:
            sys.exit(f"{target} answered {status}: {str(first)[:300]}")
        if expected is None:
            expected = first["result"]
        elif first["result"] != expected:
            sys.exit(f"{target}'s answer differs from geth's for {name}")
        count, cpu0, started = 0, cpu(pid), time.perf_counter()
        while time.perf_counter() - started < seconds:
            ask(conn, params)
            count += 1
        elapsed = time.perf_counter() - started
        spent = cpu(pid) - cpu0
        print(f"{name:<16} {target:<5} {first_ms:>9.1f} {count / elapsed:>8.1f} {1000 * spent / count:>11.2f}")
PY
