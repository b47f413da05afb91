//! `neve bench`: head-to-head serving benchmarks, done the way an operator
//! should do them by hand and rarely does.
//!
//! - **Same work for every target.** Each target's valid range is discovered
//!   ([`target::discover_range`]) and the workloads draw real keys from the
//!   intersection ([`corpus`]), so a mirror and a node answer the same
//!   requests.
//! - **Only real answers count as work.** Every answer is classified
//!   ([`classify`]): a 421, any other non-2xx, a JSON-RPC error inside a 200
//!   or a `null` result flags the cell loudly as measuring the reject path.
//! - **Closed and open loop.** A connection sweep finds the knee
//!   ([`stats::knee`]) and checks Little's law; fixed-rate runs measure from
//!   each request's due time ([`driver`]).
//! - **The machine's ceiling.** A static-file server (nginx) serving the
//!   reference target's own answers shows what sending those bytes costs.
//! - **Output.** Seed-style tables, a side-by-side verdict, `results.json`
//!   and SVG/PNG plots ([`report`], [`plot`]); target CPU and RSS from /proc
//!   ([`procstat`]).
//!
//! [`tps`] pushes signed transfers into a node and reads TPS off the chain;
//! [`suite`] builds the whole headline comparison on this machine.

pub mod classify;
pub mod corpus;
pub mod driver;
pub mod plot;
pub mod procstat;
pub mod report;
pub mod stats;
pub mod suite;
pub mod target;
pub mod tps;
pub mod workload;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use neve_upstream::RpcClient;

use crate::driver::{Plan, Schedule};
use crate::report::{Machine, Point, Results, TargetRun, WorkloadRun};
use crate::stats::{Latency, littles_law};
use crate::target::{Target, TargetKind};
use crate::workload::Workload;

/// The highest open-loop rate accepted (a schedule slot every 100 ns).
pub const MAX_RATE: f64 = 10_000_000.0;

/// The default connection sweep.
pub const DEFAULT_CONNS: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The command line or a mix file is wrong.
    #[error("{0}")]
    Usage(String),
    /// A target could not be read.
    #[error("target {0}: {1}")]
    Target(String, String),
    /// The targets share no height.
    #[error("the targets serve no common block range: {0}")]
    NoCommonRange(String),
    /// The chain lacks what a workload needs.
    #[error("building workloads from the chain: {0}")]
    Corpus(String),
    /// Writing results failed.
    #[error("writing {0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// Starting or feeding a node for the suite failed.
    #[error("{0}")]
    Setup(String),
}

