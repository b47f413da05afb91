//! The headline suite end to end at smoke size (geth, avalanchego, two
//! neves, nginx), and a TPS run read off a real chain.

mod support;

use serde_json::Value;
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_headline_suite_runs_end_to_end() {
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().display().to_string();
    let output = run_neve(&[
        "bench",
        "--suite",
        "headline",
        "--blocks",
        "40",
        "--block-txs",
        "5",
        "--avalanchego-seconds",
        "12",
        "--conns",
        "1,2",
        "--warmup",
        "0",
        "--duration",
        "0.3",
        "--pool",
        "50",
        "--workload",
        "randblock",
        "--workload",
        "randblock-full",
        "--out",
        &out_dir,
    ])
    .await;
    let summary = expect_success(&output);
    assert!(summary.contains("## neve vs Geth/v1.17.5"), "{summary}");
    assert!(summary.contains("(avalanchego C-chain)"), "{summary}");
    assert!(summary.contains("neve vs static"), "{summary}");
    assert!(
        !summary.contains("FLAGGED"),
        "every target, the ceiling included, answered every request:\n{summary}"
    );
    for pair in ["geth", "avalanchego"] {
        let results = read_json(&out.path().join(pair).join("results.json"));
        let targets = results["workloads"][0]["targets"].as_array().unwrap();
        let names: Vec<&str> = targets
            .iter()
            .map(|t| t["target"]["name"].as_str().unwrap())
            .collect();
        let expected: &[&str] = match pair {
            "geth" => &["neve", "geth", "static"],
            _ => &["neve", "avalanchego"],
        };
        assert_eq!(names, expected);
        for target in targets {
            let point = &target["points"][0];
            assert!(point["outcomes"]["ok"].as_u64().unwrap() > 0, "{point}");
            assert!(point["target_rss_bytes"].as_u64().unwrap() > 0, "{point}");
        }
        assert!(
            out.path()
                .join(pair)
                .join("randblock-full-throughput.png")
                .exists()
        );
    }
    assert!(out.path().join("summary.md").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn tps_is_read_from_block_timestamps() {
    let geth = neve_devnet::GethDev::start(neve_devnet::GethDevOptions {
        period: 1,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tps.json");
    let output = run_neve(&[
        "bench",
        "tps",
        "--rpc",
        geth.http_url(),
        "--transactions",
        "600",
        "--accounts",
        "6",
        "--json",
        json.to_str().unwrap(),
    ])
    .await;
    let table = expect_success(&output);
    assert!(
        table.contains("| block | transactions | block time s | TPS |"),
        "{table}"
    );
    let report: Value = read_json(&json);
    // A transient refusal by the pool may drop a few; what the pool took
    // is all included.
    let sent = report["sent"].as_u64().unwrap();
    assert!((570..=600).contains(&sent), "{report}");
    assert_eq!(report["included"], sent, "{report}");
    let blocks = report["blocks"].as_array().unwrap();
    let in_blocks: u64 = blocks
        .iter()
        .map(|b| b["transactions"].as_u64().unwrap())
        .sum();
    assert!(in_blocks >= sent, "{report}");
    assert!(report["average_tps"].as_f64().unwrap() > 0.0, "{report}");
    assert!(
        blocks
            .iter()
            .all(|b| b["block_time"].as_u64().unwrap() >= 1),
        "one-second blocks: {report}"
    );
}
