//! The arithmetic of a run: latency percentiles from an HDR histogram,
//! answer classes, Little's law and the knee of a concurrency sweep.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::classify::Outcome;

/// Latencies are recorded in microseconds, 1 µs to 100 s, 3 significant
/// digits (0.1 % relative error at any magnitude).
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("static histogram bounds are valid")
}

/// Records one latency, clamped into the histogram's range.
pub fn record(histogram: &mut Histogram<u64>, latency: Duration) {
    let micros = (latency.as_micros() as u64).clamp(1, histogram.high());
    histogram.record(micros).expect("value clamped into range");
}

/// How many answers fell in each class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Outcomes {
    /// 2xx with a non-null result.
    pub ok: u64,
    /// 2xx with `"result": null`.
    pub null_results: u64,
    /// 2xx with a JSON-RPC error.
    pub rpc_errors: u64,
    /// 2xx whose body is not a JSON-RPC answer.
    pub malformed: u64,
    /// 3xx answers.
    pub status_3xx: u64,
    /// 4xx answers (421 included).
    pub status_4xx: u64,
    /// Of those, 421: what neve cannot answer with authority.
    pub status_421: u64,
    /// 5xx answers.
    pub status_5xx: u64,
    /// Requests that got no answer (connection refused, reset, timeout).
    pub transport_errors: u64,
}

impl Outcomes {
    /// Books one answer.
    pub fn add(&mut self, outcome: Outcome) {
        match outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::NullResult => self.null_results += 1,
            Outcome::RpcError => self.rpc_errors += 1,
            Outcome::Malformed => self.malformed += 1,
            Outcome::Status(code) => match code {
                300..=399 => self.status_3xx += 1,
                400..=499 => {
                    self.status_4xx += 1;
                    if code == 421 {
                        self.status_421 += 1;
                    }
                }
                _ => self.status_5xx += 1,
            },
        }
    }

    /// Adds another tally into this one.
    pub fn merge(&mut self, other: &Outcomes) {
        self.ok += other.ok;
        self.null_results += other.null_results;
        self.rpc_errors += other.rpc_errors;
        self.malformed += other.malformed;
        self.status_3xx += other.status_3xx;
        self.status_4xx += other.status_4xx;
        self.status_421 += other.status_421;
        self.status_5xx += other.status_5xx;
        self.transport_errors += other.transport_errors;
    }

    /// Every request counted, answered or not.
    pub fn total(&self) -> u64 {
        self.ok
            + self.null_results
            + self.rpc_errors
            + self.malformed
            + self.status_3xx
            + self.status_4xx
            + self.status_5xx
            + self.transport_errors
    }

    /// Requests that did not do the work asked for.
    pub fn rejected(&self) -> u64 {
        self.total() - self.ok
    }

    /// A one-line account of what was rejected, or `None` when nothing was.
    pub fn reject_summary(&self) -> Option<String> {
        if self.total() == 0 {
            return Some("no request was sent or answered in the window".into());
        }
        if self.rejected() == 0 {
            return None;
        }
        let parts: Vec<String> = [
            ("HTTP 421", self.status_421),
            ("other 4xx", self.status_4xx - self.status_421),
            ("5xx", self.status_5xx),
            ("3xx", self.status_3xx),
            ("JSON-RPC errors in 200", self.rpc_errors),
            ("null results", self.null_results),
            ("not JSON-RPC", self.malformed),
            ("no answer", self.transport_errors),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{n} {what}"))
        .collect();
        Some(format!(
            "{:.1} % of {} requests: {}",
            100.0 * self.rejected() as f64 / self.total() as f64,
            self.total(),
            parts.join(", ")
        ))
    }
}

/// Latency percentiles in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    /// Arithmetic mean.
    pub mean_ms: f64,
    /// Median.
    pub p50_ms: f64,
    /// 90th percentile.
    pub p90_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// 99.9th percentile.
    pub p999_ms: f64,
    /// Largest recorded.
    pub max_ms: f64,
}

impl Latency {
    /// Reads the percentiles off a histogram of microseconds.
    pub fn from_histogram(histogram: &Histogram<u64>) -> Latency {
        if histogram.is_empty() {
            return Latency::default();
        }
        let ms = |micros: u64| micros as f64 / 1000.0;
        Latency {
            mean_ms: histogram.mean() / 1000.0,
            p50_ms: ms(histogram.value_at_quantile(0.50)),
            p90_ms: ms(histogram.value_at_quantile(0.90)),
            p99_ms: ms(histogram.value_at_quantile(0.99)),
            p999_ms: ms(histogram.value_at_quantile(0.999)),
            max_ms: ms(histogram.max()),
        }
    }
}

