#!/usr/bin/env python3
"""Abuse a live neve, one kind at a time, while a well-behaved client reads
random blocks over one keep-alive connection; print per abuse that client's
p99 against its idle p99, neve's anonymous RSS, and what the abuser got.

    abuse.py HOST:PORT PID HEAD [SECONDS]

Run by scripts/abuse.sh, which starts geth and neve first.
"""
import asyncio
import os
import json
import multiprocessing
import random
import sys
import time

HOST, PORT = sys.argv[1].split(":")
PORT = int(PORT)
PID = int(sys.argv[2])
HEAD = int(sys.argv[3])
SECONDS = float(sys.argv[4]) if len(sys.argv) > 4 else 8.0
# Abusers connect from another loopback address than the good client, as
# another machine would: neve's --client-rate tells clients apart by address.
ABUSER_ADDR = os.environ.get("ABUSER_ADDR", "127.0.0.2")


def abuser_connection():
    return asyncio.open_connection(HOST, PORT, local_addr=(ABUSER_ADDR, 0))


def rss_anon_mib():
    with open(f"/proc/{PID}/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


def request(body: bytes, keep_alive=True) -> bytes:
    connection = b"keep-alive" if keep_alive else b"close"
    return (b"POST / HTTP/1.1\r\nHost: neve\r\nContent-Type: application/json\r\nConnection: "
            + connection + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


async def read_response(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    body = await reader.readexactly(length)
    return status, body


async def good_client(stop, latencies):
    reader, writer = await asyncio.open_connection(HOST, PORT)
    rng = random.Random(7)
    while not stop.is_set():
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber",
                           "params": [hex(rng.randint(0, HEAD)), False]}).encode()
        started = time.perf_counter()
        try:
            writer.write(request(body))
            await writer.drain()
            status, _ = await read_response(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            # Its connection was closed under it: counted as a failed
            # request (status 0), and it connects again.
            status = 0
            writer.close()
            reader, writer = await asyncio.open_connection(HOST, PORT)
        latencies.append((time.perf_counter() - started, status))
    writer.close()


def p99(latencies):
    values = sorted(l for l, _ in latencies)
    return values[int(len(values) * 0.99)] * 1000 if values else float("nan")


def run_abuse(name, queue):
    """In its own process, so the abuser's work never delays the measuring
    client's event loop; at ABUSER_NICE (default 0): 19 makes the abuser's
    own CPU stand for a client on another machine rather than take it from
    the one measured."""
    os.nice(int(os.environ.get("ABUSER_NICE", "0")))
    abuse = ABUSES[name]
    queue.put(asyncio.run(abuse(None)))


async def measured(name):
    """Runs the abuse called `name` for SECONDS alongside the good client."""
    stop = asyncio.Event()
    latencies = []
    good = asyncio.create_task(good_client(stop, latencies))
    await asyncio.sleep(0.5)
    latencies.clear()
    peak = [rss_anon_mib()]

    async def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], rss_anon_mib())
            await asyncio.sleep(0.2)

    sampler = asyncio.create_task(sample())
    outcome = ""
    if name == "idle":
        await asyncio.sleep(SECONDS)
    else:
        queue = multiprocessing.Queue()
        child = multiprocessing.Process(target=run_abuse, args=(name, queue))
        child.start()
        while child.is_alive() and queue.empty():
            await asyncio.sleep(0.1)
        outcome = queue.get()
        child.join()
    stop.set()
    await good
    await sampler
    # Which failures: 429 is the good client over its own --client-rate
    # (the connection closes with it), 0 a connection closed under it.
    failures = {}
    for _, s in latencies:
        if s != 200:
            failures[s] = failures.get(s, 0) + 1
    bad = ", ".join(f"{n} × {s or 'closed'}" for s, n in sorted(failures.items())) or "0"
    return name, p99(latencies), len(latencies), bad, peak[0], outcome


async def slowloris(stop):
    """Connections sending a header a byte at a time."""
    writers = []
    for _ in range(200):
        _, writer = await abuser_connection()
        writers.append(writer)
    line = b"POST / HTTP/1.1\r\nHost: neve\r\nX-Slow: " + b"a" * 64
    closed = 0
    deadline = time.time() + SECONDS
    i = 0
    while time.time() < deadline and i < len(line):
        for writer in writers:
            try:
                writer.write(line[i:i + 1])
                await writer.drain()
            except (ConnectionError, OSError):
                closed += 1
        i += 1
        await asyncio.sleep(SECONDS / len(line))
    for writer in writers:
        writer.close()
    return f"200 slow headers, {closed} write failures (neve closed them)"


async def never_reading(stop):
    """Clients pipelining full-block requests and never reading answers."""
    writers = []
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber",
                       "params": [hex(HEAD), True]}).encode()
    for _ in range(20):
        _, writer = await abuser_connection()
        writers.append(writer)
    sent = 0
    deadline = time.time() + SECONDS
    while time.time() < deadline:
        for writer in writers:
            if writer.transport.get_write_buffer_size() < 1 << 20:
                writer.write(request(body) * 10)
                sent += 10
        await asyncio.sleep(0.05)
    for writer in writers:
        writer.transport.abort()
    return f"20 clients sent {sent} requests, read nothing"


async def idle_connections(stop):
    """10,000 connections that send nothing."""
    writers = []
    refused = 0
    for _ in range(10_000):
        try:
            _, writer = await abuser_connection()
            writers.append(writer)
        except OSError:
            refused += 1
    await asyncio.sleep(SECONDS)
    for writer in writers:
        writer.transport.abort()
    return f"{len(writers)} idle connections open ({refused} refused at connect)"


