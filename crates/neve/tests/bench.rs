//! `neve bench` against real targets: neve mirroring a geth dev chain and
//! that geth. The run discovers both ranges, measures only real answers,
//! writes tables, JSON and plots, records what ran it and what it measured,
//! and flags the reject path loudly, exiting 3 unless told to allow it.

mod support;

use std::path::Path;

use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn bench_compares_neve_and_geth_over_the_same_blocks() {
    let (geth, neve) = neve_mirroring_a_chain_with_logs().await;
    let out = tempfile::tempdir().unwrap();
    let neve_target = format!("neve={}", neve.url);
    let geth_target = format!("geth={}", geth.http_url());
    let out_dir = out.path().display().to_string();
    let output = run_neve(&[
        "bench",
        "--target",
        &neve_target,
        "--target",
        &geth_target,
        "--workload",
        "randblock",
        "--workload",
        "logs",
        "--workload",
        "mix:block-tail",
        "--conns",
        "1,4",
        "--warmup",
        "0.2",
        "--duration",
        "1.5",
        "--pool",
        "200",
        "--out",
        &out_dir,
    ])
    .await;
    let stdout = expect_success(&output);
    eprintln!("{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("### randblock — neve"), "{stdout}");
    assert!(
        stdout.contains("| workload | target vs baseline |"),
        "{stdout}"
    );
    assert!(
        stdout.contains("every answer was a real result"),
        "a neve that holds the whole chain answers every block-tail request:\n{stdout}"
    );

    let results = read_json(&out.path().join("results.json"));
    let version = results["neve_version"].as_str().unwrap();
    assert!(version.starts_with(env!("CARGO_PKG_VERSION")), "{version}");
    let command_line = results["command_line"].as_str().unwrap();
    assert!(
        command_line.contains("bench") && command_line.contains(&neve_target),
        "{command_line}"
    );
    let results_md = std::fs::read_to_string(out.path().join("results.md")).unwrap();
    assert!(
        results_md.contains(version) && results_md.contains(command_line),
        "{results_md}"
    );
    let head = neve.health().unwrap()["blocks"]["max_contiguous_height"].clone();
    assert_eq!(results["common_range"], serde_json::json!([0, head]));
    let randblock = &results["workloads"][0];
    assert_eq!(randblock["workload"], "randblock");
    let targets = randblock["targets"].as_array().unwrap();
    // Each target's web3_clientVersion, asked once at the start.
    let versions: Vec<&str> = targets
        .iter()
        .map(|t| t["client_version"].as_str().unwrap_or_default())
        .collect();
    assert!(
        versions[0].to_ascii_lowercase().starts_with("neve"),
        "{versions:?}"
    );
    assert!(versions[1].starts_with("Geth/v"), "{versions:?}");
    assert_eq!(targets[0]["range"]["source"], "neve-health");
    assert_eq!(targets[1]["range"]["source"], "node-search");
    assert_eq!(
        targets[1]["range"]["low"], 0,
        "an archive geth serves genesis"
    );
    for target in targets {
        let points = target["points"].as_array().unwrap();
        assert_eq!(points.len(), 2);
        for point in points {
            assert!(
                point["requests_per_second"].as_f64().unwrap() > 0.0,
                "{point}"
            );
            assert!(point["outcomes"]["ok"].as_u64().unwrap() > 0, "{point}");
            assert!(
                point["target_cpu_cores"].is_number(),
                "pid found by port: {point}"
            );
            assert!(point["target_rss_bytes"].as_u64().unwrap() > 0, "{point}");
        }
    }
    assert_eq!(results["verdicts"][0]["target"], "neve");
    assert_eq!(results["verdicts"][0]["baseline"], "geth");
    for file in [
        "results.md",
        "randblock-throughput.svg",
        "randblock-latency.svg",
        "logs-throughput.svg",
    ] {
        assert!(out.path().join(file).exists(), "{file}");
    }
    let png = std::fs::read(out.path().join("randblock-throughput.png")).expect("a PNG plot");
    assert_eq!(&png[..4], b"\x89PNG");

    // The seeds' read mix is mostly balance reads: served from verified
    // proofs (fetched while the pool is primed), so no reject path.
    let output = run_neve(&[
        "bench",
        "--target",
        &neve_target,
        "--workload",
        "mix:seeds-read",
        "--workload",
        "balance",
        "--workload",
        "storage",
        "--conns",
        "2",
        "--warmup",
        "0",
        "--duration",
        "0.5",
        "--pool",
        "200",
        "--out",
        &out_dir,
    ])
    .await;
    let stdout = expect_success(&output);
    assert!(!stdout.contains("FLAGGED"), "{stdout}");
    let state = &neve.health().unwrap()["state"];
    assert!(state["hits"].as_u64().unwrap() > 0, "{state}");

    // A method neve does not serve is a 421, and the run says so loudly:
    // it writes every output, names the flagged cell and exits 3.
    let mix = out.path().join("call.toml");
    std::fs::write(
        &mix,
        "[[call]]\nmethod = \"eth_sendRawTransaction\"\nweight = 1\nparams = '[\"0x00\"]'\n",
    )
    .unwrap();
    let flagged_dir = out.path().join("flagged").display().to_string();
    let workload = format!("mix:{}", mix.display());
    let flagged = |out_dir: String, allow: bool| {
        let mut args = vec![
            "bench".to_owned(),
            "--target".into(),
            neve_target.clone(),
            "--workload".into(),
            workload.clone(),
            "--conns".into(),
            "2".into(),
            "--warmup".into(),
            "0".into(),
            "--duration".into(),
            "0.5".into(),
            "--pool".into(),
            "50".into(),
            "--out".into(),
            out_dir,
        ];
        if allow {
            args.push("--allow-flagged".into());
        }
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            run_neve(&args).await
        }
    };
    let output = flagged(flagged_dir.clone(), false).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stdout}\n{stderr}");
    assert!(stdout.contains("!!! FLAGGED"), "{stdout}");
    let last = stderr.lines().next_back().unwrap_or_default();
    assert!(
        last.contains("flagged") && last.contains(&format!("neve {workload} c2")),
        "{stderr}"
    );
    let results = read_json(&Path::new(&flagged_dir).join("results.json"));
    let point = &results["workloads"][0]["targets"][0]["points"][0];
    assert!(point["reject_path"].is_string(), "{point}");
    assert!(Path::new(&flagged_dir).join("results.md").exists());

    // --allow-flagged records the same run and exits 0.
    let output = flagged(out_dir, true).await;
    let stdout = expect_success(&output);
    assert!(stdout.contains("!!! FLAGGED"), "{stdout}");
    assert!(stdout.contains("HTTP 421"), "{stdout}");
}
