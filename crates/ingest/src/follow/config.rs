//! How a follower behaves: its settings, their defaults, and what a
//! sync step reports.

use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use neve_store::Store;

/// Deepest reorg followed by rolling back; deeper ones are refused loudly,
/// since they mean a confused upstream more often than a real chain event.
/// Default is 64.
pub const DEFAULT_MAX_REORG_DEPTH: u64 = 64;

/// Damaged blocks fetched again per sync step (once caught up): repair
/// never delays the tip by more than a few blocks' fetches. Default is 4.
pub const REPAIRS_PER_STEP: usize = 4;

/// Blocks fetched at once during backfill. Each is one HTTP batch; 16 keeps
/// a loopback geth busy without starving its other clients. Default is 16.
pub const DEFAULT_FETCH_CONCURRENCY: usize = 16;

/// How often the follower asks the upstream for its head (one
/// `eth_blockNumber` sent past the pause, `RpcClient::probe`) while a
/// refusal's pause holds every other request: once a block interval
/// (learnt from the blocks stored), within these bounds. A provider that
/// refused with a day's `Retry-After` (clamped to 5 minutes) and then
/// recovers is seen within one block interval on a chain of 1 s blocks and
/// within 5 s on any, and its answer ends the pause, so neve follows again
/// about two block intervals after the recovery rather than minutes. One
/// cheap call a second at most is a tenth of what following at the tip
/// asks (a head every `--poll-ms`, 100 ms); backfill, proofs and state
/// fetches honour the pause until a probe ends it. Default is 1 s to 5 s.
pub const PAUSED_PROBE_EVERY: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(5);

/// The period of the probes sent while paused for a chain of blocks
/// `interval` apart (unknown: the shortest); see [`PAUSED_PROBE_EVERY`].
pub fn probe_period(interval: Option<Duration>) -> Duration {
    interval
        .unwrap_or_default()
        .clamp(*PAUSED_PROBE_EVERY.start(), *PAUSED_PROBE_EVERY.end())
}

/// Most blocks per store append (one fsync). Default is 64.
pub const DEFAULT_APPEND_BATCH: usize = 64;

/// Bytes of prepared blocks ingest may hold at once: fetched and being
/// verified, and waiting to be appended. Fetches in flight are limited by
/// it (at the size of recent blocks) as well as by their count, so a chain
/// of 5 MB blocks does not cost sixteen times that per fetch in flight.
/// A block in flight costs several times its bytes (the answer, the
/// decoded values verification checks, the prepared record), so the
/// process's peak is a few times this. Backfilling 129 blocks of ~1,400
/// transactions from geth (2026-11-26, two rounds alternated): 24 MiB
/// peaked at 145–153 MiB of anonymous memory at 7.5–8.7 blocks/s; 12 MiB
/// at 80–81 MiB and 7.9–8.0 blocks/s; 8 MiB at 75–80 MiB and 6.8–7.9
/// blocks/s. 12 keeps a backfill of big blocks under the 64 MiB serving
/// budget plus a state cache's, at a backfill rate within the noise of
/// twice the buffer. Default is 12 MiB.
pub const DEFAULT_INGEST_BUFFER_BYTES: usize = 12 << 20;

/// Blocks waiting to be appended are appended once they weigh this much,
/// even short of [`DEFAULT_APPEND_BATCH`]. Default is 8 MiB.
pub(super) const APPEND_BATCH_BYTES: usize = 8 << 20;

/// A block being fetched and verified is held in about this many copies at
/// its peak: the answer, the prepared record, and what verification decodes
/// (transactions, receipts with their logs).
pub(super) const IN_FLIGHT_COPIES: usize = 4;

/// The size a block is assumed to have before any was fetched: large, so
/// the first fetches are few (two at the default buffer) until real sizes
/// are known; the estimate falls to the real size within a few blocks.
pub(super) const FIRST_BLOCK_BYTES_GUESS: usize =
    DEFAULT_INGEST_BUFFER_BYTES / IN_FLIGHT_COPIES / 2;

/// The height an empty store starts at (the floor of what it keeps).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartHeight {
    /// At this height (`0` mirrors from genesis).
    Height(u64),
    /// At the upstream's head when first synced.
    Tip,
    /// The retention window back from the head (all of it without a
    /// retention limit). The default.
    Retention,
}

/// How the follower behaves.
#[derive(Clone, Debug)]
pub struct IngestConfig {
    /// Where an empty store starts.
    pub floor: StartHeight,
    /// The store's block retention, used by [`StartHeight::Retention`].
    pub retain_blocks: Option<u64>,
    /// See [`DEFAULT_MAX_REORG_DEPTH`].
    pub max_reorg_depth: u64,
    /// See [`DEFAULT_FETCH_CONCURRENCY`].
    pub fetch_concurrency: usize,
    /// See [`DEFAULT_APPEND_BATCH`].
    pub append_batch: usize,
    /// See [`DEFAULT_INGEST_BUFFER_BYTES`].
    pub buffer_bytes: usize,
    /// The upstream is another neve: identity, head and tags come from its
    /// `/health`, and a long way behind is closed from its `/blocks` stream.
    pub mirror: bool,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            floor: StartHeight::Retention,
            retain_blocks: None,
            max_reorg_depth: DEFAULT_MAX_REORG_DEPTH,
            fetch_concurrency: DEFAULT_FETCH_CONCURRENCY,
            append_batch: DEFAULT_APPEND_BATCH,
            buffer_bytes: DEFAULT_INGEST_BUFFER_BYTES,
            mirror: false,
        }
    }
}

/// What one sync step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// The upstream's head.
    pub head: u64,
    /// Blocks appended.
    pub appended: u64,
    /// The height rolled back to, if a reorg was followed.
    pub rolled_back_to: Option<u64>,
    /// Whether the store now reaches the head.
    pub caught_up: bool,
}

/// The store's writer, shared by the follower and whoever restarts it:
/// readers hold views of this store, so a restarted follower must go on
/// writing the same one, never reopen it.
pub type SharedStore = Arc<Mutex<Store>>;
