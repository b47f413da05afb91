//! The request path fuzzed: any body gets a well-formed answer with a sane
//! status, and never a panic. Runs the seed corpus, then generated bodies.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::BodyExt;
use neve_store::testing::SyntheticBlock;
use neve_store::{Durability, Identity, Store, StoreConfig};
use proptest::prelude::*;

use super::*;
use crate::rpc::Reads;

struct FixedChain;

impl ChainView for FixedChain {
    fn upstream_head(&self) -> Option<u64> {
        Some(9)
    }
    fn safe(&self) -> Option<u64> {
        Some(8)
    }
    fn finalized(&self) -> Option<u64> {
        Some(7)
    }
    fn upstream_health(&self) -> UpstreamHealth {
        UpstreamHealth::default()
    }
}

fn server() -> (Server, tempfile::TempDir) {
    server_with(Arc::new(FixedChain))
}

fn server_with(chain: Arc<dyn ChainView>) -> (Server, tempfile::TempDir) {
    server_configured(chain, |_| {})
}

fn server_configured(
    chain: Arc<dyn ChainView>,
    configure: impl FnOnce(&mut ServeConfig),
) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity {
        chain_id: 5,
        genesis_hash: [0; 32],
    };
    let mut store = Store::open(
        dir.path(),
        identity,
        StoreConfig {
            durability: Durability::OsBuffered,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    let blocks: Vec<_> = (0..10).map(|h| SyntheticBlock::new(0, h, 3, 200)).collect();
    store
        .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
        .unwrap();
    let server = Server {
        events: tokio::sync::broadcast::channel(4).0,
        scans: scan_pool(),
        io: io_pool(),
        ctx: Arc::new(Context {
            reader: store.reader(),
            chain,
            state: Some(Arc::new(neve_state::State::new(1 << 20, 64))),
            state_answers: false,
            config: {
                let mut config = ServeConfig {
                    logs_max_range: 5,
                    logs_max_results: 4,
                    ..ServeConfig::default()
                };
                configure(&mut config);
                config
            },
            chain_id: Bytes::from_static(b"\"0x5\""),
            net_version: Bytes::from_static(b"\"5\""),
            client_version: Bytes::from_static(b"\"neve/test\""),
            genesis_hash: "00".repeat(32),
        }),
        metrics: Arc::new(Metrics::default()),
        clients: None,
        shutting_down: AtomicBool::new(false),
        stopping: {
            let (never, stopping) = tokio::sync::watch::channel(false);
            std::mem::forget(never);
            stopping
        },
        fallback: None,
        fetch: None,
        exports: Arc::new(tokio::sync::Semaphore::new(crate::export::MAX_EXPORTS)),
        started: Instant::now(),
    };
    std::mem::forget(store); // keep the writer (and its lock) for the reader's lifetime
    (server, dir)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// Answers `body` and checks the answer's shape.
fn check(server: &Server, runtime: &tokio::runtime::Runtime, body: &[u8]) {
    let response = runtime.block_on(server.respond(&Bytes::copy_from_slice(body)));
    let status = response.status().as_u16();
    assert!(
        matches!(status, 200 | 421),
        "status {status} for {:?}",
        String::from_utf8_lossy(body)
    );
    let bytes = runtime
        .block_on(response.into_body().collect())
        .unwrap()
        .to_bytes();
    if bytes.is_empty() {
        // Only notifications (valid requests without an id) go unanswered.
        assert!(
            is_notification(body),
            "no answer for {:?}",
            String::from_utf8_lossy(body)
        );
        return;
    }
    // An id is echoed as sent, as geth does: a number too large for a
    // float is valid JSON that this checker's parser cannot hold.
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&bytes)
        && e.to_string().contains("number out of range")
    {
        return;
    }
    let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "answer is not JSON ({e}) for {:?}: {:?}",
            String::from_utf8_lossy(body),
            String::from_utf8_lossy(&bytes)
        )
    });
    let elements = match &value {
        serde_json::Value::Array(items) => items.clone(),
        other => vec![other.clone()],
    };
    for element in elements {
        assert_eq!(element["jsonrpc"], "2.0", "{element}");
        assert!(
            element.get("result").is_some() != element.get("error").is_some(),
            "{element}"
        );
    }
}

