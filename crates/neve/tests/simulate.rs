//! `eth_simulateV1` against the live node: on a chain with an ERC-20
//! (`support/Wallet.sol`, balances debited, so a transfer of a whole
//! balance deletes its slot and the block's state root needs the node a
//! deletion collapses into), hundreds of random simulations through neve
//! equal geth's answers, whole (blocks, hashes, state roots, logs, errors):
//! token transfers, approvals and transfers from an allowance chained
//! across calls and blocks, overrides in one block read in the next,
//! reverts and panics, ether moved by calls and inside them, validation on
//! and off, traced transfers, full transactions, moved precompiles, block
//! overrides and gaps, at `latest` and at heights of the tail. Then its
//! bounds, each against the request built to break it.

mod support;

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::calls::*;

/// The token's creation code, compiled from `support/Wallet.sol`.
const WALLET_CODE: &str = include_str!("support/Wallet.bin");

/// Holders of the token at deployment, 1,000 each.
const HOLDERS: u64 = 24;

/// A holder's address: `0x…10NN`.
fn holder(index: u64) -> String {
    format!("0x{:040x}", 0x1000 + index)
}

/// A small deterministic generator (xorshift), so a failure repeats.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, sides: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % sides
    }

    fn chance(&mut self, one_in: u64) -> bool {
        self.roll(one_in) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.roll(items.len() as u64) as usize]
    }
}

fn word(address: &str) -> String {
    format!("{:0>64}", address.trim_start_matches("0x"))
}

/// Calldata of the function `signature` with `words` as arguments.
fn token_call(signature: &str, words: &[String]) -> String {
    let selector = &alloy_primitives::keccak256(signature)[..4];
    format!(
        "0x{}{}",
        alloy_primitives::hex::encode(selector),
        words.concat()
    )
}

/// The storage slot of `balanceOf[owner]`.
fn balance_slot(owner: &str) -> String {
    let mut preimage = hex_bytes(&word(owner));
    preimage.extend([0u8; 32]);
    format!("{}", alloy_primitives::keccak256(preimage))
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    alloy_primitives::hex::decode(hex).unwrap()
}

/// Who the random calls are made by and about.
struct Cast {
    wallet: String,
    funded: String,
    people: Vec<String>,
}

/// One random call.
fn random_call(dice: &mut Dice, cast: &Cast, moved: Option<&str>) -> Value {
    let from = dice.pick(&cast.people).clone();
    let to = dice.pick(&cast.people).clone();
    let amount = *dice.pick(&[1u64, 7, 1000, 2000]);
    match dice.roll(9) {
        0..=2 => json!({"from": from, "to": cast.wallet,
            "input": token_call("transfer(address,uint256)", &[word(&to), format!("{amount:064x}")])}),
        3 => json!({"from": from, "to": cast.wallet,
            "input": token_call("approve(address,uint256)", &[word(&to), format!("{amount:064x}")])}),
        4 => {
            let owner = dice.pick(&cast.people).clone();
            json!({"from": from, "to": cast.wallet,
                "input": token_call("transferFrom(address,address,uint256)", &[word(&owner), word(&to), format!("{amount:064x}")])})
        }
        5 => json!({"from": cast.funded, "to": cast.wallet, "value": quantity(amount),
            "input": token_call("pay(address)", &[word(&to)])}),
        6 => {
            let sender = if dice.chance(2) {
                cast.funded.clone()
            } else {
                from
            };
            json!({"from": sender, "to": to, "value": quantity(amount)})
        }
        7 => json!({"from": from, "to": PROBE, "gas": "0x30000"}),
        _ => match moved {
            // ecrecover's answer for a hash and signature of zeros.
            Some(at) => json!({"from": from, "to": at, "input": format!("0x{}", "00".repeat(128))}),
            None => {
                json!({"from": from, "to": "0x0000000000000000000000000000000000000002", "input": "0x1234"})
            }
        },
    }
}

