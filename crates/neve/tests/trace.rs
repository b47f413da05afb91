//! `debug_trace*` against the live node: on a chain of `neve load`
//! traffic (transfers, a token's calls) and of transactions through
//! `support/Tracee.sol` (calls nested with value and logs, failures
//! inside calls and of whole transactions, contracts made and destroyed,
//! slots cleared, precompiles), every block and transaction of the tail
//! traced through neve under every tracer and option equals geth's
//! answer, as do traced calls at blocks and transaction indices.

mod support;

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::calls::*;

/// Every tracer and option neve runs, as a trace's configuration.
fn configs() -> Vec<Value> {
    vec![
        json!({}),
        json!({"enableMemory": true, "enableReturnData": true}),
        json!({"disableStack": true, "disableStorage": true}),
        json!({"limit": 3000}),
        json!({"tracer": "callTracer"}),
        json!({"tracer": "callTracer", "tracerConfig": {"withLog": true}}),
        json!({"tracer": "callTracer", "tracerConfig": {"onlyTopCall": true}}),
        json!({"tracer": "prestateTracer"}),
        json!({"tracer": "prestateTracer", "tracerConfig": {"diffMode": true}}),
        json!({"tracer": "prestateTracer", "tracerConfig": {"disableCode": true, "disableStorage": true}}),
        json!({"tracer": "4byteTracer"}),
        json!({"tracer": "flatCallTracer"}),
        json!({"tracer": "noopTracer"}),
        json!({"tracer": "muxTracer", "tracerConfig": {"callTracer": {"withLog": true}, "4byteTracer": null, "prestateTracer": {"diffMode": true}}}),
        json!({"tracer": "callTracer", "timeout": "10s"}),
    ]
}

/// The trace test contract's creation code (`support/Tracee.sol`).
const TRACEE_CODE: &str = include_str!("support/Tracee.bin");

/// Calldata of `signature` with `words`.
fn calldata(signature: &str, words: &[String]) -> String {
    let selector = &alloy_primitives::keccak256(signature)[..4];
    format!(
        "0x{}{}",
        alloy_primitives::hex::encode(selector),
        words.concat()
    )
}

fn word(value: u64) -> String {
    format!("{value:064x}")
}

/// The dev account's next nonce. Asked of both `latest` and `pending`: a
/// dev geth asked for the next one while it seals a block can give one
/// already taken ("replacement transaction underpriced").
async fn next_nonce(geth: &RpcClient) -> u64 {
    let mut nonce = 0;
    for tag in ["latest", "pending"] {
        let count: String = geth
            .call(
                "eth_getTransactionCount",
                json!([neve_devnet::GETH_DEV_ADDRESS, tag]),
            )
            .await
            .unwrap();
        nonce = nonce.max(neve_upstream::parse_quantity(&count).unwrap());
    }
    nonce
}

/// `tx` from the dev account with `nonce` (and 5 M gas unless it names
/// its own).
fn from_dev(tx: &Value, nonce: u64) -> Value {
    let mut tx = tx.clone();
    tx["from"] = json!(neve_devnet::GETH_DEV_ADDRESS);
    tx["nonce"] = json!(quantity(nonce));
    tx.as_object_mut()
        .unwrap()
        .entry("gas")
        .or_insert(json!("0x4c4b40"));
    tx
}

