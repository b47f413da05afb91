//! The conformance harness proven on geth itself: geth v1.17.5 on the
//! imported execution-apis chain passes every case of the block-tail methods.

use neve_devnet::GethConformance;
use neve_devnet::conformance::{BLOCK_TAIL_METHODS, fixtures_dir, load_cases, run_all};
use neve_upstream::RpcClient;

#[tokio::test(flavor = "multi_thread")]
async fn geth_passes_every_block_tail_case_on_the_conformance_chain() {
    let fixtures = fixtures_dir();
    let cases = load_cases(&fixtures, BLOCK_TAIL_METHODS).expect("fixtures load");
    assert!(
        cases.len() >= 40,
        "only {} cases found in {}",
        cases.len(),
        fixtures.display()
    );

    let geth = GethConformance::start(&fixtures)
        .await
        .expect("geth starts on the conformance chain");
    let client = RpcClient::new(geth.http_url()).unwrap();
    let report = run_all(&client, &cases).await;
    eprint!("{}", report.render());
    assert!(report.failed.is_empty(), "{}", report.render());
    // Every method in the list had at least one case run.
    for method in BLOCK_TAIL_METHODS {
        assert!(
            report
                .passed
                .iter()
                .any(|name| name.starts_with(&format!("{method}/"))),
            "no case ran for {method}"
        );
    }
}
