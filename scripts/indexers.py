#!/usr/bin/env python3
"""Indexers tracing a growing chain, as explorers and pipelines do.

  indexers.py run URL SECONDS INDEXERS BEHIND   -> JSON on stdout
  indexers.py cold URL GETH_URL BLOCKS [up]     -> JSON on stdout
  indexers.py cold-tx URL GETH_URL BLOCKS       -> JSON on stdout
  indexers.py held-tx URL GETH_URL BLOCKS       -> JSON on stdout
  indexers.py first-tx URL_A URL_B GETH_URL BLOCKS -> JSON on stdout
  indexers.py sizes URL BLOCKS                  -> JSON on stdout
  indexers.py witnesses GETH_URL BLOCKS AT_ONCE -> JSON on stdout
  indexers.py sealed GETH_URL AFTER UPTO         -> JSON on stdout
  indexers.py replays URL FIRST COUNT ROUNDS     -> JSON on stdout
  indexers.py burn PROFILE                      -> JSON on stdout

`run`: INDEXERS threads, spread over the BEHIND blocks behind the tip
(each starting at its own block; all at the oldest with STAGGER=0) and
tracing every block from there on, as fast as answers come, with
`callTracer` then `prestateTracer` (one connection each, kept alive);
after SECONDS, what they got: answers, 421s, errors, requests a second
while they had blocks to trace (the answers before each caught up, over
the time until the last did; else the whole run),
and latency percentiles.

`cold`: the newest BLOCKS blocks with transactions not traced anywhere
yet, each traced once with `callTracer` through URL (a cold memo, and a
cold witness unless prefetched) and once through GETH_URL, one at a time;
the latencies side by side. Newest first, so no block's parent was
traced before it; with `up`, oldest first, so each one's parent was
(the first's excepted), as for an indexer following the chain.

`cold-tx`: one transaction of each of the newest BLOCKS blocks with
transactions, nobody's trace asked of them yet: the first, the middle and
the last in turn, traced with `callTracer` (`debug_traceTransaction`)
through URL and through GETH_URL, each first in turn; latencies side by
side for each place in a block, and how many witnesses URL fetched for
each (its `/metrics`).

`held-tx`: in each of the newest BLOCKS blocks with transactions, the
middle transaction traced cold (as `cold-tx`), then the one after it and
the last, whose block's state URL holds by then (a cold memo over state
held); each through URL and GETH_URL, each first in turn; then the time
GETH_URL takes to make the block's witness (its caches warm by then):
what a trace deep into a block waits for when nothing is held.

`first-tx`: two neves following one node (an A/B), both fresh: the first
and the second transaction of every other one of the newest 2 x BLOCKS
blocks with transactions (so no block's parent was traced), traced with
`callTracer` through URL_A, URL_B and GETH_URL, the order rotated each
block; latencies, and the node calls each neve made for each trace.

`sizes`: the newest BLOCKS blocks' witness answers (as URL serves them)
beside the blocks' own sizes.

`witnesses`: the node's (GETH_URL's) witnesses of the newest BLOCKS
blocks with transactions, AT_ONCE at a time (as neve asks them): how long
the node takes only to hand over that many blocks' state, the floor of a
catch-up that asks it for as many.

`sealed`: the blocks and transactions the node sealed after block AFTER
up to UPTO, so its CPU with no indexers is taken per transaction sealed
(the load's rate drifts; sealing is most of the node's own work).

`burn`: takes CPU as PROFILE says (a file of lines "SECONDS CPU_SECONDS",
the CPU other processes took in each interval of a run, as sampled), at
the same moments from its start: one process filled before a second, in
10 ms slices busy for their share. What geth spends beside it with no
indexers is what it spends when the same CPU is taken beside it by
something that asks it nothing (on a machine of few cores, another
process busy beside the node costs the node CPU of its own: shared
caches, the hypervisor's time).

`replays`: blocks FIRST..FIRST+COUNT-1 traced one at a time with
`callTracer`, then `prestateTracer`, ROUNDS times over, each round under a
`timeout` never asked before, so each answer is a replay (a fresh memo
key) rather than a kept answer; each request sent once, a failed one
counted apart. ROUNDS 0 traces each once with `callTracer`, then
`prestateTracer`, its state fetched (a warm-up). Their latencies.
"""

