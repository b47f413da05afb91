//! Verified state reads against the live node: under `neve load` traffic,
//! at random heights of the tail, neve's balance, nonce, code, storage and
//! proof answers equal geth's, directly and through a neve mirroring a
//! neve; a proxy that lies about state gets refused and counted; after a
//! reorg no read is answered from a dropped root; bad parameters get
//! -32602 and fetch nothing; calls' fetches waiting their turn on a slow
//! node leave plain reads a slot.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use neve_devnet::faults::{FaultProxy, StateTamper};
use neve_upstream::{RpcClient, parse_quantity, quantity};
use serde_json::{Value, json};
use support::*;

/// A never-used address.
const NOBODY: &str = "0x00000000000000000000000000000000000c0ffe";

/// The JSON-RPC answer and HTTP status of one call.
async fn call(client: &RpcClient, method: &str, params: Value) -> (u16, Value) {
    let body = json!({"jsonrpc":"2.0","id":7,"method":method,"params":params}).to_string();
    let (status, bytes) = client.post(body.into()).await.unwrap();
    (status.as_u16(), serde_json::from_slice(&bytes).unwrap())
}

/// neve's answer equals geth's (a 421 is retried once: the fetch it
/// started has warmed the store by then).
async fn same(neve: &RpcClient, geth: &RpcClient, method: &str, params: Value) {
    let (_, expected) = call(geth, method, params.clone()).await;
    let (mut status, mut got) = call(neve, method, params.clone()).await;
    if status == 421 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        (status, got) = call(neve, method, params.clone()).await;
    }
    assert_eq!(status, 200, "{method} {params}: {got}");
    assert_eq!(got["result"], expected["result"], "{method} {params}");
    assert!(expected.get("result").is_some(), "geth answered {expected}");
}

/// Senders, recipients, token holders and the token, from the chain.
async fn addresses(geth: &RpcClient) -> (Vec<String>, String, Vec<String>) {
    let mut accounts = BTreeSet::new();
    for block in blocks(geth).await {
        for tx in block["transactions"].as_array().unwrap() {
            accounts.insert(tx["from"].as_str().unwrap().to_string());
            if let Some(to) = tx["to"].as_str() {
                accounts.insert(to.to_string());
            }
        }
    }
    let logs = transfer_logs(geth).await;
    let token = logs[0]["address"].as_str().unwrap().to_string();
    // The token keys each holder's balance by the holder's address.
    let slots: BTreeSet<String> = logs
        .iter()
        .map(|l| l["topics"][2].as_str().unwrap().to_string())
        .take(6)
        .collect();
    accounts.remove(&token);
    (
        accounts.into_iter().collect(),
        token,
        slots.into_iter().collect(),
    )
}

