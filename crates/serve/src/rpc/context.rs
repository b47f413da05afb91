//! What a call reads with ([`Context`]: the store, the upstream's view, the
//! state layer, the limits) and the lookups every family shares: the
//! height a tag stands for, a block by reference, a transaction by hash,
//! each as [`Reads`] allows. It knows no method.

use std::sync::Arc;

use bytes::Bytes;
use neve_store::{Block, Cold, Reader};

use crate::config::{ChainView, ServeConfig};
use crate::params::{BlockRef, BlockTag};

/// How one call reads: whether it may wait for the disk, and which block
/// `latest` is for the request it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reads {
    pub(crate) waits: Waits,
    /// The block `latest` stands for (`None`: not neve's to say), decided
    /// once when the request began ([`Context::latest`]): every element of
    /// a batch, and a call answered again after a fetch or on the I/O
    /// threads, answers at the same block, so `eth_getBlockByNumber
    /// ("latest")` and `eth_getProof(…, "latest")` in one batch agree.
    pub(crate) latest: Option<u64>,
    /// When the work it belongs to began on the call threads (its first
    /// run; a run again after a fetch keeps it): a trace's time bound
    /// counts from here, across its rounds.
    pub(crate) since: Option<std::time::Instant>,
    /// A replay's witness round is behind it: what it misses is fetched
    /// as proofs from here on.
    pub(crate) witness_asked: bool,
    /// A round of fetches is behind it.
    pub(crate) fetched: bool,
}

/// Whether a call may wait for the disk: never on an async worker, which
/// answers [`Reply::Cold`](super::reply::Reply::Cold) instead and hands the
/// call to the I/O threads; there records are read into memory of their
/// own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waits {
    /// Not at all: only what is in memory is read.
    Never,
    /// For the disk: records are read with `pread`.
    ForDisk,
}

impl Reads {
    /// On an async worker, at `latest`.
    pub(crate) fn in_memory(latest: Option<u64>) -> Reads {
        Reads {
            waits: Waits::Never,
            latest,
            since: None,
            witness_asked: false,
            fetched: false,
        }
    }

    /// Where waiting for the disk is allowed (the I/O threads), at `latest`.
    pub(crate) fn from_disk(latest: Option<u64>) -> Reads {
        Reads {
            waits: Waits::ForDisk,
            latest,
            since: None,
            witness_asked: false,
            fetched: false,
        }
    }
}

/// What a call needs: the store, the upstream's view, the limits.
pub(crate) struct Context {
    pub(crate) reader: Reader,
    pub(crate) chain: Arc<dyn ChainView>,
    /// Verified state, when the state layer is on; state methods are
    /// unsupported (421, -32601) without it.
    pub(crate) state: Option<Arc<neve_state::State>>,
    /// Where replayed blocks' post-states are computed, beside `state`.
    pub(crate) post_states: Option<neve_execution::PostStates>,
    /// State reads are answered (fetched through when not held), not 421.
    pub(crate) state_answers: bool,
    /// The chain's rules for calls (empty until learnt: calls are 421).
    pub(crate) call_rules: Arc<neve_execution::RulesCell>,
    /// The facts of the blocks calls were pinned to lately.
    pub(crate) call_blocks: neve_execution::FactsCache,
    /// Analysed contract code, shared by calls.
    pub(crate) call_codes: neve_execution::CodeCache,
    /// Whole blocks parsed for replay lately ([`REPLAY_BLOCKS_KEPT`]).
    ///
    /// [`REPLAY_BLOCKS_KEPT`]: neve_execution::trace::REPLAY_BLOCKS_KEPT
    pub(crate) replay_blocks: neve_execution::HeightCache<neve_execution::trace::ReplayBlock>,
    /// Calls' answers by block and call, served again without running.
    pub(crate) call_answers: super::CallMemo,
    /// Traces' answers by replayed block and request, apart from the
    /// calls' (a block's trace is megabytes).
    pub(crate) trace_answers: super::CallMemo,
    /// Replays that did not reproduce their block's verified receipts.
    pub(crate) replays_diverged: std::sync::atomic::AtomicU64,
    /// The configurations whole blocks were traced with lately: a block's
    /// replay answers them too.
    pub(crate) trace_asks: super::TraceAsks,
    /// Trace answers made alongside another's replay, and kept.
    pub(crate) answers_along: std::sync::atomic::AtomicU64,
    /// Blocks parsed for a replay while its witness was fetched
    /// ([`super::Job::prepare`]).
    pub(crate) blocks_prepared: std::sync::atomic::AtomicU64,
    /// Proofs a block's traces offer ahead of the block indexers trace
    /// next, for the server to fetch in the background.
    pub(crate) proofs_ahead: super::ProofsAhead,
    /// The chain runs coreth's EVM and price oracle: see
    /// [`Context::runs_coreth`].
    pub(crate) coreth: bool,
    /// The fees of the blocks the fee methods read lately (the oracle's,
    /// and fee history's apart).
    pub(crate) fee_blocks: neve_execution::fees::FeeCaches,
    pub(crate) config: ServeConfig,
    pub(crate) chain_id: Bytes,
    pub(crate) net_version: Bytes,
    /// `web3_clientVersion`'s answer, as JSON.
    pub(crate) client_version: Bytes,
    /// Hex digits of the genesis hash, for `/health`.
    pub(crate) genesis_hash: String,
}

