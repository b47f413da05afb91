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

    let ours = || async {
        let output = run_neve(&[
            "bench",
            "--target",
            &target,
            "--workload",
            "randblock",
            "--conns",
            "4",
            "--warmup",
            "0.5",
            "--duration",
            "2",
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
            std::process::Command::new("wrk")
                .args(["-t2", "-c4", "-d2s", "-s", &lua, &url])
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

    // Alternate which tool goes first, so drift on a shared machine hits
    // both alike; the first round writes the script wrk runs.
    let (mut ours_rps, mut wrk_rps) = (Vec::new(), Vec::new());
    for round in 0..5 {
        if round % 2 == 0 {
            ours_rps.push(ours().await);
            wrk_rps.push(wrk().await);
        } else {
            wrk_rps.push(wrk().await);
            ours_rps.push(ours().await);
        }
    }
    eprintln!("neve bench {ours_rps:.0?} req/s, wrk {wrk_rps:.0?} req/s");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (ours, theirs) = (median(&mut ours_rps), median(&mut wrk_rps));
    let ratio = ours / theirs;
    eprintln!("neve bench {ours:.0} req/s, wrk {theirs:.0} req/s: ratio {ratio:.3}");
    assert!(
        (0.85..=1.15).contains(&ratio),
        "neve bench {ours:.0} vs wrk {theirs:.0} req/s"
    );
}
