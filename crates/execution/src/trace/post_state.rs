//! A replayed block's post-state, kept as state: once a whole block has
//! replayed over its parent's verified state and reproduced every receipt,
//! its changes (and its withdrawals' credit) applied to the parent's trie
//! give a root; when that root is the block's own verified `stateRoot`, the
//! nodes made for it hash up to a root neve trusts, as a proof's do, and go
//! into the node store. The block's child then replays over them: an
//! indexer tracing every new block costs the node a witness (or proofs)
//! only for what the chain had not touched lately.
//!
//! It is computed from what is held only (no proof is fetched, no preimage
//! searched for): a node it needs that is not held leaves the post-state
//! unkept, and the child's replay fetches as it would have. A root unlike
//! the header's keeps nothing and is logged: the replay proved its
//! receipts, so that would be neve's fault, never the chain's.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;

use alloy_primitives::U256;
use bytes::Bytes;
use revm::Database;
use revm::database::CacheDB;
use revm::state::EvmState;

use crate::db::VerifiedDb;
use crate::run::Pinned;
use crate::state_root::{Changes, Root, state_root};

use super::inputs::ReplayBlock;

/// What a replay records for its block's post-state: its changes, or
/// nothing once it is not to be kept.
pub(crate) struct PostState(Option<Changes>);

impl PostState {
    /// Recorded when a replay runs the `whole` of `block`, whose
    /// post-state no replay computed yet.
    pub(crate) fn wanted(pinned: &Pinned<'_>, block: &ReplayBlock, whole: bool) -> Self {
        let facts = &block.facts;
        let done = pinned.state.post_state_claimed(facts.number, &facts.hash.0);
        let readable = block.withdrawals.is_some();
        PostState((whole && readable && !done).then(Changes::without_searches))
    }

    /// Nothing recorded.
    pub(crate) fn none() -> Self {
        PostState(None)
    }

    /// Whether it is still to be kept.
    pub(crate) fn wanted_still(&self) -> bool {
        self.0.is_some()
    }

    /// An execution's changes (a transaction's, a system call's), before
    /// they are committed; past the changes' bound, nothing is kept.
    pub(crate) fn record(&mut self, state: &EvmState) {
        if let Some(changes) = &mut self.0
            && changes.record(state).is_err()
        {
            self.give_up();
        }
    }

    /// Not to be kept (a system call that failed, a bound).
    pub(crate) fn give_up(&mut self) {
        self.0 = None;
    }

    /// Keeps the post-state of `block`, replayed into `overlay` over
    /// `pinned` and proved against its receipts: its withdrawals credited,
    /// its root computed from what is held, and the nodes made kept when
    /// it is the header's. Not when the trace's time is up: the work is
    /// the trace's (bounded by the changes' bound).
    pub(crate) fn keep(
        self,
        pinned: &Pinned<'_>,
        block: &ReplayBlock,
        overlay: &mut CacheDB<&VerifiedDb<'_>>,
        late: bool,
    ) {
        let Some(changes) = self.0.filter(|_| !late) else {
            return;
        };
        // Another replay of the block (under another tracer) may have
        // computed it meanwhile.
        if !pinned
            .state
            .claim_post_state(block.facts.number, &block.facts.hash.0)
        {
            return;
        }
        let counters = &pinned.state.counters;
        let counter = match kept(pinned, block, overlay, changes) {
            Ok(()) => &counters.post_states_kept,
            Err(why) => {
                if let Some(why) = why {
                    counters.post_states_unlike.fetch_add(1, Relaxed);
                    // Once: on a chain whose rules neve does not know it
                    // would be every block's.
                    static TOLD: AtomicBool = AtomicBool::new(false);
                    if !TOLD.swap(true, Relaxed) {
                        tracing::warn!(
                            block = block.facts.number,
                            why,
                            "a replayed block's post-state is not kept (told once; counted in neve_state_post_states_unlike_total)"
                        );
                    }
                }
                &counters.post_states_unkept
            }
        };
        counter.fetch_add(1, Relaxed);
    }
}

/// The post-state kept, or why not (`None`: nothing held allows it, no
/// fault of anyone's).
fn kept(
    pinned: &Pinned<'_>,
    block: &ReplayBlock,
    overlay: &mut CacheDB<&VerifiedDb<'_>>,
    mut changes: Changes,
) -> Result<(), Option<&'static str>> {
    let started = std::time::Instant::now();
    // The withdrawals' credit, in Gwei, after the transactions.
    for (address, gwei) in block.withdrawals.iter().flatten() {
        let mut info = match overlay.basic(*address) {
            Ok(info) => info.unwrap_or_default(),
            Err(never) => match never {},
        };
        info.balance = info
            .balance
            .saturating_add(U256::from(*gwei) * U256::from(1_000_000_000u64));
        overlay.insert_account_info(*address, info);
        changes.touched(*address).map_err(|_| None)?;
    }
    if overlay.db.has_needs() {
        return Err(None);
    }
    let root = match state_root(pinned, overlay, &mut changes) {
        Ok(Root::Hash(root)) => root,
        Ok(Root::Needs(_)) | Err(_) => return Err(None),
    };
    if root != block.facts.state_root {
        return Err(Some("its root is unlike the header's"));
    }
    // Codes the block made: those not held yet.
    let codes: Vec<Bytes> = overlay
        .cache
        .contracts
        .iter()
        .filter(|(hash, _)| !pinned.state.has_code(&hash.0))
        .map(|(_, code)| code.original_bytes().0)
        .collect();
    let rooted = started.elapsed();
    let nodes = changes.into_made_nodes();
    let witnessed = neve_state::verify_witness(&root.0, &nodes, &codes)
        .map_err(|_| Some("a node made for it does not decode"))?;
    let verified = started.elapsed();
    pinned.state.insert(witnessed.verified);
    tracing::debug!(
        block = block.facts.number,
        nodes = nodes.len(),
        ms = started.elapsed().as_millis() as u64,
        root_ms = rooted.as_millis() as u64,
        verify_ms = (verified - rooted).as_millis() as u64,
        insert_ms = (started.elapsed() - verified).as_millis() as u64,
        "a replayed block's post-state kept"
    );
    Ok(())
}