impl Context {
    /// Whether the chain runs coreth: the operator said its upstream is an
    /// avalanchego, or its id is a C-chain's, or the state follows coreth's
    /// storage keys (which it does only for those two).
    pub(crate) fn runs_coreth(
        coreth_upstream: bool,
        chain_id: u64,
        state_keys: Option<neve_state::StorageKeys>,
    ) -> bool {
        use neve_state::StorageKeys::Coreth;
        coreth_upstream
            || neve_state::StorageKeys::of_chain(chain_id) == Coreth
            || state_keys == Some(Coreth)
    }

    /// Whether the chain's price oracle is geth's, the one the fee
    /// methods follow: not on coreth's chains (whose call rules are
    /// learnt only where [`Context::coreth`] holds).
    pub(crate) fn fees_are_geths(&self) -> bool {
        !self.coreth
    }

    /// The block `latest` stands for now, if neve can answer for it: a
    /// request decides it once ([`Reads::latest`]).
    ///
    /// `latest` is ours only while we hold the upstream's head, or the
    /// block before it for the grace after the upstream announced it (what
    /// a pool of full nodes behind a balancer differs by for longer).
    pub(crate) fn latest(&self) -> Option<u64> {
        let max = self.reader.stats().max_contiguous_height?;
        // Following first, then the head: a contact seen here comes with
        // the head heard with it (ingest stores the head, then the contact),
        // never with the head of before a silence.
        if !self.chain.following() {
            return None;
        }
        // Unknown until ingest has read it: then `latest` is not ours to say.
        let head = self.chain.upstream_head()?;
        let lag = self.config.latest_lag;
        let in_grace = head == max + lag + 1
            && self
                .chain
                .upstream_head_age()
                .is_some_and(|age| age < self.config.latest_grace);
        if head > max + lag && !in_grace {
            return None;
        }
        Some(max)
    }

    /// The height a tag stands for in a call that reads as `reads` says,
    /// if neve can answer for it.
    pub(crate) fn resolve(&self, tag: BlockTag, reads: Reads) -> Option<u64> {
        let stats = self.reader.stats();
        let (min, max) = (stats.min_height?, stats.max_contiguous_height?);
        let height = match tag {
            BlockTag::Number(n) => n,
            BlockTag::Latest => reads.latest?,
            BlockTag::Earliest => 0,
            BlockTag::Safe => self.chain.safe()?,
            BlockTag::Finalized => self.chain.finalized()?,
            BlockTag::Pending => return None,
        };
        (min..=max).contains(&height).then_some(height)
    }

    pub(crate) fn block(&self, reference: BlockRef, reads: Reads) -> Result<Option<Block>, Cold> {
        let memory = self.reader.in_memory();
        match (reference, reads.waits) {
            (BlockRef::Tag(tag), pages) => match (self.resolve(tag, reads), pages) {
                (None, _) => Ok(None),
                (Some(height), Waits::Never) => memory.block(height),
                (Some(height), Waits::ForDisk) => Ok(self.reader.from_disk().block(height)),
            },
            (BlockRef::Hash(hash), Waits::Never) => memory.block_by_hash(&hash),
            (BlockRef::Hash(hash), Waits::ForDisk) => {
                Ok(self.reader.from_disk().block_by_hash(&hash))
            }
        }
    }

    pub(crate) fn transaction(
        &self,
        hash: &[u8; 32],
        reads: Reads,
    ) -> Result<Option<(Block, u32)>, Cold> {
        match reads.waits {
            Waits::Never => self.reader.in_memory().transaction(hash),
            Waits::ForDisk => Ok(self.reader.from_disk().transaction(hash)),
        }
    }
}

#[cfg(test)]
mod tests {
    use neve_state::StorageKeys;

    use super::Context;

    #[test]
    fn coreth_is_said_by_the_operator_the_chain_id_or_the_state() {
        // A chain of an avalanchego with an id of its own, state off: the
        // operator's word alone keeps geth's oracle away from it.
        assert!(Context::runs_coreth(true, 99_999, None));
        assert!(Context::runs_coreth(false, 43_114, None));
        assert!(Context::runs_coreth(
            false,
            99_999,
            Some(StorageKeys::Coreth)
        ));
        assert!(!Context::runs_coreth(false, 1, Some(StorageKeys::Plain)));
        assert!(!Context::runs_coreth(false, 1, None));
    }
}
