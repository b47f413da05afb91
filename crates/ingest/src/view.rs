//! What the rest of neve reads of ingest while it runs ([`IngestView`]):
//! the upstream's heights, the follower's health as ages and errors, what
//! the upstream offers, and the Prometheus lines of ingest's counters and
//! of its upstream client's pacing. Every read is of live counters.
//!
//! Serving sees it through its own `ChainView` trait, which the binary
//! implements over this type method by method: ingest does not depend on
//! the serving crate, nor serving on ingest.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use neve_upstream::{RedactedUrl, RpcClient, StateWindow};

use crate::status::IngestStatus;

/// What serving sees of ingest: its counters, and the upstream client's
/// pacing.
pub struct IngestView {
    status: Arc<IngestStatus>,
    url: RedactedUrl,
    upstream: RpcClient,
    max_silence: Duration,
}

/// How long the upstream may go unheard (no exchange with it succeeding)
/// before neve stops taking its stored tip for the chain's head: `latest`
/// is then 421 and readiness down, whatever the reason (a provider's
/// quota pausing every request, a dead link, a stuck follower). The
/// follower asks for the head every `--poll-ms` (100 ms by default), so
/// this is a hundred missed polls. Default is 10 s.
pub const DEFAULT_MAX_UPSTREAM_SILENCE: Duration = Duration::from_secs(10);

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

    /// This view, taking the upstream as gone after `max_silence` without
    /// an exchange that succeeded (see [`DEFAULT_MAX_UPSTREAM_SILENCE`]).
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

    /// The upstream's `safe` height, if it has one.
    pub fn safe(&self) -> Option<u64> {
        self.status.safe()
    }

    /// The upstream's `finalized` height, if it has one.
    pub fn finalized(&self) -> Option<u64> {
        self.status.finalized()
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
        age_seconds(self.status.last_contact_unix_ms.load(Ordering::Relaxed))
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
        self.upstream
            .pacing()
            .stats()
            .paused_for_seconds
            .map(|s| format!("the upstream refused with 429 or 503; asking again in {s:.1} s"))
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
    /// allowed silence. Serving treats `latest` as unknown (421) and
    /// readiness as down otherwise, so a stored tip that stopped moving
    /// for any reason is never passed off as the head.
    pub fn following(&self) -> bool {
        let heard_lately = self
            .last_contact_age_seconds()
            .is_none_or(|age| age <= self.max_silence.as_secs_f64());
        !self.status.follower_down.load(Ordering::Relaxed) && heard_lately
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

    /// Appends the Prometheus text of ingest's counters, then of the
    /// upstream client's pacing.
    pub fn render_metrics(&self, out: &mut String) {
        let s = &self.status;
        for (name, help, kind, value) in [
            (
                "neve_ingest_upstream_head",
                "The upstream's head at the last sync.",
                "gauge",
                s.upstream_head.load(Ordering::Relaxed),
            ),
            (
                "neve_ingest_appended_blocks_total",
                "Blocks stored since start.",
                "counter",
                s.appended_blocks.load(Ordering::Relaxed),
            ),
            (
                "neve_ingest_refused_blocks_total",
                "Blocks that failed verification and were not stored.",
                "counter",
                s.refused_blocks.load(Ordering::Relaxed),
            ),
            (
                "neve_ingest_reorgs_total",
                "Reorgs followed by a rollback.",
                "counter",
                s.reorgs.load(Ordering::Relaxed),
            ),
            (
                "neve_ingest_follower_restarts_total",
                "Followers restarted after one died (a panic); each is logged.",
                "counter",
                s.follower_restarts.load(Ordering::Relaxed),
            ),
            (
                "neve_ingest_follower_up",
                "1 while a follower runs; 0 after one died until its successor runs.",
                "gauge",
                !s.follower_down.load(Ordering::Relaxed) as u64,
            ),
            (
                "neve_ingest_upstream_connected",
                "1 when the last exchange with the upstream succeeded.",
                "gauge",
                s.connected.load(Ordering::Relaxed) as u64,
            ),
        ] {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
        let pacing = self.upstream.pacing().stats();
        for (name, help, kind, value) in [
            (
                "neve_upstream_requests_total",
                "HTTP requests sent to the upstream (JSON-RPC, /blocks, /health).",
                "counter",
                pacing.requests as f64,
            ),
            (
                "neve_upstream_refusals_total",
                "429 and 503 answers from the upstream; each pauses every request.",
                "counter",
                pacing.refusals as f64,
            ),
            (
                "neve_upstream_wait_seconds_total",
                "Seconds requests to the upstream waited for the budget or a refusal's pause, summed.",
                "counter",
                pacing.waited_seconds,
            ),
            (
                "neve_upstream_paused",
                "1 while a refusal's pause (Retry-After or backoff) holds every request.",
                "gauge",
                pacing.paused_for_seconds.is_some() as u64 as f64,
            ),
            (
                "neve_upstream_budget_requests_per_second",
                "--upstream-rps (0: no budget).",
                "gauge",
                pacing.budget_per_second,
            ),
            (
                "neve_upstream_max_batch",
                "Most calls per batch sent to the upstream: --upstream-max-batch, or fewer learnt from refusals.",
                "gauge",
                self.upstream.max_batch() as f64,
            ),
        ] {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
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
}
