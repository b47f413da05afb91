"""Random traces asked of neve and of geth, compared (scripts/diff-traces.sh).

    trace_diff.py NEVE_URL GETH_URL COUNT DEPTH [--seed N] [--clients N]

Each case is a random block of the DEPTH newest, a random tracer
configuration, and a random way to ask: debug_traceBlockByNumber,
debug_traceBlockByHash, debug_traceTransaction, or debug_traceCall of
one of the block's transactions (at the block or `latest`, half of them
with a `txIndex`, some past the block's transactions). The struct logger
is asked of single transactions only (a whole block's is megabytes).
Prints each difference and each 421; exits 1 on a difference.
"""

import argparse
import collections
import concurrent.futures
import json
import random
import sys
import urllib.error
import urllib.request

# Every tracer and option of the issue, as the test suite's `configs()`.
CONFIGS = [
    {},
    {"enableMemory": True, "enableReturnData": True},
    {"disableStack": True, "disableStorage": True},
    {"limit": 50},
    {"tracer": "callTracer"},
    {"tracer": "callTracer", "tracerConfig": {"withLog": True}},
    {"tracer": "callTracer", "tracerConfig": {"onlyTopCall": True}},
    {"tracer": "prestateTracer"},
    {"tracer": "prestateTracer", "tracerConfig": {"diffMode": True}},
    {"tracer": "prestateTracer", "tracerConfig": {"disableCode": True, "disableStorage": True}},
    {"tracer": "4byteTracer"},
    {"tracer": "flatCallTracer"},
    {"tracer": "noopTracer"},
    {
        "tracer": "muxTracer",
        "tracerConfig": {
            "callTracer": {"withLog": True},
            "4byteTracer": None,
            "prestateTracer": {"diffMode": True},
        },
    },
]


def post(url, method, params):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    request = urllib.request.Request(url, body, {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, None


def case(rng, geth, head, depth):
    """One random request: (method, params), or None for an empty block."""
    number = rng.randint(head - depth, head)
    config = dict(rng.choice(CONFIGS))
    how = rng.choice(["number", "hash", "transaction", "call"])
    if "tracer" not in config and how in ("number", "hash"):
        how = "transaction"
    block = post(geth, "eth_getBlockByNumber", [hex(number), False])[1]["result"]
    txs = block["transactions"]
    if how == "number":
        return "debug_traceBlockByNumber", [hex(number), config]
    if how == "hash":
        return "debug_traceBlockByHash", [block["hash"], config]
    if not txs:
        return None
    if how == "transaction":
        return "debug_traceTransaction", [rng.choice(txs), config]
    tx = post(geth, "eth_getTransactionByHash", [rng.choice(txs)])[1]["result"]
    call = {k: tx[k] for k in ("from", "to", "value", "gas")}
    call["data"] = tx["input"]
    if rng.random() < 0.5:
        config["txIndex"] = hex(rng.randint(0, len(txs)))
    at = hex(number) if rng.random() < 0.7 else "latest"
    return "debug_traceCall", [call, at, config]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("neve")
    parser.add_argument("geth")
    parser.add_argument("count", type=int)
    parser.add_argument("depth", type=int)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=6)
    args = parser.parse_args()
    head = int(post(args.geth, "eth_blockNumber", [])[1]["result"], 16)
    depth = min(args.depth, head - 1)
    rng = random.Random(args.seed)
    cases = [case(rng, args.geth, head, depth) for _ in range(args.count)]

    def heads():
        return [post(url, "eth_blockNumber", [])[1]["result"] for url in (args.neve, args.geth)]

    def compare(asked):
        method, params = asked
        at_latest = "latest" in params
        before = heads() if at_latest else None
        status, ours = post(args.neve, method, params)
        _, theirs = post(args.geth, method, params)
        if status == 421:
            return "421", method, params, None
        same = status == 200 and all(
            ours.get(key) == theirs.get(key) for key in ("result", "error")
        )
        if not same and at_latest and len(set(before + heads())) > 1:
            # The head moved between the two answers: not comparable.
            return "moved", method, params, None
        return ("same" if same else "differs"), method, params, (status, ours, theirs)

    with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
        outcomes = list(pool.map(compare, [c for c in cases if c]))
    counted = collections.Counter(outcome[0] for outcome in outcomes)
    for kind, method, params, answers in outcomes:
        if kind == "421":
            print(f"421 {method} {json.dumps(params)[:300]}")
        elif kind == "differs":
            status, ours, theirs = answers
            print(f"differs {method} {json.dumps(params)[:300]}")
            print(f"  neve ({status}): {json.dumps(ours)[:400]}")
            print(f"  geth: {json.dumps(theirs)[:400]}")
    print(f"{sum(counted.values())} traces over the {depth + 1} newest blocks: "
          f"{counted['same']} equal to geth's, {counted['differs']} not, {counted['421']} 421, "
          f"{counted['moved']} at `latest` while the head moved")
    sys.exit(1 if counted["differs"] else 0)


if __name__ == "__main__":
    main()
