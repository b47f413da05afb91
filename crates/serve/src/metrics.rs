//! Counters and latency histograms: plain atomics bumped with a relaxed
//! add on every request, read into Prometheus families (`family`) only
//! when `/metrics` is scraped, so the library costs the hot path nothing.

pub(crate) mod family;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus::proto::{Metric, MetricFamily, MetricType};

use crate::methods::{SERVED_COUNT, served};
use crate::rpc::{MemoCounts, Outcome};
use family::{family, figure, histogram_sample, sample};

/// Upper bounds of the latency buckets, in seconds: fine below a
/// millisecond, where neve's answers live, coarse above.
const BUCKETS: [f64; 12] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5,
];

#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_nanos: AtomicU64,
}

/// What `/metrics` reports from the serving side.
pub struct Metrics {
    /// Per method (the served ones, then "other"): ok, miss, error.
    calls: Vec<[AtomicU64; 3]>,
    latency: Vec<Histogram>,
    /// Bodies over the size limit.
    pub(crate) too_large: AtomicU64,
    /// Connections refused at the connection limit.
    pub(crate) refused_connections: AtomicU64,
    /// Open connections.
    pub(crate) connections: AtomicU64,
    /// Batches over the element limit.
    pub(crate) batch_too_large: AtomicU64,
    /// Chain-event watchers restarted after one panicked.
    pub(crate) events_restarts: AtomicU64,
    /// Requests refused with 429 under `--client-rate`.
    pub(crate) rate_limited: AtomicU64,
    /// Requests answered 503 while catching up (`--shed-when-behind`).
    pub(crate) shed: AtomicU64,
    /// Log scans waiting for or running on the scan threads.
    pub(crate) scans_queued: AtomicU64,
    /// Log queries refused because [`crate::methods::logs::MAX_QUEUED_SCANS`] were queued.
    pub(crate) scans_refused: AtomicU64,
    /// Calls answered on the I/O threads: their records were not in memory.
    pub(crate) cold_reads: AtomicU64,
    /// Cold reads answered 421 at once: `server::offload::MAX_QUEUED_COLD_READS` were queued.
    pub(crate) cold_reads_refused: AtomicU64,
    /// Requests' cold reads waiting for or running on the I/O threads.
    pub(crate) cold_reads_queued: AtomicU64,
    /// Calls waiting for or running on the call threads.
    pub(crate) calls_queued: AtomicU64,
    /// Calls answered 421 at once: `server::execute::MAX_QUEUED_CALLS` were queued.
    pub(crate) calls_refused: AtomicU64,
    /// Calls executed, by how they ended: [`CallEnd`].
    call_ends: [AtomicU64; 3],
    /// Gas of the executed calls' answers (`execute_calls`' count).
    call_gas: AtomicU64,
    /// Time from a call's hand-off to the call threads to its answer,
    /// fetches between its runs included.
    call_time: Histogram,
    /// Bytes of answers read from the disk into memory of their own and
    /// not yet written out (and dropped); shared with those answers.
    pub(crate) cold_answer_bytes: Arc<AtomicU64>,
    /// The store's records in memory, bytes, from the last sample
    /// (`server/residency.rs`).
    pub(crate) store_resident_bytes: AtomicU64,
    /// Of the last sample's pages, parts per million in memory.
    pub(crate) store_resident_ppm: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            calls: (0..=SERVED_COUNT).map(|_| Default::default()).collect(),
            latency: (0..=SERVED_COUNT).map(|_| Histogram::default()).collect(),
            too_large: AtomicU64::new(0),
            refused_connections: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            batch_too_large: AtomicU64::new(0),
            events_restarts: AtomicU64::new(0),
            rate_limited: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            scans_queued: AtomicU64::new(0),
            scans_refused: AtomicU64::new(0),
            cold_reads: AtomicU64::new(0),
            cold_reads_refused: AtomicU64::new(0),
            cold_reads_queued: AtomicU64::new(0),
            cold_answer_bytes: Arc::default(),
            calls_queued: AtomicU64::new(0),
            calls_refused: AtomicU64::new(0),
            call_ends: Default::default(),
            call_gas: AtomicU64::new(0),
            call_time: Histogram::default(),
            store_resident_bytes: AtomicU64::new(0),
            store_resident_ppm: AtomicU64::new(0),
        }
    }
}

