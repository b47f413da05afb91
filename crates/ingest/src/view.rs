//! What the rest of neve reads of ingest while it runs ([`IngestView`]):
//! the upstream's heights, the follower's health as ages and errors, what
//! the upstream offers, and the Prometheus families of ingest's counters and
//! of its upstream client's pacing. Every read is of live counters.
//!
//! Serving sees it through its own `ChainView` trait, which the binary
//! implements over this type method by method: ingest does not depend on
//! the serving crate, nor serving on ingest.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use neve_upstream::{RedactedUrl, RpcClient, StateWindow};
use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{Counter, Gauge, Opts};

use crate::status::IngestStatus;

/// What serving sees of ingest: its counters, and the upstream client's
/// pacing.
pub struct IngestView {
    status: Arc<IngestStatus>,
    url: RedactedUrl,
    upstream: RpcClient,
    max_silence: Duration,
}

/// The longest the upstream may go unheard (no exchange with it
/// succeeding: a result of the shape asked for, not a JSON-RPC error nor a
/// page answered with 200) before neve stops taking its stored tip for the
/// chain's head: `latest` is then 421 and readiness down, whatever the
/// reason (a provider's quota pausing every request, a dead link, a stuck
/// follower). The bound itself is [`SILENCE_BLOCKS`] block intervals of
/// the chain ([`IngestView::silence_bound`]); this is its ceiling, and the
/// bound until an interval is learnt. `--max-upstream-silence` sets the
/// ceiling, so an operator can make neve stricter than three blocks (a
/// ceiling under [`MIN_UPSTREAM_SILENCE`] is the bound), never looser:
/// on a 1 s chain a longer silence would serve a tip more than three
/// blocks old as `latest` with 200. The follower asks for the head every
/// `--poll-ms` (100 ms by default), so the ceiling is a hundred missed
/// polls; on a 12 s chain (three intervals are 36 s) it is the bound.
/// Default is 10 s.
pub const DEFAULT_MAX_UPSTREAM_SILENCE: Duration = Duration::from_secs(10);

/// Block intervals the upstream may go unheard before the stored tip is
/// not the head ([`IngestView::silence_bound`]): a tip that stopped moving
/// is then at most about three blocks old when `latest` turns 421, on a
/// chain of any pace. Default is 3.
pub const SILENCE_BLOCKS: u32 = 3;

/// The shortest silence bound the chain's pace sets, for chains of blocks
/// under 667 ms (three of them are less): at the tip every sync step
/// starts with a head, so contact is refreshed every step, and a step is
/// the head, the tags, the block's batch and an append, about four round
/// trips, under a second to a provider 100–200 ms away. Two seconds hold
/// one slow step and the follower's first retries (100, then 200 ms
/// apart) without readiness flapping on a single late answer. Default is
/// 2 s.
pub const MIN_UPSTREAM_SILENCE: Duration = Duration::from_secs(2);

