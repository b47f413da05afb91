//! geth's constants the fee arithmetic uses (`params` and `eth/gasprice`).

/// Transactions sampled per block by the oracle (geth's `sampleNumber`).
pub const SAMPLE_NUMBER: usize = 3;

/// Most reward percentiles one `eth_feeHistory` call may ask for (geth's
/// `maxQueryLimit`).
pub const MAX_REWARD_PERCENTILES: usize = 100;

/// Blob gas one blob consumes (`params.BlobTxBlobGasPerBlob`, 2^17).
pub const BLOB_GAS_PER_BLOB: u64 = 1 << 17;

/// The lowest blob base fee (`params.BlobTxMinBlobGasprice`).
pub const MIN_BLOB_BASE_FEE: u64 = 1;

/// EIP-7918's execution-gas cost per blob (`params.BlobBaseCost`, 2^13).
pub const BLOB_BASE_COST: u64 = 1 << 13;

/// The first London block's base fee (`params.InitialBaseFee`, 1 gwei).
pub const INITIAL_BASE_FEE: u128 = 1_000_000_000;

/// One gwei, in wei.
pub(crate) const GWEI: u128 = 1_000_000_000;
