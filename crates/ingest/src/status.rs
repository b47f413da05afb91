//! The follower's live counters, read by health and metrics, and what the
//! upstream was found to offer ([`Capabilities`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The newest blocks stored whose header times give the chain's block
/// interval: their mean spacing, so one late or early block moves it by a
/// thirty-first, and a chain that changes pace is followed within a few
/// dozen blocks. Default is 32.
pub const BLOCK_INTERVAL_WINDOW: usize = 32;

/// What the upstream offers beyond the basics, found by probing
/// ([`crate::fetch`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `eth_getBlockReceipts` (else receipts are fetched per transaction).
    pub block_receipts: bool,
    /// `debug_getRawHeader`, `debug_getRawBlock`, `debug_getRawReceipts`.
    pub raw: bool,
}

/// Live counters for health and metrics; all reads are O(1).
#[derive(Debug, Default)]
pub struct IngestStatus {
    /// The upstream's head at the last sync.
    pub upstream_head: AtomicU64,
    /// Unix milliseconds when `upstream_head` last rose: when the newest
    /// block was announced, as far as neve knows.
    pub upstream_head_since_unix_ms: AtomicU64,
    /// The upstream's `safe` height + 1 (0: unknown).
    pub(crate) safe_plus_one: AtomicU64,
    /// The upstream's `finalized` height + 1 (0: unknown).
    pub(crate) finalized_plus_one: AtomicU64,
    /// Whether the last exchange with the upstream succeeded.
    pub connected: AtomicBool,
    /// Unix milliseconds of the last exchange that succeeded.
    pub last_contact_unix_ms: AtomicU64,
    /// Unix milliseconds of the last block appended.
    pub last_block_unix_ms: AtomicU64,
    /// Blocks that failed preparation or verification (never stored).
    pub refused_blocks: AtomicU64,
    /// Reorgs followed by a rollback.
    pub reorgs: AtomicU64,
    /// Blocks appended since start.
    pub appended_blocks: AtomicU64,
    /// Set while no follower runs: the last one died (panicked) and its
    /// successor is not up yet, or cannot be. Serving treats `latest` as
    /// unknown and readiness as down meanwhile.
    pub follower_down: AtomicBool,
    /// Followers restarted after one died.
    pub follower_restarts: AtomicU64,
    /// What the last probe found: `eth_getBlockReceipts` (1), raw data (2).
    /// Blocks stored without raw data while the upstream has none are
    /// answered 421 for the `debug_getRaw*` methods; `/health` says which.
    capabilities: AtomicU64,
    state_window: std::sync::Mutex<Option<neve_upstream::StateWindow>>,
    /// Set once a sync step has read the upstream's head.
    pub(crate) head_known: AtomicBool,
    /// Notified after every append and rollback.
    pub changed: Arc<tokio::sync::Notify>,
    last_error: Mutex<Option<String>>,
    /// Why the last write to the store failed (a full disk, a failed
    /// fsync); cleared by the next step that succeeds.
    store_error: Mutex<Option<String>>,
    /// Height and verified header time (seconds) of the newest blocks
    /// stored, oldest first, at most [`BLOCK_INTERVAL_WINDOW`].
    block_times: Mutex<VecDeque<(u64, u64)>>,
    /// Their mean spacing in milliseconds (0: fewer than two known).
    block_interval_ms: AtomicU64,
}

impl IngestStatus {
    /// The upstream's head as of the last sync; `None` until one has read
    /// it (after a restart, the stored tip must not pass for the head).
    pub fn head(&self) -> Option<u64> {
        self.head_known
            .load(Ordering::Relaxed)
            .then(|| self.upstream_head.load(Ordering::Relaxed))
    }

    /// The upstream's `safe` height, if it has one.
    pub fn safe(&self) -> Option<u64> {
        self.safe_plus_one.load(Ordering::Relaxed).checked_sub(1)
    }

    /// The upstream's `finalized` height, if it has one.
    pub fn finalized(&self) -> Option<u64> {
        self.finalized_plus_one
            .load(Ordering::Relaxed)
            .checked_sub(1)
    }

