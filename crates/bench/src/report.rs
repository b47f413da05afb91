//! Results: the JSON model, the seed-style tables, the side-by-side
//! verdict and the loud flags (the reject path, a client-bound cell).

use std::fmt::Write as _;

use serde::Serialize;

use crate::stats::{Latency, Outcomes, knee};
use crate::target::{Target, ValidRange};

/// One cell of a sweep: a target under one schedule.
#[derive(Clone, Debug, Serialize)]
pub struct Point {
    /// Connections.
    pub conns: usize,
    /// Open-loop rate asked for; `None` for a closed loop.
    pub rate: Option<f64>,
    /// Answers per second in the measured window.
    pub requests_per_second: f64,
    /// Latency percentiles.
    pub latency: Latency,
    /// Answer classes.
    pub outcomes: Outcomes,
    /// Mean answer body size.
    pub mean_body_bytes: f64,
    /// Little's law (closed loop): the mean latency `conns / throughput`
    /// implies, and how far the measured mean is from it.
    pub littles_law_mean_ms: Option<f64>,
    /// (measured − implied) / implied.
    pub littles_law_deviation: Option<f64>,
    /// Cores the target used during the window (when it runs here).
    pub target_cpu_cores: Option<f64>,
    /// Cores the load generator used during the window.
    pub client_cpu_cores: Option<f64>,
    /// Open loop: mean lateness of the client's timer for requests sent on
    /// time, excluded from their latency.
    pub client_timer_lag_ms: Option<f64>,
    /// The target's resident memory after the window.
    pub target_rss_bytes: Option<u64>,
    /// Of that, anonymous memory (excludes page cache of mapped files).
    pub target_rss_anon_bytes: Option<u64>,
    /// Of that, file-backed memory (mapped files' pages in the page cache:
    /// for neve, the part of its store in memory).
    pub target_rss_file_bytes: Option<u64>,
    /// Set when anything but a real answer came back: the run measured the
    /// reject path.
    pub reject_path: Option<String>,
    /// Set when the load generator, not the target, set the pace: an open
    /// loop whose timer sent requests late by more than
    /// [`CLIENT_BOUND_TIMER_LAG_MS`] on average.
    pub client_bound: Option<String>,
}

/// Mean lateness of an open loop's sends past which the run measured the
/// load generator: its requests left late, so the rate the target saw was
/// not the rate asked. 2 ms is ten times the timer's own jitter here and
/// well under any interval an open-loop rate is asked at per connection.
pub const CLIENT_BOUND_TIMER_LAG_MS: f64 = 2.0;

impl Point {
    /// Why the cell does not measure the target, if it does not.
    pub fn flag(&self) -> Option<&str> {
        self.reject_path.as_deref().or(self.client_bound.as_deref())
    }
}

/// The client-bound flag of an open-loop cell whose sends were late by
/// `lag_ms` on average.
pub fn client_bound(lag_ms: Option<f64>) -> Option<String> {
    lag_ms
        .filter(|lag| *lag > CLIENT_BOUND_TIMER_LAG_MS)
        .map(|lag| {
            format!(
                "client-bound: the load generator sent {lag:.1} ms late on average \
             (over {CLIENT_BOUND_TIMER_LAG_MS} ms); it, not the target, set the pace"
            )
        })
}

/// A target's sweep over one workload.
#[derive(Clone, Debug, Serialize)]
pub struct TargetRun {
    /// The target.
    pub target: Target,
    /// What it serves.
    pub range: Option<ValidRange>,
    /// What it says it is (`web3_clientVersion`, asked once at the start),
    /// so a result names the build it measured; `None` when it did not say
    /// (a static ceiling is not asked).
    pub client_version: Option<String>,
    /// One point per connection count or rate.
    pub points: Vec<Point>,
}

impl TargetRun {
    /// Highest throughput of the sweep.
    pub fn peak(&self) -> f64 {
        self.points
            .iter()
            .map(|p| p.requests_per_second)
            .fold(0.0, f64::max)
    }

    /// Smallest concurrency reaching 95 % of the peak (closed loop).
    pub fn knee(&self) -> Option<usize> {
        let points: Vec<(usize, f64)> = self
            .points
            .iter()
            .filter(|p| p.rate.is_none())
            .map(|p| (p.conns, p.requests_per_second))
            .collect();
        knee(&points)
    }

