#!/usr/bin/env bash
# What the node pays for a block's state, three ways: its execution
# witness, proofs of the accounts its transactions name sent one request
# each (as neve's fetcher sends them), and the same proofs as one JSON-RPC
# batch. geth's CPU (utime + stime from /proc, in clock ticks) and wall
# time, for the four newest blocks of 1,000+ transactions of a chain grown
# at the load's full rate; the batch and the single requests ask disjoint
# accounts, each before anything warmed geth's caches for them, and the
# witness comes first on alternate blocks. No neve: it prices the
# fetches neve could ask.
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
def witness(n):
    c0 = cpu(); t0 = time.monotonic()
    call("debug_executionWitness", [hex(n)])
    return cpu() - c0, time.monotonic() - t0
def singles(keys, at):
    c0 = cpu(); t0 = time.monotonic()
    for a in keys:
        call("eth_getProof", [a, [], at])
    return cpu() - c0, time.monotonic() - t0
def batch(keys, at):
    c0 = cpu(); t0 = time.monotonic()
    body = [{"jsonrpc":"2.0","id":i,"method":"eth_getProof","params":[a, [], at]} for i, a in enumerate(keys)]
    req = urllib.request.Request(url, json.dumps(body).encode(), {"content-type":"application/json"})
    got = json.load(urllib.request.urlopen(req, timeout=60))
    assert len(got) == len(keys)
    return cpu() - c0, time.monotonic() - t0
for i, b in enumerate(blocks):
    n = int(b["number"], 16)
    keys = set()
    for tx in b["transactions"]:
        keys.add(tx["from"])
        if tx["to"]: keys.add(tx["to"])
    # Two samples of 300 (about what a child of a kept post-state misses
    # here), disjoint, so neither is asked after the other warmed geth's
    # caches for its keys. Executing the block for its witness reads them
    # all: on alternate blocks the witness comes first, then last.
    ordered = sorted(keys)
    a, s = ordered[:300], ordered[300:600]
    at = hex(n - 1)
    witness_first = i % 2 == 1
    if witness_first:
        w = witness(n)
    bc = batch(a, at)
    sc = singles(s, at)
    if not witness_first:
        w = witness(n)
    warm = batch(a, at)
    ms = lambda x: f"cpu {x[0]*1e3:.0f} ms wall {x[1]*1e3:.0f} ms"
    print(f"block {n}: {len(b['transactions'])} txs, {len(keys)} accounts; witness {'first' if witness_first else 'last'}")
    print(f"  witness: {ms(w)}")
    print(f"  {len(a)} proofs as one batch: {ms(bc)} ({bc[0]/len(a)*1e6:.0f} us cpu each)")
    print(f"  {len(s)} other proofs one request each: {ms(sc)} ({sc[0]/max(len(s),1)*1e6:.0f} us cpu each)")
    print(f"  the batch again, warm: {ms(warm)}")
PY
