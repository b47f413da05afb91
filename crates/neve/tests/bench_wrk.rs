//! `neve bench` measures what wrk measures: on the same neve, sending the
//! same requests (the script `neve bench --wrk-script` writes), the two
//! tools' req/s agree within ±15 %. Its own test binary, so nothing else
//! runs beside it.

mod support;

use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn bench_agrees_with_wrk_sending_the_same_requests() {
    let (_geth, neve) = neve_mirroring_a_chain_with_logs().await;
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().display().to_string();
    let lua = out.path().join("randblock.lua").display().to_string();
    let target = format!("neve={}", neve.url);

    // Server on core 0, whichever client is measuring on core 1: on two
    // shared cores, letting the scheduler mix them makes each round's rate
    // swing by ±20 %, more than the band this test checks.
    let pinned = std::process::Command::new("taskset")
        .args(["-a", "-p", "-c", "0", &neve.pid().to_string()])
        .output()
        .expect("taskset runs");
    assert!(pinned.status.success(), "{pinned:?}");
    let ours = || async {
        let output = run_pinned(&[
            env!("CARGO_BIN_EXE_neve"),
            "bench",
            "--target",
            &target,
            "--workload",
            "randblock",
            "--conns",
            "4",
            "--warmup",
            "0.3",
            "--duration",
            "1",
            "--pool",
            "500",
            "--out",
            &out_dir,
            "--wrk-script",
            &lua,
        ])
        .await;
        expect_success(&output);
        let results = read_json(&out.path().join("results.json"));
        let point = &results["workloads"][0]["targets"][0]["points"][0];
        assert!(point["reject_path"].is_null(), "{point}");
        point["requests_per_second"].as_f64().unwrap()
    };
    let wrk = || async {
        let (lua, url) = (lua.clone(), neve.url.clone());
        let wrk = tokio::task::spawn_blocking(move || {
            std::process::Command::new("taskset")
                .args(["-c", "1", "wrk", "-t1", "-c4", "-d1s", "-s", &lua, &url])
                .output()
                .expect("wrk runs (scripts/install-deps.sh installs it)")
        })
        .await
        .unwrap();
        let text = String::from_utf8_lossy(&wrk.stdout).into_owned();
        assert!(!text.contains("Non-2xx"), "{text}");
        text.lines()
            .find_map(|l| l.strip_prefix("Requests/sec:"))
            .unwrap_or_else(|| panic!("wrk printed no rate:\n{text}"))
            .trim()
            .parse::<f64>()
            .unwrap()
    };

    // Many short rounds, alternating which tool goes first so drift on a
    // shared machine hits both alike; the first round writes the script wrk
    // runs.
    let (mut ours_rps, mut wrk_rps) = (Vec::new(), Vec::new());
    for round in 0..12 {
        if round % 2 == 0 {
            ours_rps.push(ours().await);
            wrk_rps.push(wrk().await);
        } else {
            wrk_rps.push(wrk().await);
            ours_rps.push(ours().await);
        }
    }
    eprintln!("neve bench {ours_rps:.0?} req/s, wrk {wrk_rps:.0?} req/s");
    // Interference from other tenants only ever slows a round down, so the
    // upper quartile estimates each tool's undisturbed rate better than the
    // median does.
    let upper_quartile = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() * 3 / 4]
    };
    let (ours, theirs) = (upper_quartile(&mut ours_rps), upper_quartile(&mut wrk_rps));
    let ratio = ours / theirs;
    eprintln!("neve bench {ours:.0} req/s, wrk {theirs:.0} req/s: ratio {ratio:.3}");
    assert!(
        (0.85..=1.15).contains(&ratio),
        "neve bench {ours:.0} vs wrk {theirs:.0} req/s"
    );
}

/// Runs `COMMAND ARGS…` on core 1.
async fn run_pinned(command: &[&str]) -> std::process::Output {
    let command: Vec<String> = command.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new("taskset")
            .args(["-c", "1"])
            .args(&command)
            .output()
            .expect("taskset runs")
    })
    .await
    .unwrap()
}
