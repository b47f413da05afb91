// Reads blocks, receipts and logs through neve with ethers and compares them
// with the node's own answers; makes contract calls as a dapp does (a token's
// methods called statically, gas estimated, a revert decoded, fee data)
// through both and compares the values; then subscribes to newHeads over neve's
// WebSocket and waits for two heads. Prints a JSON summary; exits non-zero
// on any difference.
//
//   node ethers-check.mjs NEVE_HTTP NEVE_WS NODE_HTTP
import { Contract, JsonRpcProvider, WebSocketProvider, id, toQuantity } from "ethers";

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

// Contract calls at one block both hold, so both answer for the same state.
const abi = [
  "function transfer(address to, uint256 amount) returns (bool)",
  "function balanceOf(address owner) view returns (uint256)",
];
const token = la[0].address;
const at = head;
const holders = [...new Set(la.map(l => "0x" + l.topics[2].slice(26)))].slice(0, 8);
const onNeve = new Contract(token, abi, neve), onNode = new Contract(token, abi, node);
let callsChecked = 0;
for (const holder of holders) {
  const overrides = { from: holder, blockTag: at };
  const [a, b] = await Promise.all([
    retry(() => onNeve.transfer.staticCall(holders[0], 1n, overrides)),
    onNode.transfer.staticCall(holders[0], 1n, overrides),
  ]);
  same(`transfer from ${holder}`, a, b);
  const [ba, bb] = await Promise.all([
    retry(() => onNeve.balanceOf.staticCall(holder, { blockTag: at })),
    onNode.balanceOf.staticCall(holder, { blockTag: at }),
  ]);
  same(`balanceOf ${holder}`, ba, bb);
  const tx = await onNeve.transfer.populateTransaction(holder, 1n);
  const estimate = (p) => p.send("eth_estimateGas", [{ from: holder, to: tx.to, data: tx.data }, toQuantity(at)]);
  const [ea, eb] = await Promise.all([retry(() => estimate(neve)), estimate(node)]);
  same(`estimate from ${holder}`, ea, eb);
  callsChecked++;
}
// A revert with a reason (the token's code overridden with one that
// reverts with Error("no")), as ethers decodes it from each.
const revertCode = "0x6308c379a060e01b600052" + "6020600452" + "6002602452" + "616e6f60f01b604452" + "60646000fd";
const revertCall = (p) => p.send("eth_call", [{ to: token, data: "0x" }, toQuantity(at), { [token]: { code: revertCode } }])
  .then(
    (result) => ({ result }),
    (e) => {
      // neve's 421 (not yet ingested) is retried, as a front end would.
      if (e.code === "SERVER_ERROR") throw e;
      return { code: e.code, reason: e.reason ?? null, data: e.data ?? null, rpc: e.info?.error ?? null };
    },
  );
const [ra, rb] = await Promise.all([retry(() => revertCall(neve)), revertCall(node)]);
same("revert", ra, rb);
if (rb.reason !== "no") { console.error(`the node's revert decoded as ${JSON.stringify(rb)}`); process.exit(1); }
// Fee history a wallet asks for beside its calls, at the same block.
const fees = (p) => p.send("eth_feeHistory", ["0x4", toQuantity(at), [25, 75]]);
const [fa, fb] = await Promise.all([retry(() => fees(neve)), fees(node)]);
same("fee history", fa, fb);

const ws = new WebSocketProvider(neveWs, undefined, { staticNetwork: true });
const heads = [];
await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error(`only ${heads.length} heads in 30 s`)), 30000);
  ws.on("block", (n) => { heads.push(n); if (heads.length >= 2) { clearTimeout(timer); resolve(); } });
});
await ws.destroy();
console.log(JSON.stringify({ head, txsChecked, logsChecked, callsChecked, heads }));
process.exit(0);
