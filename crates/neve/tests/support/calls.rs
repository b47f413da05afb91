//! What the call tests share: probes put over accounts with a state
//! override, a token's holders from the chain's logs, and the comparison
//! of one call's answer through neve and through the node.

use std::collections::BTreeSet;
use std::time::Duration;

use neve_upstream::RpcClient;
use serde_json::{Value, json};

use super::transfer_logs;

/// A never-used address.
pub const STRANGER: &str = "0x00000000000000000000000000000000000c0ffe";
/// Where the probes' code is put with a state override.
pub const PROBE: &str = "0x00000000000000000000000000000000000000aa";

/// Echoes the environment: NUMBER, TIMESTAMP, COINBASE, PREVRANDAO,
/// GASLIMIT, CHAINID, BASEFEE, BLOBBASEFEE, GASPRICE, ORIGIN, CALLER,
/// CALLVALUE, BLOCKHASH(NUMBER-1), SELFBALANCE and GAS, a word each.
pub const ENV: &str = "0x43600052426020524160405244606052456080524660a0524860c0524a60e0523a6101005232610120523361014052346101605260014303406101805247\
6101a0525a6101c0526101e06000f3";

/// Probes by name: each is the whole runtime of an account.
pub const PROBES: &[(&str, &str)] = &[
    ("env", ENV),
    // Error("nope").
    (
        "revert",
        "0x6308c379a060e01b60005260206004526004602452636e6f706560e01b60445260646000fd",
    ),
    // Panic(0x11).
    ("panic", "0x634e487b7160e01b600052601160045260246000fd"),
    ("empty revert", "0x5f5ffd"),
    ("endless loop", "0x5b5f56"),
    ("invalid", "0xfe"),
    ("undefined opcode", "0x0c"),
    ("stack underflow", "0x01"),
    // Returns SLOAD(calldata[0..32]).
    ("sload", "0x5f35545f5260205ff3"),
];

/// The JSON-RPC answer and HTTP status of one call.
pub async fn call(client: &RpcClient, method: &str, params: &Value) -> (u16, Value) {
    let body = json!({"jsonrpc":"2.0","id":7,"method":method,"params":params}).to_string();
    let (status, bytes) = client.post(body.into()).await.unwrap();
    (status.as_u16(), serde_json::from_slice(&bytes).unwrap())
}

/// neve's answer equals geth's, result or error (a 421 is asked again:
/// the fetches it started warm the store).
pub async fn same(neve: &RpcClient, geth: &RpcClient, method: &str, params: Value) {
    let (_, expected) = call(geth, method, &params).await;
    let (mut status, mut got) = call(neve, method, &params).await;
    for _ in 0..10 {
        if status != 421 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        (status, got) = call(neve, method, &params).await;
    }
    assert_eq!(status, 200, "{method} {params}: {got}");
    assert!(
        got == expected,
        "{method} {params}\n  differs at: {}\n  neve: {got:.2000}",
        neve_devnet::conformance::differences(&expected, &got).join("\n              ")
    );
}

/// The token, holders (senders of transfers) and the slots of holders'
/// balances, from the chain's logs.
pub async fn token_and_holders(geth: &RpcClient) -> (String, Vec<String>, Vec<String>) {
    let logs = transfer_logs(geth).await;
    let token = logs[0]["address"].as_str().unwrap().to_string();
    let topic_address = |topic: &Value| format!("0x{}", &topic.as_str().unwrap()[26..]);
    let holders: BTreeSet<String> = logs
        .iter()
        .map(|l| topic_address(&l["topics"][1]))
        .collect();
    let slots: BTreeSet<String> = logs
        .iter()
        .map(|l| l["topics"][2].as_str().unwrap().to_string())
        .collect();
    (
        token,
        holders.into_iter().take(4).collect(),
        slots.into_iter().take(4).collect(),
    )
}

/// `transfer(to, amount)` calldata.
pub fn transfer(to: &str, amount: u64) -> String {
    format!(
        "0xa9059cbb{:0>64}{amount:064x}",
        to.trim_start_matches("0x")
    )
}

/// Each probe of [`PROBES`] as the whole runtime of [`PROBE`], called
/// plainly, with value and gas from `funded`, with a legacy price, with
/// EIP-1559 fees, and estimated: the same answer through neve and the node.
pub async fn compare_probes(neve: &RpcClient, node: &RpcClient, at: &Value, funded: &str) {
    for (_, code) in PROBES {
        let probe = json!({PROBE: {"code": code}});
        for call in [
            json!({"to": PROBE}),
            json!({"to": PROBE, "from": funded, "value": "0x1", "gas": "0x100000"}),
            json!({"to": PROBE, "from": funded, "gasPrice": "0x3b9aca00"}),
            json!({"to": PROBE, "from": funded, "maxFeePerGas": "0x77359400", "maxPriorityFeePerGas": "0x2"}),
        ] {
            same(neve, node, "eth_call", json!([call, at, probe])).await;
        }
        same(
            neve,
            node,
            "eth_estimateGas",
            json!([{"to": PROBE, "from": funded}, at, probe]),
        )
        .await;
    }
}

/// A geth dev chain with a token and its holders, a neve following it from
/// genesis, and a client of each.
pub struct TokenChain {
    /// Kept running for the test's length.
    pub node: neve_devnet::GethDev,
    pub geth: RpcClient,
    pub neve: super::Neve,
    pub client: RpcClient,
    pub head: u64,
    pub token: String,
    pub holders: Vec<String>,
    pub slots: Vec<String>,
}

/// [`TokenChain`], caught up.
pub async fn neve_on_a_token_chain() -> TokenChain {
    let (node, head) = super::chain_with_logs().await;
    let geth = RpcClient::new(node.http_url()).unwrap();
    let neve = super::Neve::start(node.http_url(), &["--floor", "0"], head).await;
    let client = RpcClient::new(&neve.url).unwrap();
    let (token, holders, slots) = token_and_holders(&geth).await;
    assert!(!holders.is_empty() && !slots.is_empty());
    TokenChain {
        node,
        geth,
        neve,
        client,
        head,
        token,
        holders,
        slots,
    }
}

/// A neve's counter from `/metrics`.
pub fn metric(neve: &super::Neve, name: &str) -> u64 {
    let (_, text) = neve.get("/metrics").unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} "))?.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics")) as u64
}

/// Whether `client`'s address is refused for its budget (429).
pub async fn over_budget(client: &RpcClient) -> bool {
    let chain_id = json!({"jsonrpc": "2.0", "id": 1, "method": "eth_chainId"});
    let answer = client.post(chain_id.to_string().into()).await;
    format!("{answer:?}").contains("status: 429")
}

/// neve's answer is geth's byte for byte, as an indexer comparing raw
/// answers sees it.
pub async fn same_bytes(neve: &RpcClient, geth: &RpcClient, method: &str, params: &Value) {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string();
    let (_, ours) = neve.post(body.clone().into()).await.unwrap();
    let (_, theirs) = geth.post(body.into()).await.unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim_end().to_string();
    let (ours, theirs) = (text(&ours), text(&theirs));
    if ours != theirs {
        let at = ours
            .bytes()
            .zip(theirs.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(ours.len().min(theirs.len()));
        let around = |t: &str| t[at.saturating_sub(80)..(at + 80).min(t.len())].to_string();
        panic!(
            "{method} {params}: bytes differ at {at}\n  geth: {}\n  neve: {}",
            around(&theirs),
            around(&ours)
        );
    }
}
