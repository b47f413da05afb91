//! The request path fuzzed: any body gets a well-formed answer with a sane
//! status, and never a panic. Runs the seed corpus, then generated bodies.

use bytes::Bytes;
use http_body_util::BodyExt;
use proptest::prelude::*;

use crate::methods;
use crate::server::Server;
use crate::server::tests::{runtime, server};
use crate::server::ws;

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
