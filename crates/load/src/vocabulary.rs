//! The words the run's parts share: the fees in use and a sender with its
//! nonce.

use alloy_signer_local::PrivateKeySigner;

/// Gas prices in use, refreshed from the node while the run goes on.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Fees {
    /// Legacy and access-list gas price; dynamic-fee `maxFeePerGas`.
    pub(crate) max_fee: u128,
    /// Dynamic-fee tip.
    pub(crate) tip: u128,
}

/// A sender account with its locally tracked next nonce.
pub(crate) struct Sender {
    pub(crate) signer: PrivateKeySigner,
    pub(crate) nonce: u64,
}