/// Compares every state method at `height` for a sample of keys.
async fn compare_at(
    neve: &RpcClient,
    geth: &RpcClient,
    height: u64,
    accounts: &[String],
    token: &str,
    slots: &[String],
) {
    let at = quantity(height);
    for (i, account) in accounts.iter().enumerate() {
        same(neve, geth, "eth_getBalance", json!([account, at])).await;
        if i % 2 == 0 {
            same(neve, geth, "eth_getTransactionCount", json!([account, at])).await;
        }
    }
    same(neve, geth, "eth_getBalance", json!([NOBODY, at])).await;
    same(neve, geth, "eth_getCode", json!([NOBODY, at])).await;
    same(neve, geth, "eth_getCode", json!([token, at])).await;
    same(neve, geth, "eth_getCode", json!([accounts[0], at])).await;
    for slot in slots.iter().take(3) {
        same(neve, geth, "eth_getStorageAt", json!([token, slot, at])).await;
    }
    same(neve, geth, "eth_getStorageAt", json!([token, "0x1", at])).await;
    same(
        neve,
        geth,
        "eth_getStorageValues",
        json!([{token: slots, (accounts[0].as_str()): [slots[0]]}, at]),
    )
    .await;
    let mut keys: Vec<Value> = slots.iter().map(|s| json!(s)).collect();
    keys.push(json!("0x5"));
    same(neve, geth, "eth_getProof", json!([token, keys, at])).await;
    same(
        neve,
        geth,
        "eth_getProof",
        json!([accounts[1], [slots[0]], at]),
    )
    .await;
    same(neve, geth, "eth_getProof", json!([NOBODY, ["0x0"], at])).await;
    // By block hash (EIP-1898) too.
    let block: Value = geth
        .call("eth_getBlockByNumber", (at.clone(), false))
        .await
        .unwrap();
    let by_hash = json!({"blockHash": block["hash"], "requireCanonical": true});
    same(neve, geth, "eth_getBalance", json!([accounts[0], by_hash])).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn state_reads_equal_geths_under_load_directly_and_through_a_mirror() {
    let (geth_node, head) = chain_with_logs().await;
    let geth = RpcClient::new(geth_node.http_url()).unwrap();
    let neve = Neve::start(
        geth_node.http_url(),
        &["--floor", "0", "--ws-url", geth_node.ws_url()],
        head,
    )
    .await;
    let client = RpcClient::new(&neve.url).unwrap();
    let (accounts, token, slots) = addresses(&geth).await;
    assert!(accounts.len() >= 4 && !slots.is_empty());
    let sample: Vec<String> = accounts
        .iter()
        .step_by(accounts.len() / 4)
        .cloned()
        .collect();

    // Traffic goes on while heights are compared.
    let mut load = neve_load::LoadConfig::new(geth_node.http_url(), Duration::from_secs(6));
    load.accounts = 8;
    load.tps = Some(200);
    let traffic = tokio::spawn(neve_load::run(load, |_| {}));
    for step in 0..6u64 {
        let height = 1 + (step * 7919) % head;
        compare_at(&client, &geth, height, &sample, &token, &slots).await;
    }
    traffic.await.unwrap().expect("load");

    // Bad input: -32602 naming the argument, and nothing fetched for it.
    let before = neve.health().unwrap()["state"]["upstream_calls"].clone();
    for (method, params) in [
        ("eth_getBalance", json!(["0x1234", "latest"])),
        ("eth_getBalance", json!([NOBODY, "0xzz"])),
        (
            "eth_getStorageAt",
            json!([token, format!("0x{}", "1".repeat(65)), "latest"]),
        ),
        ("eth_getProof", json!([token, "0x1", "latest"])),
        ("eth_getProof", json!([token, vec!["0x1"; 1025], "latest"])),
        ("eth_getStorageValues", json!([{}, "latest"])),
        (
            "eth_getStorageValues",
            json!([{ "0x12": ["0x1"] }, "latest"]),
        ),
        ("eth_getCode", json!([NOBODY, {"blockHash": "0x12"}])),
    ] {
        let (status, answer) = call(&client, method, params.clone()).await;
        assert_eq!(status, 200, "{method} {params}");
        assert_eq!(
            answer["error"]["code"], -32602,
            "{method} {params}: {answer}"
        );
    }
    let (_, answer) = call(
        &client,
        "eth_getStorageValues",
        json!([{ (token.as_str()): vec![slots[0].clone(); 1025] }, "latest"]),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32005, "{answer}");
    assert_eq!(
        neve.health().unwrap()["state"]["upstream_calls"],
        before,
        "bad requests fetched nothing"
    );
    // Not ours to answer: pending, and heights past the tail.
    let (status, _) = call(&client, "eth_getBalance", json!([NOBODY, "pending"])).await;
    assert_eq!(status, 421);
    let (status, _) = call(&client, "eth_getBalance", json!([NOBODY, "0xffffff"])).await;
    assert_eq!(status, 421);
    let (status, answer) = call(&client, "eth_sendRawTransaction", json!(["0x00"])).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (421, json!(-32601))
    );

    // A neve mirroring that neve fetches its proofs from it, and verifies
    // them against headers it verified itself.
    let stored = neve.health().unwrap()["blocks"]["max_contiguous_height"]
        .as_u64()
        .unwrap();
    let mirror = Neve::start_mirror(&neve.url, stored).await;
    let mirrored = RpcClient::new(&mirror.url).unwrap();
    for height in [stored / 3, stored - 1] {
        compare_at(&mirrored, &geth, height, &sample, &token, &slots).await;
    }
    let health = neve.health().unwrap();
    let state = &health["state"];
    eprintln!("state: {state}");
    assert_eq!(state["refused_proofs"], 0, "geth's proofs all verify");
    assert!(state["hits"].as_u64().unwrap() > 0 && state["fetched"].as_u64().unwrap() > 0);
    assert_eq!(mirror.health().unwrap()["state"]["refused_proofs"], 0);
    let metrics = neve.get("/metrics").unwrap().1;
    for name in [
        "neve_state_hits_total",
        "neve_state_fetched_total",
        "neve_state_misses_total",
        "neve_state_refused_proofs_total",
        "neve_state_node_bytes",
        "neve_state_evictions_total",
    ] {
        assert!(metrics.contains(name), "{name} in /metrics");
    }
}