import concurrent.futures
import http.client
import json
import os
import sys
import threading
import time
import urllib.parse


class Client:
    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        self.host, self.port = parts.hostname, parts.port
        self.conn = None

    def post(self, method, params, attempts=2):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        return self.request("POST", "/", body, {"Content-Type": "application/json"}, attempts)

    def request(self, verb, path, body=None, headers=None, attempts=2):
        for attempt in range(attempts):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                self.conn.request(verb, path, body, headers or {})
                response = self.conn.getresponse()
                data = response.read()
                return response.status, data
            except (http.client.HTTPException, OSError):
                self.conn = None
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def result(self, method, params):
        status, data = self.post(method, params)
        if status != 200:
            raise RuntimeError(f"{method}: HTTP {status}")
        return json.loads(data)["result"]


def tip(client):
    return int(client.result("eth_blockNumber", []), 16)


TRACERS = [{"tracer": "callTracer"}, {"tracer": "prestateTracer"}]


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(url, seconds, indexers, behind, stagger=True):
    start_tip = tip(Client(url))
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    totals = {"ok": 0, "ok_behind": 0, "421": 0, "error": 0, "latencies": [], "caught_up": []}
    started = time.monotonic()

    def indexer(i):
        client = Client(url)
        # Spread over the backlog, as indexers started at different times
        # are (all at its start with STAGGER=0).
        spread = behind * i // indexers if stagger else 0
        next_block = max(1, start_tip - behind + spread)
        caught_up = None
        ok_behind = 0
        latencies, ok, missed, errors = [], 0, 0, 0
        while time.monotonic() < deadline:
            try:
                head = tip(client)
            except RuntimeError:
                # A mirror behind its upstream for a moment answers 421
                # (a front end asks the node): ask again shortly.
                time.sleep(0.05)
                continue
            if next_block > head:
                if caught_up is None:
                    caught_up = time.monotonic() - started
                    ok_behind = ok
                time.sleep(0.05)
                continue
            for config in TRACERS:
                t0 = time.monotonic()
                try:
                    status, data = client.post(
                        "debug_traceBlockByNumber", [hex(next_block), config]
                    )
                except OSError:
                    errors += 1
                    continue
                latencies.append(time.monotonic() - t0)
                if status == 200 and b'"result"' in data[:64]:
                    ok += 1
                elif status == 421:
                    missed += 1
                else:
                    errors += 1
            next_block += 1
        with lock:
            totals["ok"] += ok
            totals["ok_behind"] += ok_behind if caught_up is not None else ok
            totals["421"] += missed
            totals["error"] += errors
            totals["latencies"] += latencies
            totals["caught_up"].append(caught_up)

    # A neve's witnesses fetched from the node, sampled as the run goes
    # (nothing from a node, which has no such counter).
    witnessed = []

    def sample_witnesses():
        client = Client(url)
        while time.monotonic() < deadline:
            fetched = witnesses_fetched(client)
            if fetched is not None:
                witnessed.append((time.monotonic() - started, fetched))
            if not witnessed:
                return
            time.sleep(0.1)

    threads = [threading.Thread(target=indexer, args=(i,)) for i in range(indexers)]
    threads.append(threading.Thread(target=sample_witnesses))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    caught = [c for c in totals["caught_up"] if c is not None]
    # Requests a second while there was backlog: until the last indexer
    # caught up (each then waits on the chain), else over the whole run.
    busy = max(caught) if len(caught) == indexers else seconds
    latencies = totals.pop("latencies")
    totals.update(
        {
            "seconds": seconds,
            "busy_seconds": round(busy, 3),
            "rps_while_behind": round(totals["ok_behind"] / max(busy, 1e-9), 1),
            "p50_ms": round(1e3 * (percentile(latencies, 0.5) or 0), 2),
            "p99_ms": round(1e3 * (percentile(latencies, 0.99) or 0), 2),
            # Witnesses the neve fetched while its indexers had blocks.
            "witnesses_while_behind": (
                int(max(v for t, v in witnessed if t <= busy) - witnessed[0][1])
                if witnessed and witnessed[0][0] <= busy
                else None
            ),
            "start_tip": start_tip,
            "end_tip": tip(Client(url)),
        }
    )
    return totals