impl BenchError {
    fn target(target: &Target, error: impl std::fmt::Display) -> BenchError {
        BenchError::Target(target.name.clone(), error.to_string())
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
        move |e| BenchError::Io(path.to_owned(), e)
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct BenchConfig {
    /// JSON-RPC targets; the first is the reference the workloads (and the
    /// ceiling's files) are built from.
    pub targets: Vec<Target>,
    /// Static-file ceilings serving `ceiling_dir`.
    pub ceilings: Vec<Target>,
    /// Where the ceilings' files are written (the directory they serve).
    pub ceiling_dir: Option<PathBuf>,
    /// Workload names (see [`workload::build`]).
    pub workloads: Vec<String>,
    /// The closed-loop sweep; empty for none.
    pub conns: Vec<usize>,
    /// Open-loop rates (req/s); empty for none.
    pub rates: Vec<f64>,
    /// Connections an open loop spreads its schedule over.
    pub open_conns: usize,
    /// Unmeasured time before each cell.
    pub warmup: Duration,
    /// Measured time per cell.
    pub duration: Duration,
    /// Distinct requests per workload.
    pub pool: usize,
    /// Seed for sampling and request order.
    pub seed: u64,
    /// `(target, baseline)` pairs for the verdict; empty: the first target
    /// against each other one.
    pub compare: Vec<(String, String)>,
    /// Where results go (tables, JSON, plots).
    pub out: Option<PathBuf>,
    /// Also write a wrk Lua script sending the first workload's pool.
    pub wrk_script: Option<PathBuf>,
    /// The neve running the benchmark, recorded in the results (the
    /// binary's version line: this crate does not know it).
    pub neve_version: Option<String>,
    /// The command line it runs with, URLs redacted
    /// ([`report::command_line`]), recorded in the results.
    pub command_line: Option<String>,
}

impl BenchConfig {
    /// Defaults for everything but the targets.
    pub fn new(targets: Vec<Target>) -> BenchConfig {
        BenchConfig {
            targets,
            ceilings: Vec::new(),
            ceiling_dir: None,
            workloads: vec!["randblock".into()],
            conns: DEFAULT_CONNS.to_vec(),
            rates: Vec::new(),
            open_conns: 64,
            warmup: Duration::from_secs(1),
            duration: Duration::from_secs(5),
            pool: 1000,
            seed: 7,
            compare: Vec::new(),
            out: None,
            wrk_script: None,
            neve_version: None,
            command_line: None,
        }
    }
}

/// Runs the benchmark; `progress` hears one line per step.
pub async fn run(
    config: &BenchConfig,
    mut progress: impl FnMut(&str),
) -> Result<Results, BenchError> {
    let reference = config
        .targets
        .first()
        .ok_or_else(|| BenchError::Usage("at least one JSON-RPC --target is needed".into()))?;
    if !config.ceilings.is_empty() && config.ceiling_dir.is_none() {
        return Err(BenchError::Usage(
            "a --ceiling needs --ceiling-dir, the directory it serves".into(),
        ));
    }
    if config.conns.is_empty() && config.rates.is_empty() {
        return Err(BenchError::Usage(
            "nothing to run: give --conns or --rates".into(),
        ));
    }
    if config
        .rates
        .iter()
        .any(|r| !r.is_finite() || *r <= 0.0 || *r > MAX_RATE)
    {
        return Err(BenchError::Usage(format!(
            "rates must be between 0 and {MAX_RATE} req/s"
        )));
    }
    if !config.rates.is_empty() && config.open_conns == 0 {
        return Err(BenchError::Usage(
            "an open loop needs --open-conns of at least 1".into(),
        ));
    }
    let mut names: Vec<&str> = config
        .targets
        .iter()
        .chain(&config.ceilings)
        .map(|t| t.name.as_str())
        .collect();
    names.sort_unstable();
    if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(BenchError::Usage(format!(
            "two targets are named {}",
            twice[0]
        )));
    }
    for (target, baseline) in &config.compare {
        for name in [target, baseline] {
            if !names.contains(&name.as_str()) {
                return Err(BenchError::Usage(format!(
                    "--compare names {name}, which is not a target"
                )));
            }
        }
    }
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    let (mut ranges, mut client_versions) = (Vec::new(), Vec::new());
    for target in &config.targets {
        let range = target::discover_range(target).await?;
        let version = target::client_version(&target.url).await;
        progress(&format!(
            "{}: {}, serves {range}",
            target.name,
            version.as_deref().unwrap_or("no web3_clientVersion")
        ));
        ranges.push((target.name.clone(), range));
        client_versions.push((target.name.clone(), version));
    }
    let common = target::intersect(&ranges)?;
    progress(&format!(
        "common range {}..={}",
        common.start(),
        common.end()
    ));

    let reference_client =
        RpcClient::new(&reference.url).map_err(|e| BenchError::target(reference, e))?;
    let corpus =
        corpus::Corpus::sample(&reference_client, common.clone(), config.pool, config.seed).await?;
    progress(&format!(
        "corpus: {} heights, {} transactions, {} addresses, log contract {}",
        corpus.heights.len(),
        corpus.txs.len(),
        corpus.addresses.len(),
        corpus.log_address.as_deref().unwrap_or("none")
    ));

    let mut workloads = Vec::new();
    for name in &config.workloads {
        workloads.push(workload::build(name, &corpus, config.pool, config.seed)?);
    }
    if let (Some(dir), false) = (&config.ceiling_dir, config.ceilings.is_empty()) {
        for workload in &workloads {
            write_ceiling_files(dir, workload, &reference_client).await?;
        }
        progress(&format!("ceiling files written under {}", dir.display()));
    }
    if let Some(path) = &config.wrk_script {
        let endpoint = reference.endpoint()?;
        std::fs::write(path, wrk_lua(&endpoint.path, &workloads[0].requests))
            .map_err(BenchError::io(path))?;
    }

    let mut all_targets: Vec<Target> = config
        .targets
        .iter()
        .chain(&config.ceilings)
        .cloned()
        .collect();
    for target in &mut all_targets {
        if target.pids.is_empty() && is_loopback(&target.url) {
            target
                .pids
                .extend(procstat::pids_listening_on(target.endpoint()?.port));
        }
    }

    let mut results = Results {
        neve_version: config.neve_version.clone(),
        command_line: config.command_line.clone(),
        started_unix,
        machine: Machine::this(),
        common_range: (*common.start(), *common.end()),
        warmup_seconds: config.warmup.as_secs_f64(),
        duration_seconds: config.duration.as_secs_f64(),
        workloads: Vec::new(),
        verdicts: Vec::new(),
    };
    let mut schedules: Vec<Schedule> = config
        .conns
        .iter()
        .map(|&conns| Schedule {
            conns,
            rate: None,
            warmup: config.warmup,
            duration: config.duration,
        })
        .collect();
    schedules.extend(config.rates.iter().map(|&rate| Schedule {
        conns: config.open_conns,
        rate: Some(rate),
        warmup: config.warmup,
        duration: config.duration,
    }));

    for workload in &workloads {
        let mut run = WorkloadRun {
            workload: workload.name.clone(),
            pool: workload.requests.len(),
            targets: Vec::new(),
        };
        for target in &all_targets {
            let endpoint = target.endpoint()?;
            let plan = match target.kind {
                TargetKind::Rpc => Plan::rpc(endpoint, workload.requests.clone()),
                TargetKind::Static => {
                    Plan::static_files(endpoint, &workload.slug, workload.requests.len())
                }
            };
            let mut target_run = TargetRun {
                target: target.clone(),
                range: ranges
                    .iter()
                    .find(|(n, _)| *n == target.name)
                    .map(|(_, r)| r.clone()),
                client_version: client_versions
                    .iter()
                    .find(|(n, _)| *n == target.name)
                    .and_then(|(_, v)| v.clone()),
                points: Vec::new(),
            };
            driver::prime(&plan).await;
            for schedule in &schedules {
                let point = measure(&plan, *schedule, &target.pids, config.seed).await;
                progress(&format!(
                    "{} {} {}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms{}",
                    workload.name,
                    target.name,
                    match schedule.rate {
                        Some(rate) => format!("@{rate:.0}/s"),
                        None => format!("c{}", schedule.conns),
                    },
                    point.requests_per_second,
                    point.latency.p50_ms,
                    point.latency.p99_ms,
                    point
                        .flag()
                        .map_or(String::new(), |why| format!("  !!! FLAGGED: {why}"))
                ));
                target_run.points.push(point);
            }
            run.targets.push(target_run);
        }
        results.workloads.push(run);
    }

    let pairs = if config.compare.is_empty() {
        all_targets[1..]
            .iter()
            .map(|t| (all_targets[0].name.clone(), t.name.clone()))
            .collect()
    } else {
        config.compare.clone()
    };
    results.judge(&pairs);
    if let Some(dir) = &config.out {
        for note in write_results(dir, &results, &workloads)? {
            progress(&note);
        }
    }
    Ok(results)
}

/// One cell: the driver plus /proc samples of the target and this process
/// taken at the edges of the measured window.
async fn measure(plan: &Plan, schedule: Schedule, pids: &[u32], seed: u64) -> Point {
    let me = std::process::id();
    let pids = pids.to_vec();
    let sampler = tokio::spawn(async move {
        tokio::time::sleep(schedule.warmup).await;
        let before = (
            procstat::sample_all(&pids),
            procstat::sample(me),
            Instant::now(),
        );
        tokio::time::sleep(schedule.duration).await;
        let after = (
            procstat::sample_all(&pids),
            procstat::sample(me),
            Instant::now(),
        );
        (before, after)
    });
    let measured = driver::run(plan, schedule, seed).await;
    let ((target_before, me_before, t0), (target_after, me_after, t1)) =
        sampler.await.expect("sampler does not panic");
    let seconds = (t1 - t0).as_secs_f64();
    let cores = |before: Option<procstat::Sample>, after: Option<procstat::Sample>| {
        Some(procstat::cores_used(&before?, &after?, seconds))
    };
    let latency = Latency::from_histogram(&measured.histogram);
    let (little_mean, little_deviation) = match schedule.rate {
        None => {
            let (mean, deviation) = littles_law(
                schedule.conns,
                measured.requests_per_second,
                latency.mean_ms,
            );
            (
                Some(mean).filter(|m| m.is_finite()),
                Some(deviation).filter(|d| d.is_finite()),
            )
        }
        Some(_) => (None, None),
    };
    let answered = measured.histogram.len().max(1);
    Point {
        conns: schedule.conns,
        rate: schedule.rate,
        requests_per_second: measured.requests_per_second,
        latency,
        mean_body_bytes: measured.body_bytes as f64 / answered as f64,
        littles_law_mean_ms: little_mean,
        littles_law_deviation: little_deviation,
        target_cpu_cores: cores(target_before, target_after),
        client_cpu_cores: cores(me_before, me_after),
        client_timer_lag_ms: measured.mean_timer_lag.map(|d| d.as_secs_f64() * 1000.0),
        target_rss_bytes: target_after.map(|s| s.rss_bytes),
        target_rss_anon_bytes: target_after.map(|s| s.rss_anon_bytes),
        target_rss_file_bytes: target_after.map(|s| s.rss_file_bytes),
        reject_path: measured.outcomes.reject_summary(),
        client_bound: report::client_bound(
            measured.mean_timer_lag.map(|d| d.as_secs_f64() * 1000.0),
        ),
        outcomes: measured.outcomes,
    }
}

fn is_loopback(url: &str) -> bool {
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return false;
    };
    matches!(uri.host(), Some(h) if h == "localhost" || h.starts_with("127.") || h == "[::1]")
}

