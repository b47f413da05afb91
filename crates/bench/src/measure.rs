//! One cell measured: the driver, with /proc samples of the target and of
//! this process around the measured window.

use std::time::Instant;

use crate::driver::{self, Plan, Schedule};
use crate::procstat;
use crate::report::{self, Point};
use crate::stats::{Latency, littles_law};

/// One cell: the driver plus /proc samples of the target and this process
/// taken at the edges of the measured window.
pub(crate) async fn measure(plan: &Plan, schedule: Schedule, pids: &[u32], seed: u64) -> Point {
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
