//! The first half of `eth_getLogs`: a filter resolved to the heights it
//! covers and checked against the range limit ([`plan`]), and what one
//! request may still spend on scans ([`Budget`]). Nothing is scanned here.

use serde_json::value::RawValue;

use crate::errors::ErrorCode;
use crate::params::{self, BlockTag};
use crate::rpc::{Context, Reads, Reply, Waits};

use super::filter::{Filter, FilterShape};

fn invalid(message: impl Into<String>) -> Reply {
    Reply::Error(ErrorCode::InvalidParams, message.into())
}

/// Queries spanning at most this many blocks together are scanned where
/// they are parsed: their blooms are a few page-cached reads, cheaper than
/// a hop to the scan threads. The rest of a request's queries (a batch of
/// short ones too, once it has used this up) are scanned there, off the
/// async workers. Default is 32.
pub const SCAN_INLINE_BLOCKS: u64 = 32;

/// What one request may still spend on log scans.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    blocks: u64,
    pub(super) bytes: u64,
    /// Blocks still to be scanned on the async worker.
    inline: u64,
}

impl Budget {
    pub(crate) fn new(blocks: u64, bytes: u64) -> Budget {
        Budget {
            blocks,
            bytes,
            inline: SCAN_INLINE_BLOCKS,
        }
    }

    /// Whether a query of `blocks` is short enough to scan on the async
    /// worker (books nothing).
    pub(crate) fn fits_inline(&self, blocks: u64) -> bool {
        blocks <= self.inline
    }

    /// Whether a query of `blocks` may be scanned on the async worker; if
    /// so, books them.
    pub(crate) fn take_inline(&mut self, blocks: u64) -> bool {
        if !self.fits_inline(blocks) {
            return false;
        }
        self.inline -= blocks;
        true
    }

    pub(super) fn exhausted(&self, what: &str) -> Reply {
        Reply::Error(
            ErrorCode::LimitExceeded,
            format!(
                "request exceeds its eth_getLogs budget ({what}); send fewer or narrower queries per request"
            ),
        )
    }

    /// Books the blocks a query will scan, or refuses it.
    pub(crate) fn charge_blocks(&mut self, blocks: u64, limit: u64) -> Result<(), Reply> {
        if blocks > self.blocks {
            return Err(self.exhausted(&format!("{limit} blocks scanned")));
        }
        self.blocks -= blocks;
        Ok(())
    }
}

/// A query ready to scan: its filter and the heights it covers.
pub(crate) struct Plan {
    pub(super) filter: Filter,
    pub(super) from: u64,
    pub(super) to: u64,
    /// By hash, the block found is the one searched: a reorg between the
    /// lookup and a re-read by height cannot swap it.
    pub(super) by_hash: Option<neve_store::Block>,
}

impl Plan {
    /// How many blocks it covers.
    pub(crate) fn blocks(&self) -> u64 {
        self.to - self.from + 1
    }

    /// Whether scanning it touches only pages in memory: each block's
    /// fixed fields, log and run tables and log section (for a short query
    /// on an async worker; one that is not goes to the scan threads).
    pub(crate) fn in_memory(&self, ctx: &Context) -> bool {
        let logs_in_memory =
            |block: Option<&neve_store::Block>| block.is_none_or(neve_store::Block::logs_in_memory);
        match &self.by_hash {
            Some(block) => logs_in_memory(Some(block)),
            None => (self.from..=self.to).all(|height| {
                ctx.reader
                    .in_memory()
                    .block(height)
                    .is_ok_and(|block| logs_in_memory(block.as_ref()))
            }),
        }
    }
}

/// Parses and resolves a filter, checks the range limit; the reply is the
/// answer when there is nothing to scan (an error, or a miss), or
/// [`Reply::Cold`] when the block a hash names is not in memory and
/// `reads` may not wait for it.
pub(crate) fn plan(ctx: &Context, raw: &RawValue, reads: Reads) -> Result<Plan, Reply> {
    let shape: FilterShape<'_> = match serde_json::from_str(raw.get()) {
        Ok(shape) => shape,
        Err(e) => return Err(invalid(format!("invalid argument 0: {e}"))),
    };
    let filter = match Filter::parse(&shape) {
        Ok(filter) => filter,
        Err(e) => return Err(invalid(format!("invalid argument 0: {e}"))),
    };
    let (from, to, by_hash) = if let Some(hash) = shape.block_hash {
        if shape.from_block.is_some() || shape.to_block.is_some() {
            return Err(invalid(
                "invalid argument 0: cannot specify both BlockHash and FromBlock/ToBlock, choose one or the other",
            ));
        }
        let hash = match params::hash(hash) {
            Ok(hash) => hash,
            Err(e) => return Err(invalid(format!("invalid argument 0: {e}"))),
        };
        let found = match reads.waits {
            Waits::Never => ctx.reader.in_memory().block_by_hash(&hash),
            Waits::ForDisk => Ok(ctx.reader.block_by_hash(&hash)),
        };
        match found {
            Ok(Some(block)) => (block.height(), block.height(), Some(block)),
            Ok(None) => return Err(Reply::Miss),
            Err(neve_store::Cold) => return Err(Reply::Cold),
        }
    } else {
        let tag = |text: Option<&str>| text.map_or(Ok(BlockTag::Latest), params::block_tag);
        let (from_tag, to_tag) = match (tag(shape.from_block), tag(shape.to_block)) {
            (Ok(f), Ok(t)) => (f, t),
            (Err(e), _) | (_, Err(e)) => return Err(invalid(format!("invalid argument 0: {e}"))),
        };
        // Past the upstream's own head is wrong everywhere, not just here.
        if let (Some(head), BlockTag::Number(n)) = (ctx.chain.upstream_head(), to_tag)
            && n > head
        {
            return Err(invalid("block range extends beyond current head block"));
        }
        let (Some(from), Some(to)) = (ctx.resolve(from_tag, reads), ctx.resolve(to_tag, reads))
        else {
            return Err(Reply::Miss);
        };
        if from > to {
            return Err(invalid("invalid block range params"));
        }
        (from, to, None)
    };
    let max_range = ctx.config.logs_max_range;
    if to - from >= max_range {
        return Err(Reply::Error(
            ErrorCode::LimitExceeded,
            format!(
                "block range too large: at most {max_range} blocks per query; try [0x{from:x}, 0x{:x}]",
                from + max_range - 1
            ),
        ));
    }
    Ok(Plan {
        filter,
        from,
        to,
        by_hash,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_scans_at_most_its_inline_blocks_on_the_worker() {
        let mut budget = Budget::new(1000, 1000);
        assert!(budget.take_inline(SCAN_INLINE_BLOCKS / 2));
        assert!(!budget.take_inline(SCAN_INLINE_BLOCKS));
        assert!(budget.take_inline(SCAN_INLINE_BLOCKS / 2));
        assert!(
            !budget.take_inline(1),
            "a batch of short queries goes off the worker"
        );
    }
}
