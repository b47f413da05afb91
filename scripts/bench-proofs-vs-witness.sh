#!/usr/bin/env bash
# What the node pays for a block's state, three ways: its execution
# witness, proofs of the accounts its transactions name sent one request
# each (as neve's fetcher sends them), and the same proofs as one JSON-RPC
# batch. geth's CPU (utime + stime from /proc, in clock ticks) and wall
# time, for the four newest blocks of 1,000+ transactions of a chain grown
# at the load's full rate. No neve: it prices the fetches neve could ask.
#
#   scripts/bench-proofs-vs-witness.sh
source "$(dirname "$0")/lib.sh"
start_geth_dev
grow_chain 12 20000
head=$(head_of "$geth_url")
echo "head $head"
python3 - "$geth_url" "$geth_pid" "$head" <<'PY'
import json, sys, time, urllib.request, os
url, pid, head = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tck = os.sysconf("SC_CLK_TCK")
def cpu():
    f = open(f"/proc/{pid}/stat").read().split(")")[1].split()
    return (int(f[11]) + int(f[12])) / tck
def call(method, params):
    req = urllib.request.Request(url, json.dumps({"jsonrpc":"2.0","id":1,"method":method,"params":params}).encode(), {"content-type":"application/json"})
    return json.load(urllib.request.urlopen(req, timeout=60))
blocks = []
for n in range(head, 0, -1):
    b = call("eth_getBlockByNumber", [hex(n), True])["result"]
    if len(b["transactions"]) >= 1000:
        blocks.append(b)
    if len(blocks) == 4: break
for b in blocks:
    n = int(b["number"], 16)
    keys = set()
    for tx in b["transactions"]:
        keys.add(tx["from"]); 
        if tx["to"]: keys.add(tx["to"])
    c0 = cpu(); t0 = time.monotonic()
    call("debug_executionWitness", [hex(n)])
    wc, wt = cpu() - c0, time.monotonic() - t0
    # At most 300: about what a child of a kept post-state misses here.
    sample = sorted(keys)[:300]
    c0 = cpu(); t0 = time.monotonic()
    for a in sample:
        call("eth_getProof", [a, [], hex(n - 1)])
    pc, pt = cpu() - c0, time.monotonic() - t0
    c0 = cpu(); t0 = time.monotonic()
    body = [{"jsonrpc":"2.0","id":i,"method":"eth_getProof","params":[a, [], hex(n - 1)]} for i, a in enumerate(sample)]
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type":"application/json"})
    got = json.load(urllib.request.urlopen(req, timeout=60))
    bc, bt = cpu() - c0, time.monotonic() - t0
    print(f"block {n}: {len(b['transactions'])} txs, {len(keys)} accounts; witness cpu {wc*1e3:.0f} ms wall {wt*1e3:.0f} ms; "
          f"{len(sample)} proofs one request each cpu {pc*1e3:.0f} ms wall {pt*1e3:.0f} ms ({pc/len(sample)*1e6:.0f} us cpu each)")
    # After the single requests: geth's caches are warm for these keys.
    print(f"  the same {len(got)} proofs as one batch: cpu {bc*1e3:.0f} ms wall {bt*1e3:.0f} ms ({bc/len(got)*1e6:.0f} us each)")
PY