    fn at_conns(&self, conns: usize) -> Option<&Point> {
        self.points
            .iter()
            .find(|p| p.conns == conns && p.rate.is_none())
    }

    /// Req/s per core of target CPU at the peak.
    fn peak_per_core(&self) -> Option<f64> {
        let peak = self
            .points
            .iter()
            .max_by(|a, b| a.requests_per_second.total_cmp(&b.requests_per_second))?;
        let cores = peak.target_cpu_cores.filter(|c| *c > 0.0)?;
        Some(peak.requests_per_second / cores)
    }

    fn max_rss(&self) -> Option<u64> {
        self.points.iter().filter_map(|p| p.target_rss_bytes).max()
    }

    fn max_rss_anon(&self) -> Option<u64> {
        self.points
            .iter()
            .filter_map(|p| p.target_rss_anon_bytes)
            .max()
    }
}

/// One workload across all targets.
#[derive(Clone, Debug, Serialize)]
pub struct WorkloadRun {
    /// Its name.
    pub workload: String,
    /// Distinct requests in its pool.
    pub pool: usize,
    /// Every target's sweep.
    pub targets: Vec<TargetRun>,
}

/// A target against a baseline on one workload.
#[derive(Clone, Debug, Serialize)]
pub struct Verdict {
    /// The workload.
    pub workload: String,
    /// The target judged.
    pub target: String,
    /// What it is judged against.
    pub baseline: String,
    /// Peak req/s of target ÷ peak of baseline.
    pub peak_ratio: Option<f64>,
    /// Baseline's c1 median ÷ target's (how many times faster one request is).
    pub c1_latency_ratio: Option<f64>,
    /// Baseline's RSS ÷ target's (how many times less memory), counting
    /// mapped files' cached pages (a mapped store's) as memory.
    pub rss_ratio: Option<f64>,
    /// Baseline's anonymous memory ÷ target's: the heap alone, which the
    /// kernel cannot reclaim.
    pub anon_rss_ratio: Option<f64>,
    /// Target's req/s per core of CPU it used at its peak ÷ the baseline's:
    /// on a box where the load generator shares the cores, a target that
    /// answers faster also leaves itself less CPU, and the peak ratio
    /// understates how much less work each answer costs it.
    pub per_core_ratio: Option<f64>,
    /// Either side measured the reject path somewhere in the sweep.
    pub flagged: bool,
}

/// The machine the run was on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Online cores.
    pub cores: usize,
    /// `uname -r`-style kernel release.
    pub kernel: String,
    /// CPU model name.
    pub cpu: String,
}

impl Machine {
    /// Reads this machine's facts.
    pub fn this() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|rest| rest.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_default();
        Machine {
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            cpu,
        }
    }
}

/// Everything a run measured; written as `results.json`.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    /// The neve that ran it (`0.1.0 (commit …, built …)`), when told: a
    /// figure is only as good as knowing which build made it.
    pub neve_version: Option<String>,
    /// The command line it ran with, URLs redacted ([`command_line`]), when
    /// told: how to make the figure again.
    pub command_line: Option<String>,
    /// Seconds since the Unix epoch at the start.
    pub started_unix: u64,
    /// Where it ran.
    pub machine: Machine,
    /// The heights every target served, which the workloads drew from.
    pub common_range: (u64, u64),
    /// Warm-up per cell, seconds.
    pub warmup_seconds: f64,
    /// Measured time per cell, seconds.
    pub duration_seconds: f64,
    /// Per workload.
    pub workloads: Vec<WorkloadRun>,
    /// Side by side.
    pub verdicts: Vec<Verdict>,
}