/// The receipts of `hashes`, waited for.
async fn receipts_of(geth: &RpcClient, hashes: Vec<String>) -> Vec<Value> {
    let mut receipts = Vec::new();
    for hash in hashes {
        let receipt = loop {
            let receipt: Value = geth
                .call("eth_getTransactionReceipt", [&hash])
                .await
                .unwrap();
            if !receipt.is_null() {
                break receipt;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        receipts.push(receipt);
    }
    receipts
}

/// Sends `txs` from the dev account at once (a block may take several)
/// and waits for their receipts; returns them.
async fn send_all(geth: &RpcClient, txs: &[Value]) -> Vec<Value> {
    let nonce = next_nonce(geth).await;
    let mut hashes = Vec::new();
    for (tx, nonce) in txs.iter().zip(nonce..) {
        let hash: String = geth
            .call("eth_sendTransaction", [from_dev(tx, nonce)])
            .await
            .unwrap();
        hashes.push(hash);
    }
    receipts_of(geth, hashes).await
}

/// As [`send_all`], in one JSON-RPC batch: geth takes them in one go, so
/// a node sealing a block a second puts them in one block, or two.
async fn send_in_one_batch(geth: &RpcClient, txs: &[Value]) -> Vec<Value> {
    let nonce = next_nonce(geth).await;
    let calls: Vec<Value> = txs
        .iter()
        .zip(nonce..)
        .enumerate()
        .map(|(id, (tx, nonce))| {
            json!({"jsonrpc": "2.0", "id": id, "method": "eth_sendTransaction",
                "params": [from_dev(tx, nonce)]})
        })
        .collect();
    let (_, body) = geth
        .post(Value::Array(calls).to_string().into())
        .await
        .unwrap();
    let mut answers: Vec<Value> = serde_json::from_slice(&body).unwrap();
    answers.sort_by_key(|a| a["id"].as_u64());
    let hashes = answers
        .iter()
        .map(|a| a["result"].as_str().expect("sent").to_string())
        .collect();
    receipts_of(geth, hashes).await
}

/// Deploys `Tracee` and runs transactions of every kind through it, some
/// in one block; returns the heights of the blocks they are in, and those
/// whose transactions run out of gas inside a call (a struct log's step
/// geth prices in words neve does not have: the node's).
async fn tracee_blocks(geth: &RpcClient) -> (Vec<u64>, Vec<u64>) {
    let created = send_all(
        geth,
        &[json!({"data": format!("0x{}", TRACEE_CODE.trim())})],
    )
    .await;
    let tracee = created[0]["contractAddress"].as_str().unwrap().to_string();
    let to =
        |data: String, value: u64| json!({"to": tracee, "data": data, "value": quantity(value)});
    let salt = |n: u64| format!("{n:064x}");
    let rounds = [
        vec![
            to(calldata("fan(uint256)", &[word(4)]), 1000),
            to(calldata("fail(uint256)", &[word(0)]), 0),
            to(calldata("fail(uint256)", &[word(1)]), 0),
            to(calldata("make(bytes32)", &[salt(1)]), 64),
            to(calldata("tidy(uint256,uint256)", &[word(0), word(3)]), 0),
        ],
        vec![
            to(calldata("fail(uint256)", &[word(3)]), 0),
            to(
                calldata(
                    "peek(address)",
                    &[format!("{:0>64}", tracee.trim_start_matches("0x"))],
                ),
                0,
            ),
            json!({"to": tracee, "value": "0x5"}),
            to(calldata("fan(uint256)", &[word(2)]), 7),
            to(calldata("make(bytes32)", &[salt(2)]), 0),
        ],
        vec![to(calldata("fail(uint256)", &[word(2)]), 0)],
    ];
    let mut blocks = Vec::new();
    let mut out_of_gas = Vec::new();
    for (round, txs) in rounds.iter().enumerate() {
        for receipt in send_all(geth, txs).await {
            let number =
                neve_upstream::parse_quantity(receipt["blockNumber"].as_str().unwrap()).unwrap();
            if !blocks.contains(&number) {
                blocks.push(number);
            }
            if round == 2 && !out_of_gas.contains(&number) {
                out_of_gas.push(number);
            }
        }
    }
    (blocks, out_of_gas)
}

async fn block(client: &RpcClient, number: u64) -> Value {
    client
        .call("eth_getBlockByNumber", json!([quantity(number), false]))
        .await
        .unwrap()
}

/// The blocks 1..=`head` with transactions.
async fn busy_blocks(geth: &RpcClient, head: u64) -> Vec<u64> {
    let mut busy = Vec::new();
    for number in 1..=head {
        let txs = &block(geth, number).await["transactions"];
        if !txs.as_array().unwrap().is_empty() {
            busy.push(number);
        }
    }
    busy
}

#[tokio::test(flavor = "multi_thread")]
async fn traces_equal_geths_for_every_block_and_tracer() {
    let TokenChain {
        node: _node,
        geth,
        neve: _neve,
        client,
        head,
        ..
    } = neve_on_a_token_chain().await;
    let (tracee, out_of_gas) = tracee_blocks(&geth).await;
    if std::env::var("NEVE_TRACE_PAUSE").is_ok() {
        // For a look by hand: both ends, and the blocks through `Tracee`.
        eprintln!("PAUSE {} {} {tracee:?}", _node.http_url(), _neve.url);
        tokio::time::sleep(std::time::Duration::from_secs(900)).await;
    }
    let only = std::env::var("NEVE_TRACE_CONFIG").ok();
    let (mut traced, mut blocks) = (0, 0u64);
    // Every block of the tail, the ones through `Tracee` last.
    for number in (1..=head).chain(tracee) {
        let block = block(&geth, number).await;
        let txs = block["transactions"].as_array().unwrap().clone();
        if txs.is_empty() {
            continue;
        }
        for config in configs() {
            if only
                .as_ref()
                .is_some_and(|o| serde_json::from_str::<Value>(o).unwrap() != config)
            {
                continue;
            }
            if out_of_gas.contains(&number) && config.get("tracer").is_none() {
                // A step out of gas is priced in geth's words only: a
                // struct log that reaches one is the node's.
                let params = json!([quantity(number), config]);
                let (status, _) = call(&client, "debug_traceBlockByNumber", &params).await;
                if status == 421 {
                    continue;
                }
            }
            same(
                &client,
                &geth,
                "debug_traceBlockByNumber",
                json!([quantity(number), config]),
            )
            .await;
            same(
                &client,
                &geth,
                "debug_traceBlockByHash",
                json!([block["hash"], config]),
            )
            .await;
            if number > head || number % 7 == 0 {
                let params = json!([quantity(number), config]);
                same_bytes(&client, &geth, "debug_traceBlockByNumber", &params).await;
            }
            let step = if number > head { 1 } else { 17 };
            for tx in txs.iter().step_by(step) {
                same(
                    &client,
                    &geth,
                    "debug_traceTransaction",
                    json!([tx, config]),
                )
                .await;
            }
            traced += 1;
        }
        blocks += 1;
    }
    assert!(traced > 10, "{traced} blocks traced");
    // Every block replayed whole left its post-state, hashed to its
    // header's root; a block after one traced replayed over it, and asked
    // the node for no witness. (The last block's is computed after its
    // answer, on its own thread.)
    for _ in 0..100 {
        let computed = metric(&_neve, "neve_state_post_states_kept_total")
            + metric(&_neve, "neve_state_post_states_unkept_total");
        if only.is_some() || computed >= blocks {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let kept = metric(&_neve, "neve_state_post_states_kept_total");
    let witnesses = metric(&_neve, "neve_state_witnesses_fetched_total");
    assert_eq!(metric(&_neve, "neve_state_post_states_unlike_total"), 0);
    let unkept = metric(&_neve, "neve_state_post_states_unkept_total");
    if only.is_none() {
        // (One left unkept is a node a deletion folds into, not held.)
        assert_eq!(kept + unkept, blocks, "post-states computed");
        assert!(
            kept * 4 >= blocks * 3,
            "{kept} post-states kept of {blocks}"
        );
        assert!(
            witnesses < blocks / 2,
            "{witnesses} witnesses for {blocks} blocks"
        );
        // Once the tracers were asked of two blocks, a callTracer's replay
        // of a block made a prestateTracer's answer too (and the other way
        // round): those answers are among the ones compared above.
        let along = metric(&_neve, "neve_trace_answers_along_total");
        assert!(
            along >= blocks / 2,
            "{along} answers made along, {blocks} blocks"
        );
    }
}

/// A tree of mirrors traces without asking the node for more than each
/// block's witness once: a mirror of a mirror of neve replays each block
/// over the witness fetched down the tree (each level verifying it from
/// its own root), its first trace answered at once, and every trace equal
/// to geth's.
#[tokio::test(flavor = "multi_thread")]
async fn a_mirror_of_a_mirror_traces_from_witnesses_as_geth_does() {
    let TokenChain {
        node: _node,
        geth,
        neve,
        head,
        ..
    } = neve_on_a_token_chain().await;
    let (tracee, out_of_gas) = tracee_blocks(&geth).await;
    let tip = *tracee.last().unwrap();
    let middle = support::Neve::start_mirror(&neve.url, tip).await;
    let leaf = support::Neve::start_mirror(&middle.url, tip).await;
    let client = RpcClient::new(&leaf.url).unwrap();
    let configs = [
        json!({"tracer": "callTracer", "tracerConfig": {"withLog": true}}),
        json!({"tracer": "prestateTracer", "tracerConfig": {"diffMode": true}}),
        json!({"enableMemory": true}),
    ];
    let (mut blocks, mut at_once) = (0, 0);
    for number in (1..=head).step_by(5).chain(tracee) {
        let block = block(&geth, number).await;
        let txs = block["transactions"].as_array().unwrap().clone();
        if txs.is_empty() {
            continue;
        }
        blocks += 1;
        // The block's first trace anywhere in the tree: cold at every level.
        let first = json!([quantity(number), configs[0]]);
        let (status, _) = call(&client, "debug_traceBlockByNumber", &first).await;
        at_once += usize::from(status == 200);
        for (i, config) in configs.iter().enumerate() {
            if i == 2 && out_of_gas.contains(&number) {
                continue;
            }
            let params = json!([quantity(number), config]);
            same(&client, &geth, "debug_traceBlockByNumber", params).await;
            let params = json!([txs[txs.len() / 2], config]);
            same(&client, &geth, "debug_traceTransaction", params).await;
        }
    }
    assert!(blocks > 5, "{blocks} blocks traced");
    assert_eq!(
        at_once, blocks,
        "every block's first trace answered at once"
    );
    // The leaf replayed each block over its witness, fetched down the
    // tree (each level verifying it), or over the state its replay of the
    // block before kept (the Tracee's blocks follow one another), and what
    // that left as proofs.
    let kept = metric(&leaf, "neve_state_post_states_kept_total");
    let fetched = metric(&leaf, "neve_state_witnesses_fetched_total");
    let unkept = metric(&leaf, "neve_state_post_states_unkept_total");
    eprintln!(
        "the leaf: {fetched} witnesses, {kept} post-states kept, {unkept} not, {blocks} blocks"
    );
    assert!(kept >= 1, "the leaf kept {kept} post-states");
    // Every block replayed whole whose post-state was computed hashed to
    // its header's root.
    assert!(unkept * 4 <= kept, "{unkept} post-states unkept");
    assert_eq!(metric(&leaf, "neve_state_post_states_unlike_total"), 0);
    for (who, n) in [("neve", &neve), ("middle", &middle), ("leaf", &leaf)] {
        let witnesses = metric(n, "neve_state_witnesses_fetched_total");
        assert!(witnesses >= fetched, "{who}: {witnesses} witnesses");
        assert_eq!(metric(n, "neve_state_witnesses_refused_total"), 0, "{who}");
    }
}

/// What an upstream's witness cannot do: a header that does not hash to
/// the block's parent gets the witness refused (counted, not kept, not
/// served), a node no path reaches is dropped, an upstream
/// without the method is asked for proofs; each block's trace is geth's
/// all the same. A client asking for many blocks' witnesses at once gets
/// at most `MAX_WITNESS_FETCHES_IN_FLIGHT` of them asked of the node at a
/// time, the rest in turn. Eight asking one cold trace at once share one
/// replay.
#[tokio::test(flavor = "multi_thread")]
async fn witnesses_that_lie_or_are_missing_change_no_trace() {
    use neve_devnet::faults::{Fault, FaultProxy, StateTamper};
    let (node, head) = support::chain_with_logs().await;
    let geth = RpcClient::new(node.http_url()).unwrap();
    let proxy = FaultProxy::start(node.http_url(), vec![Fault::Pass]).await;
    let neve = support::Neve::start(proxy.url(), &["--floor", "0"], head).await;
    let client = RpcClient::new(&neve.url).unwrap();
    let busy = busy_blocks(&geth, head).await;
    // Blocks 0 and 1, the witnesses asked at once from 2, the flood's
    // cold blocks (4, every third, up to the last 6), the last 2.
    assert!(busy.len() >= 24, "{} blocks with transactions", busy.len());
    let flooded = busy.len() - 18..busy.len() - 6;
    let config = json!({"tracer": "callTracer", "tracerConfig": {"withLog": true}});
    let trace = |number: u64| json!([quantity(number), config]);

    // A header that does not hash to the parent: refused, nothing kept.
    proxy.control().tamper_state(StateTamper::WitnessHeader);
    // (First, a tracer neve does not run: the node's to answer, so it is
    // asked for no witness, nor anything else.)
    let calls = metric(&neve, "neve_state_upstream_calls_total");
    let javascript = json!({"tracer": "{result: function() { return 1 }, fault: function() {}}"});
    let (status, _) = call(
        &client,
        "debug_traceBlockByNumber",
        &json!([quantity(busy[0]), javascript]),
    )
    .await;
    assert_eq!(status, 421);
    assert_eq!(metric(&neve, "neve_state_upstream_calls_total"), calls);
    assert_eq!(proxy.control().state_tampered(), 0, "no witness asked");
    // The witness slow in coming, as a busy node's: the block's
    // transactions are parsed meanwhile.
    let slow = std::time::Duration::from_millis(300);
    proxy
        .control()
        .set_method_fault(Some(("debug_executionWitness", Fault::Slow(slow))));
    same(&client, &geth, "debug_traceBlockByNumber", trace(busy[0])).await;
    proxy.control().set_method_fault(None);
    assert_eq!(proxy.control().state_tampered(), 1);
    assert_eq!(metric(&neve, "neve_state_witnesses_refused_total"), 1);
    let (status, _) = call(
        &client,
        "debug_executionWitness",
        &json!([quantity(busy[0])]),
    )
    .await;
    assert_eq!(status, 421, "a refused witness is not served");
    // Its transactions were parsed while the node made the witness.
    assert!(metric(&neve, "neve_trace_blocks_prepared_total") >= 1);

    // A node no path reaches: dropped; what is served is geth's. (A
    // block whose parent no trace replayed: the child of one traced
    // replays over the state kept from it, and asks no witness.)
    let stray = *busy.last().unwrap();
    proxy.control().tamper_state(StateTamper::WitnessStray);
    same(&client, &geth, "debug_traceBlockByNumber", trace(stray)).await;
    assert_eq!(proxy.control().state_tampered(), 2);
    assert_eq!(metric(&neve, "neve_state_witness_entries_dropped_total"), 1);
    same(
        &client,
        &geth,
        "debug_executionWitness",
        json!([quantity(stray)]),
    )
    .await;

    // Many blocks' witnesses asked at once: at most the bound reach the node.
    // As many as the fetcher takes in flight at once, and some more.
    let many = (flooded.start - 2).min(neve_ingest::state_fetch::MAX_FETCHES_IN_FLIGHT - 8);
    let asked: Vec<Value> = busy[2..2 + many]
        .iter()
        .enumerate()
        .map(|(i, n)| {
            json!({"jsonrpc": "2.0", "id": i, "method": "debug_executionWitness", "params": [quantity(*n)]})
        })
        .collect();
    let (calls, shed) = (
        metric(&neve, "neve_state_upstream_calls_total"),
        metric(&neve, "neve_state_fetch_shed_total"),
    );
    // Each answer slow, so the ones asked would all be in flight at once.
    let slow = std::time::Duration::from_millis(300);
    proxy.control().set_override(Some(Fault::Slow(slow)));
    proxy.control().watch_method(Some("debug_executionWitness"));
    client
        .post(serde_json::to_vec(&asked).unwrap().into())
        .await
        .unwrap();
    let most = proxy.control().most_at_once();
    assert!(
        most > 0 && most as usize <= neve_ingest::state_fetch::MAX_WITNESS_FETCHES_IN_FLIGHT,
        "{most} witnesses asked of the node at once"
    );
    // The rest wait their turn: in a few slow answers' time, all fetched.
    let turns = asked.len() / neve_ingest::state_fetch::MAX_WITNESS_FETCHES_IN_FLIGHT + 3;
    tokio::time::sleep(slow * turns as u32).await;
    proxy.control().set_override(None);
    proxy.control().watch_method(None);
    let made = metric(&neve, "neve_state_upstream_calls_total") - calls;
    assert_eq!(made, asked.len() as u64, "each asked once, none shed");
    assert_eq!(metric(&neve, "neve_state_fetch_shed_total"), shed);

    // Eight indexers asking one cold trace at once: one replay, its
    // answer shared.
    // (Answers made alongside a replay for other tracers are stored too.)
    let replays = |neve: &support::Neve| {
        metric(neve, "neve_trace_memo_stored_total")
            - metric(neve, "neve_trace_answers_along_total")
    };
    let stored = replays(&neve);
    let (shared, hits) = (
        metric(&neve, "neve_trace_flights_shared_total"),
        metric(&neve, "neve_trace_memo_hits_total"),
    );
    let params = json!([quantity(busy[2]), {"tracer": "prestateTracer"}]);
    eight_at_once(&client, &geth, &params).await;
    assert_eq!(replays(&neve) - stored, 1, "one replay for the eight");
    // The seven others took its answer in flight, or from the memo after.
    let took = metric(&neve, "neve_trace_flights_shared_total") - shared
        + metric(&neve, "neve_trace_memo_hits_total")
        - hits;
    assert!(
        took >= 7,
        "{took} of the seven took the one replay's answer"
    );
    assert_eq!(metric(&neve, "neve_trace_flights_waited_out_total"), 0);

    // A flood of cold block traces waiting on slow witnesses, a
    // configuration each (so none shares another's run): their blocks are
    // parsed meanwhile, only on call threads no run waits for, and other
    // calls are admitted and answered, each at once, while the traces
    // still wait.
    let cold: Vec<u64> = busy[flooded].iter().step_by(3).copied().collect();
    assert_eq!(cold.len(), 4);
    let (refused, prepared) = (
        metric(&neve, "neve_calls_refused_total"),
        metric(&neve, "neve_trace_blocks_prepared_total"),
    );
    let slow = std::time::Duration::from_secs(3);
    proxy
        .control()
        .set_method_fault(Some(("debug_executionWitness", Fault::Slow(slow))));
    let asks: Vec<Value> = cold
        .iter()
        .flat_map(|number| {
            (10..22).map(move |seconds| {
                let config = json!({"tracer": "callTracer", "timeout": format!("{seconds}s")});
                json!([quantity(*number), config])
            })
        })
        .collect();
    let flood: Vec<_> = asks
        .iter()
        .map(|params| {
            let (client, params) = (client.clone(), params.clone());
            tokio::spawn(async move { call(&client, "debug_traceBlockByNumber", &params).await })
        })
        .collect();
    // The flood in its witness round.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    // Each its own call (none a memo's answer), each run on a call thread.
    let dead = "0x000000000000000000000000000000000000dead";
    let other_calls: Vec<Value> = (0..8)
        .map(|i| json!([{"to": dead, "data": format!("0x{i:02x}")}, "latest"]))
        .collect();
    let mut expected = Vec::new();
    for params in &other_calls {
        expected.push(call(&geth, "eth_call", params).await.1);
    }
    let began = std::time::Instant::now();
    for (params, expected) in other_calls.iter().zip(&expected) {
        let (status, got) = call(&client, "eth_call", params).await;
        assert_eq!(
            (status, &got["result"]),
            (200, &expected["result"]),
            "{got}"
        );
    }
    // None waited for a witness (3 s in coming), nor behind the parses.
    let took = began.elapsed();
    assert!(
        took < std::time::Duration::from_secs(1),
        "the calls took {took:?}"
    );
    assert!(
        flood.iter().all(|trace| !trace.is_finished()),
        "the calls were answered while the traces waited for their witnesses"
    );
    for (params, trace) in asks.iter().zip(flood) {
        let (status, got) = trace.await.unwrap();
        assert_eq!(status, 200, "{params}: {got}");
        let (_, expected) = call(&geth, "debug_traceBlockByNumber", params).await;
        assert_eq!(got["result"], expected["result"]);
    }
    proxy.control().set_method_fault(None);
    assert_eq!(metric(&neve, "neve_calls_refused_total"), refused);
    assert!(metric(&neve, "neve_trace_blocks_prepared_total") > prepared);

    // An upstream without the method: proofs, and it is not asked again.
    proxy
        .control()
        .set_lacking_method(Some("debug_executionWitness"));
    let last = busy[busy.len() - 2..].to_vec();
    // Its proofs wait their turn: at most the request's share of the
    // fetcher's slots asked of the node at once (`MAX_FETCHES_PER_REQUEST`,
    // 16).
    proxy.control().watch_method(Some("eth_getProof"));
    // Eight at once again, now over rounds of proofs: the seven wait out
    // the one replay's rounds and take its answer.
    let (shared, stored) = (
        metric(&neve, "neve_trace_flights_shared_total"),
        replays(&neve),
    );
    eight_at_once(&client, &geth, &trace(last[0])).await;
    assert_eq!(replays(&neve) - stored, 1, "one replay for the eight");
    let took = metric(&neve, "neve_trace_flights_shared_total") - shared;
    assert!(took >= 1, "{took} took the answer in flight");
    assert_eq!(metric(&neve, "neve_trace_flights_waited_out_total"), 0);
    let most = proxy.control().most_at_once();
    proxy.control().watch_method(None);
    assert!(
        (1..=16).contains(&most),
        "{most} proofs asked of the node at once"
    );
    let lacking = proxy.control().faults_served();
    assert!(lacking >= 1, "neve asked for a witness and was refused");
    let four_bytes = json!([quantity(last[1]), {"tracer": "4byteTracer"}]);
    same(&client, &geth, "debug_traceBlockByNumber", four_bytes).await;
    assert_eq!(proxy.control().faults_served(), lacking, "not asked again");
}

/// The block trace `params` asked of neve eight times at once: each
/// answer equals geth's.
async fn eight_at_once(client: &RpcClient, geth: &RpcClient, params: &Value) {
    let asks = (0..8).map(|_| {
        let (client, params) = (client.clone(), params.clone());
        tokio::spawn(async move { call(&client, "debug_traceBlockByNumber", &params).await })
    });
    let (_, expected) = call(geth, "debug_traceBlockByNumber", params).await;
    for answer in futures_util::future::join_all(asks).await {
        let (status, got) = answer.unwrap();
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["result"], expected["result"]);
    }
}

/// A real indexer: paradigm's cryo (PyPI, `tests/clients/cryo-check.py`)
/// extracts every trace dataset it has (calls, balance, storage, nonce and
/// code diffs, opcodes) over blocks of the token's traffic and of
/// `Tracee`'s, through neve and straight from geth: the same rows.
#[tokio::test(flavor = "multi_thread")]
async fn cryo_extracts_the_same_rows_through_neve_as_from_geth() {
    let TokenChain {
        node,
        geth,
        neve,
        client,
        head,
        ..
    } = neve_on_a_token_chain().await;
    let (tracee, out_of_gas) = tracee_blocks(&geth).await;
    // A struct log that reaches a step out of gas is the node's (421), and
    // cryo gives up on a 421: the opcodes stop short of those blocks.
    let last = *tracee
        .iter()
        .filter(|n| !out_of_gas.contains(n))
        .max()
        .unwrap();
    let tip = *tracee.iter().max().unwrap();
    neve.wait_for_height(tip, std::time::Duration::from_secs(60))
        .await;
    let ranges = [
        (
            head - 6,
            head,
            "geth_calls geth_balance_diffs geth_storage_diffs geth_nonce_diffs geth_code_diffs",
        ),
        (
            tracee[0],
            tip,
            "geth_calls geth_balance_diffs geth_storage_diffs geth_nonce_diffs geth_code_diffs",
        ),
        (tracee[0], last, "geth_opcodes"),
    ];
    // Each block's state brought in once, as an indexer's first pass would.
    for number in (head - 6..=head).chain(tracee[0]..=tip) {
        let params = json!([quantity(number), {"tracer": "callTracer"}]);
        same(&client, &geth, "debug_traceBlockByNumber", params).await;
    }
    let python = neve_devnet::workspace_root().join("tests/clients/.venv/bin/python");
    let script = neve_devnet::workspace_root().join("tests/clients/cryo-check.py");
    for (first, last, datasets) in ranges {
        let mut args = vec![
            script.display().to_string(),
            neve.url.clone(),
            node.http_url().to_string(),
            first.to_string(),
            last.to_string(),
        ];
        args.extend(datasets.split(' ').map(str::to_string));
        let python = python.clone();
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(python).args(&args).output()
        })
        .await
        .unwrap()
        .expect("python runs (scripts/install-deps.sh makes tests/clients/.venv with cryo)");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "cryo over {first}..={last}:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let rows: Value = serde_json::from_str(stdout.trim()).unwrap();
        eprintln!("cryo {first}..={last}: {rows}");
        for dataset in datasets.split(' ') {
            assert!(rows[dataset].as_u64().unwrap() > 0, "{dataset}: {rows}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn traced_calls_equal_geths_at_blocks_and_transaction_indices() {
    let TokenChain {
        node: _node,
        geth,
        neve,
        client,
        head,
        token,
        holders,
        ..
    } = neve_on_a_token_chain().await;
    let funded = neve_devnet::GETH_DEV_ADDRESS;
    let calls = [
        json!({"from": holders[0], "to": token, "data": transfer(&holders[1], 1)}),
        json!({"from": holders[0], "to": token, "data": transfer(&holders[1], u64::MAX)}),
        json!({"from": funded, "to": STRANGER, "value": "0x10"}),
        json!({"from": funded, "data": format!("0x600a600c600039600a6000f3{}", "602a60005260206000f3")}),
        json!({"to": PROBE}),
    ];
    let mut compared = 0;
    for number in (1..=head).rev().take(6) {
        let block = block(&geth, number).await;
        let txs = block["transactions"].as_array().unwrap().len();
        for config in configs() {
            for (i, call) in calls.iter().enumerate() {
                let mut config = config.clone();
                let object = config.as_object_mut().unwrap();
                match i % 3 {
                    0 if txs > 0 => {
                        object.insert(
                            "txIndex".into(),
                            json!(quantity((number % txs as u64) as u64)),
                        );
                    }
                    1 => {
                        let (name, code) = PROBES[(number as usize + i) % PROBES.len()];
                        object.insert("stateOverrides".into(), json!({PROBE: {"code": code}}));
                        if object.get("tracer").is_none()
                            && object.get("limit").is_none()
                            && call["to"] == PROBE
                            && name == "endless loop"
                        {
                            // A struct log past neve's cap: the node's.
                            let params = json!([call, quantity(number), config]);
                            let (status, _) =
                                support::calls::call(&client, "debug_traceCall", &params).await;
                            assert_eq!(status, 421, "{params}");
                            continue;
                        }
                    }
                    _ => {
                        object.insert(
                            "blockOverrides".into(),
                            json!({"number": quantity(number + 1)}),
                        );
                        object.insert("stateOverrides".into(), json!({PROBE: {"code": ENV}}));
                    }
                }
                same(
                    &client,
                    &geth,
                    "debug_traceCall",
                    json!([call, quantity(number), config]),
                )
                .await;
                compared += 1;
            }
        }
    }
    assert!(compared > 100, "{compared}");

    // Indices geth has no transaction at: its refusals, word for word
    // (past the block's transactions; past Go's `int`, printed negative;
    // the genesis block); and index 0 of a block without transactions,
    // which runs over the parent's state.
    let with_transactions = busy_blocks(&geth, head).await;
    let count = async |number: u64| {
        let block = block(&geth, number).await;
        block["transactions"].as_array().unwrap().len() as u64
    };
    // The oldest block with transactions: none of its state is held, and
    // none is asked of the node for an index it has no transaction at.
    let busy = with_transactions[0];
    let config = |index: &str| json!({"tracer": "callTracer", "txIndex": index});
    let asked = (
        metric(&neve, "neve_state_upstream_calls_total"),
        metric(&neve, "neve_state_witnesses_fetched_total"),
    );
    let hash = block(&geth, busy).await["hash"].clone();
    let past = [
        (json!(quantity(busy)), quantity(count(busy).await)),
        (json!(quantity(busy)), "0xffffffffffffffff".into()),
        (json!({"blockHash": hash}), quantity(count(busy).await + 1)),
        (json!("latest"), quantity(count(head).await + 1)),
    ];
    for (at, index) in past {
        let params = json!([calls[2], at, config(&index)]);
        let (status, got) = support::calls::call(&client, "debug_traceCall", &params).await;
        assert_eq!(status, 200, "{params}: {got}");
        let (_, expected) = support::calls::call(&geth, "debug_traceCall", &params).await;
        assert_eq!(got["error"], expected["error"], "{params}");
        let message = got["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("out of range"), "{got}");
    }
    let now = (
        metric(&neve, "neve_state_upstream_calls_total"),
        metric(&neve, "neve_state_witnesses_fetched_total"),
    );
    assert_eq!(now, asked, "nothing asked of the node");
    // A call that does not parse is refused for that first, as geth does.
    // (Its words are serde's, not Go's: the code is geth's.) So is a
    // genesis trace of a configuration that does not parse.
    let bad = [
        (
            "debug_traceCall",
            json!([{"gas": "0xZZ"}, quantity(busy), config("0x99")]),
        ),
        ("debug_traceBlockByNumber", json!(["0x0", {"tracer": 5}])),
    ];
    for (method, params) in bad {
        let (status, got) = support::calls::call(&client, method, &params).await;
        let (_, expected) = support::calls::call(&geth, method, &params).await;
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["error"]["code"], expected["error"]["code"], "{got}");
        assert_eq!(got["error"]["code"], -32602, "{got}");
    }
    let genesis = json!([calls[2], "0x0", config("0x0")]);
    same(&client, &geth, "debug_traceCall", genesis).await;
    let empty = (1..=head)
        .find(|n| !with_transactions.contains(n))
        .expect("a block without transactions");
    for index in ["0x0", "0x1"] {
        let params = json!([calls[2], quantity(empty), config(index)]);
        same(&client, &geth, "debug_traceCall", params).await;
    }
}

/// A loop of 200,000 rounds that ends well (some 4.6 M gas, a million
/// steps): its struct log is past neve's answer cap.
const LOOPS: &str = "0x62030d405b600190038060045700";

/// Creation code returning [`LOOPS`] as the runtime.
const LOOPS_INIT: &str = "0x600e80600b6000396000f362030d405b600190038060045700";

#[tokio::test(flavor = "multi_thread")]
async fn the_trace_bounds_hold_against_requests_built_to_break_them() {
    let TokenChain {
        node: _node,
        geth,
        neve,
        client,
        head,
        ..
    } = neve_on_a_token_chain().await;
    let status = |params: Value, method: &'static str| {
        let client = client.clone();
        async move {
            let started = std::time::Instant::now();
            let (status, answer) = call(&client, method, &params).await;
            (status, answer, started.elapsed())
        }
    };
    // A block of loops: its struct log (with memory) is gigabytes; neve
    // stops at its cap and leaves it to the node, in well under geth's
    // timeout, holding no more than the cap.
    let created = send_all(&geth, &[json!({"data": LOOPS_INIT})]).await;
    let loops = created[0]["contractAddress"].as_str().unwrap().to_string();
    let receipts = send_all(&geth, &vec![json!({"to": loops}); 3]).await;
    let number = receipts[2]["blockNumber"].clone();
    neve.wait_for_height(
        neve_upstream::parse_quantity(number.as_str().unwrap()).unwrap(),
        std::time::Duration::from_secs(30),
    )
    .await;
    let before = neve.rss_anon_bytes();
    for config in [
        json!({}),
        json!({"enableMemory": true, "enableReturnData": true}),
    ] {
        let (code, _, took) = status(json!([number, config]), "debug_traceBlockByNumber").await;
        assert_eq!(code, 421, "a struct log past the cap, {config}");
        assert!(took < std::time::Duration::from_secs(10), "{took:?}");
        let tx = &receipts[2]["transactionHash"];
        let (code, _, _) = status(json!([tx, config]), "debug_traceTransaction").await;
        assert_eq!(code, 421, "{config}");
    }
    let grown = neve.rss_anon_bytes().saturating_sub(before);
    assert!(grown < 256 << 20, "the traces held {grown} bytes");
    // The same block under a native tracer is small: answered, as geth.
    same(
        &client,
        &geth,
        "debug_traceBlockByNumber",
        json!([number, {"tracer": "callTracer"}]),
    )
    .await;
    // With geth's `limit`, the struct log stops early: answered, as geth.
    same(
        &client,
        &geth,
        "debug_traceTransaction",
        json!([receipts[0]["transactionHash"], {"limit": 10_000}]),
    )
    .await;
    // A traced call of the same loop, under a state override.
    let (code, _, _) = status(
        json!([{"to": PROBE}, quantity(head), {"stateOverrides": {PROBE: {"code": LOOPS}}}]),
        "debug_traceCall",
    )
    .await;
    assert_eq!(code, 421);
    // A timeout shorter than the run: stopped, the node's.
    let (code, _, _) = status(
        json!([number, {"timeout": "1ns"}]),
        "debug_traceBlockByNumber",
    )
    .await;
    assert_eq!(code, 421, "past its own timeout");
    // Tracers neve does not run, and options it does not follow: the node's.
    for config in [
        json!({"tracer": "{result: function() { return 1 }, fault: function() {}}"}),
        json!({"tracer": "bigramTracer"}),
        json!({"tracer": ""}),
        json!({"tracer": "prestateTracer", "tracerConfig": {"includeEmpty": true}}),
        json!({"overrides": {"pragueTime": 0}}),
        // Keys Go reads without regard to case, or the last of two.
        json!({"Tracer": "callTracer"}),
        json!({"tracer": "callTracer", "tracerconfig": {"onlyTopCall": true}}),
    ] {
        let (code, _, _) = status(json!([number, config]), "debug_traceBlockByNumber").await;
        assert_eq!(code, 421, "{config}");
    }
    // A transaction index past the block's: geth's refusal; a block past
    // the head, a hash neve does not hold: the node's; genesis: geth's
    // refusal.
    let past = json!([{"to": PROBE}, number, {"txIndex": "0xffffffff"}]);
    same(&client, &geth, "debug_traceCall", past).await;
    let (code, _, _) = status(json!([quantity(head + 1000)]), "debug_traceBlockByNumber").await;
    assert_eq!(code, 421);
    let (code, _, _) = status(
        json!([format!("0x{}", "ab".repeat(32))]),
        "debug_traceTransaction",
    )
    .await;
    assert_eq!(code, 421);
    same(&client, &geth, "debug_traceBlockByNumber", json!(["0x0"])).await;
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"debug_traceBlockByNumber","params":[{number},{{"tracer":"callTracer","tracer":"4byteTracer"}}]}}"#
    );
    let (code, _) = client.post(body.into()).await.unwrap();
    assert_eq!(code.as_u16(), 421, "a key given twice");
    // A negative limit: geth logs no step at all.
    same(
        &client,
        &geth,
        "debug_traceTransaction",
        json!([receipts[0]["transactionHash"], {"limit": -1}]),
    )
    .await;
    // Malformed parameters: geth's -32602, nothing run.
    for (method, params) in [
        (
            "debug_traceCall",
            json!([{"to": PROBE}, number, {"txIndex": 1}]),
        ),
        ("debug_traceBlockByNumber", json!(["3"])),
        (
            "debug_traceBlockByNumber",
            json!([number, {"enableMemory": "yes"}]),
        ),
        ("debug_traceTransaction", json!(["0x12"])),
        ("debug_traceCall", json!([{"to": PROBE}])),
    ] {
        let (code, answer, _) = status(params.clone(), method).await;
        assert_eq!(code, 200, "{method} {params}");
        assert_eq!(
            answer["error"]["code"], -32602,
            "{method} {params}: {answer}"
        );
    }
    // A trace asked again is the memo's: no replay.
    let hits = metric(&neve, "neve_trace_memo_hits_total");
    let params = json!([number, {"tracer": "prestateTracer"}]);
    same(&client, &geth, "debug_traceBlockByNumber", params.clone()).await;
    same(&client, &geth, "debug_traceBlockByNumber", params).await;
    assert!(metric(&neve, "neve_trace_memo_hits_total") > hits);
    assert_eq!(metric(&neve, "neve_trace_replays_diverged_total"), 0);
    // Tracers alongside, against a client naming configurations of its
    // own: an indexer traces blocks with prestateTracer; a flood of
    // configurations asked of two blocks each, more than the table holds,
    // does not push it out; a block nobody traced yet, asked
    // with callTracer, makes the indexer's answer in the same replay, and
    // that answer is geth's.
    let busy = busy_blocks(&geth, head).await;
    assert!(busy.len() >= 6, "{} blocks with transactions", busy.len());
    let prestate = json!({"tracer": "prestateTracer"});
    for n in &busy[..3] {
        let (code, _, _) =
            status(json!([quantity(*n), prestate]), "debug_traceBlockByNumber").await;
        assert_eq!(code, 200);
    }
    for i in 0..80 {
        // Tracers neve does not run: 421 at once, each noted all the same,
        // as asked of two blocks.
        let config = json!({"tracer": format!("flood{i}")});
        for n in &busy[..2] {
            let params = json!([quantity(*n), config]);
            let (code, _, _) = status(params, "debug_traceBlockByNumber").await;
            assert_eq!(code, 421);
        }
    }
    let along = metric(&neve, "neve_trace_answers_along_total");
    let hits = metric(&neve, "neve_trace_memo_hits_total");
    let fresh = *busy.last().unwrap();
    let (code, _, _) = status(
        json!([quantity(fresh), {"tracer": "callTracer"}]),
        "debug_traceBlockByNumber",
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(metric(&neve, "neve_trace_answers_along_total"), along + 1);
    same(
        &client,
        &geth,
        "debug_traceBlockByNumber",
        json!([quantity(fresh), prestate]),
    )
    .await;
    assert_eq!(
        metric(&neve, "neve_trace_memo_hits_total"),
        hits + 1,
        "made alongside"
    );
}

/// Creation code of a contract whose code is 24,576 zero bytes (the most
/// a contract holds): each transaction that touches it carries its code,
/// 49 KB of hex, in a `prestateTracer` trace.
const BIG_INIT: &str = "0x6160006000f3";

/// Creation code of a contract that reads the code size of each of
/// `contracts` (`EXTCODESIZE`, so each one's code is in the transaction's
/// pre-state) and stops.
fn toucher_init(contracts: &[String]) -> String {
    let mut runtime = String::new();
    for contract in contracts {
        runtime += &format!("73{}3b50", contract.trim_start_matches("0x"));
    }
    runtime += "00";
    let length = runtime.len() / 2;
    // PUSH2 length, DUP1, PUSH2 13, PUSH1 0, CODECOPY, PUSH1 0, RETURN.
    format!("0x61{length:04x}8061000d6000396000f3{runtime}")
}

/// A companion never costs the asked trace its answer: a block whose
/// `callTracer` trace is small and whose `prestateTracer` trace (each
/// transaction's pre-state carrying 32 contracts' code) is past
/// `MAX_TRACE_BYTES`, asked with `callTracer` while `prestateTracer` is
/// offered alongside, is answered as geth answers it, the companion
/// dropped at the cap (nothing answered alongside), neve holding no more
/// than the cap's worth; the block's `prestateTracer` trace asked itself
/// is the node's.
#[tokio::test(flavor = "multi_thread")]
async fn a_companion_past_the_answer_cap_is_dropped_not_the_asked_trace() {
    use neve_execution::trace::MAX_TRACE_BYTES;
    // A block a second, so that the touching transactions share one.
    let (node, head) = support::chain_with_logs_on(neve_devnet::GethDevOptions {
        period: 1,
        ..Default::default()
    })
    .await;
    let geth = RpcClient::new(node.http_url()).unwrap();
    // A memo that would keep even the whole companion (a quarter of a
    // generation, 256 MiB): were it not dropped, it would be kept.
    let neve = support::Neve::start(
        node.http_url(),
        &["--floor", "0", "--trace-memo-bytes", "2147483648"],
        head,
    )
    .await;
    let client = RpcClient::new(&neve.url).unwrap();
    let deploy = json!({"data": BIG_INIT, "gas": quantity(5_100_000)});
    let big: Vec<String> = send_all(&geth, &vec![deploy; 32])
        .await
        .iter()
        .map(|r| r["contractAddress"].as_str().unwrap().to_string())
        .collect();
    let created = send_all(&geth, &[json!({"data": toucher_init(&big)})]).await;
    let toucher = created[0]["contractAddress"].as_str().unwrap().to_string();
    let touches = json!({"to": toucher, "gas": quantity(200_000)});
    // 26 touches in one block: some 41 MB of pre-states, past the cap,
    // yet few enough that without the cap the companion would end before
    // the time cut-off. Sent in one go they share a block; should a block
    // end among them, they are sent again.
    let number = loop {
        let receipts = send_in_one_batch(&geth, &vec![touches.clone(); 26]).await;
        let mut per_block = std::collections::BTreeMap::<u64, usize>::new();
        for receipt in &receipts {
            let number = neve_upstream::parse_quantity(receipt["blockNumber"].as_str().unwrap());
            *per_block.entry(number.unwrap()).or_default() += 1;
        }
        let (&number, &txs) = per_block.iter().max_by_key(|(_, txs)| **txs).unwrap();
        // Each transaction's pre-state holds 32 codes of 49 KB.
        if txs * 32 * 49_000 > 11 * MAX_TRACE_BYTES / 10 {
            break number;
        }
    };
    neve.wait_for_height(number, std::time::Duration::from_secs(30))
        .await;
    // An indexer's prestateTracer, asked of two blocks: offered alongside.
    let prestate = json!({"tracer": "prestateTracer"});
    let busy = busy_blocks(&geth, head).await;
    for n in &busy[..2] {
        let (code, _) = call(
            &client,
            "debug_traceBlockByNumber",
            &json!([quantity(*n), prestate]),
        )
        .await;
        assert_eq!(code, 200);
    }
    // Beside a small block's callTracer trace it runs, and is kept.
    let along = metric(&neve, "neve_trace_answers_along_total");
    same(
        &client,
        &geth,
        "debug_traceBlockByNumber",
        json!([quantity(busy[2]), {"tracer": "callTracer"}]),
    )
    .await;
    assert_eq!(metric(&neve, "neve_trace_answers_along_total"), along + 1);
    let along = along + 1;
    // The block's state fetched by a replay no companion joins.
    same(
        &client,
        &geth,
        "debug_traceBlockByNumber",
        json!([quantity(number), {"tracer": "noopTracer"}]),
    )
    .await;
    let before = neve.rss_anon_bytes();
    let started = std::time::Instant::now();
    same(
        &client,
        &geth,
        "debug_traceBlockByNumber",
        json!([quantity(number), {"tracer": "callTracer"}]),
    )
    .await;
    // A companion still running at half the trace's time is dropped for
    // that; ended before, it was dropped at the cap (on a machine so
    // loaded that the replay took longer, the answer and the memory held
    // are what this shows).
    if started.elapsed() < neve_execution::trace::MAX_TRACE_TIME / 2 {
        assert_eq!(
            metric(&neve, "neve_trace_answers_along_total"),
            along,
            "the companion dropped at the cap"
        );
    }
    let grown = neve.rss_anon_bytes().saturating_sub(before);
    assert!(grown < 4 * MAX_TRACE_BYTES as u64, "held {grown} bytes");
    let (code, _) = call(
        &client,
        "debug_traceBlockByNumber",
        &json!([quantity(number), prestate]),
    )
    .await;
    assert_eq!(code, 421, "past the cap on its own: the node's");
    assert_eq!(metric(&neve, "neve_trace_replays_diverged_total"), 0);
}

/// An indexer following a busy chain asks for each block's trace as soon
/// as its parent's came, while neve still proves the parent's post-state
/// (its root over some thousand changed accounts). The child's first run
/// reads that post-state as the parent's replay left it, over the
/// grandparent's verified state, only to learn what to fetch; the fetch
/// goes beside the proving, and the answer is a run over verified state
/// alone. Every answer equals geth's, and every post-state is kept.
/// (geth's dev chain has no withdrawals: their recipients, read with the
/// rest, are not exercised here.)
/// Asserts `got`, neve's answer to block `number`'s trace under
/// `config`, equals geth's, naming where it differs.
async fn block_trace_is_geths(geth: &RpcClient, number: u64, config: &Value, got: &Value) {
    let params = json!([quantity(number), config]);
    let (_, expected) = call(geth, "debug_traceBlockByNumber", &params).await;
    assert!(
        *got == expected,
        "block {number} differs at: {}",
        neve_devnet::conformance::differences(&expected, got).join("\n  ")
    );
}

/// A geth dev chain sealing a block a second, each of some thousand
/// transfers among a thousand accounts, for `seconds` of load; a neve
/// following it to its head; and the blocks of at least 200 transfers.
async fn transfers_chain(
    seconds: u64,
) -> (neve_devnet::GethDev, RpcClient, support::Neve, Vec<u64>) {
    let (node, geth, neve, busy, _) = transfers_chain_behind(seconds, false).await;
    (node, geth, neve, busy)
}

/// As [`transfers_chain`], with neve following the node through a fault
/// proxy when `proxied`.
async fn transfers_chain_behind(
    seconds: u64,
    proxied: bool,
) -> (
    neve_devnet::GethDev,
    RpcClient,
    support::Neve,
    Vec<u64>,
    Option<neve_devnet::faults::FaultProxy>,
) {
    let node = neve_devnet::GethDev::start(neve_devnet::GethDevOptions {
        period: 1,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let mut load =
        neve_load::LoadConfig::new(node.http_url(), std::time::Duration::from_secs(seconds));
    load.accounts = 1_000;
    load.tps = Some(1_000);
    let head = neve_load::run(load, |_| {}).await.expect("load").last_block;
    let geth = RpcClient::new(node.http_url()).unwrap();
    let proxy = match proxied {
        true => {
            use neve_devnet::faults::{Fault, FaultProxy};
            Some(FaultProxy::start(node.http_url(), vec![Fault::Pass]).await)
        }
        false => None,
    };
    let upstream = proxy.as_ref().map_or(node.http_url(), |p| p.url());
    let neve = support::Neve::start(upstream, &["--floor", "0"], head).await;
    let mut busy = Vec::new();
    for number in 1..=head {
        let txs = block(&geth, number).await["transactions"]
            .as_array()
            .unwrap()
            .len();
        if txs >= 200 {
            busy.push(number);
        }
    }
    (node, geth, neve, busy, proxy)
}

/// The longest run of consecutive heights in `busy`.
fn longest_run(busy: &[u64]) -> Vec<u64> {
    let mut run: Vec<u64> = Vec::new();
    let mut longest: Vec<u64> = Vec::new();
    for number in busy {
        if run.last().is_some_and(|last| last + 1 != *number) {
            run.clear();
        }
        run.push(*number);
        if run.len() > longest.len() {
            longest = run.clone();
        }
    }
    longest
}

/// A transaction's trace nobody asked before, over a parent of which
/// nothing is held: a block's first transaction reads a few keys, fetched
/// as proofs (the node makes no witness of the whole block for it), as
/// does a call traced at an early index; one 300 transactions into a block
/// of transfers names more than proofs stand for over nothing held (128
/// keys, where 512 would still be proofs) and is replayed over the block's
/// witness. Each answered at its first ask, equal to geth's. Then the
/// upstream turns on those proofs: a lie in one is refused, counted, and
/// asked again (the trace geth's); proofs that stall make the trace a 421
/// within the replay's wait (`WITNESS_WAIT`, 5 s) while other reads are
/// answered at once, and once the node answers again the same trace is
/// geth's; proofs that each come late, but in time for their round, make
/// a trace of several rounds a 421 within the same wait, counted from its
/// first fetch. No witness is asked for any of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_cold_transaction_trace_is_proofs_for_a_few_keys_the_witness_past_them() {
    use neve_devnet::faults::{Fault, StateTamper};
    let (_node, geth, neve, busy, proxy) = transfers_chain_behind(10, true).await;
    let proxy = proxy.expect("proxied");
    let client = RpcClient::new(&neve.url).unwrap();
    let witnesses = || metric(&neve, "neve_state_witnesses_fetched_total");
    let transactions = async |number: u64| {
        block(&geth, number).await["transactions"]
            .as_array()
            .unwrap()
            .clone()
    };
    let answered_at_once = async |method: &str, params: Value| {
        let (status, got) = call(&client, method, &params).await;
        assert_eq!(status, 200, "{method} {params}: {got:.300}");
        same(&client, &geth, method, params).await;
    };
    // Three blocks none of whose parents' state is held: the one after
    // each traced is skipped (proofs at its parent's root are not at its).
    let mut cold = Vec::new();
    for &number in &busy {
        if cold.last().is_none_or(|last: &u64| number > last + 1) {
            cold.push(number);
        }
    }
    assert!(cold.len() >= 5, "blocks of transfers: {busy:?}");
    let config = json!({"tracer": "callTracer"});
    let calls = metric(&neve, "neve_state_upstream_calls_total");
    let first = transactions(cold[0]).await[0].clone();
    answered_at_once("debug_traceTransaction", json!([first, config])).await;
    let traced_call = json!([
        {"to": "0x000000000000000000000000000000000000dead"},
        quantity(cold[1]),
        {"tracer": "callTracer", "txIndex": "0x1"}
    ]);
    answered_at_once("debug_traceCall", traced_call).await;
    assert_eq!(witnesses(), 0, "a witness for an early transaction");
    assert!(
        metric(&neve, "neve_state_upstream_calls_total") > calls,
        "its state was fetched"
    );
    let deep = transactions(cold[2]).await;
    assert!(deep.len() > 300, "{} transactions", deep.len());
    answered_at_once("debug_traceTransaction", json!([deep[300], config])).await;
    assert_eq!(witnesses(), 1, "the witness of a block read deep into");

    // A lie in the first proof of the next cold block's round: refused,
    // counted, asked again; the trace is geth's.
    let refused = metric(&neve, "neve_state_refused_proofs_total");
    proxy.control().tamper_state(StateTamper::Balance);
    let lied = transactions(cold[3]).await[0].clone();
    answered_at_once("debug_traceTransaction", json!([lied, config])).await;
    assert_eq!(proxy.control().state_tampered(), 1, "the lie told");
    assert!(
        metric(&neve, "neve_state_refused_proofs_total") > refused,
        "the lie refused"
    );

    // Proofs that stall (4 KiB of the answer, then nothing): the trace
    // is the node's, within the replay's wait, and reads go on meanwhile.
    proxy
        .control()
        .set_method_fault(Some(("eth_getProof", Fault::Stall)));
    let stalled = transactions(cold[4]).await[0].clone();
    let params = json!([stalled, config]);
    let asked = std::time::Instant::now();
    let trace = {
        let (client, params) = (client.clone(), params.clone());
        tokio::spawn(async move { call(&client, "debug_traceTransaction", &params).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let read = std::time::Instant::now();
    same(
        &client,
        &geth,
        "eth_getBlockByNumber",
        json!([quantity(cold[4]), false]),
    )
    .await;
    assert!(
        read.elapsed() < std::time::Duration::from_secs(1),
        "a read while the proofs stall took {:?}",
        read.elapsed()
    );
    assert!(!trace.is_finished(), "the trace waits for its proofs");
    let (status, got) = trace.await.unwrap();
    let took = asked.elapsed();
    assert_eq!(status, 421, "{got:.300}");
    // `WITNESS_WAIT` (5 s) from its first fetch, however the rounds
    // fall (a fetch's own timeout is 5 s too: the round after one that
    // failed just in time asks nothing more), and a run's time besides.
    assert!(
        took < std::time::Duration::from_millis(6_500),
        "a trace held {took:?} by stalled proofs"
    );
    assert!(proxy.control().faults_served() >= 1, "the proofs stalled");
    proxy.control().set_method_fault(None);
    // The node answers again: the same trace is geth's (its rounds join
    // the stalled fetch until it fails, then ask again).
    answered_at_once("debug_traceTransaction", params).await;

    // Proofs that come, but 3 s after each ask: a transaction a few into
    // the block takes two rounds or more (the refused ones before it
    // name only their senders in the first), so the trace is a 421 at
    // `WITNESS_WAIT` from its first fetch, not a wait a round.
    proxy.control().set_method_fault(Some((
        "eth_getProof",
        Fault::Slow(std::time::Duration::from_secs(3)),
    )));
    let slow = transactions(cold[4]).await[5].clone();
    let params = json!([slow, config]);
    let asked = std::time::Instant::now();
    let (status, got) = call(&client, "debug_traceTransaction", &params).await;
    let slowly = asked.elapsed();
    assert_eq!(status, 421, "after {slowly:?}: {got:.300}");
    assert!(
        slowly < std::time::Duration::from_millis(6_500),
        "a trace held {slowly:?} by slow proofs"
    );
    proxy.control().set_method_fault(None);
    answered_at_once("debug_traceTransaction", params).await;
    assert_eq!(
        witnesses(),
        1,
        "no witness for the lied, stalled or slow traces"
    );
    eprintln!("stalled proofs: 421 after {took:?}; slow proofs: 421 after {slowly:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_traced_while_its_parents_post_state_is_proved_equals_geths() {
    // Eight seconds of load: four busy blocks in a row even when another
    // test's node shares the cores (six did not, once).
    let (_node, geth, neve, busy) = transfers_chain(8).await;
    let client = RpcClient::new(&neve.url).unwrap();
    // The longest run of consecutive blocks of transfers.
    let longest = longest_run(&busy);
    assert!(longest.len() >= 4, "busy blocks in a row: {longest:?}");
    // Each asked as soon as the one before answered; compared after.
    let config = json!({"tracer": "callTracer"});
    let mut answers = Vec::new();
    for number in &longest {
        let params = json!([quantity(*number), config]);
        let (status, got) = call(&client, "debug_traceBlockByNumber", &params).await;
        assert_eq!(status, 200, "block {number}: {got:.500}");
        if answers.is_empty() {
            // A block whose parent was not replayed here is a one-off as
            // far as neve knows: nothing is proved ahead of its child.
            assert_eq!(metric(&neve, "neve_trace_proofs_ahead_total"), 0);
        }
        answers.push(got);
    }
    // Past the first, each block's child was offered the accounts its
    // transactions name that were not held (the load sends to fresh
    // addresses), proved while the block was traced; the children's
    // traces above equal geth's all the same.
    let ahead = metric(&neve, "neve_trace_proofs_ahead_total");
    assert!(ahead >= 1, "{ahead} accounts proved ahead");
    // Once per block, however its traces are asked again: configurations
    // the memo keeps apart (each a run of its own), in turns and in one
    // batch, offer nothing more.
    for round in 0..3 {
        let config = json!({"tracer": "callTracer", "timeout": format!("{}s", 5 + round)});
        for number in longest.iter().rev() {
            let params = json!([quantity(*number), config]);
            let (status, got) = call(&client, "debug_traceBlockByNumber", &params).await;
            assert_eq!(status, 200, "block {number}: {got:.300}");
        }
    }
    let batch: Vec<Value> = longest
        .iter()
        .enumerate()
        .map(|(i, number)| {
            let config = json!({"tracer": "callTracer", "timeout": format!("{}s", 10 + i)});
            json!({"jsonrpc": "2.0", "id": i, "method": "debug_traceBlockByNumber",
                   "params": [quantity(*number), config]})
        })
        .collect();
    let (status, body) = client
        .post(Value::Array(batch).to_string().into())
        .await
        .unwrap();
    let batched: Vec<Value> = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 200);
    assert!(
        batched.iter().all(|a| a.get("result").is_some()),
        "{batched:.300?}"
    );
    assert_eq!(
        metric(&neve, "neve_trace_proofs_ahead_total"),
        ahead,
        "a block's child is offered once"
    );
    for (number, got) in longest.iter().zip(answers) {
        block_trace_is_geths(&geth, *number, &config, &got).await;
    }
    // At least one child asked while its parent's proof was under way
    // (each is asked within a few ms of its parent's answer; a proof over
    // a thousand accounts takes tens), and what that run named was
    // fetched beside the proving.
    let overlays = metric(&neve, "neve_state_post_state_overlays_total");
    let fetched = metric(&neve, "neve_state_post_state_overlay_fetches_total");
    assert!(
        fetched >= 1 && fetched <= overlays,
        "{overlays} runs over a post-state being proved, {fetched} fetched for"
    );
    for _ in 0..100 {
        let computed = metric(&neve, "neve_state_post_states_kept_total")
            + metric(&neve, "neve_state_post_states_unkept_total");
        if computed >= longest.len() as u64 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(metric(&neve, "neve_state_post_states_unlike_total"), 0);
    assert_eq!(
        metric(&neve, "neve_state_post_states_kept_total"),
        longest.len() as u64
    );
}

/// The proofs a block's trace fetches ahead of its child, against an
/// upstream that leaves them unanswered and one that lies in them, each
/// block asked as soon as the one before answered (as an indexer
/// following the chain asks). The node silent on the state asked at
/// block N (only the proofs ahead of N+1 are, while N is traced: N's own
/// run reads at N-1, and a witness is not asked by a `blockHash`
/// object): N's trace is answered, and N+1's, asked once the node answers
/// again, does not wait out the silent fetch should it join it (proofs
/// ahead fail after `AHEAD_PROOFS_TIMEOUT`, not the reads'
/// `FETCH_TIMEOUT`; that a read joins them is the fetcher's unit test),
/// nor does a read at `latest` meanwhile. Then a
/// lie in the proofs asked ahead at another block: refused and counted,
/// nothing of it kept. Every trace equals geth's. (Which blocks' children
/// name accounts not held depends on the load: the first of the lane
/// that proves ahead is taken.)
#[tokio::test(flavor = "multi_thread")]
async fn proofs_ahead_of_a_silent_or_lying_upstream_change_no_trace() {
    use neve_devnet::faults::{Fault, StateTamper};
    let (_node, geth, neve, busy, proxy) = transfers_chain_behind(24, true).await;
    let proxy = proxy.expect("proxied");
    let client = RpcClient::new(&neve.url).unwrap();
    let blocks = longest_run(&busy);
    // The silent part takes three blocks at least, the lie part five more;
    // whether a block proves ahead depends on the load, so each part has
    // room for a few blocks that do not (on a run of eight a silent part
    // taken at its second try left the lie part none).
    assert!(blocks.len() >= 10, "busy blocks in a row: {blocks:?}");
    let config = json!({"tracer": "callTracer"});
    let mut answers: Vec<(u64, Value)> = Vec::new();
    let mut hashes = Vec::new();
    // What the proofs (and codes) asked at a block name it by.
    for number in &blocks {
        let hash = block(&geth, *number).await["hash"]
            .as_str()
            .unwrap()
            .to_owned();
        let at = format!("{{\"blockHash\":\"{hash}\"}}");
        hashes.push(&*Box::leak(at.into_boxed_str()));
    }
    let traced = async |number: u64, answers: &mut Vec<(u64, Value)>| {
        let params = json!([quantity(number), config]);
        let (status, got) = call(&client, "debug_traceBlockByNumber", &params).await;
        assert_eq!(status, 200, "block {number}: {got:.500}");
        answers.push((number, got));
    };
    let until = |what: &'static str, done: &dyn Fn() -> bool| {
        for _ in 0..100 {
            if done() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("not within 5 s: {what}");
    };
    let ahead = || metric(&neve, "neve_trace_proofs_ahead_total");

    // Silent: the fault armed for each block in turn as it is traced,
    // until one proves ahead (its proofs are taken before its answer).
    traced(blocks[0], &mut answers).await;
    assert_eq!(ahead(), 0, "a one-off");
    let failures = metric(&neve, "neve_state_fetch_failures_total");
    let mut k = 1;
    let (ahead_started, stalled) = loop {
        assert!(k + 1 < blocks.len(), "no block of {blocks:?} proved ahead");
        let before = ahead();
        let stalled = proxy.control().faults_served();
        proxy
            .control()
            .set_method_fault(Some((hashes[k], Fault::Stall)));
        traced(blocks[k], &mut answers).await;
        let started = std::time::Instant::now();
        if ahead() > before {
            break (started, stalled);
        }
        k += 1;
    };
    until("the proofs ahead stalled", &|| {
        proxy.control().faults_served() > stalled
    });
    proxy.control().set_method_fault(None);
    use neve_ingest::state_fetch::{AHEAD_PROOFS_TIMEOUT, FETCH_TIMEOUT};
    // The node answers again; the silent fetch is still under way. A read
    // at `latest` is answered before that fetch could fail, so it waited
    // for nothing of it. (A 421 of `latest` itself, neve's newest block
    // stored past the grace after the node announced it on a loaded
    // machine, is asked again.)
    let balance = json!(["0x00000000000000000000000000000000000a11ce", "latest"]);
    let answer_by = ahead_started + AHEAD_PROOFS_TIMEOUT * 3 / 4;
    loop {
        let (status, got) = call(&client, "eth_getBalance", &balance).await;
        if status == 200 {
            break;
        }
        assert!(
            std::time::Instant::now() < answer_by,
            "a read at latest while the proofs ahead hang: {status} {got}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    traced(blocks[k + 1], &mut answers).await;
    let since = ahead_started.elapsed();
    assert!(
        since < FETCH_TIMEOUT - AHEAD_PROOFS_TIMEOUT / 2,
        "the child answered {since:?} after the silent fetch it joined began"
    );
    until("the silent proofs failed, counted", &|| {
        metric(&neve, "neve_state_fetch_failures_total") > failures
    });
    eprintln!(
        "silent: block {} of {blocks:?} proved ahead; its child answered after {since:?}",
        blocks[k]
    );

    // A lie: the first proof asked ahead at the next block that proves
    // ahead states another balance. The lane starts again past two blocks
    // no trace replayed (its first block a one-off over its witness: its
    // child names what that does not hold). The silent part's offers have
    // ended or been dropped by now (`OFFER_KEPT`).
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let refused = metric(&neve, "neve_state_refused_proofs_total");
    let mut k = k + 4;
    traced(blocks[k], &mut answers).await;
    loop {
        k += 1;
        assert!(
            k + 1 < blocks.len(),
            "no later block of {blocks:?} proved ahead"
        );
        let before = ahead();
        proxy
            .control()
            .tamper_state_matching(StateTamper::Balance, hashes[k]);
        traced(blocks[k], &mut answers).await;
        if ahead() > before {
            break;
        }
    }
    until("the lie told", &|| proxy.control().state_tampered() == 1);
    until("the lie refused", &|| {
        metric(&neve, "neve_state_refused_proofs_total") > refused
    });
    traced(blocks[k + 1], &mut answers).await;
    eprintln!("lie: block {} proved ahead", blocks[k]);

    for (number, got) in answers {
        block_trace_is_geths(&geth, number, &config, &got).await;
    }
    assert_eq!(metric(&neve, "neve_trace_replays_diverged_total"), 0);
}

/// Busy blocks' traces asked at once: their post-states are claimed and
/// handed to the one post-state thread together, and past the queue's two
/// (`POST_STATES_QUEUED`) a replay lets its claim go rather than wait or
/// queue more. Each trace equals geth's, every claim ends (kept or let
/// go, none unlike, none left hanging), and a later replay of a block
/// whose claim was let go keeps its post-state: each block's is kept
/// exactly once. (With a call thread per core, two on this project's
/// machine, replays seldom outpace the post-state thread: how many were
/// let go is printed, not required.)
#[tokio::test(flavor = "multi_thread")]
async fn a_burst_of_block_traces_ends_every_post_state_claim() {
    let (_node, geth, neve, mut busy) = transfers_chain(8).await;
    assert!(busy.len() >= 4, "busy blocks: {busy:?}");
    busy.truncate(6);
    let client = RpcClient::new(&neve.url).unwrap();
    let ended = || {
        metric(&neve, "neve_state_post_states_kept_total")
            + metric(&neve, "neve_state_post_states_unkept_total")
    };
    // Until no claim has ended for a second: the thread is idle.
    let settled = || async {
        let (mut last, mut still) = (ended(), 0);
        for _ in 0..200 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let now = ended();
            still = if now == last { still + 1 } else { 0 };
            last = now;
            if still >= 10 {
                break;
            }
        }
        last
    };
    let equals_geths = |number: u64, config: &Value, answer: (u16, Value)| {
        let (geth, config) = (geth.clone(), config.clone());
        async move {
            let (status, got) = answer;
            assert_eq!(status, 200, "block {number}: {got:.500}");
            block_trace_is_geths(&geth, number, &config, &got).await;
        }
    };
    let config = json!({"tracer": "callTracer"});
    let asks = busy.iter().map(|number| {
        let (client, params) = (client.clone(), json!([quantity(*number), config]));
        tokio::spawn(async move { call(&client, "debug_traceBlockByNumber", &params).await })
    });
    let answers = futures_util::future::join_all(asks).await;
    for (number, answer) in busy.iter().zip(answers) {
        equals_geths(*number, &config, answer.unwrap()).await;
    }
    let first = settled().await;
    assert!(first <= busy.len() as u64, "{first} claims ended");
    // One at a time, under another tracer: what was let go is claimed
    // again and kept; what was kept is not claimed twice.
    let config = json!({"tracer": "prestateTracer"});
    for number in &busy {
        let params = json!([quantity(*number), config]);
        let answer = call(&client, "debug_traceBlockByNumber", &params).await;
        equals_geths(*number, &config, answer).await;
        settled().await;
    }
    let kept = metric(&neve, "neve_state_post_states_kept_total");
    let let_go = metric(&neve, "neve_state_post_states_unkept_total");
    assert_eq!(metric(&neve, "neve_state_post_states_unlike_total"), 0);
    assert_eq!(
        kept,
        busy.len() as u64,
        "each block's post-state kept once ({let_go} let go in the burst)"
    );
    eprintln!(
        "{} blocks at once: {first} claims ended, {let_go} let go",
        busy.len()
    );
}