/// Little's law for a closed loop: `conns` requests are always in flight,
/// so the mean latency must equal `conns / throughput`. Returns that
/// expected mean in milliseconds and the measured mean's relative deviation
/// from it; a large deviation means the client, not the target, set the pace
/// (or connections sat idle).
pub fn littles_law(conns: usize, requests_per_second: f64, measured_mean_ms: f64) -> (f64, f64) {
    if requests_per_second <= 0.0 {
        return (f64::INFINITY, f64::INFINITY);
    }
    let expected_ms = conns as f64 / requests_per_second * 1000.0;
    (expected_ms, (measured_mean_ms - expected_ms) / expected_ms)
}

/// The knee of a sweep: the smallest concurrency whose throughput reaches
/// 95 % of the peak. `points` are (connections, req/s) in any order.
pub fn knee(points: &[(usize, f64)]) -> Option<usize> {
    let peak = points.iter().map(|(_, rps)| *rps).fold(0.0, f64::max);
    if peak <= 0.0 {
        return None;
    }
    points
        .iter()
        .filter(|(_, rps)| *rps >= 0.95 * peak)
        .map(|(conns, _)| *conns)
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_known_distribution() {
        let mut histogram = new_histogram();
        // 1..=1000 ms, one each: p50 = 500 ms, p99 = 990 ms, max = 1000 ms.
        for ms in 1..=1000u64 {
            record(&mut histogram, Duration::from_millis(ms));
        }
        let latency = Latency::from_histogram(&histogram);
        let close = |a: f64, b: f64| (a - b).abs() / b < 0.002;
        assert!(close(latency.p50_ms, 500.0), "{latency:?}");
        assert!(close(latency.p90_ms, 900.0), "{latency:?}");
        assert!(close(latency.p99_ms, 990.0), "{latency:?}");
        assert!(close(latency.p999_ms, 999.0), "{latency:?}");
        assert!(close(latency.max_ms, 1000.0), "{latency:?}");
        assert!(close(latency.mean_ms, 500.5), "{latency:?}");
    }

    #[test]
    fn sub_microsecond_and_huge_latencies_are_clamped_not_lost() {
        let mut histogram = new_histogram();
        record(&mut histogram, Duration::from_nanos(10));
        record(&mut histogram, Duration::from_secs(1000));
        assert_eq!(histogram.len(), 2);
        assert_eq!(histogram.min(), 1);
        assert!(histogram.max() >= 99_000_000);
    }

    #[test]
    fn an_empty_histogram_reads_as_zero() {
        assert_eq!(
            Latency::from_histogram(&new_histogram()),
            Latency::default()
        );
    }

    #[test]
    fn littles_law_holds_for_a_saturated_closed_loop() {
        // 16 connections at 8,000 req/s: each request takes 2 ms on average.
        let (expected, deviation) = littles_law(16, 8000.0, 2.0);
        assert!((expected - 2.0).abs() < 1e-9);
        assert!(deviation.abs() < 1e-9);
        let (_, deviation) = littles_law(16, 8000.0, 1.0);
        assert!((deviation + 0.5).abs() < 1e-9);
        assert!(littles_law(4, 0.0, 1.0).0.is_infinite());
    }

    #[test]
    fn the_knee_is_the_first_concurrency_within_five_percent_of_peak() {
        let sweep = [
            (1, 9000.0),
            (2, 17000.0),
            (4, 30000.0),
            (8, 40000.0),
            (16, 41000.0),
            (32, 39500.0),
        ];
        assert_eq!(knee(&sweep), Some(8)); // 40,000 ≥ 0.95 × 41,000
        assert_eq!(knee(&[(1, 0.0)]), None);
        assert_eq!(knee(&[]), None);
    }

    #[test]
    fn outcomes_tally_and_explain_the_reject_path() {
        let mut outcomes = Outcomes::default();
        for outcome in [
            Outcome::Ok,
            Outcome::Ok,
            Outcome::Status(421),
            Outcome::Status(404),
            Outcome::Status(502),
            Outcome::RpcError,
            Outcome::NullResult,
        ] {
            outcomes.add(outcome);
        }
        outcomes.transport_errors += 1;
        assert_eq!(outcomes.total(), 8);
        assert_eq!(outcomes.rejected(), 6);
        let summary = outcomes.reject_summary().unwrap();
        assert!(summary.starts_with("75.0 % of 8 requests"), "{summary}");
        assert!(
            summary.contains("1 HTTP 421") && summary.contains("1 other 4xx"),
            "{summary}"
        );
        let mut merged = Outcomes::default();
        merged.merge(&outcomes);
        merged.merge(&outcomes);
        assert_eq!(merged.total(), 16);
        assert!(
            Outcomes::default().reject_summary().is_some(),
            "an empty cell is flagged"
        );
        let mut clean = Outcomes::default();
        clean.add(Outcome::Ok);
        assert_eq!(clean.reject_summary(), None);
    }
}
