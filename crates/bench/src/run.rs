//! [`run`]: check the configuration, find what every target serves, build
//! the workloads, sweep every target with each, judge and write.

use std::ops::RangeInclusive;

use neve_upstream::RpcClient;

use crate::config::BenchConfig;
use crate::corpus;
use crate::driver::{self, Plan, Schedule};
use crate::error::BenchError;
use crate::measure::measure;
use crate::output::{write_ceiling_files, write_results, wrk_lua};
use crate::procstat;
use crate::report::{Machine, Results, TargetRun, WorkloadRun};
use crate::target::{self, Target, TargetKind, ValidRange};
use crate::workload::{self, Workload};

/// Each target's name with what it serves, and with its client version.
type Discovered = (Vec<(String, ValidRange)>, Vec<(String, Option<String>)>);

/// Runs the benchmark; `progress` hears one line per step.
pub async fn run(
    config: &BenchConfig,
    mut progress: impl FnMut(&str),
) -> Result<Results, BenchError> {
    let reference = config.check()?;
    let started_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());

    let discovered = discover(config, &mut progress).await?;
    let common = target::intersect(&discovered.0)?;
    progress(&format!(
        "common range {}..={}",
        common.start(),
        common.end()
    ));

    let workloads = prepare_workloads(config, reference, &common, &mut progress).await?;
    let all_targets = all_targets(config)?;

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
    let schedules = schedules(config);

    for workload in &workloads {
        let mut run = WorkloadRun {
            workload: workload.name.clone(),
            pool: workload.requests.len(),
            targets: Vec::new(),
        };
        for target in &all_targets {
            let target_run = sweep_target(
                config,
                workload,
                target,
                &discovered,
                &schedules,
                &mut progress,
            )
            .await?;
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

/// What each target serves and which client it is, told to `progress`.
async fn discover(
    config: &BenchConfig,
    progress: &mut impl FnMut(&str),
) -> Result<Discovered, BenchError> {
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
    Ok((ranges, client_versions))
}

/// The workloads drawn from the reference target's corpus over `common`,
/// with the ceiling's files and the wrk script written when asked for.
async fn prepare_workloads(
    config: &BenchConfig,
    reference: &Target,
    common: &RangeInclusive<u64>,
    progress: &mut impl FnMut(&str),
) -> Result<Vec<Workload>, BenchError> {
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

    Ok(workloads)
}

/// The JSON-RPC targets then the ceilings, each on loopback with the pids
/// listening on its port when none were given.
fn all_targets(config: &BenchConfig) -> Result<Vec<Target>, BenchError> {
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
    Ok(all_targets)
}

/// The closed-loop schedules, then the open-loop ones.
fn schedules(config: &BenchConfig) -> Vec<Schedule> {
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
    schedules
}

/// One target swept with one workload under every schedule.
async fn sweep_target(
    config: &BenchConfig,
    workload: &Workload,
    target: &Target,
    (ranges, client_versions): &Discovered,
    schedules: &[Schedule],
    progress: &mut impl FnMut(&str),
) -> Result<TargetRun, BenchError> {
    let endpoint = target.endpoint()?;
    let plan = match target.kind {
        TargetKind::Rpc => Plan::rpc(endpoint, workload.requests.clone()),
        TargetKind::Static => Plan::static_files(endpoint, &workload.slug, workload.requests.len()),
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
    for schedule in schedules {
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
    Ok(target_run)
}

/// Whether `url` names this machine (its targets' pids can be found).
fn is_loopback(url: &str) -> bool {
    let Ok(uri) = url.parse::<hyper::Uri>() else {
        return false;
    };
    matches!(uri.host(), Some(h) if h == "localhost" || h.starts_with("127.") || h == "[::1]")
}

#[cfg(test)]
mod tests {
    use super::*;

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