/// Writes the reference target's answer to each member of the pool as
/// `<dir>/<slug>/<i>.json`.
async fn write_ceiling_files(
    dir: &Path,
    workload: &Workload,
    reference: &RpcClient,
) -> Result<(), BenchError> {
    let sub = dir.join(&workload.slug);
    std::fs::create_dir_all(&sub).map_err(BenchError::io(&sub))?;
    for (i, body) in workload.requests.iter().enumerate() {
        let (_, answer) = reference
            .post(body.clone())
            .await
            .map_err(|e| BenchError::Target("reference".into(), e.to_string()))?;
        let path = sub.join(format!("{i}.json"));
        std::fs::write(&path, &answer).map_err(BenchError::io(&path))?;
    }
    // A thousand answers of 100 KB are 100 MB of dirty pages: written back
    // by the kernel a few seconds later, they took CPU from whichever
    // target was measured first (its ratio 10-20 % lower than in a round
    // where it went second). Written back now, they cost no cell anything.
    sync_file_system(&sub).map_err(BenchError::io(&sub))
}

/// Writes back every dirty page of the file system holding `dir`.
fn sync_file_system(dir: &Path) -> std::io::Result<()> {
    let handle = std::fs::File::open(dir)?;
    // SAFETY: syncfs only reads the descriptor, which `handle` keeps open.
    let done = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&handle)) };
    if done == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A wrk script that posts uniformly random members of `bodies` to `path`:
