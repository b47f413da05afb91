//! What a whole block's trace offers ahead of its child
//! ([`crate::rpc::ProofsAhead`]): the accounts the child's transactions
//! name that its parent's state does not hold, proved at the block's own
//! root, so the child's first run finds them held.

use std::collections::HashSet;

use alloy_primitives::Address;
use neve_execution::trace::{ReplayBlock, Which};
use neve_execution::{Needs, Pinned};
use neve_state::{ProofRequest, Read};

use crate::params::{BlockRef, BlockTag};
use crate::rpc::{Context, Reads};

/// Offers the proofs ahead of `replayed`'s child, once per block, when
/// `replayed` follows a block replayed here (a client tracing the chain
/// block by block: a one-off trace asks the node for nothing more). The
/// child is parsed into the replays' cache as its own first run would.
/// Only where fetching is on. `fetching`: what `replayed`'s own run is
/// about to fetch at its parent's root (its accounts are held at its
/// own root after that, if its post-state is kept; asking them ahead
/// would ask the node twice).
pub(super) fn offer_child(
    ctx: &Context,
    reads: Reads,
    pinned: &Pinned<'_>,
    replayed: &ReplayBlock,
    fetching: Option<&Needs>,
) {
    let parent = pinned.block;
    let state = pinned.state;
    let own = &replayed.facts;
    if ctx.config.state_fetch_timeout.is_none()
        || ctx.proofs_ahead.claimed(own.number, &own.hash.0)
        || !state.post_state_claimed(parent.number, &parent.hash.0)
    {
        return;
    }
    let height = own.number + 1;
    let at = BlockRef::Tag(BlockTag::Number(height));
    let Some(child) = ctx.block(at, reads).ok().flatten() else {
        return;
    };
    let Some(child) = ctx
        .replay_blocks
        .get_or_read(child.height(), &child.hash(), || {
            super::stored::replay_block(&child, Which::All)
        })
    else {
        return;
    };
    if child.facts.parent_hash != own.hash || !ctx.proofs_ahead.claim(own.number, &own.hash.0) {
        return;
    }
    // What the child's first run finds without them: what the block
    // itself names (its replay's changes, over which the child runs) or
    // fetches, what its own root or its parent's answers, or, while the
    // parent's post-state is being proved, the parent's changes and its
    // own parent's root.
    let named: HashSet<Address> = replayed.named_accounts().into_iter().collect();
    let found = |root: &[u8; 32], address: &Address| {
        matches!(state.account(root, &address.0.0, false), Read::Found(_))
    };
    let parents = ctx
        .post_states
        .as_ref()
        .and_then(|p| p.unproved(parent.number, &parent.hash.0));
    // Lookups in memory first, then walks of the tries.
    let held = |address: &Address| {
        named.contains(address)
            || fetching.is_some_and(|needs| needs.accounts.contains_key(address))
            || parents.as_ref().is_some_and(|u| u.changed(address))
            || found(&own.state_root.0, address)
            || found(&parent.state_root.0, address)
            || parents
                .as_ref()
                .is_some_and(|u| found(&u.below().0, address))
    };
    let requests: Vec<ProofRequest> = child
        .named_accounts()
        .into_iter()
        .filter(|address| !held(address))
        .map(|address| ProofRequest {
            block_hash: own.hash.0,
            state_root: own.state_root.0,
            address: address.0.0,
            slots: Vec::new(),
            code: false,
        })
        .collect();
    ctx.proofs_ahead.offer(requests);
}
