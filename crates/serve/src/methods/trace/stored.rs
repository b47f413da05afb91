//! A stored block as a replay takes it ([`replay_block`]): what a trace
//! replays, and what is proved ahead of a block's child (`ahead.rs`).

use neve_execution::BlockFacts;
use neve_execution::trace::{BlockTx, ReceiptFacts, ReplayBlock, Which};
use neve_store::Block;

/// `block` as a replay takes it: its facts, and its transactions and
/// receipts up to the last one `which` traces; `None` when its raw
/// transactions are not stored, or a record does not read.
pub(super) fn replay_block(block: &Block, which: Which) -> Option<ReplayBlock> {
    let header = block.hashes_only().ok()?;
    let facts = BlockFacts::from_json(&header).ok()?;
    if facts.number != block.height() || facts.hash.0 != block.hash() {
        return None;
    }
    let last = match which {
        Which::All => block.tx_count(),
        Which::One(index) => u32::try_from(index).ok()? + 1,
        Which::Before(index) => u32::try_from(index).ok()?,
    };
    if last > block.tx_count() {
        return None;
    }
    // Each section read once, not a part at a time.
    let parts = block.transaction_parts(last).ok()?;
    let mut txs = Vec::with_capacity(last as usize);
    let mut receipts = Vec::with_capacity(last as usize);
    for index in 0..parts.len() {
        let part = parts.get(index);
        if part.raw.is_empty() {
            return None;
        }
        txs.push(BlockTx::parse(part.hash.into(), &part.raw, &part.json).ok()?);
        receipts.push(ReceiptFacts::from_json(&part.receipt).ok()?);
    }
    Some(ReplayBlock {
        facts,
        txs,
        receipts,
        withdrawals: ReplayBlock::withdrawals_from_json(&header).ok(),
    })
}
