//! `neve bench` measures what wrk measures: on the same neve, sending the
//! same requests (the script `neve bench --wrk-script` writes), each tool's
//! req/s is what the server itself counted answering while that tool ran.
//! Its own test binary, so nothing else runs beside it.
//!
//! The two tools' rates are compared to the server's count, not to each
//! other: with the server saturated on one core, this machine gives 1.2–1.3×
//! more answers per second to `neve bench` than to wrk, and the server's own
//! counter agrees with both (BENCHMARKS.md, "neve bench and wrk").

mod support;

use support::*;

#[tokio::test(flavor = "multi_thread")]
async fn bench_and_wrk_each_report_what_the_server_answered() {
    let (_geth, neve) = neve_mirroring_a_chain_with_logs().await;
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().display().to_string();
    let lua = out.path().join("randblock.lua").display().to_string();
    let target = format!("neve={}", neve.url);

    // Server on one core, whichever client is measuring on another: on two
    // shared cores, letting the scheduler mix them makes each round's rate
    // swing by ±20 %, more than the band this test checks. With a single
    // core allowed, nothing is pinned.
    let cores = allowed_cpus();
    let client_core = cores.get(1).copied();
    if let (Some(server_core), Some(_)) = (cores.first(), client_core) {
        let pinned = std::process::Command::new("taskset")
            .args(["-a", "-p", "-c", &server_core.to_string()])
            .arg(neve.pid().to_string())
            .output()
            .expect("taskset runs");
        assert!(pinned.status.success(), "{pinned:?}");
    }
    let ours = || async {
        let output = run_pinned(
            client_core,
            &[
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
                &DURATION_SECS.to_string(),
                "--pool",
                "500",
                "--out",
                &out_dir,
                "--wrk-script",
                &lua,
            ],
        )
        .await;
        expect_success(&output);
        let results = read_json(&out.path().join("results.json"));
        let point = &results["workloads"][0]["targets"][0]["points"][0];
        assert!(point["reject_path"].is_null(), "{point}");
        point["requests_per_second"].as_f64().unwrap()
    };
    let wrk = || async {
        let wrk = run_pinned(
            client_core,
            &[
                "wrk",
                "-t1",
                "-c4",
                &format!("-d{DURATION_SECS}s"),
                "-s",
                &lua,
                &neve.url,
            ],
        )
        .await;
        let text = String::from_utf8_lossy(&wrk.stdout).into_owned();
        assert!(!text.contains("Non-2xx"), "{text}");
        text.lines()
            .find_map(|l| l.strip_prefix("Requests/sec:"))
            .unwrap_or_else(|| panic!("wrk printed no rate:\n{text}"))
            .trim()
            .parse::<f64>()
            .unwrap()
    };

    // Each run is watched through the server's own counter of answers; the
    // busiest DURATION-long stretch of it is the tool's measured window
    // (neve bench's sampling, priming and warm-up come before it).
    let mut ratios = Vec::new();
    let (mut ours_rps, mut wrk_rps) = (Vec::new(), Vec::new());
    for round in 0..8 {
        let use_wrk = round % 2 == 1;
        let watch = CounterWatch::start(neve.addr.clone());
        let reported = if use_wrk { wrk().await } else { ours().await };
        let counted = watch.busiest_rate(DURATION_SECS);
        eprintln!(
            "{}: reported {reported:.0} req/s, server counted {counted:.0} req/s",
            if use_wrk { "wrk" } else { "neve bench" }
        );
        ratios.push(reported / counted);
        if use_wrk { &mut wrk_rps } else { &mut ours_rps }.push(reported);
    }
    eprintln!("neve bench {ours_rps:.0?} req/s, wrk {wrk_rps:.0?} req/s");
    // A run the machine's other tenants disturbed only blurs the window, so
    // each tool is judged by its median run.
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let ours_ratio = median(ratios.iter().step_by(2).copied().collect());
    let wrk_ratio = median(ratios.iter().skip(1).step_by(2).copied().collect());
    eprintln!("reported / counted: neve bench {ours_ratio:.3}, wrk {wrk_ratio:.3}");
    for (tool, ratio) in [("neve bench", ours_ratio), ("wrk", wrk_ratio)] {
        assert!(
            (0.90..=1.10).contains(&ratio),
            "{tool} reported {ratio:.3}× what the server counted"
        );
    }
}

/// Seconds each tool measures for.
const DURATION_SECS: f64 = 2.0;

/// Polls a neve's count of answered JSON-RPC calls every few milliseconds
/// until dropped.
struct CounterWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    samples: std::thread::JoinHandle<Vec<(std::time::Instant, u64)>>,
}

impl CounterWatch {
    fn start(addr: String) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let samples = std::thread::spawn(move || {
            let mut samples = Vec::new();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(count) = rpc_calls(&addr, None) {
                    samples.push((std::time::Instant::now(), count));
                }
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            samples
        });
        Self { stop, samples }
    }

    /// Answers per second over the busiest stretch of `secs` seconds (or
    /// over all the samples, when a slow `/metrics` left fewer).
    fn busiest_rate(self, secs: f64) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let samples = self.samples.join().unwrap();
        let rate = |(start, first): (std::time::Instant, u64),
                    (end, last): (std::time::Instant, u64)| {
            (last - first) as f64 / (end - start).as_secs_f64()
        };
        let stretches = samples.iter().enumerate().filter_map(|(i, &from)| {
            let to = samples[i..]
                .iter()
                .find(|(at, _)| (*at - from.0).as_secs_f64() >= secs)?;
            Some(rate(from, *to))
        });
        let best = stretches
            .max_by(f64::total_cmp)
            .or_else(|| Some(rate(*samples.first()?, *samples.last()?)))
            .unwrap_or(0.0);
        assert!(best > 0.0, "the server's counter never moved: {samples:?}");
        best
    }
}

/// Runs `COMMAND ARGS…`, on `core` when given.
async fn run_pinned(core: Option<u32>, command: &[&str]) -> std::process::Output {
    let mut argv: Vec<String> = match core {
        Some(core) => vec!["taskset".into(), "-c".into(), core.to_string()],
        None => Vec::new(),
    };
    argv.extend(command.iter().map(|a| a.to_string()));
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "{} runs (scripts/install-deps.sh installs it): {e}",
                    argv[0]
                )
            })
    })
    .await
    .unwrap()
}

/// The CPUs this process may run on, from `Cpus_allowed_list` ("0-1,4").
fn allowed_cpus() -> Vec<u32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let Some(list) = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
    else {
        return Vec::new();
    };
    list.trim()
        .split(',')
        .filter_map(|range| match range.split_once('-') {
            Some((a, b)) => Some(a.parse().ok()?..=b.parse().ok()?),
            None => range.parse().ok().map(|c| c..=c),
        })
        .flatten()
        .collect()
}
