//! The follower's live counters, read by health and metrics, and what the
//! upstream was found to offer ([`Capabilities`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

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

    pub(crate) fn contact(&self, ok: bool) {
        self.connected.store(ok, Ordering::Relaxed);
        if ok {
            self.last_contact_unix_ms
                .store(unix_ms(), Ordering::Relaxed);
        }
    }
}

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
