//! A real client library (ethers, from npm) reads blocks, transactions,
//! receipts and logs through neve, makes a dapp's contract calls (static
//! calls, gas estimates, a revert with a reason, fee history), and gets
//! what geth gives it, then subscribes to newHeads over neve's WebSocket.

mod support;

use std::time::Duration;

use neve_devnet::{GethDev, GethDevOptions};
use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn ethers_reads_and_calls_through_neve_and_subscribes_to_new_heads() {
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    // A chain with token logs, then a steady trickle of blocks.
    let mut config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(3));
    config.accounts = 8;
    config.tps = Some(300);
    let report = neve_load::run(config, |_| {}).await.expect("load");
    let neve = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", geth.ws_url()],
        report.last_block,
    )
    .await;
    let mut trickle = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(40));
    trickle.accounts = 2;
    trickle.tps = Some(5);
    let trickle = tokio::spawn(neve_load::run(trickle, |_| {}));

    let script = neve_devnet::workspace_root().join("tests/clients/ethers-check.mjs");
    let ws = neve.url.replacen("http://", "ws://", 1);
    let args = [
        script.display().to_string(),
        neve.url.clone(),
        ws,
        geth.http_url().to_string(),
    ];
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node").args(&args).output()
    })
    .await
    .unwrap()
    .expect("node runs (scripts/install-deps.sh installs ethers)");
    trickle.abort();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "ethers check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    eprintln!("{summary}");
    assert!(summary["txsChecked"].as_u64().unwrap() > 10, "{summary}");
    assert!(summary["logsChecked"].as_u64().unwrap() > 0, "{summary}");
    assert!(summary["callsChecked"].as_u64().unwrap() > 0, "{summary}");
    assert_eq!(summary["heads"].as_array().unwrap().len(), 2);
}
