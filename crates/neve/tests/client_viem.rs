//! A real client library (viem, from npm) simulates through neve what a
//! wallet previews: `simulateCalls` (a token transfer and ether sent,
//! transfers and asset changes traced, a revert decoded) and
//! `simulateBlocks` (a stranger funded by a state override, then a
//! holder's transfer a block later; validation unset, off and on, full
//! transactions or hashes, a validation refusal), and gets what geth gives
//! it.

mod support;

use support::calls::*;

#[tokio::test(flavor = "multi_thread")]
async fn viem_simulates_calls_and_blocks_through_neve_as_through_geth() {
    // A chain with the load's token and its holders; the dev chain seals
    // on transactions only, so it holds still while the two are compared.
    let TokenChain {
        node,
        neve,
        token,
        holders,
        ..
    } = neve_on_a_token_chain().await;

    let script = neve_devnet::workspace_root().join("tests/clients/viem-simulate.mjs");
    let args = [
        script.display().to_string(),
        neve.url.clone(),
        node.http_url().to_string(),
        token,
        neve_devnet::GETH_DEV_ADDRESS.to_string(),
        holders[0].clone(),
    ];
    let output = tokio::task::spawn_blocking(move || {
        std::process::Command::new("node").args(&args).output()
    })
    .await
    .unwrap()
    .expect("node runs (scripts/install-deps.sh installs viem)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "viem check failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    eprintln!("{summary}");
    // Every case ran: simulateCalls' six, simulateBlocks' twelve and the
    // refusal.
    assert_eq!(summary["compared"].as_u64(), Some(19), "{summary}");
    assert_eq!(summary["simulated"].as_u64(), Some(12), "{summary}");
    // The refusal reached viem as the node's error code, which it maps to
    // its own error type.
    assert_eq!(
        summary["refusal"]["name"], "InsufficientFundsError",
        "{summary}"
    );
}