/// the same work `neve bench` sends, for cross-checking with wrk.
pub fn wrk_lua(path: &str, bodies: &[Bytes]) -> String {
    let mut lua = String::from(
        "-- written by neve bench: the same request pool it sends\nlocal bodies = {\n",
    );
    for body in bodies {
        lua.push_str("[==[");
        lua.push_str(&String::from_utf8_lossy(body));
        lua.push_str("]==],\n");
    }
    // Each request is formatted once, in `init` (wrk has set the Host header
    // by then): formatting per request in Lua costs wrk's one thread more
    // than neve answering it, so wrk would measure itself.
    lua.push_str(&format!(
        "}}\nwrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\n\
         local requests = {{}}\n\
         init = function(args)\n  \
           for i, body in ipairs(bodies) do requests[i] = wrk.format(\"POST\", \"{path}\", nil, body) end\n\
         end\n\
         request = function() return requests[math.random(#requests)] end\n"
    ));
    lua
}

/// Writes `results.json`, `results.md` and the plots; returns notes to show.
fn write_results(
    dir: &Path,
    results: &Results,
    workloads: &[Workload],
) -> Result<Vec<String>, BenchError> {
    std::fs::create_dir_all(dir).map_err(BenchError::io(dir))?;
    let json = dir.join("results.json");
    std::fs::write(
        &json,
        serde_json::to_vec_pretty(results).expect("results serialise"),
    )
    .map_err(BenchError::io(&json))?;
    let md = dir.join("results.md");
    std::fs::write(&md, results.render()).map_err(BenchError::io(&md))?;
    let mut notes = vec![format!("wrote {} and {}", json.display(), md.display())];
    for (run, workload) in results.workloads.iter().zip(workloads) {
        match plot::sweep(dir, &workload.slug, run) {
            Ok((files, note)) => {
                if !files.is_empty() {
                    notes.push(format!(
                        "plots: {}",
                        files
                            .iter()
                            .map(|f| f.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                notes.extend(note);
            }
            Err(e) => notes.push(format!("plot for {} failed: {e}", run.workload)),
        }
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wrk_script_carries_the_pool_verbatim() {
        let bodies = vec![
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x1",false]}"#),
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#),
        ];
        let lua = wrk_lua("/ext/bc/C/rpc", &bodies);
        assert!(
            lua.contains(r#"[==[{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}]==],"#)
        );
        assert!(lua.contains(r#"wrk.format("POST", "/ext/bc/C/rpc", nil, body)"#));
        assert!(lua.contains("request = function() return requests[math.random(#requests)] end"));
    }

    #[tokio::test]
    async fn inconsistent_configurations_are_refused_before_any_request() {
        let target = |spec| Target::parse(spec, TargetKind::Rpc).unwrap();
        let usage = |config: BenchConfig| async move {
            match run(&config, |_| {}).await {
                Err(BenchError::Usage(why)) => why,
                other => panic!("expected a usage error, got {other:?}"),
            }
        };
        // Port 9 (discard) is never asked: these fail before any request.
        let two = vec![
            target("a=http://127.0.0.1:9"),
            target("a=http://127.0.0.1:9"),
        ];
        assert!(
            usage(BenchConfig::new(two))
                .await
                .contains("two targets are named a")
        );
        let mut config = BenchConfig::new(vec![target("a=http://127.0.0.1:9")]);
        config.compare = vec![("a".into(), "b".into())];
        assert!(usage(config).await.contains("--compare names b"));
        for rate in [f64::INFINITY, f64::NAN, -1.0, 1e12] {
            let mut config = BenchConfig::new(vec![target("a=http://127.0.0.1:9")]);
            config.rates = vec![rate];
            assert!(usage(config).await.contains("rates must be"), "{rate}");
        }
        let mut config = BenchConfig::new(vec![target("a=http://127.0.0.1:9")]);
        config.rates = vec![100.0];
        config.open_conns = 0;
        assert!(usage(config).await.contains("--open-conns"));
        assert!(usage(BenchConfig::new(vec![])).await.contains("--target"));
    }

    #[test]
    fn loopback_urls_are_recognised() {
        assert!(is_loopback("http://127.0.0.1:8545/"));
        assert!(is_loopback("http://localhost:1/x"));
        assert!(!is_loopback("http://10.0.0.1:8545/"));
    }
}
