// Live lag: subscribes to newHeads on the node and on neve and reports, per
// block hash, how much later neve announced it (p50 / p99 / max, ms).
//
//   node lag.mjs NODE_WS NEVE_WS SECONDS
import WebSocket from "ws";

const [nodeWs, neveWs, seconds] = process.argv.slice(2);
const seen = { node: new Map(), neve: new Map() };
function watch(url, name) {
  const ws = new WebSocket(url);
  ws.on("open", () => ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] })));
  ws.on("message", (data) => {
    const msg = JSON.parse(data);
    const head = msg.params && msg.params.result;
    if (head && head.hash) seen[name].set(head.hash, performance.now());
  });
  return ws;
}
const sockets = [watch(nodeWs, "node"), watch(neveWs, "neve")];
await new Promise((r) => setTimeout(r, Number(seconds) * 1000));
sockets.forEach((s) => s.close());
const lags = [];
for (const [hash, t] of seen.node) if (seen.neve.has(hash)) lags.push(seen.neve.get(hash) - t);
lags.sort((a, b) => a - b);
const at = (q) => lags.length ? lags[Math.min(lags.length - 1, Math.floor(q * lags.length))].toFixed(1) : "n/a";
console.log(JSON.stringify({ blocks: lags.length, p50_ms: at(0.5), p99_ms: at(0.99), max_ms: lags.length ? lags[lags.length - 1].toFixed(1) : "n/a" }));