/// [`chain_with_logs`], a fault proxy before its geth, and a neve
/// following through the proxy (no WebSocket, no prefetch: every state
/// read it makes is one the test asked for), with `extra` flags.
struct Proxied {
    /// Kept running for the test's length.
    _node: neve_devnet::GethDev,
    geth: RpcClient,
    proxy: FaultProxy,
    neve: Neve,
    client: RpcClient,
    head: u64,
}

async fn neve_behind_a_proxy(extra: &[&str]) -> Proxied {
    let (node, head) = chain_with_logs().await;
    let geth = RpcClient::new(node.http_url()).unwrap();
    let proxy = FaultProxy::start(node.http_url(), vec![]).await;
    let mut args = vec![
        "--floor",
        "0",
        "--ws-url",
        "none",
        "--state-prefetch-rate",
        "0",
    ];
    args.extend_from_slice(extra);
    let neve = Neve::start(proxy.url(), &args, head).await;
    let client = RpcClient::new(&neve.url).unwrap();
    Proxied {
        _node: node,
        geth,
        proxy,
        neve,
        client,
        head,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lying_upstream_gets_its_state_refused_counted_and_never_served() {
    // The node bound (not `..`): it runs until the test ends.
    let Proxied {
        _node: _running,
        geth,
        proxy,
        neve,
        client,
        head,
    } = neve_behind_a_proxy(&[]).await;
    let (accounts, token, slots) = addresses(&geth).await;
    let lies = [
        (StateTamper::Balance, "eth_getBalance", json!([accounts[0]])),
        (
            StateTamper::Nonce,
            "eth_getTransactionCount",
            json!([accounts[1]]),
        ),
        (
            StateTamper::StorageValue,
            "eth_getStorageAt",
            json!([token, slots[0]]),
        ),
        (
            StateTamper::ProofNode,
            "eth_getBalance",
            json!([accounts[2]]),
        ),
        (StateTamper::CodeByte, "eth_getCode", json!([token])),
    ];
    for (i, (lie, method, params)) in lies.into_iter().enumerate() {
        // A height no earlier read touched, so the read must fetch.
        let height = quantity(head - 1 - i as u64);
        let mut params = params.as_array().unwrap().clone();
        params.push(json!(height));
        let params = Value::Array(params);
        let refused = neve.health().unwrap()["state"]["refused_proofs"]
            .as_u64()
            .unwrap();
        proxy.control().tamper_state(lie);
        let (status, answer) = call(&client, method, params.clone()).await;
        assert_eq!(status, 421, "{lie:?}: the lie is not served: {answer}");
        assert_eq!(
            proxy.control().state_tampered(),
            i as u64 + 1,
            "{lie:?} told"
        );
        assert_eq!(
            neve.health().unwrap()["state"]["refused_proofs"],
            refused + 1,
            "{lie:?} refused and counted"
        );
        // Nothing of the lie was stored: the honest answer comes next.
        same(&client, &geth, method, params).await;
    }
    assert!(
        neve.get("/metrics")
            .unwrap()
            .1
            .contains("neve_state_refused_proofs_total 5")
    );
}

/// An address no chain uses, where calls run code they override.
const PROBE: &str = "0x00000000000000000000000000000000000b0b00";

/// Runtime code returning the sum of `accounts`' balances: PUSH1 0, then
/// PUSH20 account, BALANCE, ADD for each, then MSTORE and RETURN 32 bytes.
fn balances_summed(accounts: &[String]) -> String {
    let mut code = String::from("0x6000");
    for account in accounts {
        code += &format!("73{}3101", account.trim_start_matches("0x"));
    }
    code + "60005260206000f3"
}

/// A call's round asks the proofs it misses in one batch; a lie about one
/// account in it is refused and counted, and the batch's honest proofs
/// are kept: the next round asks only that account again, and the call
/// gets geth's answer.
#[tokio::test(flavor = "multi_thread")]
async fn a_lie_in_a_batch_of_proofs_costs_only_its_account() {
    use support::calls::metric;
    // Held whole (its node runs until the test ends).
    let behind = neve_behind_a_proxy(&["--state-fetch-timeout-ms", "8000"]).await;
    let (geth, proxy, neve, client) = (&behind.geth, &behind.proxy, &behind.neve, &behind.client);
    let (accounts, _, _) = addresses(geth).await;
    let head = behind.head;
    let summed = |of: &[String]| {
        let code = balances_summed(of);
        json!([{"to": PROBE}, quantity(head - 2), {PROBE: {"code": code}}])
    };
    // What every call reads besides the accounts it sums (the probe, the
    // caller), held first.
    same(client, geth, "eth_call", summed(&[])).await;
    // Three other accounts, honestly: what one round asks of three
    // accounts (each a proof and its code), in one request.
    let asked = metric(neve, "neve_state_upstream_calls_total");
    proxy.control().watch_method(Some("eth_getProof"));
    same(client, geth, "eth_call", summed(&accounts[3..6])).await;
    let honest = metric(neve, "neve_state_upstream_calls_total") - asked;
    assert_eq!(proxy.control().watched(), 1, "one batch asked");
    assert!(honest >= 3 && honest.is_multiple_of(3), "{honest} calls");
    let (_, expected) = call(geth, "eth_call", summed(&accounts[..3])).await;
    let asked = metric(neve, "neve_state_upstream_calls_total");
    let refused = metric(neve, "neve_state_refused_proofs_total");
    proxy.control().watch_method(Some("eth_getProof"));
    proxy.control().tamper_state(StateTamper::Balance);
    let (status, answer) = call(client, "eth_call", summed(&accounts[..3])).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["result"], expected["result"]);
    assert_eq!(proxy.control().state_tampered(), 1, "the lie told");
    assert_eq!(
        metric(neve, "neve_state_refused_proofs_total"),
        refused + 1,
        "the lie refused and counted"
    );
    // The batch, then the refused account's calls again.
    assert_eq!(
        metric(neve, "neve_state_upstream_calls_total"),
        asked + honest + honest / 3
    );
    assert_eq!(proxy.control().watched(), 2, "two batches asked");
    proxy.control().watch_method(None);
}

/// A call at `height` of code of its own that sums `of`'s balances.
fn summed_at(height: u64, of: &[String]) -> Value {
    let code = balances_summed(of);
    json!([{"to": PROBE}, quantity(height), {PROBE: {"code": code}}])
}

/// [`neve_behind_a_proxy`] with `extra` flags and its chain's accounts,
/// a [`summed_at`] of none answered once (nothing of the accounts held).
async fn ready_to_sum(extra: &[&str]) -> (Proxied, Vec<String>) {
    let behind = neve_behind_a_proxy(extra).await;
    let (accounts, _, _) = addresses(&behind.geth).await;
    let call = summed_at(behind.head - 2, &[]);
    same(&behind.client, &behind.geth, "eth_call", call).await;
    (behind, accounts)
}

/// A batch of proofs holds its fetcher slot for at most `FETCH_TIMEOUT`,
/// however the upstream cuts it, and keeps what it reached: allowed one
/// call a batch (`--upstream-max-batch 1`) and answering each 1 s late,
/// the batch of a call's three accounts (a proof and a code each: six
/// exchanges in turn) ends at 5 s with the accounts answered by then
/// verified and kept, the third counted as a failure; the call was a miss
/// at its own deadline, and once the node is quick again the same call
/// asks only the accounts not reached (nothing of the batch was left
/// pending).
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_of_proofs_ends_within_the_fetch_timeout() {
    use neve_devnet::faults::Fault;
    use neve_ingest::state_fetch::FETCH_TIMEOUT;
    use support::calls::metric;
    // Held whole (its node runs until the test ends).
    let (behind, accounts) = ready_to_sum(&[
        "--state-fetch-timeout-ms",
        "1000",
        "--upstream-max-batch",
        "1",
    ])
    .await;
    let (geth, proxy, neve, client) = (&behind.geth, &behind.proxy, &behind.neve, &behind.client);
    let summed = |of: &[String]| summed_at(behind.head - 2, of);
    let failures = metric(neve, "neve_state_fetch_failures_total");
    let late = Duration::from_secs(1);
    proxy.control().set_override(Some(Fault::Slow(late)));
    let asked = std::time::Instant::now();
    let (status, answer) = call(client, "eth_call", summed(&accounts[..3])).await;
    assert_eq!(status, 421, "a miss at the call's deadline: {answer}");
    assert!(asked.elapsed() < FETCH_TIMEOUT, "{:?}", asked.elapsed());
    // Unbounded, all six would be answered at 6 s and nothing would
    // fail; the margin is for a loaded machine.
    while metric(neve, "neve_state_fetch_failures_total") == failures {
        assert!(
            asked.elapsed() < FETCH_TIMEOUT + 5 * late,
            "the batch still held its slot after {:?}",
            asked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(asked.elapsed() >= FETCH_TIMEOUT, "ended by the timeout");
    // The third account at least (the second too when the machine is so
    // loaded that four exchanges took over 5 s), never the first.
    let unreached = metric(neve, "neve_state_fetch_failures_total") - failures;
    assert!((1..=2).contains(&unreached), "{unreached} not reached");
    proxy.control().set_override(None);
    let calls = metric(neve, "neve_state_upstream_calls_total");
    same(client, geth, "eth_call", summed(&accounts[..3])).await;
    assert_eq!(
        metric(neve, "neve_state_upstream_calls_total"),
        calls + 2 * unreached,
        "only the accounts not reached asked again"
    );
}

/// An endless answer to a batch of proofs (what a broken or hostile
/// upstream can send) is read up to `MAX_PROOF_BATCH_ANSWER_BYTES` and no
/// further: the batch ends there, well before the fetch timeout, its
/// accounts counted as failures and nothing kept; the call asks it once
/// more (a failure may pass), then is a miss rather than ask a third
/// time, neve holding no more than the cap's worth; plain
/// reads beside it are answered, and once the node answers proofs well
/// again the same call is geth's.
#[tokio::test(flavor = "multi_thread")]
async fn an_endless_answer_to_a_batch_of_proofs_ends_at_its_cap() {
    use neve_devnet::faults::Fault;
    use neve_ingest::state_fetch::{FETCH_TIMEOUT, MAX_PROOF_BATCH_ANSWER_BYTES};
    use support::calls::metric;
    // Held whole (its node runs until the test ends).
    // A deadline long enough for many reads of the cap, were rounds to
    // ask again and again.
    let (behind, accounts) = ready_to_sum(&["--state-fetch-timeout-ms", "4000"]).await;
    let (geth, proxy, neve, client) = (&behind.geth, &behind.proxy, &behind.neve, &behind.client);
    let summed = |of: &[String]| summed_at(behind.head - 2, of);
    let failures = metric(neve, "neve_state_fetch_failures_total");
    let before = neve.rss_anon_bytes();
    proxy
        .control()
        .set_method_fault(Some(("eth_getProof", Fault::Endless)));
    proxy.control().watch_method(Some("eth_getProof"));
    let asked = std::time::Instant::now();
    let (status, answer) = call(client, "eth_call", summed(&accounts[..3])).await;
    assert_eq!(status, 421, "a miss: {answer}");
    while metric(neve, "neve_state_fetch_failures_total") < failures + 6 {
        assert!(
            asked.elapsed() < FETCH_TIMEOUT,
            "the batch read on for {:?}",
            asked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        metric(neve, "neve_state_fetch_failures_total"),
        failures + 6,
        "each account of the batch, twice"
    );
    assert_eq!(
        proxy.control().watched(),
        2,
        "asked a second time, not a third: a miss instead"
    );
    let grown = neve.rss_anon_bytes().saturating_sub(before);
    assert!(
        grown < 3 * MAX_PROOF_BATCH_ANSWER_BYTES as u64,
        "held {grown} bytes of an endless answer"
    );
    // A read that asks no proof is served meanwhile.
    same(
        client,
        geth,
        "eth_getBlockByNumber",
        json!([quantity(behind.head - 1), false]),
    )
    .await;
    proxy.control().set_method_fault(None);
    let calls = metric(neve, "neve_state_upstream_calls_total");
    same(client, geth, "eth_call", summed(&accounts[..3])).await;
    assert_eq!(
        metric(neve, "neve_state_upstream_calls_total"),
        calls + 6,
        "nothing of the endless batch was kept: each account asked again"
    );
}

/// Fetches waiting their turn (the rounds of calls and traces) hold at
/// most `MAX_IN_TURN_FETCHES` of the fetcher's `MAX_FETCHES_IN_FLIGHT`
/// slots however many requests want them: with the node slow, 52 calls
/// (four heights, thirteen sets of three accounts not held; a call's
/// proofs go in one batch, one slot) keep at most that many batches of
/// proofs asked of the node at once; a plain read beside them still gets
/// a slot (not shed) and geth's answer, and so does each call.
#[tokio::test(flavor = "multi_thread")]
async fn fetches_waiting_their_turn_leave_plain_reads_a_slot() {
    use neve_devnet::faults::Fault;
    use neve_ingest::state_fetch::{MAX_FETCHES_IN_FLIGHT, MAX_IN_TURN_FETCHES};
    use support::calls::metric;
    // The node bound (not `..`): it runs until the test ends.
    let Proxied {
        _node: _running,
        geth,
        proxy,
        neve,
        client,
        head,
    } = neve_behind_a_proxy(&["--state-fetch-timeout-ms", "8000"]).await;
    let (accounts, _, _) = addresses(&geth).await;
    assert!(accounts.len() > 40, "{} accounts", accounts.len());
    const { assert!(MAX_IN_TURN_FETCHES < MAX_FETCHES_IN_FLIGHT) };
    let summed = |height: u64, set: usize| {
        let code = balances_summed(&accounts[set * 3..set * 3 + 3]);
        json!([{"to": PROBE}, quantity(height), {PROBE: {"code": code}}])
    };
    let asked: Vec<(u64, usize)> = (0..4)
        .flat_map(|i| (0..13).map(move |set| (head - 2 - i, set)))
        .collect();
    const { assert!(52 > MAX_IN_TURN_FETCHES) };
    let mut expected = Vec::new();
    for (height, set) in &asked {
        let (_, answer) = call(&geth, "eth_call", summed(*height, *set)).await;
        expected.push(answer["result"].clone());
    }
    let (_, balance) = call(
        &geth,
        "eth_getBalance",
        json!([accounts[40], quantity(head - 7)]),
    )
    .await;
    let shed = metric(&neve, "neve_state_fetch_shed_total");

    // Long enough for all 52 calls to reach their fetch on two call
    // threads while the first batches are still out.
    let slow = Duration::from_millis(1000);
    proxy.control().set_override(Some(Fault::Slow(slow)));
    proxy.control().watch_method(Some("eth_getProof"));
    let calls: Vec<_> = asked
        .iter()
        .map(|(height, set)| {
            let (client, params) = (client.clone(), summed(*height, *set));
            tokio::spawn(async move { call(&client, "eth_call", params).await })
        })
        .collect();
    // Once the calls' proofs hold their slots: a read at a fifth height.
    tokio::time::sleep(slow / 2).await;
    let (status, read) = call(
        &client,
        "eth_getBalance",
        json!([accounts[40], quantity(head - 7)]),
    )
    .await;
    assert_eq!(status, 200, "the read got a slot: {read}");
    assert_eq!(read["result"], balance["result"]);
    for (answer, expected) in futures_util::future::join_all(calls)
        .await
        .into_iter()
        .zip(&expected)
    {
        let (status, answer) = answer.unwrap();
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["result"], *expected);
    }
    let most = proxy.control().most_at_once() as usize;
    proxy.control().set_override(None);
    proxy.control().watch_method(None);
    // The waiting ones filled their slots (the calls wanted 52), never
    // past them (and the read's own).
    assert!(
        (MAX_IN_TURN_FETCHES..=MAX_IN_TURN_FETCHES + 1).contains(&most),
        "{most} proofs asked of the node at once"
    );
    assert_eq!(
        metric(&neve, "neve_state_fetch_shed_total"),
        shed,
        "nothing shed"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_reorg_no_read_is_answered_from_a_dropped_root() {
    let (geth_node, head) = chain_with_logs().await;
    let geth = RpcClient::new(geth_node.http_url()).unwrap();
    let neve = Neve::start(
        geth_node.http_url(),
        &["--floor", "0", "--ws-url", geth_node.ws_url()],
        head,
    )
    .await;
    let client = RpcClient::new(&neve.url).unwrap();
    let (accounts, _, _) = addresses(&geth).await;
    let dropped = head - 2;
    let old: Value = geth
        .call("eth_getBlockByNumber", (quantity(dropped), false))
        .await
        .unwrap();
    let old_hash = old["hash"].clone();
    same(
        &client,
        &geth,
        "eth_getBalance",
        json!([accounts[0], {"blockHash": old_hash}]),
    )
    .await;

    let _: Value = geth
        .call("debug_setHead", [quantity(dropped - 1)])
        .await
        .unwrap();
    let mut load = neve_load::LoadConfig::new(geth_node.http_url(), Duration::from_secs(3));
    load.accounts = 8;
    load.tps = Some(200);
    neve_load::run(load, |_| {})
        .await
        .expect("load after the fork");
    let new_head = head_of(&geth).await;
    assert!(new_head >= dropped, "the chain grew past the fork");
    let new: Value = geth
        .call("eth_getBlockByNumber", (quantity(dropped), false))
        .await
        .unwrap();
    assert_ne!(new["hash"], old_hash, "the block was replaced");
    wait_for_block(&client, dropped, &new["hash"]).await;

    // The dropped block's root is gone with it: 421, though geth (archive)
    // still answers for it.
    let (status, answer) = call(
        &client,
        "eth_getBalance",
        json!([accounts[0], {"blockHash": old_hash}]),
    )
    .await;
    assert_eq!(status, 421, "{answer}");
    // The same height now reads the new block's state.
    same(
        &client,
        &geth,
        "eth_getBalance",
        json!([accounts[0], quantity(dropped)]),
    )
    .await;
    same(
        &client,
        &geth,
        "eth_getTransactionCount",
        json!([accounts[0], quantity(dropped)]),
    )
    .await;
}

async fn head_of(client: &RpcClient) -> u64 {
    let head: String = client.call("eth_blockNumber", ()).await.unwrap();
    parse_quantity(&head).unwrap()
}

/// Waits until neve stores `hash` at `height`.
async fn wait_for_block(client: &RpcClient, height: u64, hash: &Value) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let (status, answer) = call(
            client,
            "eth_getBlockByNumber",
            json!([quantity(height), false]),
        )
        .await;
        if status == 200 && answer["result"]["hash"] == *hash {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "neve never rolled back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