fn age_seconds(unix_ms: u64) -> Option<f64> {
    if unix_ms == 0 {
        return None;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()?
        .as_millis() as u64;
    Some(now.saturating_sub(unix_ms) as f64 / 1000.0)
}

impl IngestView {
    /// A view of the follower's `status`, showing its upstream as `url`
    /// and the pacing of `upstream` (a client sharing the follower's
    /// limits).
    pub fn new(status: Arc<IngestStatus>, url: RedactedUrl, upstream: RpcClient) -> IngestView {
        IngestView {
            status,
            url,
            upstream,
            max_silence: DEFAULT_MAX_UPSTREAM_SILENCE,
        }
    }

    /// This view, taking the upstream as gone after `max_silence` at most
    /// without an exchange that succeeded, sooner on a fast chain (see
    /// [`DEFAULT_MAX_UPSTREAM_SILENCE`]).
    pub fn with_max_silence(mut self, max_silence: Duration) -> IngestView {
        self.max_silence = max_silence;
        self
    }

    /// The live counters behind this view.
    pub fn status(&self) -> &Arc<IngestStatus> {
        &self.status
    }

    /// The upstream's head, if known.
    pub fn upstream_head(&self) -> Option<u64> {
        self.status.head()
    }

    /// The upstream's `safe` height, if it has one and neve follows it:
    /// like `latest`, a tag heard before a silence is not the chain's now.
    pub fn safe(&self) -> Option<u64> {
        self.status.safe().filter(|_| self.following())
    }

    /// The upstream's `finalized` height, if it has one and neve follows
    /// it.
    pub fn finalized(&self) -> Option<u64> {
        self.status.finalized().filter(|_| self.following())
    }

    /// The upstream's URL, credentials masked.
    pub fn url(&self) -> &RedactedUrl {
        &self.url
    }

    /// Whether the last exchange with the upstream succeeded.
    pub fn upstream_connected(&self) -> bool {
        self.status.connected.load(Ordering::Relaxed)
    }

    /// Seconds since the last exchange with the upstream that succeeded.
    pub fn last_contact_age_seconds(&self) -> Option<f64> {
        age_seconds(self.status.last_contact_unix_ms.load(Ordering::Acquire))
    }

    /// Seconds since the last block was stored.
    pub fn last_block_age_seconds(&self) -> Option<f64> {
        age_seconds(self.status.last_block_unix_ms.load(Ordering::Relaxed))
    }

    /// What the last sync step (or the follower's death) failed with, if
    /// the last one failed.
    pub fn last_error(&self) -> Option<String> {
        self.status.last_error()
    }

    /// Whether the upstream offers raw RLP; `None` until probed.
    pub fn raw_data(&self) -> Option<bool> {
        self.status.capabilities().map(|c| c.raw)
    }

    /// Why no request goes to the upstream now, if none does.
    pub fn waiting(&self) -> Option<String> {
        let left = self.upstream.pacing().paused_for()?;
        let every = crate::follow::probe_period(self.status.block_interval());
        Some(format!(
            "the upstream refused with 429 or 503; its head is asked every {:.1} s, everything else waits {:.1} s more at most",
            every.as_secs_f64(),
            left.as_secs_f64()
        ))
    }

    /// Notified after every append and rollback.
    pub fn changes(&self) -> Arc<tokio::sync::Notify> {
        self.status.changed.clone()
    }

    /// The blocks the upstream said it can prove state at, when it said.
    pub fn upstream_state_window(&self) -> Option<StateWindow> {
        self.status.state_window()
    }

    /// Whether neve follows the chain: a follower runs (none while one
    /// that died is restarted) and the upstream was heard from within the
    /// [`silence_bound`](IngestView::silence_bound). Serving treats
    /// `latest` as unknown (421) and readiness as down otherwise, so a
    /// stored tip that stopped moving for any reason is never passed off
    /// as the head.
    pub fn following(&self) -> bool {
        let bound = self.silence_bound().as_secs_f64();
        let heard_lately = self
            .last_contact_age_seconds()
            .is_none_or(|age| age <= bound);
        !self.status.follower_down.load(Ordering::Relaxed) && heard_lately
    }

    /// How long the upstream may go unheard before neve stops following:
    /// [`SILENCE_BLOCKS`] of the chain's block interval (learnt from the
    /// verified header times of the newest blocks stored), no less than
    /// [`MIN_UPSTREAM_SILENCE`] and no more than `--max-upstream-silence`
    /// ([`DEFAULT_MAX_UPSTREAM_SILENCE`]), which is the bound until an
    /// interval is known. On a chain of 1 s blocks, 3 s.
    pub fn silence_bound(&self) -> Duration {
        match self.status.block_interval() {
            Some(interval) => (interval * SILENCE_BLOCKS)
                .max(MIN_UPSTREAM_SILENCE)
                .min(self.max_silence),
            None => self.max_silence,
        }
    }

    /// Followers restarted after one died.
    pub fn follower_restarts(&self) -> u64 {
        self.status.follower_restarts.load(Ordering::Relaxed)
    }

    /// Why writing to the store fails, while it does.
    pub fn store_write_error(&self) -> Option<String> {
        self.status.store_error()
    }

    /// How long ago the upstream's head reached its current height.
    pub fn upstream_head_age(&self) -> Option<Duration> {
        let since = self
            .status
            .upstream_head_since_unix_ms
            .load(Ordering::Relaxed);
        age_seconds(since).map(Duration::from_secs_f64)
    }

    /// The Prometheus families of ingest's counters, then of the upstream
    /// client's pacing, read now.
    pub fn metric_families(&self) -> Vec<MetricFamily> {
        let s = &self.status;
        let read = |value: &std::sync::atomic::AtomicU64| value.load(Ordering::Relaxed) as f64;
        let flag = |on: bool| if on { 1.0 } else { 0.0 };
        let pacing = self.upstream.pacing().stats();
        [
            (
                "neve_ingest_upstream_head",
                "The upstream's head at the last sync.",
                read(&s.upstream_head),
            ),
            (
                "neve_ingest_appended_blocks_total",
                "Blocks stored since start.",
                read(&s.appended_blocks),
            ),
            (
                "neve_ingest_refused_blocks_total",
                "Blocks that failed verification and were not stored.",
                read(&s.refused_blocks),
            ),
            (
                "neve_ingest_reorgs_total",
                "Reorgs followed by a rollback.",
                read(&s.reorgs),
            ),
            (
                "neve_ingest_follower_restarts_total",
                "Followers restarted after one died (a panic); each is logged.",
                read(&s.follower_restarts),
            ),
            (
                "neve_ingest_follower_up",
                "1 while a follower runs; 0 after one died until its successor runs.",
                flag(!s.follower_down.load(Ordering::Relaxed)),
            ),
            (
                "neve_ingest_upstream_connected",
                "1 when the last exchange with the upstream succeeded.",
                flag(s.connected.load(Ordering::Relaxed)),
            ),
            (
                "neve_upstream_requests_total",
                "HTTP requests sent to the upstream (JSON-RPC, /blocks, /health).",
                pacing.requests as f64,
            ),
            (
                "neve_upstream_refusals_total",
                "429 and 503 answers from the upstream; each pauses every request.",
                pacing.refusals as f64,
            ),
            (
                "neve_upstream_wait_seconds_total",
                "Seconds requests to the upstream waited for the budget or a refusal's pause, summed.",
                pacing.waited_seconds,
            ),
            (
                "neve_upstream_paused",
                "1 while a refusal's pause (Retry-After or backoff) holds every request.",
                flag(pacing.paused_for_seconds.is_some()),
            ),
            (
                "neve_upstream_budget_requests_per_second",
                "--upstream-rps (0: no budget).",
                pacing.budget_per_second,
            ),
            (
                "neve_upstream_max_batch",
                "Most calls per batch sent to the upstream: --upstream-max-batch, or fewer learnt from refusals.",
                self.upstream.max_batch() as f64,
            ),
        ]
        .into_iter()
        .flat_map(|(name, help, value)| one_value(name, help, value))
        .collect()
    }
}

/// The family of one value without labels, made by the library's own
/// metric types: a counter when its name ends in `_total` (every counter
/// of ingest's does), a gauge otherwise.
fn one_value(name: &str, help: &str, value: f64) -> Vec<MetricFamily> {
    let opts = Opts::new(name, help);
    let invalid = "ingest's metric names are valid";
    if name.ends_with("_total") {
        let counter = Counter::with_opts(opts).expect(invalid);
        counter.inc_by(value);
        counter.collect()
    } else {
        let gauge = Gauge::with_opts(opts).expect(invalid);
        gauge.set(value);
        gauge.collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(max_silence: Duration) -> (IngestView, Arc<IngestStatus>) {
        let status = Arc::new(IngestStatus::default());
        let url = RedactedUrl::of("http://127.0.0.1:1");
        let client = RpcClient::new("http://127.0.0.1:1").unwrap();
        (
            IngestView::new(status.clone(), url, client).with_max_silence(max_silence),
            status,
        )
    }

    /// issue 32.1: a tip that stopped moving because the upstream went
    /// silent (a day's `Retry-After`, a dead link) is not the head.
    #[test]
    fn an_upstream_silent_past_the_bound_is_not_followed() {
        let (view, status) = view(Duration::from_secs(10));
        assert!(
            view.following(),
            "never heard from yet: the head is unknown anyway"
        );
        status.contact(true);
        assert!(view.following());
        let eleven_seconds_ago = crate::status::unix_ms() - 11_000;
        status
            .last_contact_unix_ms
            .store(eleven_seconds_ago, Ordering::Relaxed);
        assert!(!view.following());
        status.contact(true);
        assert!(view.following());
        status.follower_down.store(true, Ordering::Relaxed);
        assert!(!view.following());
    }

    /// What `/metrics` showed of ingest when its text was written by hand
    /// (upstream head 12, seven blocks appended, a follower running).
    const BEFORE: &str = r#"# HELP neve_ingest_upstream_head The upstream's head at the last sync.
# TYPE neve_ingest_upstream_head gauge
neve_ingest_upstream_head 12
# HELP neve_ingest_appended_blocks_total Blocks stored since start.
# TYPE neve_ingest_appended_blocks_total counter
neve_ingest_appended_blocks_total 7
# HELP neve_ingest_refused_blocks_total Blocks that failed verification and were not stored.
# TYPE neve_ingest_refused_blocks_total counter
neve_ingest_refused_blocks_total 0
# HELP neve_ingest_reorgs_total Reorgs followed by a rollback.
# TYPE neve_ingest_reorgs_total counter
neve_ingest_reorgs_total 0
# HELP neve_ingest_follower_restarts_total Followers restarted after one died (a panic); each is logged.
# TYPE neve_ingest_follower_restarts_total counter
neve_ingest_follower_restarts_total 0
# HELP neve_ingest_follower_up 1 while a follower runs; 0 after one died until its successor runs.
# TYPE neve_ingest_follower_up gauge
neve_ingest_follower_up 1
# HELP neve_ingest_upstream_connected 1 when the last exchange with the upstream succeeded.
# TYPE neve_ingest_upstream_connected gauge
neve_ingest_upstream_connected 0
# HELP neve_upstream_requests_total HTTP requests sent to the upstream (JSON-RPC, /blocks, /health).
# TYPE neve_upstream_requests_total counter
neve_upstream_requests_total 0
# HELP neve_upstream_refusals_total 429 and 503 answers from the upstream; each pauses every request.
# TYPE neve_upstream_refusals_total counter
neve_upstream_refusals_total 0
# HELP neve_upstream_wait_seconds_total Seconds requests to the upstream waited for the budget or a refusal's pause, summed.
# TYPE neve_upstream_wait_seconds_total counter
neve_upstream_wait_seconds_total 0
# HELP neve_upstream_paused 1 while a refusal's pause (Retry-After or backoff) holds every request.
# TYPE neve_upstream_paused gauge
neve_upstream_paused 0
# HELP neve_upstream_budget_requests_per_second --upstream-rps (0: no budget).
# TYPE neve_upstream_budget_requests_per_second gauge
neve_upstream_budget_requests_per_second 0
# HELP neve_upstream_max_batch Most calls per batch sent to the upstream: --upstream-max-batch, or fewer learnt from refusals.
# TYPE neve_upstream_max_batch gauge
neve_upstream_max_batch 1000
"#;

    /// The families as Prometheus text are the hand-written text of
    /// before: the same names, types, help and values.
    #[test]
    fn the_metrics_are_every_counter_and_gauge_of_ingest_and_the_upstream_client() {
        let (view, status) = view(DEFAULT_MAX_UPSTREAM_SILENCE);
        status.appended_blocks.store(7, Ordering::Relaxed);
        status.upstream_head.store(12, Ordering::Relaxed);
        let text = prometheus::TextEncoder::new()
            .encode_to_string(&view.metric_families())
            .unwrap();
        assert_eq!(text, BEFORE);
    }

    fn heard_ago(status: &IngestStatus, ms: u64) {
        status
            .last_contact_unix_ms
            .store(crate::status::unix_ms() - ms, Ordering::Relaxed);
    }

    /// Issue 42 (5): on a chain of 1 s blocks, 4 s without a successful
    /// exchange is four blocks the stored tip may be behind; the bound is
    /// three intervals, between a floor and the operator's ceiling.
    #[test]
    fn the_silence_bound_is_three_block_intervals_between_a_floor_and_the_flag() {
        let (one_second, status) = view(DEFAULT_MAX_UPSTREAM_SILENCE);
        assert_eq!(
            one_second.silence_bound(),
            DEFAULT_MAX_UPSTREAM_SILENCE,
            "no interval learnt yet"
        );
        status.note_block_times((100..=140).map(|h| (h, 1_700_000_000 + h)));
        assert_eq!(one_second.silence_bound(), Duration::from_secs(3));
        heard_ago(&status, 2_500);
        assert!(one_second.following());
        heard_ago(&status, 4_000);
        assert!(!one_second.following(), "four 1 s blocks unheard");

        // Four blocks a second: the floor.
        let (fast, status) = view(DEFAULT_MAX_UPSTREAM_SILENCE);
        status.note_block_times((0..=64).map(|h| (h, 1_700_000_000 + h / 4)));
        assert_eq!(fast.silence_bound(), MIN_UPSTREAM_SILENCE);
        // Mainnet's 12 s: the ceiling.
        let (slow, status) = view(DEFAULT_MAX_UPSTREAM_SILENCE);
        status.note_block_times((0..=32).map(|h| (h, 1_700_000_000 + 12 * h)));
        assert_eq!(slow.silence_bound(), DEFAULT_MAX_UPSTREAM_SILENCE);
        // An operator's ceiling under the floor is the bound.
        let (strict, status) = view(Duration::from_secs(1));
        status.note_block_times((0..=32).map(|h| (h, 1_700_000_000 + h)));
        assert_eq!(strict.silence_bound(), Duration::from_secs(1));
    }
}
