//! Results: the JSON model, the seed-style tables, the side-by-side
//! verdict and the loud flags (the reject path, a client-bound cell).
//! The model is here; the Markdown in `render`, the recorded command line
//! in `command_line`.

use serde::Serialize;

mod command_line;
mod render;
#[cfg(test)]
mod tests;

pub use command_line::command_line;

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
}

/// A cell's name in tables and flags: its rate, or its connections.
fn cell_name(point: &Point) -> String {
    match point.rate {
        Some(rate) => format!("@{rate:.0}/s"),
        None => format!("c{}", point.conns),
    }
}