impl Results {
    /// Judges each `(target, baseline)` pair on every workload.
    pub fn judge(&mut self, pairs: &[(String, String)]) {
        self.verdicts.clear();
        for workload in &self.workloads {
            let find = |name: &str| workload.targets.iter().find(|t| t.target.name == name);
            for (target, baseline) in pairs {
                let (Some(t), Some(b)) = (find(target), find(baseline)) else {
                    continue;
                };
                let ratio = |x: f64, y: f64| (y > 0.0).then(|| x / y);
                let c1 = match (t.at_conns(1), b.at_conns(1)) {
                    (Some(t1), Some(b1)) => ratio(b1.latency.p50_ms, t1.latency.p50_ms),
                    _ => None,
                };
                let rss = match (t.max_rss(), b.max_rss()) {
                    (Some(t), Some(b)) => ratio(b as f64, t as f64),
                    _ => None,
                };
                let anon_rss = match (t.max_rss_anon(), b.max_rss_anon()) {
                    (Some(t), Some(b)) => ratio(b as f64, t as f64),
                    _ => None,
                };
                let per_core = match (t.peak_per_core(), b.peak_per_core()) {
                    (Some(t), Some(b)) => ratio(t, b),
                    _ => None,
                };
                let flagged = t.points.iter().chain(&b.points).any(|p| p.flag().is_some());
                self.verdicts.push(Verdict {
                    workload: workload.workload.clone(),
                    target: target.clone(),
                    baseline: baseline.clone(),
                    peak_ratio: ratio(t.peak(), b.peak()),
                    c1_latency_ratio: c1,
                    rss_ratio: rss,
                    anon_rss_ratio: anon_rss,
                    per_core_ratio: per_core,
                    flagged,
                });
            }
        }
    }

    /// Every flagged cell, one line each.
    pub fn flags(&self) -> Vec<String> {
        self.flagged()
            .into_iter()
            .map(|(cell, why)| format!("{cell}: {why}"))
            .collect()
    }

    /// Every flagged cell's name (`target workload cell`), for a one-line
    /// account of what a run did not measure.
    pub fn flagged_cells(&self) -> Vec<String> {
        self.flagged().into_iter().map(|(cell, _)| cell).collect()
    }

    /// Every flagged cell: its name and why.
    fn flagged(&self) -> Vec<(String, &str)> {
        let mut flagged = Vec::new();
        for workload in &self.workloads {
            for run in &workload.targets {
                for point in &run.points {
                    if let Some(why) = point.flag() {
                        flagged.push((
                            format!(
                                "{} {} {}",
                                run.target.name,
                                workload.workload,
                                cell_name(point)
                            ),
                            why,
                        ));
                    }
                }
            }
        }
        flagged
    }

    /// The tables, verdict and flags as Markdown.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(version) = &self.neve_version {
            let _ = writeln!(out, "neve {version}\n");
        }
        if let Some(line) = &self.command_line {
            let _ = writeln!(out, "command line: `{line}`\n");
        }
        let _ = writeln!(
            out,
            "machine: {} cores, {}, kernel {}; common range {}..={}; {} s warm-up + {} s per cell\n",
            self.machine.cores,
            self.machine.cpu,
            self.machine.kernel,
            self.common_range.0,
            self.common_range.1,
            self.warmup_seconds,
            self.duration_seconds
        );
        for workload in &self.workloads {
            for run in &workload.targets {
                let _ = writeln!(
                    out,
                    "### {} — {} ({}{})\n",
                    workload.workload,
                    run.target.name,
                    neve_upstream::RedactedUrl::of(&run.target.url),
                    run.client_version
                        .as_deref()
                        .map_or(String::new(), |v| format!(", {v}"))
                );
                out.push_str(&render_sweep(run));
                let _ = writeln!(
                    out,
                    "\npeak {:.0} req/s; knee (95 % of peak) at {}\n",
                    run.peak(),
                    run.knee().map_or("-".to_owned(), |k| format!("c{k}"))
                );
            }
        }
        if !self.verdicts.is_empty() {
            out.push_str("### Side by side\n\n");
            out.push_str("| workload | target vs baseline | peak req/s ratio | req/s per CPU core ratio | c1 p50 latency ratio | anonymous memory ratio | RSS ratio |\n");
            out.push_str("|---|---|---|---|---|---|---|\n");
            for v in &self.verdicts {
                let x = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.2}×"));
                let _ = writeln!(
                    out,
                    "| {} | {} vs {}{} | {} | {} | {} | {} | {} |",
                    v.workload,
                    v.target,
                    v.baseline,
                    if v.flagged { " (FLAGGED)" } else { "" },
                    x(v.peak_ratio),
                    x(v.per_core_ratio),
                    x(v.c1_latency_ratio),
                    x(v.anon_rss_ratio),
                    x(v.rss_ratio)
                );
            }
            out.push_str(
                "\npeak ratio > 1: the target serves more; per-core ratio > 1: each answer costs the target less CPU; latency and memory ratios > 1: the target is that many times faster / smaller. Anonymous memory is the heap, which the kernel cannot reclaim; RSS (VmRSS) also counts mapped files' pages in the page cache, for neve the part of its store in memory, which the kernel reclaims under pressure.\n",
            );
        }
        let flags = self.flags();
        if flags.is_empty() {
            out.push_str(
                "\nevery answer was a real result (HTTP 2xx, non-null result, no JSON-RPC error)\n",
            );
        } else {
            out.push_str("\n!!! FLAGGED — these cells did not measure the target (the reject path: answers that were not the work asked for; or client-bound):\n");
            for flag in flags {
                let _ = writeln!(out, "!!!   {flag}");
            }
        }
        out
    }
}