/// How an executed call (`eth_call`, `eth_estimateGas`,
/// `eth_createAccessList`) ended; one answered from the memo was not
/// executed, and is counted by the memo.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallEnd {
    /// Answered from the state neve held.
    Local = 0,
    /// Answered after fetching the state its runs named.
    Fetched = 1,
    /// Not answered: 421.
    Miss = 2,
}

const CALL_ENDS: [&str; 3] = ["local", "fetched", "miss"];

impl Histogram {
    fn record(&self, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        if let Some(bucket) = BUCKETS.iter().position(|b| seconds <= *b) {
            self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }

    /// The histogram as read now, under `labels`.
    fn sample(&self, labels: &[(&str, &str)]) -> Metric {
        let mut cumulative = 0;
        let buckets = BUCKETS.iter().zip(&self.buckets).map(|(bound, n)| {
            cumulative += n.load(Ordering::Relaxed);
            (*bound, cumulative)
        });
        histogram_sample(
            labels,
            buckets,
            self.count.load(Ordering::Relaxed),
            self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        )
    }
}

impl Metrics {
    /// Books one call of the method at `index` (see `methods::method_index`).
    pub(crate) fn record(&self, index: usize, outcome: Outcome, elapsed: Duration) {
        let slot = match outcome {
            Outcome::Ok => 0,
            Outcome::Miss => 1,
            Outcome::Error => 2,
        };
        self.calls[index][slot].fetch_add(1, Ordering::Relaxed);
        self.latency[index].record(elapsed);
    }

    /// Books one executed call: how it ended and the time it took.
    pub(crate) fn record_call(&self, end: CallEnd, elapsed: Duration) {
        self.call_ends[end as usize].fetch_add(1, Ordering::Relaxed);
        self.call_time.record(elapsed);
    }

    /// Books the gas executed calls used.
    pub(crate) fn record_call_gas(&self, gas: u64) {
        self.call_gas.fetch_add(gas, Ordering::Relaxed);
    }

    /// Gas spent on the call threads so far (calls' runs, and the fee
    /// methods' blocks read, as gas): what the heap watcher reads a burst
    /// of work there by.
    pub(crate) fn call_gas_total(&self) -> u64 {
        self.call_gas.load(Ordering::Relaxed)
    }

    /// The serving metrics alone in Prometheus text, the memo's counts as
    /// none: what tests of the serving side read.
    #[cfg(test)]
    pub(crate) fn render(&self, out: &mut String) {
        out.push_str(&family::encode(self.families(MemoCounts::default())));
    }

    /// The serving metrics as Prometheus families, read now: calls by
    /// method and outcome and their latency, the HTTP front's and the
    /// queues' figures, then the executed calls' (`memo`: the memo's
    /// answers).
    pub(crate) fn families(&self, memo: MemoCounts) -> Vec<MetricFamily> {
        let mut families = self.request_families();
        families.extend(
            self.figures()
                .into_iter()
                .map(|(name, help, value)| figure(name, help, value)),
        );
        families.extend(self.call_families(memo));
        families
    }

    /// Calls by method and outcome, and the time they took, of the
    /// methods called at least once.
    fn request_families(&self) -> Vec<MetricFamily> {
        let names: Vec<&str> = served().chain(["other"]).collect();
        let mut requests = Vec::new();
        for (method, counts) in names.iter().zip(&self.calls) {
            for (outcome, n) in ["ok", "miss", "error"].iter().zip(counts) {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    let labels = [("method", *method), ("outcome", *outcome)];
                    requests.push(sample(MetricType::COUNTER, &labels, n as f64));
                }
            }
        }
        let latencies = names
            .iter()
            .zip(&self.latency)
            .filter(|(_, histogram)| histogram.count.load(Ordering::Relaxed) > 0)
            .map(|(method, histogram)| histogram.sample(&[("method", method)]))
            .collect();
        vec![
            family(
                "neve_rpc_requests_total",
                "JSON-RPC calls by method and outcome (ok, miss = HTTP 421, error).",
                MetricType::COUNTER,
                requests,
            ),
            family(
                "neve_rpc_duration_seconds",
                "Time to answer one call, from parsed request to prepared response.",
                MetricType::HISTOGRAM,
                latencies,
            ),
        ]
    }

