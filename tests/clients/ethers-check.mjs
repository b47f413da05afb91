// Reads blocks, receipts and logs through neve with ethers and compares them
// with the node's own answers; then subscribes to newHeads over neve's
// WebSocket and waits for two heads. Prints a JSON summary; exits non-zero
// on any difference.
//
//   node ethers-check.mjs NEVE_HTTP NEVE_WS NODE_HTTP
import { JsonRpcProvider, WebSocketProvider, id } from "ethers";

const [neveHttp, neveWs, nodeHttp] = process.argv.slice(2);
const options = { staticNetwork: true, batchMaxCount: 1 };
const neve = new JsonRpcProvider(neveHttp, undefined, options);
const node = new JsonRpcProvider(nodeHttp, undefined, options);

async function retry(f) {
  // neve answers 421 for what it has not ingested yet; a front end would
  // retry elsewhere, this client just waits a moment.
  for (let i = 0; ; i++) {
    try { return await f(); } catch (e) { if (i >= 150) throw e; await new Promise(r => setTimeout(r, 100)); }
  }
}

function same(what, a, b) {
  const ja = JSON.stringify(a, (_, v) => typeof v === "bigint" ? v.toString() : v);
  const jb = JSON.stringify(b, (_, v) => typeof v === "bigint" ? v.toString() : v);
  if (ja !== jb) { console.error(`${what} differs:\n neve ${ja.slice(0, 400)}\n node ${jb.slice(0, 400)}`); process.exit(1); }
}

const head = await retry(() => neve.getBlockNumber());
let txsChecked = 0, logsChecked = 0;
for (let n = Math.max(1, head - 20); n <= head; n++) {
  const [a, b] = await Promise.all([retry(() => neve.getBlock(n, true)), node.getBlock(n, true)]);
  same(`block ${n}`, a.toJSON(), b.toJSON());
  for (const hash of a.transactions.slice(0, 5)) {
    const [ra, rb] = await Promise.all([retry(() => neve.getTransactionReceipt(hash)), node.getTransactionReceipt(hash)]);
    same(`receipt ${hash}`, ra.toJSON(), rb.toJSON());
    const [ta, tb] = await Promise.all([retry(() => neve.getTransaction(hash)), node.getTransaction(hash)]);
    same(`transaction ${hash}`, ta.toJSON(), tb.toJSON());
    txsChecked++;
  }
}
const filter = { fromBlock: Math.max(1, head - 20), toBlock: head, topics: [id("Transfer(address,address,uint256)")] };
const [la, lb] = await Promise.all([retry(() => neve.getLogs(filter)), node.getLogs(filter)]);
same("logs", la.map(l => l.toJSON()), lb.map(l => l.toJSON()));
logsChecked = la.length;

const ws = new WebSocketProvider(neveWs, undefined, { staticNetwork: true });
const heads = [];
await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`only ${heads.length} heads in 30 s`)), 30000);
  ws.on("block", (n) => { heads.push(n); if (heads.length >= 2) { clearTimeout(timer); resolve(); } });
});
await ws.destroy();
console.log(JSON.stringify({ head, txsChecked, logsChecked, heads }));
process.exit(0);