def blocks_with_transactions(client, count):
    out, number = [], tip(client)
    while len(out) < count and number > 0:
        block = client.result("eth_getBlockByNumber", [hex(number), False])
        if block["transactions"]:
            out.append((number, int(block["size"], 16)))
        number -= 1
    return out


def neve_metric(client, name):
    """A neve's counter `name` (its `/metrics`); None from a node, which
    has no such counter, or when not answered."""
    try:
        text = client.request("GET", "/metrics")[1].decode(errors="replace")
    except (http.client.HTTPException, OSError):
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def witnesses_fetched(client):
    """A neve's witnesses fetched from the node."""
    return neve_metric(client, "neve_state_witnesses_fetched_total")


def side_by_side(row, neve, geth, neve_first, method, params):
    """`method` asked of neve and of the node, one after the other, into
    `row` (`neve_ms`, `neve_status`, `geth_ms`, `geth_status`): whoever goes
    second finds the node's caches warm, so callers put each first in turn."""
    order = [("neve", neve), ("geth", geth)]
    for name, client in order if neve_first else order[::-1]:
        t0 = time.monotonic()
        status, _ = client.post(method, params)
        row[name + "_ms"] = round(1e3 * (time.monotonic() - t0), 2)
        row[name + "_status"] = status


def p50s(sides):
    """neve's and the node's p50 over `sides` (rows of `side_by_side`)
    both answered."""
    ok = [s for s in sides if s["neve_status"] == 200 and s["geth_status"] == 200]
    return {
        "neve_p50_ms": percentile([s["neve_ms"] for s in ok], 0.5),
        "geth_p50_ms": percentile([s["geth_ms"] for s in ok], 0.5),
        "answered": len(ok),
    }


def cold(url, geth_url, count, upward=False):
    neve, geth = Client(url), Client(geth_url)
    out = []
    blocks = blocks_with_transactions(geth, count)
    if upward:
        # Oldest first: each block's parent traced just before it, as an
        # indexer following the chain traces it.
        blocks.reverse()
    for i, (number, _) in enumerate(blocks):
        row = {"block": number}
        side_by_side(row, neve, geth, i % 2 == 0, "debug_traceBlockByNumber",
                     [hex(number), TRACERS[0]])
        # What the node takes to make the block's witness, for comparison.
        t0 = time.monotonic()
        geth.post("debug_executionWitness", [hex(number)])
        row["witness_ms"] = round(1e3 * (time.monotonic() - t0), 2)
        out.append(row)
    ok = [r for r in out if r["neve_status"] == 200 and r["geth_status"] == 200]
    return {
        "blocks": out,
        "neve_p50_ms": percentile([r["neve_ms"] for r in ok], 0.5),
        "geth_p50_ms": percentile([r["geth_ms"] for r in ok], 0.5),
        "witness_p50_ms": percentile([r["witness_ms"] for r in out], 0.5),
        "neve_421": sum(r["neve_status"] == 421 for r in out),
    }


def block_transactions(neve, geth, count):
    """Each of the newest `count` blocks with transactions, as neve holds
    them (a block it has not stored yet would be its 421): its number and
    its transactions' hashes."""
    for number, _ in blocks_with_transactions(neve, count):
        yield number, geth.result("eth_getBlockByNumber", [hex(number), False])["transactions"]


