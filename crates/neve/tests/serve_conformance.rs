//! The conformance judge through neve: mirroring geth's import of the
//! execution-apis chain from genesis, neve passes every case of the methods
//! it serves (state reads included, fetched through from geth's proofs and
//! verified), answers 421 for the rest, and with `--fallback` to that geth
//! answers every case exactly as geth does.

mod support;

use neve_devnet::GethConformance;
use neve_devnet::conformance::{Case, fixtures_dir, load_cases, run_all, served_methods};
use neve_upstream::RpcClient;
use support::*;

fn all_methods() -> Vec<String> {
    let mut methods: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    methods.sort();
    methods
}

/// Cases neve answers 421, as its contract says, and a front end takes
/// to the node: simulations on blocks whose rules `eth_config` no longer
/// names (genesis, before the merge; block 0x35, under the previous blob
/// schedule), and one at a block past the stored head; traces of blocks
/// before the merge (1 to 3, whose rules no method of the node names),
/// and of a block or transaction neve does not hold (the node may: a
/// block of another branch, a transaction not yet stored).
const THE_NODES: &[&str] = &[
    "eth_simulateV1/ethSimulate-empty-with-block-num-set-firstblock",
    "eth_simulateV1/ethSimulate-empty-with-block-num-set-minusone",
    "eth_simulateV1/ethSimulate-make-call-with-future-block",
    "debug_traceBlockByHash/trace-block-not-found",
    "debug_traceBlockByNumber/trace-block-memory-encoding",
    "debug_traceBlockByNumber/trace-block-return-data-behavior",
    "debug_traceBlockByNumber/trace-block-storage-encoding",
    "debug_traceBlockByNumber/trace-block-with-transactions",
    "debug_traceTransaction/trace-legacy-transfer",
    "debug_traceTransaction/trace-unknown-tx",
];

/// Checks [`THE_NODES`]'s cases among `cases` get 421; returns the rest.
async fn the_nodes_cases_are_421(client: &RpcClient, cases: Vec<Case>) -> Vec<Case> {
    let (to_node, rest): (Vec<_>, Vec<_>) = cases
        .into_iter()
        .partition(|case| THE_NODES.contains(&case.name.as_str()));
    for case in &to_node {
        let (status, _) = client
            .post(case.exchanges[0].request.clone().into())
            .await
            .unwrap();
        assert_eq!(status.as_u16(), 421, "{}", case.name);
    }
    rest
}

#[tokio::test(flavor = "multi_thread")]
async fn neve_passes_every_case_of_the_methods_it_serves_and_421s_the_rest() {
    let geth = GethConformance::start(&fixtures_dir())
        .await
        .expect("geth on the conformance chain");
    let neve = Neve::start(geth.http_url(), &["--floor", "0"], 0x36).await;
    let client = RpcClient::new(&neve.url).unwrap();

    let served = load_cases(&fixtures_dir(), &served_methods()).unwrap();
    let served = the_nodes_cases_are_421(&client, served).await;
    let report = run_all(&client, &served).await;
    eprint!("{}", report.render());
    assert!(report.failed.is_empty(), "{}", report.render());

    // Every case of a method neve does not serve: HTTP 421 with -32601.
    let others: Vec<String> = all_methods()
        .into_iter()
        .filter(|m| !served_methods().contains(&m.as_str()))
        .collect();
    let others: Vec<&str> = others.iter().map(String::as_str).collect();
    for case in load_cases(&fixtures_dir(), &others).unwrap() {
        let (status, body) = client
            .post(case.exchanges[0].request.clone().into())
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(status.as_u16(), 421, "{}: {body}", case.name);
        assert_eq!(body["error"]["code"], -32601, "{}", case.name);
    }
}

/// The simulation cases alone, each answer compared whole (blocks,
/// hashes, state roots, logs): the quick judge of `eth_simulateV1`.
#[tokio::test(flavor = "multi_thread")]
async fn neve_passes_every_simulation_case() {
    let geth = GethConformance::start(&fixtures_dir())
        .await
        .expect("geth on the conformance chain");
    let neve = Neve::start(geth.http_url(), &["--floor", "0"], 0x36).await;
    let client = RpcClient::new(&neve.url).unwrap();
    let cases = load_cases(&fixtures_dir(), &["eth_simulateV1"]).unwrap();
    assert!(cases.len() >= 70, "{} cases", cases.len());
    let cases = the_nodes_cases_are_421(&client, cases).await;
    let report = run_all(&client, &cases).await;
    eprint!("{}", report.render());
    assert!(
        report.failed.is_empty(),
        "{}\nneve's log:\n{}",
        report.render(),
        neve.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_fallback_every_case_is_answered_as_geth_answers_it() {
    // Two geths on the same chain: one answers directly, one sits behind
    // neve, so state-changing cases cannot leak from one run to the other.
    let direct = GethConformance::start(&fixtures_dir()).await.expect("geth");
    let behind = GethConformance::start(&fixtures_dir()).await.expect("geth");
    let neve = Neve::start(
        behind.http_url(),
        &[
            "--floor",
            "0",
            "--fallback",
            behind.http_url(),
            // The default list of reads, and the fixtures' block builder.
            "--fallback-methods",
            &format!("{},testing_*", neve_serve::DEFAULT_FALLBACK_METHODS),
        ],
        0x36,
    )
    .await;
    let methods = all_methods();
    let methods: Vec<&str> = methods.iter().map(String::as_str).collect();
    let cases = load_cases(&fixtures_dir(), &methods).unwrap();
    let geth_report = run_all(&RpcClient::new(direct.http_url()).unwrap(), &cases).await;
    let neve_report = run_all(&RpcClient::new(&neve.url).unwrap(), &cases).await;
    eprintln!(
        "geth alone: {} passed, {} failed",
        geth_report.passed.len(),
        geth_report.failed.len()
    );
    let geth_passes: std::collections::BTreeSet<_> = geth_report.passed.iter().collect();
    let neve_passes: std::collections::BTreeSet<_> = neve_report.passed.iter().collect();
    let missing: Vec<_> = geth_passes.difference(&neve_passes).collect();
    assert!(
        missing.is_empty(),
        "geth passes but neve+fallback fails: {missing:?}\n{}",
        neve_report.render()
    );
    assert!(
        geth_report.passed.len() > 150,
        "the suite ran: {}",
        geth_report.passed.len()
    );

    // A method off the allow-list never reaches the node, alone or in a
    // batch: geth answers debug_getBadBlocks, neve does not forward it.
    let through = RpcClient::new(&neve.url).unwrap();
    let node = RpcClient::new(behind.http_url()).unwrap();
    let bad_blocks = r#"{"jsonrpc":"2.0","id":1,"method":"debug_getBadBlocks","params":[]}"#;
    let (_, answer) = node.post(bad_blocks.into()).await.unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert!(answer["result"].is_array(), "{answer}");
    let (status, answer) = through.post(bad_blocks.into()).await.unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(status.as_u16(), 421);
    assert_eq!(answer["error"]["code"], -32601, "{answer}");
    let batch = format!(
        r#"[{bad_blocks},{{"jsonrpc":"2.0","id":2,"method":"eth_call","params":[{{"to":"0x{}","data":"0x"}},"latest"]}}]"#,
        "00".repeat(20)
    );
    let (_, answer) = through.post(batch.into()).await.unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer[0]["error"]["code"], -32601, "{answer}");
    assert_eq!(answer[1]["result"], "0x", "eth_call is answered: {answer}");
}
