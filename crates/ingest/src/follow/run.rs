//! Running a follower until shutdown: steps on new heads or a poll,
//! backoff after errors, a paused upstream waited out, and memory given
//! back after a backfill.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use neve_upstream::{Quantity, RpcClient};

use crate::status::IngestStatus;

use super::config::probe_period;
use super::follower::Follower;

impl Follower {
    /// Runs [`Follower::sync_once`] until `shutdown` turns true: right away
    /// while behind, on `wake` (new heads) or every `poll` when caught up,
    /// backing off exponentially (to 5 s) after errors.
    pub async fn run(
        mut self,
        wake: Arc<tokio::sync::Notify>,
        poll: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        self.status.follower_down.store(false, Ordering::Relaxed);
        let mut backoff = Duration::from_millis(100);
        let mut appended_since_trim = 0u64;
        let mut backlog_since_trim = false;
        loop {
            if *shutdown.borrow() {
                return;
            }
            let before = self.status.appended_blocks.load(Ordering::Relaxed);
            let result = self.sync_once().await;
            if self.status.appended_blocks.load(Ordering::Relaxed) > before {
                // Progress, even if the step then failed: no growing backoff.
                backoff = Duration::from_millis(100);
            }
            let appended = self
                .status
                .appended_blocks
                .load(Ordering::Relaxed)
                .saturating_sub(before);
            appended_since_trim += appended;
            let pause = match result {
                Ok(outcome) if !outcome.caught_up => {
                    backlog_since_trim = true;
                    Duration::ZERO
                }
                Ok(_) => {
                    backoff = Duration::from_millis(100);
                    // A backfill (or a burst of more than one block) has
                    // just been drained: its buffers are free now, and the
                    // tip needs a fraction of them.
                    if backlog_since_trim
                        || appended > 1
                        || appended_since_trim >= TRIM_AFTER_BLOCKS
                    {
                        appended_since_trim = 0;
                        backlog_since_trim = false;
                        give_memory_back().await;
                    }
                    poll
                }
                Err(error) if self.client.pacing().is_paused() => {
                    // A refusal's pause holds every request (up to the
                    // 5 minute clamp of a daily quota's Retry-After): the
                    // head is asked past it every block or so, and the
                    // first answer ends it.
                    let pacing = self.client.pacing();
                    tracing::warn!(
                        %error,
                        pause_left_ms = pacing.paused_for().unwrap_or_default().as_millis() as u64,
                        probe_every_ms = probe_period(self.status.block_interval()).as_millis() as u64,
                        "sync step failed; waiting out the upstream's pause, its head asked past it"
                    );
                    if wait_out_pause(&self.client, &self.status, &mut shutdown).await {
                        backoff = Duration::from_millis(100);
                    }
                    continue;
                }
                Err(error) => {
                    // A 429 says how long to stay away; honour at least that.
                    // Jitter keeps mirrors restarted together from asking
                    // again in step.
                    let asked = error.retry_after().unwrap_or_default();
                    let pause = backoff.max(asked) + neve_upstream::jitter(backoff / 4);
                    tracing::warn!(%error, retry_in_ms = pause.as_millis() as u64, "sync step failed");
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    pause
                }
            };
            if pause.is_zero() {
                continue;
            }
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
}

/// Waits while a refusal's pause holds every request to the upstream,
/// asking it for its head every [`probe_period`] past the pause; returns
/// once a probe is answered with a head (which ends the pause for every
/// request, and is contact: the head is published, so the stored tip of
/// before the pause is not taken for it), the pause runs out, or
/// `shutdown` changes.
/// `true` when a probe was answered.
pub(crate) async fn wait_out_pause(
    client: &RpcClient,
    status: &IngestStatus,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    let pacing = client.pacing();
    loop {
        let Some(left) = pacing.paused_for() else {
            return false;
        };
        let every = probe_period(status.block_interval());
        // A pause shorter than a probe's period is waited out; jitter keeps
        // mirrors paused together from probing in step.
        let wait = if left <= every {
            left
        } else {
            every + neve_upstream::jitter(every / 4)
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return false,
        }
        if !pacing.is_paused() {
            return false;
        }
        match client.probe::<Quantity>("eth_blockNumber", ()).await {
            Ok(Quantity(head)) => {
                status.heard_head(head);
                tracing::info!(
                    head,
                    "the paused upstream answered a probe; following again"
                );
                return true;
            }
            Err(error) => tracing::debug!(%error, "the paused upstream did not answer a probe"),
        }
    }
}

/// Caught up after a backfill or a burst of blocks, or after appending at
/// least this many blocks at the tip, the follower hands the allocator's
/// free memory back to the OS: a backfill's buffers are freed but stay
/// resident otherwise (glibc keeps them in its arenas). Default is 64.
const TRIM_AFTER_BLOCKS: u64 = 64;

/// Returns free heap memory to the OS (glibc's `malloc_trim`), on the
/// blocking pool since it walks the heap.
async fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    let _ = tokio::task::spawn_blocking(|| {
        // SAFETY: malloc_trim only releases free memory; it is thread-safe.
        unsafe { libc::malloc_trim(0) };
    })
    .await;
}