    /// (name, help, value) of the values without labels; a name ending in
    /// `_total` is a counter, any other a gauge.
    fn figures(&self) -> Vec<(&'static str, &'static str, f64)> {
        let read = |value: &AtomicU64| value.load(Ordering::Relaxed) as f64;
        vec![
            (
                "neve_http_body_too_large_total",
                "Requests refused with 413.",
                read(&self.too_large),
            ),
            (
                "neve_http_batch_too_large_total",
                "Batches refused for exceeding the element limit.",
                read(&self.batch_too_large),
            ),
            (
                "neve_http_connections_refused_total",
                "Connections refused with 503 at the connection limit.",
                read(&self.refused_connections),
            ),
            (
                "neve_http_rate_limited_total",
                "Requests refused with 429: their address was over --client-rate.",
                read(&self.rate_limited),
            ),
            (
                "neve_http_shed_total",
                "Requests answered 503 while more than --max-behind blocks behind (--shed-when-behind).",
                read(&self.shed),
            ),
            (
                "neve_logs_scans_refused_total",
                "eth_getLogs queries refused with -32005: the scan threads' queue was full.",
                read(&self.scans_refused),
            ),
            (
                "neve_logs_scans_queued",
                "Requests' log scans waiting for or running on the scan threads.",
                read(&self.scans_queued),
            ),
            (
                "neve_http_connections",
                "Open connections.",
                read(&self.connections),
            ),
            (
                "neve_store_cold_reads_total",
                "Calls answered on the I/O threads because the records they read were not in memory.",
                read(&self.cold_reads),
            ),
            (
                "neve_store_cold_reads_refused_total",
                "Cold reads answered 421 at once: the I/O threads' queue was full.",
                read(&self.cold_reads_refused),
            ),
            (
                "neve_store_cold_reads_queued",
                "Requests' cold reads waiting for or running on the I/O threads.",
                read(&self.cold_reads_queued),
            ),
            (
                "neve_calls_queued",
                "Calls (eth_call, eth_estimateGas, traces; a trace's block parsed while its witness is fetched) waiting for or running on the call threads.",
                read(&self.calls_queued),
            ),
            (
                "neve_calls_refused_total",
                "Calls answered 421 at once: the call threads' queue was full.",
                read(&self.calls_refused),
            ),
            (
                "neve_store_cold_answer_bytes",
                "Bytes of answers read from the disk and not yet written out.",
                read(&self.cold_answer_bytes),
            ),
            (
                "neve_store_resident_bytes",
                "Bytes of stored records in memory (the page cache), estimated from a sample of their pages every 10 s.",
                read(&self.store_resident_bytes),
            ),
            (
                "neve_events_watcher_restarts_total",
                "Chain-event watchers (subscriptions' source) restarted after a panic.",
                read(&self.events_restarts),
            ),
            (
                "neve_store_resident_ratio",
                "Fraction of the stored records in memory, from the last sample.",
                read(&self.store_resident_ppm) / 1e6,
            ),
        ]
    }

    /// The executed calls by how they ended (and the memo's answers,
    /// `memo`), their gas and their time.
    fn call_families(&self, memo: MemoCounts) -> Vec<MetricFamily> {
        let ends = CALL_ENDS
            .iter()
            .zip(&self.call_ends)
            .map(|(end, n)| (*end, n.load(Ordering::Relaxed)));
        let outcomes = std::iter::once(("memo", memo.hits))
            .chain(ends)
            .map(|(outcome, n)| sample(MetricType::COUNTER, &[("outcome", outcome)], n as f64))
            .collect();
        vec![
            family(
                "neve_calls_total",
                "Calls (eth_call, eth_estimateGas, eth_createAccessList) by how they were answered: memo (a kept answer at the same block, not executed), local (executed on held state), fetched (executed after fetching state), miss (421).",
                MetricType::COUNTER,
                outcomes,
            ),
            figure(
                "neve_call_gas_total",
                "Gas executed calls used: every run, however it ended (an answer, an error, a miss), a call's, every probe of an estimate's search, every run of an access list's making; and the fee methods' blocks read, as gas (what --client-rate charges).",
                self.call_gas.load(Ordering::Relaxed) as f64,
            ),
            figure(
                "neve_call_memo_stored_total",
                "Calls' answers kept in the memo.",
                memo.stored as f64,
            ),
            figure(
                "neve_call_memo_bytes",
                "Bytes of calls' answers kept in the memo, keys and overhead counted (at most --call-memo-bytes).",
                memo.bytes as f64,
            ),
            family(
                "neve_call_duration_seconds",
                "Time from a call's hand-off to the call threads to its answer, fetches between runs included.",
                MetricType::HISTOGRAM,
                vec![self.call_time.sample(&[])],
            ),
        ]
    }
}
