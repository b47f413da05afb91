// Runs viem's simulation actions through neve and through the node and
// compares what viem makes of each answer: `simulateCalls` (a token
// transfer and ether sent from one account, traced transfers, asset
// changes traced, a revert decoded) and `simulateBlocks` (two blocks: a
// stranger given a balance by a state override calls from it, then a
// holder's transfer; validation unset, on and off; traced transfers; full
// transactions or hashes; a validation refusal). Checks the answers are not
// empty (calls succeeded, logs where transfers were). Prints a JSON
// summary; on a difference prints where, the request and both raw answers,
// and exits non-zero.
//
//   node viem-simulate.mjs NEVE_HTTP NODE_HTTP TOKEN FUNDED HOLDER
import { createPublicClient, erc20Abi, http, parseAbi, parseEther } from "viem";

const [neveHttp, nodeHttp, token, funded, holder] = process.argv.slice(2);
if (!holder) { console.error("usage: viem-simulate.mjs NEVE_HTTP NODE_HTTP TOKEN FUNDED HOLDER"); process.exit(2); }
const STRANGER = "0x00000000000000000000000000000000000c0ffe";
const PROBE = "0x00000000000000000000000000000000000000aa";
// Reverts with Error("nope"), as the probe of support/calls.rs.
const REVERTS = "0x6308c379a060e01b60005260206004526004602452636e6f706560e01b60445260646000fd";
// The ether transfers geth's traceTransfers logs (ERC-7528's address).
const ETH = "0xeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee";

// Each side's last request and raw answer, shown when the two differ.
function client(url) {
  const seen = { request: null, response: null };
  const transport = http(url, {
    // No retries of viem's own: a difference must show on the first answer;
    // neve's 421 is retried below.
    retryCount: 0,
    timeout: 30_000,
    onFetchRequest: (request, init) => { seen.request = init?.body ?? null; },
    onFetchResponse: async (response) => { seen.response = await response.clone().text(); },
  });
  return { viem: createPublicClient({ transport }), seen };
}
const neve = client(neveHttp);
const node = client(nodeHttp);

async function retry(f) {
  // neve answers 421 for what it has not ingested yet; a front end would
  // retry elsewhere, this client just waits a moment.
  for (let i = 0; ; i++) {
    try { return await f(); } catch (e) {
      if (i >= 150 || !notIngested(e)) throw e;
      await new Promise(r => setTimeout(r, 100));
    }
  }
}

function notIngested(e) {
  for (let c = e; c; c = c.cause) if (c.status === 421) return true;
  return false;
}

// viem's errors as what a dapp reads from them (names, messages, the
// decoded revert), without the URL and stack that differ by side.
function describe(e) {
  if (!(e instanceof Error)) return e;
  const d = { name: e.name, shortMessage: e.shortMessage ?? e.message, details: e.details, code: e.code, reason: e.reason, data: e.data, signature: e.signature };
  if (e.cause && e.cause !== e) d.cause = describe(e.cause);
  return d;
}

const replacer = (_, v) => typeof v === "bigint" ? `${v}n` : v instanceof Error ? describe(v) : v;
// Keys sorted: JSON's objects are unordered, and neve writes a block's
// fields in another order than geth (viem keeps the order it was given).
const sorted = (v) => Array.isArray(v) ? v.map(sorted)
  : v && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map(k => [k, sorted(v[k])])) : v;
const plain = (v) => sorted(JSON.parse(JSON.stringify(v, replacer) ?? "null"));

// Paths at which `a` and `b` differ, with both values.
function differences(a, b, path = "$", out = []) {
  if (out.length >= 20) return out;
  if (a && b && typeof a === "object" && typeof b === "object" && Array.isArray(a) === Array.isArray(b)) {
    const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
    for (const k of keys) differences(a[k], b[k], Array.isArray(a) ? `${path}[${k}]` : `${path}.${k}`, out);
  } else if (JSON.stringify(a) !== JSON.stringify(b)) {
    out.push(`${path}: neve ${JSON.stringify(a)?.slice(0, 300)} node ${JSON.stringify(b)?.slice(0, 300)}`);
  }
  return out;
}

// The action run through both, as values or as the error thrown; the
// same on both sides or the script fails.
async function both(what, action) {
  const settle = (p) => p.then((value) => ({ value }), (error) => ({ error }));
  const b = await settle(action(node.viem));
  const a = await settle(retry(() => action(neve.viem)));
  const [ja, jb] = [plain(a), plain(b)];
  if (JSON.stringify(ja) !== JSON.stringify(jb)) {
    console.error(`${what} differs:\n  ${differences(ja, jb).join("\n  ")}`);
    console.error(`request:\n  ${node.seen.request}`);
    console.error(`neve answered:\n  ${neve.seen.response?.slice(0, 4000)}`);
    console.error(`node answered:\n  ${node.seen.response?.slice(0, 4000)}`);
    process.exit(1);
  }
  compared++;
  return b;
}

function expect(what, ok, value) {
  if (!ok) { console.error(`${what}: ${JSON.stringify(value, replacer)?.slice(0, 2000)}`); process.exit(1); }
}

// The revert reason viem decoded, wherever in the error's causes.
function reason(e) {
  for (let c = e; c; c = c.cause) if (c.reason) return c.reason;
  return undefined;
}

