//! `debug_executionWitness(block)`: a block's execution witness as this
//! neve verified and keeps it (`--witness-bytes`), fetched through from
//! the upstream when not held, so that a mirror below replays the block's
//! traces without asking the node. Only what verified from the parent's
//! root is in it; a mirror below verifies it again from its own.
//!
//! A miss (421) for a block not stored, one whose parent is not stored
//! (its root verifies nothing), a witness the upstream does not give or
//! that is not kept (over a quarter of `--witness-bytes`, or that is 0):
//! such a block is remembered, and not fetched again for a mirror.

use neve_state::{FetchRequest, WitnessRequest};

use crate::params::{BlockRef, BlockTag, Params};
use crate::rpc::{Context, Method, NoReply, Reads, Reply};

pub(crate) const METHODS: &[Method] = &[
    // (block number, tag or hash), as geth.
    Method::new("debug_executionWitness", (1, 1), execution_witness),
];

fn execution_witness(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    let Some(state) = &ctx.state else {
        return Ok(Reply::Unsupported);
    };
    let Some(block) = ctx.block(p.block_ref(0)?, reads)? else {
        return Ok(Reply::Miss);
    };
    let block_hash = block.hash();
    if let Some(answer) = state.witnesses.get(&block_hash) {
        return Ok(Reply::bytes(answer));
    }
    // None kept, or none to be had for this block: a fetch would answer
    // nothing.
    if state.witnesses.keeps_none() || !state.witnesses.worth_asking(&block_hash) {
        return Ok(Reply::Miss);
    }
    let Some(number) = block.height().checked_sub(1) else {
        return Ok(Reply::Miss);
    };
    let Some(parent) = ctx.block(BlockRef::Tag(BlockTag::Number(number)), reads)? else {
        return Ok(Reply::Miss);
    };
    let parent_hash = parent.hash();
    let mut unread = None;
    let root = state.state_root(number, &parent_hash, || {
        parent.hashes_only().map_err(|e| unread = Some(e)).ok()
    });
    if let Some(unread) = unread {
        return Err(unread.into());
    }
    // Not the block's parent after a reorg between the two lookups: the
    // witness's headers then do not chain to it, and it is refused.
    Ok(match root {
        Some(parent_state_root) => Reply::Fetch(vec![FetchRequest::Witness(WitnessRequest {
            block_hash,
            number: block.height(),
            parent_hash,
            parent_state_root,
        })]),
        None => Reply::Miss,
    })
}
