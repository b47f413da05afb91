use super::*;
use crate::target::TargetKind;

fn point(conns: usize, rps: f64, p50: f64, rss: u64, rejected: u64) -> Point {
    let mut outcomes = Outcomes {
        ok: 1000,
        ..Outcomes::default()
    };
    outcomes.status_421 = rejected;
    outcomes.status_4xx = rejected;
    Point {
        conns,
        rate: None,
        requests_per_second: rps,
        latency: Latency {
            p50_ms: p50,
            ..Latency::default()
        },
        reject_path: outcomes.reject_summary(),
        client_bound: None,
        outcomes,
        mean_body_bytes: 100.0,
        littles_law_mean_ms: None,
        littles_law_deviation: Some(0.01),
        target_cpu_cores: Some(0.9),
        client_cpu_cores: None,
        client_timer_lag_ms: None,
        target_rss_bytes: Some(rss),
        target_rss_anon_bytes: Some(rss / 4),
        target_rss_file_bytes: Some(rss - rss / 4),
    }
}

fn run(name: &str, points: Vec<Point>) -> TargetRun {
    TargetRun {
        target: Target {
            name: name.into(),
            url: "http://127.0.0.1:1/".into(),
            kind: TargetKind::Rpc,
            pids: Vec::new(),
        },
        range: None,
        client_version: (name == "geth").then(|| "Geth/v1.17.5-stable".to_owned()),
        points,
    }
}

#[test]
fn verdicts_are_ratios_of_peak_c1_latency_and_memory() {
    let mut results = Results {
        neve_version: Some("0.1.0 (commit 1a2b3c4d, built 2026-11-25)".into()),
        command_line: Some("neve bench --target neve=http://127.0.0.1:1/".into()),
        started_unix: 0,
        machine: Machine::this(),
        common_range: (1, 2000),
        warmup_seconds: 1.0,
        duration_seconds: 5.0,
        workloads: vec![WorkloadRun {
            workload: "randblock".into(),
            pool: 1000,
            targets: vec![
                run(
                    "neve",
                    vec![
                        point(1, 9000.0, 0.1, 100 << 20, 0),
                        point(16, 50000.0, 0.3, 120 << 20, 0),
                    ],
                ),
                run(
                    "geth",
                    vec![
                        point(1, 2000.0, 0.5, 600 << 20, 0),
                        point(16, 5000.0, 3.0, 660 << 20, 3),
                    ],
                ),
            ],
        }],
        verdicts: vec![],
    };
    // geth burns twice the CPU for its answers.
    for point in &mut results.workloads[0].targets[1].points {
        point.target_cpu_cores = Some(1.8);
    }
    results.judge(&[
        ("neve".into(), "geth".into()),
        ("neve".into(), "absent".into()),
    ]);
    assert_eq!(results.verdicts.len(), 1);
    let v = &results.verdicts[0];
    assert!((v.peak_ratio.unwrap() - 10.0).abs() < 1e-9);
    assert!((v.c1_latency_ratio.unwrap() - 5.0).abs() < 1e-9);
    assert!((v.rss_ratio.unwrap() - 5.5).abs() < 1e-9);
    assert!((v.anon_rss_ratio.unwrap() - 5.5).abs() < 1e-9);
    assert!((v.per_core_ratio.unwrap() - 20.0).abs() < 1e-9);
    assert!(v.flagged, "geth c16 answered 421s");
    let text = results.render();
    assert!(text.contains("| 16 | 50000 | 0.300 |"), "{text}");
    assert!(
        text.contains("| 90 % | - | 30 + 90 | 0 |"),
        "target and client CPU: {text}"
    );
    assert!(text.contains("knee (95 % of peak) at c16"), "{text}");
    assert!(
        text.contains("neve vs geth (FLAGGED) | 10.00× | 20.00× | 5.00× | 5.50× | 5.50× |"),
        "{text}"
    );
    assert!(text.contains("!!! FLAGGED"), "{text}");
    assert!(
        text.contains("geth randblock c16: 0.3 % of 1003 requests: 3 HTTP 421"),
        "{text}"
    );
    assert_eq!(results.flagged_cells(), ["geth randblock c16"]);
    assert!(
        text.starts_with(
            "neve 0.1.0 (commit 1a2b3c4d, built 2026-11-25)\n\n\
             command line: `neve bench --target neve=http://127.0.0.1:1/`\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("### randblock — geth (http://127.0.0.1:1/, Geth/v1.17.5-stable)"),
        "{text}"
    );
    assert!(
        text.contains("### randblock — neve (http://127.0.0.1:1/)"),
        "{text}"
    );
    let json = serde_json::to_value(&results).unwrap();
    assert_eq!(json["workloads"][0]["targets"][0]["points"][1]["conns"], 16);
    assert!(json["neve_version"].as_str().unwrap().starts_with("0.1.0"));
    assert_eq!(
        json["workloads"][0]["targets"][1]["client_version"],
        "Geth/v1.17.5-stable"
    );
    assert!(json["workloads"][0]["targets"][0]["client_version"].is_null());
}

#[test]
fn the_command_line_is_recorded_with_its_urls_redacted() {
    let line = command_line([
        "neve",
        "bench",
        "--target",
        "neve=http://127.0.0.1:8645",
        "--target=node=https://user:pass@rpc.example/v3/0123456789abcdef0123456789abcdef?key=s3cret",
        "--workload",
        "mix:my mix.toml",
    ]);
    for secret in ["user", "pass", "0123456789abcdef", "s3cret"] {
        assert!(!line.contains(secret), "{secret}: {line}");
    }
    assert_eq!(
        line,
        "neve bench --target neve=http://127.0.0.1:8645 \
         '--target=node=https://***@rpc.example/v3/***?key=***' \
         --workload 'mix:my mix.toml'"
    );
    assert_eq!(command_line(["it's", ""]), r"'it'\''s' ''");
}