    /// The last error the follower hit, if the last sync failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn publish_capabilities(&self, caps: Capabilities) {
        let bits = 4 | caps.block_receipts as u64 | (caps.raw as u64) << 1;
        self.capabilities.store(bits, Ordering::Relaxed);
    }

    pub(crate) fn publish_state_window(&self, window: Option<neve_upstream::StateWindow>) {
        *self.state_window.lock().unwrap_or_else(|p| p.into_inner()) = window;
    }

    /// The blocks the upstream said it can prove state at, when it said.
    pub fn state_window(&self) -> Option<neve_upstream::StateWindow> {
        *self.state_window.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the upstream offers beyond the basics, once probed.
    pub fn capabilities(&self) -> Option<Capabilities> {
        let bits = self.capabilities.load(Ordering::Relaxed);
        (bits & 4 != 0).then_some(Capabilities {
            block_receipts: bits & 1 != 0,
            raw: bits & 2 != 0,
        })
    }

    /// Why the last write to the store failed, while it keeps failing.
    pub fn store_error(&self) -> Option<String> {
        self.store_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(crate) fn set_store_error(&self, error: Option<String>) {
        *self.store_error.lock().unwrap_or_else(|p| p.into_inner()) = error;
    }

    pub(crate) fn set_last_error(&self, error: Option<String>) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = error;
    }

    /// Notes the heights and verified header times (seconds) of blocks
    /// just stored, in order, and learns the chain's block interval from
    /// the newest of them. A height at or below one noted (blocks stored
    /// again after a rollback) forgets the blocks it replaces.
    pub(crate) fn note_block_times(&self, blocks: impl IntoIterator<Item = (u64, u64)>) {
        let mut times = self.block_times.lock().unwrap_or_else(|p| p.into_inner());
        for (height, time) in blocks {
            while times.back().is_some_and(|&(newest, _)| newest >= height) {
                times.pop_back();
            }
            if times.len() == BLOCK_INTERVAL_WINDOW {
                times.pop_front();
            }
            times.push_back((height, time));
        }
        // The mean spacing of neighbouring blocks, leaving out spacings
        // past four medians and a second: a genesis of long ago, or a gap
        // while the chain stalled, would stretch the mean, and the median
        // alone is no spacing on a chain of several blocks a second
        // (header times are whole seconds).
        let mut spacings: Vec<u64> = times
            .iter()
            .zip(times.iter().skip(1))
            .map(|(&(h0, t0), &(h1, t1))| t1.saturating_sub(t0).saturating_mul(1000) / (h1 - h0))
            .collect();
        if spacings.is_empty() {
            return;
        }
        let middle = spacings.len() / 2;
        let median = *spacings.select_nth_unstable(middle).1;
        let usual: Vec<u64> = spacings
            .into_iter()
            .filter(|spacing| *spacing <= median.saturating_mul(4).saturating_add(1000))
            .collect();
        let interval_ms = usual.iter().sum::<u64>() / usual.len() as u64;
        // A chain whose blocks share a second (more than one a second) has
        // a spacing under the headers' resolution: a millisecond, not none.
        self.block_interval_ms
            .store(interval_ms.max(1), Ordering::Relaxed);
    }

    /// The chain's block interval: the mean spacing of the header times of
    /// the newest blocks stored (outliers left out), once two are known.
    pub fn block_interval(&self) -> Option<Duration> {
        match self.block_interval_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// The upstream answered with its head: published before it is booked
    /// as contact, so a fresh contact is not set beside the head of before
    /// a silence (which would pass the tip of then off as `latest`).
    pub(crate) fn heard_head(&self, head: u64) {
        let previous = self.upstream_head.swap(head, Ordering::Relaxed);
        if head > previous {
            self.upstream_head_since_unix_ms
                .store(unix_ms(), Ordering::Relaxed);
        }
        self.head_known.store(true, Ordering::Relaxed);
        self.contact(true);
    }

    pub(crate) fn contact(&self, ok: bool) {
        self.connected.store(ok, Ordering::Relaxed);
        if ok {
            // Release: whoever sees this contact sees the head stored
            // before it (`heard_head`).
            self.last_contact_unix_ms
                .store(unix_ms(), Ordering::Release);
        }
    }
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_interval_is_the_mean_spacing_of_the_newest_blocks() {
        let status = IngestStatus::default();
        assert_eq!(status.block_interval(), None);
        status.note_block_times([(100, 5_000)]);
        assert_eq!(status.block_interval(), None, "one block has no spacing");
        // A 12 s chain, then a backfill's worth of 1 s blocks: only the
        // newest window counts.
        status.note_block_times((101..=140).map(|h| (h, 5_000 + (h - 100) * 12)));
        assert_eq!(status.block_interval(), Some(Duration::from_secs(12)));
        let base = 5_000 + 40 * 12;
        status.note_block_times((141..=200).map(|h| (h, base + (h - 140))));
        assert_eq!(status.block_interval(), Some(Duration::from_secs(1)));
        // Four blocks a second (header times in whole seconds).
        status.note_block_times((201..=264).map(|h| (h, 10_000 + (h - 201) / 4)));
        let interval = status.block_interval().unwrap();
        assert!(
            interval > Duration::from_millis(200) && interval < Duration::from_millis(300),
            "{interval:?}"
        );
        // Blocks stored again after a rollback replace the ones they
        // roll back, not stretch the window backwards.
        status.note_block_times([(250, 20_000), (251, 20_002)]);
        let times = status.block_times.lock().unwrap();
        assert_eq!(times.back(), Some(&(251, 20_002)));
        assert!(times.iter().all(|&(h, _)| h <= 251));
        assert!(
            times
                .iter()
                .zip(times.iter().skip(1))
                .all(|(a, b)| a.0 < b.0)
        );
        drop(times);
        // A genesis of long ago among 1 s blocks does not stretch it.
        let status = IngestStatus::default();
        status.note_block_times(
            [(0, 0)]
                .into_iter()
                .chain((1..=4).map(|h| (h, 1_700_000_000 + h))),
        );
        assert_eq!(status.block_interval(), Some(Duration::from_secs(1)));
    }
}
