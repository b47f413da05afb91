//! Why a load run could not go on: [`LoadError`].

use neve_upstream::RpcError;

/// Why a load run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// An RPC call the run depends on failed.
    #[error("{step}: {source}")]
    Rpc {
        /// What was being done.
        step: &'static str,
        /// The error.
        source: RpcError,
    },
    /// The funder key is not a secp256k1 private key in hex.
    #[error("invalid funder key: {0}")]
    InvalidKey(String),
    /// No funder: no key was given and the node has no unlocked account.
    #[error(
        "no funder: pass a funded key (--funder-key) or use a node with an unlocked dev account"
    )]
    NoFunder,
    /// Setup did not complete: funding or deployment not included in time.
    #[error("{0}")]
    Setup(String),
}

/// Wraps a failed call as [`LoadError::Rpc`] at `step`.
pub(crate) fn rpc(step: &'static str) -> impl FnOnce(RpcError) -> LoadError {
    move |source| LoadError::Rpc { step, source }
}