/// One random simulation on top of block `base`.
fn random_simulation(dice: &mut Dice, cast: &Cast, base: u64) -> Value {
    let mut number = base;
    let mut blocks = Vec::new();
    for _ in 0..1 + dice.roll(3) {
        let mut block = serde_json::Map::new();
        let mut overrides = serde_json::Map::new();
        number += 1;
        if dice.chance(4) {
            number += 1 + dice.roll(3);
            overrides.insert("number".into(), json!(quantity(number)));
        }
        if dice.chance(6) {
            overrides.insert("feeRecipient".into(), json!(dice.pick(&cast.people)));
        }
        if dice.chance(8) {
            overrides.insert("baseFeePerGas".into(), json!("0x7"));
        }
        if !overrides.is_empty() {
            block.insert("blockOverrides".into(), Value::Object(overrides));
        }
        let mut state = serde_json::Map::new();
        if dice.chance(3) {
            let probes = [
                PROBES[0].1,
                PROBES[1].1,
                PROBES[2].1,
                PROBES[3].1,
                PROBES[8].1,
            ];
            let code = *dice.pick(&probes);
            state.insert(PROBE.into(), json!({"code": code}));
        }
        if dice.chance(4) {
            state.insert(STRANGER.into(), json!({"balance": "0x100000"}));
        }
        if dice.chance(4) {
            let owner = dice.pick(&cast.people).clone();
            state.insert(
                cast.wallet.clone(),
                json!({"stateDiff": {balance_slot(&owner): format!("0x{:064x}", 5000)}}),
            );
        }
        let moved = dice
            .chance(6)
            .then_some("0x000000000000000000000000000000000000ec01");
        if let Some(at) = moved {
            state.insert(
                "0x0000000000000000000000000000000000000001".into(),
                json!({"movePrecompileToAddress": at}),
            );
        }
        if !state.is_empty() {
            block.insert("stateOverrides".into(), Value::Object(state));
        }
        let calls: Vec<Value> = (0..dice.roll(4))
            .map(|_| random_call(dice, cast, moved))
            .collect();
        block.insert("calls".into(), json!(calls));
        blocks.push(Value::Object(block));
    }
    json!({
        "blockStateCalls": blocks,
        "traceTransfers": dice.chance(2),
        "validation": dice.chance(5),
        "returnFullTransactions": dice.chance(3),
    })
}

/// Deploys the token from the dev account with [`HOLDERS`] holders (the
/// dev account among them) and moves some of it, a block a transfer.
async fn deploy_wallet(geth: &RpcClient) -> String {
    let funded = neve_devnet::GETH_DEV_ADDRESS;
    let mut holders: Vec<String> = (0..HOLDERS).map(holder).collect();
    holders.push(funded.to_string());
    let mut args = format!("{:064x}{:064x}{:064x}", 0x40, 1000, holders.len());
    for h in &holders {
        args.push_str(&word(h));
    }
    let code = format!("0x{}{args}", WALLET_CODE.trim());
    let receipt = send(
        geth,
        json!({"from": funded, "data": code, "gas": "0xf00000"}),
    )
    .await;
    let wallet = receipt["contractAddress"].as_str().unwrap().to_string();
    for index in 0..4 {
        let input = token_call(
            "transfer(address,uint256)",
            &[word(&holder(index)), format!("{:064x}", 10)],
        );
        send(
            geth,
            json!({"from": funded, "to": wallet, "data": input, "gas": "0x100000"}),
        )
        .await;
    }
    wallet
}