let compared = 0;
// Both at the node's head: the dev chain seals on transactions only, so it
// holds still while the two are compared.
const head = await node.viem.getBlockNumber();
await retry(async () => { if (await neve.viem.getBlockNumber() < head) throw Object.assign(new Error("behind"), { status: 421 }); });
const transfer = (to, amount) => ({ to: token, abi: erc20Abi, functionName: "transfer", args: [to, amount] });

// simulateCalls: a holder's token transfer and ether sent, from one account.
for (const at of [{ blockNumber: head }, { blockTag: "latest" }]) {
  for (const traceTransfers of [false, true]) {
    const { value, error } = await both(`simulateCalls ${JSON.stringify(at, replacer)} traceTransfers ${traceTransfers}`, (c) => c.simulateCalls({
      ...at,
      account: holder,
      calls: [transfer(STRANGER, 1n), { to: STRANGER, value: 1n }],
      traceTransfers,
    }));
    expect("simulateCalls", !error && value.results.every(r => r.status === "success"), error ?? value);
    expect("the transfer's log", value.results[0].logs.length === 1 && value.results[0].result === true, value.results[0]);
    // Ether moved shows as a log only when transfers are traced.
    const etherLogs = value.results[1].logs.filter(l => l.address.toLowerCase() === ETH);
    expect("the traced ether transfer", etherLogs.length === (traceTransfers ? 1 : 0), value.results[1]);
  }
}
// Asset changes, as a wallet previews a transaction: eth_call and
// simulations at the resolved head (the load's token answers any call as a
// transfer, so its "balance" reads as true).
{
  const { value, error } = await both("simulateCalls traceAssetChanges", (c) => c.simulateCalls({
    account: funded,
    calls: [{ to: STRANGER, value: parseEther("1") }, transfer(STRANGER, 5n)],
    traceAssetChanges: true,
    traceTransfers: true,
  }));
  expect("asset changes", !error && value.assetChanges.some(a => a.token.symbol === "ETH" && a.value.diff <= -parseEther("1")), error ?? value);
}
// A revert viem decodes: the probe reverting with Error("nope").
{
  const { value, error } = await both("simulateCalls revert", (c) => c.simulateCalls({
    blockNumber: head,
    account: funded,
    calls: [{ to: PROBE, abi: parseAbi(["function go()"]), functionName: "go" }],
    stateOverrides: [{ address: PROBE, code: REVERTS }],
  }));
  expect("the revert", !error && value.results[0].status === "failure" && reason(value.results[0].error) === "nope", error ?? value.results);
}

// simulateBlocks: a stranger funded by an override calls from it, then a
// holder transfers in the next block.
// Validated calls pay for their gas: a cap the base fee stays under, and a
// limit their balances cover (the default is the block's whole gas).
const fees = { gas: 200_000n, maxFeePerGas: 10_000_000_000n, maxPriorityFeePerGas: 1n };
const blocks = (withFees) => [
  {
    stateOverrides: [{ address: STRANGER, balance: parseEther("10") }, { address: PROBE, code: REVERTS }],
    calls: [
      { account: STRANGER, to: funded, value: parseEther("1"), ...(withFees ? fees : {}) },
      { account: STRANGER, ...transfer(holder, 7n), ...(withFees ? fees : {}) },
    ],
  },
  {
    calls: [
      { account: holder, ...transfer(STRANGER, 3n), ...(withFees ? fees : {}) },
      { account: STRANGER, to: PROBE, abi: parseAbi(["function go()"]), functionName: "go", ...(withFees ? fees : {}) },
    ],
  },
];
let simulated = 0;
for (const validation of [undefined, false, true]) {
  for (const returnFullTransactions of [false, true]) {
    for (const at of [{ blockNumber: head }, { blockTag: "latest" }]) {
      const what = `simulateBlocks validation ${validation} full ${returnFullTransactions} ${JSON.stringify(at, replacer)}`;
      const { value, error } = await both(what, (c) => c.simulateBlocks({
        ...at,
        blocks: blocks(validation === true),
        validation,
        traceTransfers: true,
        returnFullTransactions,
      }));
      expect(what, !error && value.length === 2, error ?? value);
      const [first, second] = value;
      expect(`${what}: numbers`, first.number === head + 1n && second.number === head + 2n, value);
      expect(`${what}: the stranger's calls`, first.calls.every(c => c.status === "success") && first.calls[0].logs.length === 1 && first.calls[1].logs.length === 1, first.calls);
      expect(`${what}: the holder's transfer`, second.calls[0].status === "success" && second.calls[0].logs.length === 1, second.calls);
      expect(`${what}: the revert`, second.calls[1].status === "failure" && reason(second.calls[1].error) === "nope", second.calls);
      expect(`${what}: transactions`, first.transactions.length === 2 && first.transactions.every(t => typeof t === (returnFullTransactions ? "object" : "string")), first.transactions);
      simulated++;
    }
  }
}
// Validation refuses ether sent from an account without any: the same
// error through both.
let refusal;
{
  const { error } = await both("simulateBlocks validation refusal", (c) => c.simulateBlocks({
    blockNumber: head,
    blocks: [{ calls: [{ account: STRANGER, to: funded, value: parseEther("1"), ...fees }] }],
    validation: true,
  }));
  expect("the refusal", error, "answered");
  refusal = describe(error);
}

console.log(JSON.stringify({ head: Number(head), compared, simulated, refusal }));
process.exit(0);