/// `args` as one line to record: a URL in any of them (the whole word, or
/// what follows a `NAME=`, `--flag=` or `,`) redacted as target URLs are,
/// and a word a shell would split or expand quoted.
pub fn command_line(args: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    args.into_iter()
        .map(|arg| shell_word(&redact_url(arg.as_ref())))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `arg` with the URL in it redacted: from its scheme to the end.
fn redact_url(arg: &str) -> String {
    let Some(scheme_end) = arg.find("://") else {
        return arg.to_owned();
    };
    let start = arg[..scheme_end].rfind(['=', ',']).map_or(0, |i| i + 1);
    format!(
        "{}{}",
        &arg[..start],
        neve_upstream::RedactedUrl::of(&arg[start..])
    )
}

/// `word` as a POSIX shell reads it back: bare when it holds nothing the
/// shell treats specially, else single-quoted.
fn shell_word(word: &str) -> String {
    let bare = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_=:/.,@%+".contains(&b));
    if bare {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

fn cell_name(point: &Point) -> String {
    match point.rate {
        Some(rate) => format!("@{rate:.0}/s"),
        None => format!("c{}", point.conns),
    }
}

fn render_sweep(run: &TargetRun) -> String {
    let mut out = String::new();
    let open = run.points.iter().any(|p| p.rate.is_some());
    out.push_str(if open {
        "| rate | conns | req/s | p50 ms | p99 ms | p90 ms | p99.9 ms | max ms | target CPU | client CPU | RSS MiB (anon + file) | rejects |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    } else {
        "| conns | req/s | p50 ms | p99 ms | p90 ms | p99.9 ms | max ms | Little's law | target CPU | client CPU | RSS MiB (anon + file) | rejects |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    });
    for p in &run.points {
        let l = &p.latency;
        let percent =
            |cores: Option<f64>| cores.map_or("-".into(), |c| format!("{:.0} %", c * 100.0));
        let (cpu, client) = (percent(p.target_cpu_cores), percent(p.client_cpu_cores));
        let rss = match (p.target_rss_anon_bytes, p.target_rss_file_bytes) {
            (Some(anon), Some(file)) => format!("{} + {}", anon >> 20, file >> 20),
            _ => p
                .target_rss_bytes
                .map_or("-".into(), |b| format!("{}", b >> 20)),
        };
        let rejects = match p.outcomes.rejected() {
            0 => "0".to_owned(),
            n => format!("**{n}**"),
        };
        let lead = match p.rate {
            Some(rate) => format!("{rate:.0} | {}", p.conns),
            None => p.conns.to_string(),
        };
        let little = if open {
            String::new()
        } else {
            format!(
                " {} |",
                p.littles_law_deviation
                    .map_or("-".into(), |d| format!("{:+.0} %", d * 100.0))
            )
        };
        let _ = writeln!(
            out,
            "| {lead} | {:.0} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |{little} {cpu} | {client} | {rss} | {rejects} |",
            p.requests_per_second, l.p50_ms, l.p99_ms, l.p90_ms, l.p999_ms, l.max_ms
        );
    }
    out
}

#[cfg(test)]
mod tests {
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
}
