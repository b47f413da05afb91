//! Operating neve like the other services on a host: `--version` names the
//! build, logs come as JSON lines with their values as fields, durations
//! and sizes take units, `--help` groups its flags, proxies' liveness
//! probes (`net_listening`, `net_peerCount`) are answered, and a rolling
//! restart's drain delay keeps answering while readiness is 503.

mod support;

use std::time::{Duration, Instant};

use neve_upstream::RpcClient;
use serde_json::{Value, json};
use support::*;

#[tokio::test]
async fn version_names_the_commit_and_build_date() {
    let printed = expect_success(&run_neve(&["--version"]).await);
    let line = printed.trim();
    assert!(
        line.starts_with(&format!("neve {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{line}"
    );
    let built = line
        .split("built ")
        .nth(1)
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("a build date in {line}"));
    assert!(
        built.len() == 10 && built.as_bytes()[4] == b'-' && built.as_bytes()[7] == b'-',
        "{built}"
    );
}

#[tokio::test]
async fn serve_help_groups_its_flags_under_headings() {
    let help = expect_success(&run_neve(&["serve", "--help"]).await);
    for heading in [
        "Upstream:",
        "Store:",
        "Ingest:",
        "Listeners:",
        "Answers:",
        "Limits:",
        "State:",
        "Logging:",
    ] {
        assert!(help.contains(heading), "{heading} in:\n{help}");
    }
    // Defaults are shown with units.
    assert!(help.contains("[default: 1m]"), "{help}");
    assert!(help.contains("[default: 5MiB]"), "{help}");
}

#[tokio::test]
async fn durations_and_sizes_take_units_from_flags_environment_and_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("neve.toml");
    std::fs::write(
        &file,
        "upstream = \"http://127.0.0.1:9\"\nstate-cache-bytes = \"64MiB\"\nidle-timeout = \"2m\"\n",
    )
    .unwrap();
    let output = tokio::task::spawn_blocking({
        let file = file.clone();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_neve"))
                .args(["config", "--config"])
                .arg(&file)
                .args(["--upstream-timeout-ms", "5s", "--max-body-bytes", "1MiB"])
                .env("NEVE_DRAIN_TIMEOUT", "1500ms")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let printed = expect_success(&output);
    for (key, value) in [
        ("upstream-timeout-ms", "\"5s\"  # flag"),
        ("max-body-bytes", "\"1MiB\"  # flag"),
        ("drain-timeout", "\"1500ms\"  # environment"),
        ("state-cache-bytes", "\"64MiB\"  # file"),
        ("idle-timeout", "\"2m\"  # file"),
    ] {
        let line = printed
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{key} in:\n{printed}"));
        assert_eq!(line, format!("{key} = {value}"), "{printed}");
    }
    // Nonsense is refused naming the flag and an example.
    let refused = run_neve(&[
        "config",
        "--upstream",
        "http://127.0.0.1:9",
        "--idle-timeout",
        "soon",
    ])
    .await;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("--idle-timeout") && said.contains("30s"),
        "{said}"
    );
}

/// Every line neve logs with `--log-format json` is one JSON object with a
/// timestamp, level, target and message, and the values of an event are
/// keys of their own.
#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_a_line_with_fields_as_keys() {
    let (geth, head) = dev_chain_of(3).await;
    let neve = Neve::start(
        geth.http_url(),
        &[
            "--floor",
            "0",
            "--log-format",
            "json",
            "--log-level",
            "info,neve_ingest=debug",
        ],
        head,
    )
    .await;
    let log = neve.log();
    let mut serving = None;
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}\nwhole log:\n{log}"));
        for key in ["timestamp", "level", "target", "message"] {
            assert!(event.get(key).is_some(), "{key} in {line}");
        }
        if event["message"] == "serving" {
            serving = Some(event);
        }
    }
    let serving = serving.unwrap_or_else(|| panic!("a `serving` event in:\n{log}"));
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["listen"], neve.addr.as_str());
    assert!(serving["chain_id"].is_u64(), "{serving}");
    assert!(
        serving["upstream"].as_str().unwrap().starts_with("http://"),
        "{serving}"
    );
    // A filter with a level per module: debug lines of ingest only.
    let levels: Vec<(String, String)> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|e| {
            (
                e["level"].as_str().unwrap_or_default().to_owned(),
                e["target"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert!(
        levels
            .iter()
            .filter(|(level, _)| level == "DEBUG")
            .all(|(_, target)| target.starts_with("neve_ingest")),
        "{levels:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_log_filter_that_does_not_parse_is_refused_at_start() {
    let output = run_neve(&[
        "serve",
        "--upstream",
        "http://127.0.0.1:9",
        "--log-level",
        "neve_ingest=loud",
    ])
    .await;
    assert!(!output.status.success());
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("--log-level"), "{said}");
}

/// dshackle and proxyd keep a backend in their pool while it says it
/// listens and has a peer; a mirror's one peer is its upstream. The build
/// is in `/metrics` and `web3_clientVersion`.
#[tokio::test(flavor = "multi_thread")]
async fn proxies_probes_are_answered_and_the_build_is_exported() {
    let (geth, head) = dev_chain_of(2).await;
    let neve = Neve::start(geth.http_url(), &["--floor", "0"], head).await;
    let client = RpcClient::new(&neve.url).unwrap();
    assert_eq!(
        answer(&client, "net_listening", json!([])).await["result"],
        json!(true)
    );
    assert_eq!(
        answer(&client, "net_peerCount", json!([])).await["result"],
        json!("0x1")
    );
    let version = answer(&client, "web3_clientVersion", json!([])).await;
    assert!(
        version["result"]
            .as_str()
            .unwrap()
            .starts_with(&format!("neve/v{}-", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let (_, metrics) = neve.get("/metrics").unwrap();
    let info = metrics
        .lines()
        .find(|l| l.starts_with("neve_build_info{"))
        .unwrap_or_else(|| panic!("neve_build_info in:\n{metrics}"));
    assert!(
        info.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && info.contains("commit=\"")
            && info.ends_with(" 1"),
        "{info}"
    );
    assert!(
        metrics.contains("\nneve_http_max_connections "),
        "{metrics}"
    );
    // The upstream gone: no peer.
    drop(geth);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let peers = answer(&client, "net_peerCount", json!([])).await;
        if peers["result"] == "0x0" {
            break;
        }
        assert!(Instant::now() < deadline, "still {peers} with geth gone");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// During the drain delay readiness is 503 (a load balancer takes neve
/// out) while calls, new connections included, are still answered; then
/// neve drains and exits 0.
#[tokio::test(flavor = "multi_thread")]
async fn the_drain_delay_answers_while_readiness_is_down() {
    let (geth, head) = dev_chain_of(2).await;
    let mut neve = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--drain-delay", "3s"],
        head,
    )
    .await;
    wait_ready(&neve).await;
    let signalled = Instant::now();
    neve.terminate();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(neve.get("/health/ready").map(|(s, _)| s), Some(503));
    assert_eq!(neve.health().unwrap()["status"], "stopping");
    let client = RpcClient::new(&neve.url).unwrap();
    let chain_id = answer(&client, "eth_chainId", json!([])).await;
    assert!(chain_id["result"].is_string(), "{chain_id}");
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "checked within the delay"
    );
    let status = tokio::task::block_in_place(|| neve.wait_exit(Duration::from_secs(20)))
        .unwrap_or_else(|| panic!("neve did not exit:\n{}", neve.log()));
    assert!(status.success(), "{status}:\n{}", neve.log());
    assert!(
        signalled.elapsed() >= Duration::from_secs(3),
        "exited only after the delay"
    );
}

async fn wait_ready(neve: &Neve) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while neve.get("/health/ready").map(|(s, _)| s) != Some(200) {
        assert!(Instant::now() < deadline, "never ready:\n{}", neve.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