async def one_shot(body: bytes):
    reader, writer = await abuser_connection()
    writer.write(request(body, keep_alive=False))
    try:
        await writer.drain()
    except ConnectionError:
        pass  # refused before the body was read: its answer may be there
    try:
        status, answer = await asyncio.wait_for(read_response(reader), 30)
    except (asyncio.IncompleteReadError, ConnectionError):
        status, answer = 0, b"(closed)"
    writer.close()
    return status, answer


def bad_request(body: bytes):
    """An abuse that sends `body` over and over, one connection each time."""
    async def abuse(stop):
        deadline = time.time() + SECONDS
        sent, first, limited = 0, None, 0
        while time.time() < deadline:
            status, answer = await one_shot(body)
            sent += 1
            limited += status == 429
            if first is None:
                try:
                    parsed = json.loads(answer)
                    item = parsed[0] if isinstance(parsed, list) else parsed
                    code = item.get("error", {}).get("code", "a result")
                except ValueError:
                    code = "not JSON"
                first = f"HTTP {status}, {code}"
        if limited:
            return f"{sent} sent: {sent - limited} answered {first}, {limited} refused 429 (--client-rate)"
        return f"{sent} sent, each: {first}"
    return abuse


LOGS = {"jsonrpc": "2.0", "id": 1, "method": "eth_getLogs",
        "params": [{"fromBlock": "0x0", "toBlock": hex(HEAD)}]}


def contract_with_storage():
    """A contract on the chain (neve load's token, whose balances are
    storage): the first receipt that created one."""
    import urllib.request
    for height in range(HEAD + 1):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockReceipts",
                           "params": [hex(height)]}).encode()
        asked = urllib.request.Request(f"http://{HOST}:{PORT}/", data=body,
                                       headers={"content-type": "application/json"})
        with urllib.request.urlopen(asked) as answer:
            for receipt in json.load(answer).get("result") or []:
                if receipt.get("contractAddress"):
                    return receipt["contractAddress"]
    return "0x" + "00" * 19 + "01"


CONTRACT = contract_with_storage()


async def blocks_flood(stop):
    """Rounds of 50 clients exporting the whole store at once over
    /blocks, each reading slowly."""
    async def one():
        reader, writer = await abuser_connection()
        writer.write(f"GET /blocks?from=0&to={HEAD} HTTP/1.1\r\nHost: neve\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        got = 0
        while chunk := await reader.read(64 * 1024):
            got += len(chunk)
            await asyncio.sleep(0.01)
        writer.close()
        return status, got
    deadline = time.time() + SECONDS
    statuses, read = {}, 0
    while time.time() < deadline:
        for result in await asyncio.gather(*[one() for _ in range(50)], return_exceptions=True):
            if isinstance(result, tuple):
                statuses[result[0]] = statuses.get(result[0], 0) + 1
                read += result[1]
    shown = ", ".join(f"{n} × {status}" for status, n in sorted(statuses.items()))
    return f"{shown}; {read / 1e6:.1f} MB read"

ABUSES = {
    "slowloris": slowloris,
    "never-reading clients": never_reading,
    "10,000 idle connections": idle_connections,
    "5,000-element batch": bad_request(json.dumps(
        [{"jsonrpc": "2.0", "id": i, "method": "eth_chainId"} for i in range(5000)]).encode()),
    "1,000 whole-range eth_getLogs in a batch": bad_request(json.dumps([LOGS] * 1000).encode()),
    "200,000-deep nesting": bad_request(b"[" * 200_000 + b"]" * 200_000),
    "5,000-digit hex height": bad_request(json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "eth_getBlockByNumber",
         "params": ["0x" + "f" * 5000, False]}).encode()),
    "100,000-digit id": bad_request(b'{"jsonrpc":"2.0","id":' + b"9" * 100_000 + b',"method":"eth_chainId"}'),
    "invalid UTF-8": bad_request(b'{"jsonrpc":"2.0","id":1,"method":"eth_\xff\xfe"}'),
    # A log scan (deferred to the scan threads) and then 700 proofs naming
    # one slot 1,024 times each: the batch answer cap must hold after it.
    "eth_getLogs then 700 × 1,024-slot eth_getProof": bad_request(json.dumps(
        [LOGS] + [{"jsonrpc": "2.0", "id": i, "method": "eth_getProof",
                   "params": [CONTRACT, ["0x0"] * 1024, "latest"]} for i in range(700)]).encode()),
    "/blocks floods (50 slow exports at once)": blocks_flood,
}


async def main():
    rows = [await measured("idle")]
    only = os.environ.get("ONLY")
    for name in ABUSES:
        if only and only not in name:
            continue
        print(f"abuse: {name}", file=sys.stderr, flush=True)
        rows.append(await measured(name))
        await asyncio.sleep(1)
    idle = rows[0][1]
    print("| abuse | good client p99 | × idle | its requests (non-200) | neve anonymous RSS peak | what the abuser got |")
    print("|---|---|---|---|---|---|")
    for name, p, n, bad, peak, outcome in rows:
        print(f"| {name} | {p:.2f} ms | {p / idle:.2f} | {n} ({bad}) | {peak:.0f} MiB | {outcome or ''} |")


if __name__ == "__main__":
    asyncio.run(main())
