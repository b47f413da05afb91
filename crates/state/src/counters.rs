//! What state reads counted: live [`Counters`] and their [`StateStats`]
//! snapshot.

use std::sync::atomic::AtomicU64;

use crate::nodes::NodeStats;

/// Counters of state reads, shown by `/metrics` and `/health`.
#[derive(Debug, Default)]
pub struct Counters {
    /// State requests answered from held nodes at once.
    pub hits: AtomicU64,
    /// State requests answered after fetching through.
    pub fetched: AtomicU64,
    /// State requests answered 421 (not held and not fetched in time).
    pub misses: AtomicU64,
    /// Proofs or code refused because they did not verify.
    pub refused: AtomicU64,
    /// Fetches that failed (upstream error, timeout, no answer).
    pub fetch_failures: AtomicU64,
    /// Fetches not started because too many were in flight.
    pub shed: AtomicU64,
    /// Calls made to the upstream for reads (fetch-through).
    pub upstream_calls: AtomicU64,
    /// Calls made to the upstream by prefetch.
    pub prefetch_calls: AtomicU64,
    /// Blocks whose touched keys were proved at their root (refreshed
    /// per block).
    pub refreshed_blocks: AtomicU64,
    /// Calls made to the upstream to refresh per block (the touched keys,
    /// and their proofs); a share of [`Counters::prefetch_calls`].
    pub refresh_calls: AtomicU64,
    /// Replayed blocks whose post-state hashed to their verified
    /// `stateRoot` and was kept as state (their children replay over it).
    pub post_states_kept: AtomicU64,
    /// Replayed blocks whose post-state was not kept: a node it needed not
    /// held, a bound, or a root unlike the header's.
    pub post_states_unkept: AtomicU64,
    /// Of those, the ones whose root was unlike the header's (logged once):
    /// neve's fault, or rules neve does not know, never the chain's.
    pub post_states_unlike: AtomicU64,
    /// Replays that waited for their parent's post-state being computed
    /// (rather than ask the node for what it was about to hold).
    pub post_state_waits: AtomicU64,
    /// Replays whose first run read their parent's post-state as its
    /// replay left it, while it was being proved, to learn what to fetch.
    pub post_state_overlays: AtomicU64,
    /// Of those, the runs that named state to fetch (fetched beside the
    /// proving rather than after it).
    pub post_state_overlay_fetches: AtomicU64,
}

/// A snapshot of [`Counters`] and the node store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateStats {
    /// See [`Counters::hits`].
    pub hits: u64,
    /// See [`Counters::fetched`].
    pub fetched: u64,
    /// See [`Counters::misses`].
    pub misses: u64,
    /// See [`Counters::refused`].
    pub refused: u64,
    /// See [`Counters::fetch_failures`].
    pub fetch_failures: u64,
    /// See [`Counters::shed`].
    pub shed: u64,
    /// See [`Counters::upstream_calls`].
    pub upstream_calls: u64,
    /// See [`Counters::prefetch_calls`].
    pub prefetch_calls: u64,
    /// See [`Counters::refreshed_blocks`].
    pub refreshed_blocks: u64,
    /// See [`Counters::refresh_calls`].
    pub refresh_calls: u64,
    /// See [`Counters::post_states_kept`].
    pub post_states_kept: u64,
    /// See [`Counters::post_states_unkept`].
    pub post_states_unkept: u64,
    /// See [`Counters::post_states_unlike`].
    pub post_states_unlike: u64,
    /// See [`Counters::post_state_waits`].
    pub post_state_waits: u64,
    /// See [`Counters::post_state_overlays`].
    pub post_state_overlays: u64,
    /// See [`Counters::post_state_overlay_fetches`].
    pub post_state_overlay_fetches: u64,
    /// The node store's counters.
    pub nodes: NodeStats,
}