def cold_tx(url, geth_url, count):
    neve, geth = Client(url), Client(geth_url)
    places = ["first", "middle", "last"]
    rows = []
    for i, (number, txs) in enumerate(block_transactions(neve, geth, count)):
        place = places[i % 3]
        index = {"first": 0, "middle": len(txs) // 2, "last": len(txs) - 1}[place]
        row = {"block": number, "transactions": len(txs), "place": place}
        witnesses = witnesses_fetched(neve) or 0
        side_by_side(row, neve, geth, (i // 3) % 2 == 0, "debug_traceTransaction",
                     [txs[index], TRACERS[0]])
        row["witnesses"] = int((witnesses_fetched(neve) or 0) - witnesses)
        rows.append(row)
    out = {"blocks": rows}
    for place in places:
        at = [r for r in rows if r["place"] == place]
        out[place] = {
            **p50s(at),
            "witnesses": sum(r["witnesses"] for r in at),
            "traces": len(at),
        }
    return out


def held_tx(url, geth_url, count):
    neve, geth = Client(url), Client(geth_url)
    places = ["cold_middle", "held_next", "held_last"]
    rows = []
    for i, (number, txs) in enumerate(block_transactions(neve, geth, count)):
        middle = len(txs) // 2
        row = {"block": number, "transactions": len(txs)}
        for place, index in zip(places, [middle, middle + 1, len(txs) - 1]):
            side = {}
            side_by_side(side, neve, geth, i % 2 == 0, "debug_traceTransaction",
                         [txs[index], TRACERS[0]])
            row[place] = side
        t0 = time.monotonic()
        geth.post("debug_executionWitness", [hex(number)])
        row["geth_witness_ms"] = round(1e3 * (time.monotonic() - t0), 2)
        rows.append(row)
    out = {"blocks": rows}
    for place in places:
        out[place] = p50s([r[place] for r in rows])
    out["geth_witness_p50_ms"] = percentile([r["geth_witness_ms"] for r in rows], 0.5)
    return out


def upstream_calls(client):
    """A neve's state calls to its node so far."""
    return int(neve_metric(client, "neve_state_upstream_calls_total") or 0)


def first_tx(url_a, url_b, geth_url, count):
    targets = [("a", Client(url_a)), ("b", Client(url_b)), ("geth", Client(geth_url))]
    geth = targets[2][1]
    rows = []
    # Every other block: none's parent traced before it.
    blocks = list(block_transactions(targets[0][1], geth, 2 * count))[::2]
    for i, (number, txs) in enumerate(blocks):
        for place, index in (("first", 0), ("second", 1)):
            row = {"block": number, "place": place}
            for name, client in targets[i % 3:] + targets[:i % 3]:
                before = upstream_calls(client) if name != "geth" else 0
                t0 = time.monotonic()
                status, _ = client.post("debug_traceTransaction", [txs[index], TRACERS[0]])
                row[name + "_ms"] = round(1e3 * (time.monotonic() - t0), 2)
                row[name + "_status"] = status
                if name != "geth":
                    row[name + "_calls"] = upstream_calls(client) - before
            rows.append(row)
    out = {"blocks": rows}
    for place in ("first", "second"):
        at = [r for r in rows if r["place"] == place]
        out[place] = {
            name + "_p50_ms": percentile([r[name + "_ms"] for r in at
                                          if r[name + "_status"] == 200], 0.5)
            for name, _ in targets
        }
        for name in ("a", "b"):
            out[place][name + "_p50_calls"] = percentile([r[name + "_calls"] for r in at], 0.5)
    return out


def sizes(url, count):
    client = Client(url)
    rows = []
    for number, size in blocks_with_transactions(client, count):
        status, data = client.post("debug_executionWitness", [hex(number)])
        if status == 200:
            rows.append({"block": number, "block_bytes": size, "witness_bytes": len(data)})
    total_w = sum(r["witness_bytes"] for r in rows)
    total_b = sum(r["block_bytes"] for r in rows)
    return {
        "blocks": len(rows),
        "witness_bytes_per_block": total_w // max(1, len(rows)),
        "block_bytes_per_block": total_b // max(1, len(rows)),
        "ratio": round(total_w / max(1, total_b), 2),
    }


def witnesses(geth_url, count, at_once):
    blocks = [number for number, _ in blocks_with_transactions(Client(geth_url), count)]

    def made(number):
        status, data = Client(geth_url).post("debug_executionWitness", [hex(number)])
        return status == 200 and b'"result"' in data[:64]

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(at_once) as pool:
        answered = list(pool.map(made, blocks))
    seconds = round(time.monotonic() - t0, 3)
    return {"blocks": len(blocks), "seconds": seconds, "failed": answered.count(False)}


def sealed(geth_url, after, upto):
    """Transactions in blocks after+1..upto: what the node sealed meanwhile."""
    client = Client(geth_url)
    return {"blocks": max(0, upto - after), "transactions": sum(
        int(client.result("eth_getBlockTransactionCountByNumber", [hex(n)]), 16)
        for n in range(after + 1, upto + 1))}


def replays(url, first, count, rounds):
    client = Client(url)
    configs = [TRACERS] if rounds == 0 else [
        [{"tracer": t["tracer"], "timeout": f"{20 + r}s"} for t in TRACERS] for r in range(rounds)
    ]
    latencies, failed = [], 0
    for round_configs in configs:
        for config in round_configs:
            for number in range(first, first + count):
                t0 = time.monotonic()
                # Once, not retried: a second try could join the first's
                # replay or find its answer kept.
                try:
                    status, data = client.post("debug_traceBlockByNumber", [hex(number), config], 1)
                except (http.client.HTTPException, OSError):
                    status, data = 0, b""
                if status == 200 and b'"result"' in data[:64]:
                    latencies.append(time.monotonic() - t0)
                else:
                    failed += 1
    return {
        "replays": len(latencies),
        "failed": failed,
        "p50_ms": round(1e3 * (percentile(latencies, 0.5) or 0), 2),
        "mean_ms": round(1e3 * sum(latencies) / max(1, len(latencies)), 2),
    }


def burn(profile):
    """Takes the CPU `profile` names, interval by interval, in two processes."""
    import multiprocessing
    intervals, at = [], 0.0
    for line in open(profile):
        t, cpu = (float(v) for v in line.split())
        if t > at:
            intervals.append((t - at, cpu))
            at = t
    started = time.monotonic() + 0.1
    workers = [multiprocessing.Process(target=burner, args=(started, intervals, k)) for k in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    took = os.times()
    return {
        "seconds": round(at, 3),
        "asked_s": round(sum(c for _, c in intervals), 3),
        # What the workers took (less on a machine too busy to give it).
        "cpu_s": round(took.children_user + took.children_system, 3),
    }


def burner(started, intervals, k):
    """Worker `k` of `burn`: its share of each interval's CPU, counted in
    CPU time (not wall time, which a busy machine stretches), taken in
    10 ms slices as it comes due; what it could not take by an interval's
    end is not carried over."""
    begun = time.process_time()
    at, owed = started, 0.0
    for length, cpu in intervals:
        share = min(1.0, max(0.0, cpu / length - k))
        end = at + length
        due_from = begun + owed
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = due_from + share * (min(end, now + 0.01) - at)
            # CPU time read each half millisecond: a system call, unlike
            # the wall clock's.
            while time.process_time() < due and time.monotonic() < min(end, now + 0.01):
                spin = time.monotonic() + 0.0005
                while time.monotonic() < spin:
                    pass
            rest = min(end, now + 0.01) - time.monotonic()
            if rest > 0:
                time.sleep(rest)
        owed = time.process_time() - begun
        at = end


if __name__ == "__main__":
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "run":
        result = run(args[0], float(args[1]), int(args[2]), int(args[3]),
                     os.environ.get("STAGGER", "1") != "0")
    elif mode == "cold":
        result = cold(args[0], args[1], int(args[2]), args[3:] == ["up"])
    elif mode == "cold-tx":
        result = cold_tx(args[0], args[1], int(args[2]))
    elif mode == "held-tx":
        result = held_tx(args[0], args[1], int(args[2]))
    elif mode == "first-tx":
        result = first_tx(args[0], args[1], args[2], int(args[3]))
    elif mode == "sizes":
        result = sizes(args[0], int(args[1]))
    elif mode == "sealed":
        result = sealed(args[0], int(args[1]), int(args[2]))
    elif mode == "replays":
        result = replays(args[0], int(args[1]), int(args[2]), int(args[3]))
    elif mode == "burn":
        result = burn(args[0])
    elif mode == "witnesses":
        result = witnesses(args[0], int(args[1]), int(args[2]))
    else:
        raise SystemExit(__doc__)
    print(json.dumps(result))