/// Sends a transaction from the dev account and waits for its receipt.
async fn send(geth: &RpcClient, tx: Value) -> Value {
    let hash: String = geth.call("eth_sendTransaction", [tx]).await.unwrap();
    for _ in 0..100 {
        let receipt: Value = geth
            .call("eth_getTransactionReceipt", [&hash])
            .await
            .unwrap();
        if !receipt.is_null() {
            assert_eq!(receipt["status"], "0x1", "{receipt}");
            return receipt;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{hash} not mined");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulations_equal_geths_at_latest_and_in_the_tail() {
    let TokenChain {
        node,
        geth,
        neve: _neve,
        client,
        ..
    } = neve_on_a_token_chain().await;
    let wallet = deploy_wallet(&geth).await;
    let head = support::head(&geth).await;
    let mut people: Vec<String> = (0..HOLDERS).map(holder).collect();
    people.extend([
        STRANGER.to_string(),
        neve_devnet::GETH_DEV_ADDRESS.to_string(),
    ]);
    let cast = Cast {
        wallet,
        funded: neve_devnet::GETH_DEV_ADDRESS.to_string(),
        people,
    };
    let _ = node;
    // neve holds the head before `latest` is compared (until then its
    // `eth_blockNumber` is 421).
    loop {
        let stored: Result<String, _> = client.call("eth_blockNumber", ()).await;
        if stored.is_ok_and(|n| neve_upstream::parse_quantity(&n).unwrap() >= head) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Whole balances moved away: every holder's slot deleted, the
    // branches they leave collapsing into nodes no proof of theirs
    // brought (found under their paths, fetched, proved), block after
    // block.
    let everyone: Vec<Value> = (4..HOLDERS)
        .map(|index| {
            json!({"from": holder(index), "to": cast.wallet,
                "input": token_call("transfer(address,uint256)", &[word(STRANGER), format!("{:064x}", 1000)])})
        })
        .collect();
    let (first, rest) = everyone.split_at(everyone.len() / 2);
    same(
        &client,
        &geth,
        "eth_simulateV1",
        json!([{"blockStateCalls": [{"calls": first}, {"calls": rest}]}, "latest"]),
    )
    .await;
    let mut dice = Dice(0x5eed_cafe_f00d);
    let (mut answered, mut refused) = (0, 0);
    for round in 0..240u64 {
        // `latest` (the dev chain seals on transactions only: it holds
        // still), the head by number, and heights since the token was made.
        let (at, base) = match round % 3 {
            0 => (json!("latest"), head),
            1 => (json!(quantity(head)), head),
            _ => {
                let height = head - dice.roll(5);
                (json!(quantity(height)), height)
            }
        };
        let simulation = random_simulation(&mut dice, &cast, base);
        let params = json!([simulation, at]);
        same(&client, &geth, "eth_simulateV1", params.clone()).await;
        let (_, answer) = call(&client, "eth_simulateV1", &params).await;
        if round % 8 == 0 {
            // Byte for byte, as a client comparing raw answers sees them.
            let body =
                json!({"jsonrpc": "2.0", "id": 7, "method": "eth_simulateV1", "params": params})
                    .to_string();
            let (_, ours) = client.post(body.clone().into()).await.unwrap();
            let (_, theirs) = geth.post(body.into()).await.unwrap();
            let text = |b: &[u8]| String::from_utf8_lossy(b).trim_end().to_string();
            assert_eq!(text(&ours), text(&theirs), "{params}");
        }
        if answer["result"].is_array() {
            answered += 1;
        } else {
            refused += 1;
        }
    }
    // Both kinds were compared: blocks, and refusals (validation's).
    assert!(
        answered > 150 && refused > 10,
        "{answered} answered, {refused} refused"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_simulation_bounds_hold_against_requests_built_to_break_them() {
    let TokenChain {
        node,
        geth,
        neve,
        client,
        head,
        ..
    } = neve_on_a_token_chain().await;
    let empty = || json!({"calls": []});
    let a_call = json!({"to": STRANGER});
    let loops = json!({PROBE: {"code": PROBES[4].1}});
    for (what, simulation) in [
        // Blocks: 257 asked, or a number 257 past the pinned block.
        ("blocks", json!({"blockStateCalls": vec![empty(); 257]})),
        (
            "a far number",
            json!({"blockStateCalls": [{"blockOverrides": {"number": quantity(head + 257)}}]}),
        ),
        // Every block as far as the limit: 256, each with a call.
        (
            "256 blocks",
            json!({"blockStateCalls": vec![json!({"calls": [a_call.clone()]}); 256]}),
        ),
        // Calls: 5,001 in a block, 10,001 in all.
        (
            "calls in a block",
            json!({"blockStateCalls": [{"calls": vec![a_call.clone(); 5001]}]}),
        ),
        (
            "calls",
            json!({"blockStateCalls": vec![json!({"calls": vec![a_call.clone(); 5000]}), json!({"calls": vec![a_call.clone(); 5000]}), json!({"calls": [a_call.clone()]})]}),
        ),
        // Gas: endless loops draw on one budget for the whole request;
        // the first spends it, the next are capped at what is left.
        (
            "gas",
            json!({"blockStateCalls": [
                {"stateOverrides": loops, "calls": [{"to": PROBE}, {"to": PROBE}]},
                {"calls": [{"to": PROBE}]},
            ]}),
        ),
        // Answer bytes: 5 MB returned (10 MB of hex), then a call capped.
        (
            "return data",
            json!({"blockStateCalls": [{
                "stateOverrides": {PROBE: {"code": "0x63004c4b406000f3"}},
                "calls": [{"to": PROBE}, {"to": PROBE}],
            }]}),
        ),
    ] {
        eprintln!("{what}");
        same(
            &client,
            &geth,
            "eth_simulateV1",
            json!([simulation, "latest"]),
        )
        .await;
    }
    // Malformed requests: -32602, nothing run.
    for bad in [
        json!([]),
        json!(["latest"]),
        json!([{"blockStateCalls": "no"}, "latest"]),
        json!([{"blockStateCalls": []}, "latest"]),
        json!([{"blockStateCalls": [{"calls": [{"gas": "12"}]}]}, "latest"]),
    ] {
        let (status, answer) = call(&client, "eth_simulateV1", &bad).await;
        assert_eq!(status, 200, "{bad}: {answer}");
        assert_eq!(answer["error"]["code"], -32602, "{bad}: {answer}");
    }

    // What neve does not run as geth does is the node's (421): code put
    // over a system contract (run by every block, unpriced, and a crash
    // of geth's when it reverts), a difficulty (a block before the
    // merge), a time past 64 bits, more changed keys than its bound.
    let many_slots: serde_json::Map<String, Value> = (0..20_001u64)
        .map(|i| (format!("0x{i:064x}"), json!(format!("0x{:064x}", 1))))
        .collect();
    for the_nodes in [
        json!({"blockStateCalls": [{"stateOverrides": {"0x0000F90827F1C53a10cb7A02335B175320002935": {"code": "0x00"}}}]}),
        json!({"blockStateCalls": [{"blockOverrides": {"difficulty": "0x1"}}]}),
        json!({"blockStateCalls": [{"blockOverrides": {"time": "0xfffffffffffffffa"}}, {}]}),
        json!({"blockStateCalls": [{"stateOverrides": {STRANGER: {"stateDiff": many_slots}}}]}),
    ] {
        let (status, answer) = call(&client, "eth_simulateV1", &json!([the_nodes, "latest"])).await;
        assert_eq!(status, 421, "{answer}");
    }

    // Charged by gas: a simulation spending the 50 M budget (25,000 units
    // of a 2,000 a second rate) leaves its client over budget, and is
    // counted in the calls' gas.
    let charged = support::Neve::start(
        node.http_url(),
        &[
            "--floor",
            "tip",
            "--client-rate",
            "2000",
            "--call-memo-bytes",
            "0",
        ],
        head,
    )
    .await;
    let charged_client = RpcClient::new(&charged.url).unwrap();
    let spend = json!([{"blockStateCalls": [{"stateOverrides": loops, "calls": [{"to": PROBE}]}]}, "latest"]);
    let mut status = 421;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        if over_budget(&charged_client).await {
            continue;
        }
        let before = metric(&charged, "neve_call_gas_total");
        (status, _) = call(&charged_client, "eth_simulateV1", &spend).await;
        if status == 200 {
            let spent = metric(&charged, "neve_call_gas_total") - before;
            assert!(spent >= 49_000_000, "counted {spent} gas");
            break;
        }
    }
    assert_eq!(status, 200);
    assert!(over_budget(&charged_client).await, "not charged");
    drop(neve);
}
