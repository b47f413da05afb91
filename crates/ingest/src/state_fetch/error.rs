//! Why a fetch did not store anything.

use neve_state::ProofError;
use neve_upstream::RpcError;

/// Why a fetch did not store anything.
#[derive(Debug, thiserror::Error)]
pub(super) enum FetchError {
    #[error("upstream: {0}")]
    Upstream(#[from] RpcError),
    #[error("upstream answer is not a proof: {0}")]
    Shape(String),
    #[error("not answered within {0:?}")]
    TimedOut(std::time::Duration),
    #[error("proof refused: {0}")]
    Refused(#[from] ProofError),
}
