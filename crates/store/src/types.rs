//! The store's vocabulary: what a block handed to the store is made of,
//! and which chain a store holds.

/// A 32-byte Keccak hash.
pub type Hash = [u8; 32];

/// A byte range inside one section of a record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Start, from the start of the section.
    pub offset: u32,
    /// Length in bytes.
    pub len: u32,
}

impl Span {
    /// The empty span (for data the upstream did not provide).
    pub const EMPTY: Span = Span { offset: 0, len: 0 };

    /// A span of `len` bytes at `offset`.
    pub const fn new(offset: u32, len: u32) -> Self {
        Span { offset, len }
    }
}

/// Where one transaction's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxEntry {
    /// The transaction hash.
    pub hash: Hash,
    /// The transaction object inside the full block.
    pub full: Span,
    /// Its receipt object inside the receipts.
    pub receipt: Span,
    /// Its EIP-2718 encoding inside the raw block (empty without raw data).
    pub raw: Span,
}

/// Where one log's bytes are, and what a log filter matches on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// Index of the transaction that emitted it.
    pub tx_index: u32,
    /// The log object inside the receipts.
    pub span: Span,
    /// The emitting contract.
    pub address: [u8; 20],
    /// Up to four topics.
    pub topics: Vec<Hash>,
}

/// A block prepared for serving, as ingest hands it to the store.
#[derive(Clone, Debug)]
pub struct NewBlock<'a> {
    /// Its height.
    pub height: u64,
    /// Its hash (verified by ingest).
    pub hash: Hash,
    /// Its parent's hash; must be the hash of the block at `height - 1` when
    /// that block is stored.
    pub parent_hash: Hash,
    /// The header's logs bloom.
    pub logs_bloom: [u8; 256],
    /// The block with full transactions, bytes as received.
    pub full: &'a [u8],
    /// The block with transaction hashes only.
    pub hashes_only: &'a [u8],
    /// The receipts array, bytes as received.
    pub receipts: &'a [u8],
    /// Raw header as the JSON value the upstream sent (empty when it gave none).
    pub raw_header: &'a [u8],
    /// Raw block as the JSON value the upstream sent (empty when it gave none).
    pub raw_block: &'a [u8],
    /// Raw receipts as the JSON value the upstream sent (empty when it gave none).
    pub raw_receipts: &'a [u8],
    /// One entry per transaction, in block order.
    pub txs: Vec<TxEntry>,
    /// One entry per log, in block order.
    pub logs: Vec<LogEntry>,
}

/// Which chain a store holds; a store refuses to open for another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Identity {
    /// `eth_chainId`.
    pub chain_id: u64,
    /// The hash of block 0.
    pub genesis_hash: Hash,
}

/// What META holds: the chain and the segment sizes the store was created
/// with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) identity: Identity,
    pub(crate) segment_blocks: u32,
    pub(crate) segment_bytes: u64,
}
