//! What a call reads with ([`Context`]: the store, the upstream's view, the
//! state layer, the limits) and the lookups every family shares: the
//! height a tag stands for, a block by reference, a transaction by hash,
//! each as [`Reads`] allows. It knows no method.

use std::sync::Arc;

use bytes::Bytes;
use neve_store::{Block, Cold, Reader};

use crate::config::{ChainView, ServeConfig};
use crate::params::{BlockRef, BlockTag};

/// Whether a call may wait for the disk: never on an async worker, which
/// answers [`Reply::Cold`](super::reply::Reply::Cold) instead and hands the
/// call to the I/O threads; there records are read into memory of their
/// own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reads {
    InMemory,
    FromDisk,
}

/// What a call needs: the store, the upstream's view, the limits.
pub(crate) struct Context {
    pub(crate) reader: Reader,
    pub(crate) chain: Arc<dyn ChainView>,
    /// Verified state, when the state layer is on; state methods are
    /// unsupported (421, -32601) without it.
    pub(crate) state: Option<Arc<neve_state::State>>,
    /// State reads are answered (fetched through when not held), not 421.
    pub(crate) state_answers: bool,
    pub(crate) config: ServeConfig,
    pub(crate) chain_id: Bytes,
    pub(crate) net_version: Bytes,
    /// `web3_clientVersion`'s answer, as JSON.
    pub(crate) client_version: Bytes,
    /// Hex digits of the genesis hash, for `/health`.
    pub(crate) genesis_hash: String,
}

impl Context {
    /// The height a tag stands for, if neve can answer for it.
    pub(crate) fn resolve(&self, tag: BlockTag) -> Option<u64> {
        let stats = self.reader.stats();
        let (min, max) = (stats.min_height?, stats.max_contiguous_height?);
        let height = match tag {
            BlockTag::Number(n) => n,
            // `latest` is ours only while we hold the upstream's head, or
            // the block before it for the grace after the upstream
            // announced it (what a pool of full nodes behind a balancer
            // differs by for longer).
            BlockTag::Latest => {
                // Unknown until ingest has read it: then `latest` is not ours to say.
                let head = self.chain.upstream_head()?;
                if !self.chain.following() {
                    return None;
                }
                let lag = self.config.latest_lag;
                let in_grace = head == max + lag + 1
                    && self
                        .chain
                        .upstream_head_age()
                        .is_some_and(|age| age < self.config.latest_grace);
                if head > max + lag && !in_grace {
                    return None;
                }
                max
            }
            BlockTag::Earliest => 0,
            BlockTag::Safe => self.chain.safe()?,
            BlockTag::Finalized => self.chain.finalized()?,
            BlockTag::Pending => return None,
        };
        (min..=max).contains(&height).then_some(height)
    }

    pub(crate) fn block(&self, reference: BlockRef, reads: Reads) -> Result<Option<Block>, Cold> {
        let memory = self.reader.in_memory();
        match (reference, reads) {
            (BlockRef::Tag(tag), reads) => match (self.resolve(tag), reads) {
                (None, _) => Ok(None),
                (Some(height), Reads::InMemory) => memory.block(height),
                (Some(height), Reads::FromDisk) => Ok(self.reader.from_disk().block(height)),
            },
            (BlockRef::Hash(hash), Reads::InMemory) => memory.block_by_hash(&hash),
            (BlockRef::Hash(hash), Reads::FromDisk) => {
                Ok(self.reader.from_disk().block_by_hash(&hash))
            }
        }
    }

    pub(crate) fn transaction(
        &self,
        hash: &[u8; 32],
        reads: Reads,
    ) -> Result<Option<(Block, u32)>, Cold> {
        match reads {
            Reads::InMemory => self.reader.in_memory().transaction(hash),
            Reads::FromDisk => Ok(self.reader.from_disk().transaction(hash)),
        }
    }
}
