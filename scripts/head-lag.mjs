// Head-to-servable latency: for each block the upstream announces
// (newHeads on its WebSocket), the time until neve answers `latest`
// (eth_blockNumber, polled every POLL_MS) with it or a later block.
//
//   node scripts/head-lag.mjs UPSTREAM_WS NEVE_HTTP SECONDS
//
// Prints one JSON line: blocks measured, p50, p99 and max in ms. Needs the
// `ws` package (tests/clients installs it).
import { createRequire } from "node:module";
const require = createRequire(new URL("../tests/clients/package.json", import.meta.url));
const WebSocket = require("ws");

const [upstreamWs, neveHttp, seconds] = process.argv.slice(2);
// How often neve is asked: often enough to resolve a millisecond-scale
// lag, a few hundred calls a second at most.
const POLL_MS = 2;
const announced = new Map(); // block number -> time announced
const lags = [];
let servable = -1;

const socket = new WebSocket(upstreamWs);
socket.on("open", () =>
  socket.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] })),
);
socket.on("message", (data) => {
  const message = JSON.parse(data);
  if (message.method !== "eth_subscription") return;
  const number = parseInt(message.params.result.number, 16);
  if (!announced.has(number)) announced.set(number, performance.now());
});

async function poll() {
  const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_blockNumber", params: [] });
  const deadline = performance.now() + seconds * 1000;
  while (performance.now() < deadline) {
    try {
      const answer = await fetch(neveHttp, { method: "POST", headers: { "content-type": "application/json" }, body });
      if (answer.status === 200) {
        const head = parseInt((await answer.json()).result, 16);
        const now = performance.now();
        for (let n = servable + 1; n <= head; n++) {
          if (announced.has(n)) lags.push(now - announced.get(n));
        }
        servable = Math.max(servable, head);
      } else {
        await answer.arrayBuffer();
      }
    } catch {
      // neve busy or restarting: try again.
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  socket.close();
  lags.sort((a, b) => a - b);
  const at = (q) => (lags.length ? lags[Math.min(lags.length - 1, Math.floor(q * lags.length))] : null);
  const ms = (v) => (v === null ? null : Math.round(v * 100) / 100);
  console.log(JSON.stringify({ blocks: lags.length, p50_ms: ms(at(0.5)), p99_ms: ms(at(0.99)), max_ms: ms(at(1)) }));
}
poll();