/// A JSON-RPC notification, or a batch of nothing else: what gets no
/// answer. Members are read raw, so a number too large for a float (valid
/// JSON, and fine as an id) does not fail the check.
fn is_notification(body: &[u8]) -> bool {
    use serde_json::value::RawValue;
    type Members<'a> = std::collections::BTreeMap<String, &'a RawValue>;
    let one = |members: &Members<'_>| {
        let text = |key: &str| {
            members
                .get(key)
                .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        };
        !members.contains_key("id")
            && text("jsonrpc").as_deref() == Some("2.0")
            && text("method").is_some_and(|m| !m.is_empty())
    };
    if let Ok(items) = serde_json::from_slice::<Vec<Members<'_>>>(body) {
        return !items.is_empty() && items.iter().all(one);
    }
    serde_json::from_slice::<Members<'_>>(body).is_ok_and(|members| one(&members))
}

#[test]
fn the_seed_corpus_gets_well_formed_answers() {
    let (server, _dir) = server();
    let runtime = runtime();
    let corpus = include_str!("../tests/corpus/seeds.txt");
    for line in corpus.lines().filter(|l| !l.is_empty()) {
        check(&server, &runtime, line.as_bytes());
    }
}

fn json_ish() -> impl Strategy<Value = String> {
    let method = prop::sample::select(
        methods::served()
            .map(|m| m.to_string())
            .chain(["eth_call".into(), "".into()])
            .collect::<Vec<_>>(),
    );
    let param = prop_oneof![
        Just("\"latest\"".to_string()),
        Just("true".to_string()),
        Just("null".to_string()),
        (0u64..20).prop_map(|n| format!("\"0x{n:x}\"")),
        "[0-9a-fx]{0,70}".prop_map(|s| format!("\"{s}\"")),
        Just(r#"{"fromBlock":"0x1","toBlock":"0x9","address":"0x0101010101010101010101010101010101010101"}"#.to_string()),
        Just(r#"{"blockHash":"0x00","topics":[[]]}"#.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
    ];
    (method, prop::collection::vec(param, 0..4), any::<bool>()).prop_map(
        |(method, params, batch)| {
            let call = format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":[{}]}}"#,
                params.join(",")
            );
            if batch {
                format!("[{call},{call}]")
            } else {
                call
            }
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_get_a_well_formed_answer(body in prop::collection::vec(any::<u8>(), 0..200)) {
        let (server, _dir) = server();
        check(&server, &runtime(), &body);
    }

    #[test]
    fn json_shaped_requests_get_well_formed_answers(body in json_ish()) {
        let (server, _dir) = server();
        check(&server, &runtime(), body.as_bytes());
    }
}

/// A chain view whose follower may be down, with a fresh upstream that
/// may say which blocks it proves state at.
struct Following(bool, Option<neve_upstream::StateWindow>);

impl ChainView for Following {
    fn upstream_head(&self) -> Option<u64> {
        Some(9)
    }
    fn safe(&self) -> Option<u64> {
        None
    }
    fn finalized(&self) -> Option<u64> {
        None
    }
    fn upstream_health(&self) -> UpstreamHealth {
        UpstreamHealth {
            connected: true,
            last_contact_age_seconds: Some(0.1),
            ..UpstreamHealth::default()
        }
    }
    fn following(&self) -> bool {
        self.0
    }
    fn upstream_state_window(&self) -> Option<neve_upstream::StateWindow> {
        self.1
    }
}

fn answer(server: &Server, runtime: &tokio::runtime::Runtime, body: &str) -> (u16, String) {
    let response = runtime.block_on(server.respond(&Bytes::copy_from_slice(body.as_bytes())));
    let status = response.status().as_u16();
    let bytes = runtime
        .block_on(response.into_body().collect())
        .unwrap()
        .to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

#[test]
fn a_batch_past_its_answer_bytes_gets_response_too_large_for_the_rest() {
    let (server, _dir) = server_configured(Arc::new(FixedChain), |config| {
        config.max_batch_answer_bytes = 1000;
    });
    let runtime = runtime();
    let block = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_getBlockByNumber","params":["0x1",true]}}"#
        )
    };
    let one = answer(&server, &runtime, &block(0)).1.len();
    assert!(
        one < 1000 && 2 * one > 1000,
        "a block's answer is {one} bytes"
    );
    // The second passes the limit and is kept; the rest, and not the
    // notification, get -32003.
    let body = format!(
        "[{},{},{},{},{}]",
        block(1),
        block(2),
        r#"{"jsonrpc":"2.0","method":"eth_chainId","params":[]}"#,
        block(4),
        r#"{"jsonrpc":"2.0","id":"x","method":"eth_chainId","params":[]}"#
    );
    let (status, text) = answer(&server, &runtime, &body);
    assert_eq!(status, 200);
    let answers: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(answers.len(), 4);
    assert!(answers[0]["result"].is_object() && answers[1]["result"].is_object());
    for (answer, id) in answers[2..]
        .iter()
        .zip([serde_json::json!(4), serde_json::json!("x")])
    {
        assert_eq!(answer["id"], id);
        assert_eq!(answer["error"]["code"], -32003);
        assert_eq!(answer["error"]["message"], "response too large");
    }
}

#[test]
fn the_batch_answer_cap_holds_after_a_deferred_element() {
    let runtime = runtime();
    let query = r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x0","toBlock":"0x9"}]}"#;
    let block = r#"{"jsonrpc":"2.0","id":2,"method":"eth_getBlockByNumber","params":["0x1",true]}"#;
    let configure = |config: &mut ServeConfig| {
        config.logs_max_range = 10;
        config.logs_max_results = 10_000;
    };
    let (probe, _probe_dir) = server_configured(Arc::new(FixedChain), configure);
    let logs = answer(&probe, &runtime, query).1.len();
    let one_block = answer(&probe, &runtime, block).1.len();
    // Room for the three inline log answers and half a block.
    let (server, _dir) = server_configured(Arc::new(FixedChain), |config| {
        configure(config);
        config.max_batch_answer_bytes = 3 * logs + one_block / 2;
    });
    // The fourth log query goes to the scan threads (its size unknown
    // until it is answered); forty blocks follow it.
    let mut calls = vec![query; 4];
    calls.extend([block; 40]);
    let (status, body) = answer(&server, &runtime, &format!("[{}]", calls.join(",")));
    assert_eq!(status, 200);
    let answers: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(answers.len(), 44);
    assert!(
        answers[..4].iter().all(|a| a["result"].is_array()),
        "{body}"
    );
    assert!(
        answers[5..].iter().all(|a| a["error"]["code"] == -32003),
        "{body}"
    );
    // Counted before they were built: no block past the cap was built
    // (each built answer is counted in /metrics).
    let mut metrics = String::new();
    server.metrics.render(&mut metrics);
    let built: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("neve_rpc_requests_total{method=\"eth_getBlockByNumber\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(built <= 1, "{built} blocks built past the cap:\n{metrics}");
}

#[test]
fn exports_are_bounded_and_charged_by_the_bytes_they_send() {
    let (server, _dir) = server();
    let mut server = server;
    // One unit a second: a few KiB of export puts the client in debt.
    server.clients = clients::ClientBudget::new(1);
    let server = Arc::new(server);
    let runtime = runtime();
    let client: std::net::IpAddr = "127.0.0.7".parse().unwrap();
    let _entered = runtime.enter();
    let held: Vec<_> = (0..export::MAX_EXPORTS)
        .map(|_| server.export("from=0&to=9", client))
        .collect();
    assert!(held.iter().all(|r| r.status() == 200));
    let refused = server.export("", client);
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    drop(held);
    let export = server.export("from=0&to=9", client);
    assert_eq!(export.status(), 200);
    let body = runtime
        .block_on(export.into_body().collect())
        .unwrap()
        .to_bytes();
    assert_eq!(
        body.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .count(),
        10
    );
    assert!(body.len() > 2 * clients::BYTES_PER_UNIT, "{}", body.len());
    // The bytes sent were charged: the client is in debt.
    let in_debt = server
        .clients
        .as_ref()
        .unwrap()
        .admit(client, Instant::now());
    assert!(in_debt.is_err());
}

#[test]
fn while_no_follower_runs_latest_is_a_miss_and_readiness_is_down() {
    let runtime = runtime();
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}"#;
    let by_number =
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x3",false]}"#;
    for following in [true, false] {
        let (server, _dir) = server_with(Arc::new(Following(following, None)));
        let (status, _) = answer(&server, &runtime, head);
        assert_eq!(
            status,
            if following { 200 } else { 421 },
            "following: {following}"
        );
        // What is stored stays served.
        assert_eq!(answer(&server, &runtime, by_number).0, 200);
        let ready = server.ready().status().as_u16();
        assert_eq!(ready, if following { 200 } else { 503 });
        let health: serde_json::Value = serde_json::from_str(&server.health()).unwrap();
        assert_eq!(health["follower"]["running"], following);
        assert_eq!(health["status"], if following { "ok" } else { "degraded" });
    }
}

/// Requests geth refuses are refused here the same way (code, message and
/// id), and what geth accepts is accepted: the table was read off geth
/// 1.17 and is checked against a live geth in the binary's tests.
#[test]
fn request_validation_matches_geth() {
    let (server, _dir) = server();
    let runtime = runtime();
    let invalid = |id: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32600,"message":"invalid request"}}}}"#
        )
    };
    let params = |message: &str| {
        format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":-32602,"message":"{message}"}}}}"#)
    };
    let cases: Vec<(&str, String)> = vec![
        (
            r#"{"id":1,"method":"eth_chainId","params":[]}"#,
            invalid("1"),
        ),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"eth_chainId","params":[]}"#,
            invalid("1"),
        ),
        (
            r#"{"jsonrpc":2,"id":1,"method":"eth_chainId","params":[]}"#,
            invalid("1"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"eth_chainId"}"#,
            invalid("null"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":[1],"method":"eth_chainId"}"#,
            invalid("null"),
        ),
        (r#"{"jsonrpc":"2.0","id":1,"params":[]}"#, invalid("1")),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"","params":[]}"#,
            invalid("1"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[1]}"#,
            params("too many arguments, want at most 0"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0"]}"#,
            params("missing value for required argument 1"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByHash","params":["0x0000000000000000000000000000000000000000000000000000000000000000"]}"#,
            params("missing value for required argument 1"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0",false,1]}"#,
            params("too many arguments, want at most 2"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[]}"#,
            params("missing value for required argument 0"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getTransactionByBlockNumberAndIndex","params":["0x0"]}"#,
            params("missing value for required argument 1"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x0000000000000000000000000000000000000001","latest",1]}"#,
            params("too many arguments, want at most 2"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":{}}"#,
            params("non-array args"),
        ),
        // Accepted: no params, null params, null and odd ids, 0X prefixes.
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"0x5"}"#.into(),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":null}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"0x5"}"#.into(),
        ),
        (
            r#"{"jsonrpc":"2.0","id":null,"method":"eth_chainId"}"#,
            r#"{"jsonrpc":"2.0","id":null,"result":"0x5"}"#.into(),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1.5,"method":"eth_chainId"}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"result":"0x5"}"#.into(),
        ),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockTransactionCountByNumber","params":["0X3"]}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"0x3"}"#.into(),
        ),
        // Notifications are not answered, alone or in a batch.
        (r#"{"jsonrpc":"2.0","method":"eth_chainId"}"#, String::new()),
        (
            r#"[{"jsonrpc":"2.0","method":"eth_chainId"}]"#,
            String::new(),
        ),
        (
            r#"[{"jsonrpc":"2.0","method":"eth_chainId"},{"jsonrpc":"2.0","id":3,"method":"eth_chainId"}]"#,
            r#"[{"jsonrpc":"2.0","id":3,"result":"0x5"}]"#.into(),
        ),
    ];
    for (request, expected) in cases {
        let (status, body) = answer(&server, &runtime, request);
        assert_eq!(status, 200, "{request}");
        assert_eq!(body, expected, "{request}");
    }
}

/// Fuzz target: the request path (single, batch, every method's params)
/// and WebSocket messages, from the seed corpus and real requests of every
/// served method. Every input gets a well-formed answer and nothing panics
/// or hangs. The suite runs a short campaign; HARDENING.md a long one.
#[test]
fn fuzz_the_request_path() {
    let (server, _dir) = server();
    let runtime = runtime();
    let mut seeds: Vec<Vec<u8>> = include_str!("../tests/corpus/seeds.txt")
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| l.as_bytes().to_vec())
        .collect();
    let hash = format!("\"0x{}\"", "ab".repeat(32));
    let address = format!("\"0x{}\"", "01".repeat(20));
    for (method, params) in [
        ("eth_getBlockByNumber", r#"["0x3",true]"#.to_string()),
        ("eth_getBlockByHash", format!("[{hash},false]")),
        ("eth_getTransactionByHash", format!("[{hash}]")),
        (
            "eth_getTransactionByBlockNumberAndIndex",
            r#"["latest","0x1"]"#.into(),
        ),
        ("eth_getBlockReceipts", r#"[{"blockNumber":"0x2"}]"#.into()),
        (
            "eth_getLogs",
            format!(
                r#"[{{"fromBlock":"0x1","toBlock":"0x9","address":[{address}],"topics":[null,[{hash}]]}}]"#
            ),
        ),
        ("eth_getBalance", format!("[{address},\"0x4\"]")),
        (
            "eth_getStorageAt",
            format!("[{address},\"0x0\",\"latest\"]"),
        ),
        ("eth_getProof", format!("[{address},[{hash}],\"0x5\"]")),
        (
            "eth_getStorageValues",
            format!("[{{{address}:[{hash}]}},\"latest\"]"),
        ),
        ("debug_getRawBlock", r#"["0x1"]"#.into()),
        ("eth_subscribe", r#"["logs",{"topics":[]}]"#.into()),
        ("eth_unsubscribe", r#"["0x1"]"#.into()),
    ] {
        let call = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#);
        seeds.push(format!("[{call},{call}]").into_bytes());
        seeds.push(call.into_bytes());
    }
    let dictionary: [&[u8]; 22] = [
        b"{",
        b"}",
        b"[",
        b"]",
        b"\"",
        b",",
        b":",
        b"null",
        b"true",
        b"false",
        b"\"jsonrpc\":\"2.0\"",
        b"\"id\":",
        b"\"method\":",
        b"\"params\":",
        b"0x",
        b"0X",
        b"\"latest\"",
        b"\\u0000",
        b"\xff\xfe",
        b"-1",
        b"1e999",
        b"\"blockHash\":",
    ];
    let mut subscriptions = std::collections::HashMap::new();
    let mut next_id = 1;
    let report = neve_devnet::fuzz::run("request path", &seeds, &dictionary, 64 << 10, |input| {
        check(&server, &runtime, input);
        if subscriptions.len() > 32 {
            subscriptions.clear();
        }
        let _ = ws::subscription_call(
            &String::from_utf8_lossy(input),
            &mut subscriptions,
            &mut next_id,
        );
    });
    eprintln!("request path: {report}");
}

#[test]
fn capabilities_advertise_the_tail_and_where_state_can_be_proven() {
    let runtime = runtime();
    let ask = |chain: Following, state_answers: bool| {
        let (mut server, _dir) = server_with(Arc::new(chain));
        Arc::get_mut(&mut server.ctx).unwrap().state_answers = state_answers;
        let (status, body) = answer(
            &server,
            &runtime,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_capabilities"}"#,
        );
        assert_eq!(status, 200, "{body}");
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        body["result"].clone()
    };
    let window = |oldest, retention| {
        Some(neve_upstream::StateWindow {
            disabled: false,
            oldest,
            retention,
        })
    };
    let caps = ask(Following(true, window(0, None)), false);
    assert_eq!(caps["head"]["number"], "0x9");
    for resource in ["blocks", "tx", "receipts", "logs"] {
        assert_eq!(
            caps[resource],
            serde_json::json!({"disabled": false, "oldestBlock": "0x0"})
        );
    }
    let disabled = serde_json::json!({"disabled": true});
    assert_eq!(
        (&caps["state"], &caps["stateproofs"]),
        (&disabled, &disabled)
    );
    // An archive upstream: all of the tail.
    let caps = ask(Following(true, window(0, None)), true);
    assert_eq!(
        caps["state"],
        serde_json::json!({"disabled": false, "oldestBlock": "0x0"})
    );
    // A full node keeping 4 blocks: the newest 4 of the tail.
    let caps = ask(Following(true, window(0, Some(4))), true);
    assert_eq!(
        caps["stateproofs"],
        serde_json::json!({"disabled": false, "oldestBlock": "0x6",
            "deleteStrategy": {"type": "window", "retentionBlocks": "0x4"}})
    );
    // An upstream that says nothing is taken to keep the newest 32.
    let caps = ask(Following(true, None), true);
    assert_eq!(caps["state"]["deleteStrategy"]["retentionBlocks"], "0x20");
    // One that proves nothing, or nothing within the tail.
    let off = Some(neve_upstream::StateWindow {
        disabled: true,
        oldest: 0,
        retention: None,
    });
    assert_eq!(ask(Following(true, off), true)["state"], disabled);
    assert_eq!(
        ask(Following(true, window(50, None)), true)["state"],
        disabled
    );
}

#[test]
fn log_scans_past_the_queue_bound_are_refused_at_once_and_change_nothing() {
    let (server, _dir) = server_configured(Arc::new(FixedChain), |config| {
        config.logs_max_range = 10;
        config.logs_max_results = 10_000;
    });
    let runtime = runtime();
    // Three 10-block queries use the request's inline blocks; the fourth
    // goes to the scan threads.
    let query = r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x0","toBlock":"0x9"}]}"#;
    let batch = format!("[{}]", [query; 4].join(","));
    let parse = |body: &str| serde_json::from_str::<Vec<serde_json::Value>>(body).unwrap();
    let queued = &server.metrics.scans_queued;

    queued.store(logs::MAX_QUEUED_SCANS, Ordering::Relaxed);
    let (status, body) = answer(&server, &runtime, &batch);
    let busy = parse(&body);
    assert_eq!(status, 200);
    assert!(busy[..3].iter().all(|a| a["result"].is_array()), "{body}");
    assert_eq!(busy[3]["error"]["code"], -32005, "{body}");
    assert!(
        busy[3]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("log scans queued")
    );
    assert_eq!(queued.load(Ordering::Relaxed), logs::MAX_QUEUED_SCANS);
    assert_eq!(server.metrics.scans_refused.load(Ordering::Relaxed), 1);

    queued.store(0, Ordering::Relaxed);
    let (_, body) = answer(&server, &runtime, &batch);
    let answered = parse(&body);
    assert_eq!(answered[3]["result"], answered[0]["result"], "{body}");
    assert!(!answered[3]["result"].as_array().unwrap().is_empty());
    assert_eq!(
        queued.load(Ordering::Relaxed),
        0,
        "the scan's place is freed"
    );
}

/// Polls `future` once.
async fn poll_once<F: std::future::Future>(
    mut future: std::pin::Pin<&mut F>,
) -> std::task::Poll<F::Output> {
    std::future::poll_fn(move |cx| std::task::Poll::Ready(future.as_mut().poll(cx))).await
}

/// Issue 23: a call whose records are not in memory is answered on the I/O
/// threads, never on an async worker, and a call that needs no disk is
/// answered while it waits there.
#[test]
fn cold_reads_go_to_the_io_threads_and_others_are_answered_meanwhile() {
    let (server, _dir) = server();
    let runtime = runtime();
    let expected = server.ctx.reader.block(3).unwrap().full().unwrap();
    if !neve_store::testing::page_out(&server.ctx.reader) {
        eprintln!("MADV_PAGEOUT unsupported here: nothing to show");
        return;
    }
    // Every I/O thread held until the gate opens: cold reads stay in flight.
    let gate = Arc::new(std::sync::RwLock::new(()));
    let closed = gate.write().unwrap();
    runtime.block_on(async {
        let holds = futures_util::future::join_all((0..IO_THREADS).map(|_| {
            let gate = gate.clone();
            server.io.run(move || drop(gate.read()))
        }));
        tokio::pin!(holds);
        assert!(poll_once(holds.as_mut()).await.is_pending());
        let body = Bytes::from_static(
            br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x3",true]}"#,
        );
        let cold = server.respond(&body);
        tokio::pin!(cold);
        assert!(
            poll_once(cold.as_mut()).await.is_pending(),
            "waits for an I/O thread"
        );
        assert_eq!(server.metrics.cold_reads.load(Ordering::Relaxed), 1);

        let chain_id = Bytes::from_static(br#"{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}"#);
        let answer = server.respond(&chain_id).await;
        assert_eq!(answer.status(), 200, "answered while the cold read waits");

        drop(closed);
        let answer = cold.await;
        assert_eq!(answer.status(), 200);
        let bytes = answer.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes).into_owned();
        assert!(
            text.contains(std::str::from_utf8(&expected).unwrap()),
            "{text}"
        );
        holds.await;
    });
    assert_eq!(server.metrics.cold_reads_queued.load(Ordering::Relaxed), 0);
    // The answer read from the disk was counted until it was written out.
    assert_eq!(
        server.metrics.cold_answer_bytes.load(Ordering::Relaxed),
        0,
        "written and dropped"
    );
}

/// Issue 31: cold answers held in the heap have a bound in bytes
/// ([`crate::MAX_COLD_ANSWER_BYTES`]): past it a cold read is a miss at
/// once, counted, while reads that need no disk are answered.
#[test]
fn cold_answers_past_their_byte_bound_are_misses_at_once() {
    let (server, _dir) = server();
    let runtime = runtime();
    if !neve_store::testing::page_out(&server.ctx.reader) {
        eprintln!("MADV_PAGEOUT unsupported here: nothing to show");
        return;
    }
    server
        .metrics
        .cold_answer_bytes
        .store(crate::MAX_COLD_ANSWER_BYTES + 1, Ordering::Relaxed);
    let (status, _) = answer(
        &server,
        &runtime,
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x3",true]}"#,
    );
    assert_eq!(status, 421);
    assert_eq!(server.metrics.cold_reads_refused.load(Ordering::Relaxed), 1);
    let (status, _) = answer(
        &server,
        &runtime,
        r#"{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}"#,
    );
    assert_eq!(status, 200);
}

/// Issue 31: one rule for every read. With the store paged out, every
/// method that reads a record is answered on an async worker without
/// faulting a page in: each is `Cold` (answered again on the I/O threads)
/// or answered from what needs no record, and the store's pages stay out
/// of memory.
#[test]
fn no_served_method_faults_a_page_in_on_an_async_worker() {
    let (server, _dir) = server();
    let block = SyntheticBlock::new(0, 4, 3, 200);
    let (hash, tx) = (
        format!("0x{}", hex(&block.hash)),
        format!("0x{}", hex(&block.txs[1].hash)),
    );
    let address = format!("0x{}", hex(&[0x11; 20]));
    let calls: Vec<(&str, String)> = vec![
        ("eth_getBlockByNumber", r#"["0x4",false]"#.into()),
        ("eth_getBlockByNumber", r#"["0x4",true]"#.into()),
        ("eth_getBlockByHash", format!(r#"["{hash}",false]"#)),
        ("eth_getBlockTransactionCountByNumber", r#"["0x4"]"#.into()),
        (
            "eth_getBlockTransactionCountByHash",
            format!(r#"["{hash}"]"#),
        ),
        ("eth_getUncleCountByBlockNumber", r#"["0x4"]"#.into()),
        (
            "eth_getUncleByBlockHashAndIndex",
            format!(r#"["{hash}","0x0"]"#),
        ),
        (
            "eth_getTransactionByBlockNumberAndIndex",
            r#"["0x4","0x1"]"#.into(),
        ),
        (
            "eth_getTransactionByBlockHashAndIndex",
            format!(r#"["{hash}","0x1"]"#),
        ),
        ("eth_getTransactionByHash", format!(r#"["{tx}"]"#)),
        ("eth_getTransactionReceipt", format!(r#"["{tx}"]"#)),
        ("eth_getBlockReceipts", r#"["0x4"]"#.into()),
        ("debug_getRawHeader", r#"["0x4"]"#.into()),
        ("debug_getRawBlock", r#"["0x4"]"#.into()),
        ("debug_getRawReceipts", r#"["0x4"]"#.into()),
        ("debug_getRawTransaction", format!(r#"["{tx}"]"#)),
        ("eth_getLogs", format!(r#"[{{"blockHash":"{hash}"}}]"#)),
        (
            "eth_getLogs",
            r#"[{"fromBlock":"0x3","toBlock":"0x4"}]"#.into(),
        ),
        ("eth_getBalance", format!(r#"["{address}","0x4"]"#)),
        (
            "eth_getStorageAt",
            format!(r#"["{address}","0x0","{hash}"]"#),
        ),
        ("eth_getProof", format!(r#"["{address}",[],"0x4"]"#)),
    ];
    if !neve_store::testing::page_out(&server.ctx.reader) {
        eprintln!("MADV_PAGEOUT unsupported here: nothing to show");
        return;
    }
    let resident = || server.ctx.reader.residency(1 << 16).resident_bytes();
    // Paging out is the kernel's best effort (a page under I/O stays):
    // asked again a few times before the test gives up showing anything.
    for _ in 0..5 {
        if resident() == 0 {
            break;
        }
        neve_store::testing::page_out(&server.ctx.reader);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if resident() != 0 {
        eprintln!("the kernel kept some of the store in memory: nothing to show");
        return;
    }
    for (method, params) in &calls {
        let params = RawValue::from_string(params.clone()).unwrap();
        let reply = if *method == "eth_getLogs" {
            match server.ctx.logs_plan(Some(&params), Reads::InMemory) {
                Ok(plan) => {
                    assert!(!plan.in_memory(&server.ctx), "{method} {params}");
                    Reply::Cold
                }
                Err(reply) => reply,
            }
        } else {
            server.ctx.call(method, Some(&params), Reads::InMemory)
        };
        assert!(
            matches!(reply, Reply::Cold),
            "{method} {params}: answered on the worker from a cold store"
        );
        assert_eq!(resident(), 0, "{method} {params} faulted a page in");
    }
    // Answered where waiting is allowed: never cold there, and the block,
    // transaction and receipt methods get their answers.
    for (method, params) in &calls {
        let params = RawValue::from_string(params.clone()).unwrap();
        let reply = server.ctx.call(method, Some(&params), Reads::FromDisk);
        assert!(!matches!(reply, Reply::Cold), "{method} {params} from disk");
        let answered = !method.contains("Uncle") && !method.starts_with("debug_getRaw");
        if answered
            && method.starts_with("eth_get")
            && !method.contains("Balance")
            && *method != "eth_getLogs"
        {
            assert!(
                matches!(reply, Reply::Result(_))
                    || method.contains("Storage")
                    || method.contains("Proof"),
                "{method} {params} from disk"
            );
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// An upstream whose head is `0` and was announced `1` ago; neve holds
/// blocks 0 to 9.
struct Announced(u64, Duration);

impl ChainView for Announced {
    fn upstream_head(&self) -> Option<u64> {
        Some(self.0)
    }
    fn safe(&self) -> Option<u64> {
        None
    }
    fn finalized(&self) -> Option<u64> {
        None
    }
    fn upstream_health(&self) -> UpstreamHealth {
        UpstreamHealth::default()
    }
    fn upstream_head_age(&self) -> Option<Duration> {
        Some(self.1)
    }
}

/// In the moment between the upstream announcing block 10 and neve
/// storing it, `latest` is block 9 for the grace, then a miss; never a
/// block more than one behind.
#[test]
fn latest_is_the_block_before_a_new_head_only_for_the_grace() {
    let runtime = runtime();
    let head = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}"#;
    let syncing = r#"{"jsonrpc":"2.0","id":1,"method":"eth_syncing","params":[]}"#;
    let fresh = Duration::from_millis(100);
    let stale = Duration::from_secs(2);
    for (upstream, age, grace, answered) in [
        (10, fresh, crate::DEFAULT_LATEST_GRACE, true),
        (10, stale, crate::DEFAULT_LATEST_GRACE, false),
        (10, fresh, Duration::ZERO, false),
        (11, fresh, crate::DEFAULT_LATEST_GRACE, false),
        (9, stale, crate::DEFAULT_LATEST_GRACE, true),
    ] {
        let (server, _dir) = server_configured(Arc::new(Announced(upstream, age)), |config| {
            config.latest_grace = grace;
        });
        let case = format!("upstream at {upstream}, announced {age:?} ago, grace {grace:?}");
        let (status, body) = answer(&server, &runtime, head);
        if answered {
            assert_eq!(status, 200, "{case}: {body}");
            assert!(body.contains(r#""result":"0x9""#), "{case}: {body}");
            assert!(
                answer(&server, &runtime, syncing).1.contains("false"),
                "{case}"
            );
        } else {
            assert_eq!(status, 421, "{case}: {body}");
            assert!(
                answer(&server, &runtime, syncing)
                    .1
                    .contains("highestBlock"),
                "{case}"
            );
        }
    }
}
