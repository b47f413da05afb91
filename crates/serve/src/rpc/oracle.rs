//! The price oracle as the families that need it ask it: a stored block's
//! fee facts (read once, cached by height and hash) and geth's suggested
//! tip at a head. The fee methods answer from it; `eth_createAccessList`
//! fills its fee defaults from it, as geth does.

use std::sync::Arc;

use neve_execution::fees::{self, BlockFees, OracleConfig};

use crate::params::{BlockRef, BlockTag};

use super::context::{Context, Reads};
use super::reply::NoReply;

impl Context {
    /// The fees of stored block `height`, read once and cached.
    pub(crate) fn block_fees(
        &self,
        height: u64,
        reads: Reads,
    ) -> Result<Option<Arc<BlockFees>>, NoReply> {
        let Some(block) = self.block(BlockRef::Tag(BlockTag::Number(height)), reads)? else {
            return Ok(None);
        };
        let hash = block.hash();
        Ok(self.fee_blocks.oracle.get_or_read(height, &hash, || {
            let full = block.full().ok()?;
            let receipts = block.receipts().ok()?;
            BlockFees::from_json(&full, &receipts)
                .ok()
                .filter(|fees| fees.number == height)
        }))
    }

    /// geth's suggested tip at `head`, or `None` when a block it samples
    /// is not stored.
    pub(crate) fn suggested_tip(&self, head: u64, reads: Reads) -> Result<Option<u128>, NoReply> {
        let mut missing = false;
        let mut stop = None;
        let tip = fees::suggest_tip_cap(
            head,
            |height| match self.block_fees(height, reads) {
                Ok(Some(block)) => Some(block),
                Ok(None) => {
                    missing = true;
                    None
                }
                Err(error) => {
                    stop = Some(error);
                    None
                }
            },
            &OracleConfig::default(),
        );
        if let Some(stop) = stop {
            return Err(stop);
        }
        Ok(if missing { None } else { tip })
    }
}
