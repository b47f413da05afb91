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
//!
//! The root is most of a replay's time (about 25 ms for a block of 1,000
//! transfers), and serves the child's replay, not the trace that replayed
//! the block: it runs on a thread of its own
//! ([`crate::post_states::PostStates`]), and the child waits for it.

use alloy_primitives::{B256, U256};
use revm::Database;
use revm::bytecode::Bytecode;
use revm::database::CacheDB;
use revm::state::EvmState;

use crate::db::VerifiedDb;
use crate::post_states::{Pending, Unproved};
use crate::run::Pinned;
use crate::state_root::Changes;

use super::inputs::ReplayBlock;

/// What a replay records for its block's post-state: its changes, or
/// nothing once it is not to be kept.
pub(crate) struct PostState(Option<Changes>);

impl PostState {
    /// Recorded when a replay runs the `whole` of `block`, whose
    /// post-state no replay computed yet, and `pinned` keeps post-states.
    pub(crate) fn wanted(pinned: &Pinned<'_>, block: &ReplayBlock, whole: bool) -> Self {
        let facts = &block.facts;
        let done = pinned.state.post_state_claimed(facts.number, &facts.hash.0);
        let readable = block.withdrawals.is_some();
        let kept = pinned.post_states.is_some();
        PostState((whole && readable && kept && !done).then(Changes::without_searches))
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
    /// `pinned` and proved against its receipts: its withdrawals credited
    /// here (they read the parent's state), then its root computed from
    /// what is held, and the nodes made kept when it is the header's, on
    /// `pinned`'s [`crate::post_states::PostStates`] thread (off the
    /// answer's path); none
    /// without one. Not when the trace's time is up.
    pub(crate) fn keep(
        self,
        pinned: &Pinned<'_>,
        block: &ReplayBlock,
        overlay: &mut CacheDB<&VerifiedDb<'_>>,
        late: bool,
    ) {
        let Some(mut changes) = self.0.filter(|_| !late) else {
            return;
        };
        let Some(keeper) = pinned.post_states else {
            return;
        };
        let facts = &block.facts;
        // Another replay of the block (under another tracer) may have
        // claimed it meanwhile.
        let Some(ending) = keeper.claim(facts.number, facts.hash.0) else {
            return;
        };
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
            if changes.touched(*address).is_err() {
                return ending.unkept(None);
            }
        }
        if overlay.db.has_needs() {
            return ending.unkept(None);
        }
        // The changed accounts' storage roots as the replay read them at
        // the parent's root (every one it read was held: it has no needs).
        if let Some(roots) = overlay.db.storage_roots_read() {
            changes.read_at_base(roots.iter());
        }
        // Codes the replay read or made that are not held (those its
        // root reaches are kept).
        let codes: Vec<(B256, Bytecode)> = overlay
            .cache
            .contracts
            .iter()
            .filter(|(hash, _)| !pinned.state.has_code(&hash.0))
            .map(|(hash, code)| (*hash, code.clone()))
            .collect();
        // Only the accounts it changed: the root reads no others (the
        // overlay holds every account and slot the block read).
        let mut accounts = std::mem::take(&mut overlay.cache.accounts);
        accounts.retain(|address, _| changes.is_dirty(address));
        let pending = Pending {
            unproved: std::sync::Arc::new(Unproved {
                height: facts.number,
                block_hash: facts.hash.0,
                below: pinned.block.state_root,
                accounts,
                codes,
            }),
            state_root: facts.state_root,
            changes,
            queued: std::time::Instant::now(),
        };
        keeper.queue(pending, ending);
    }
}
