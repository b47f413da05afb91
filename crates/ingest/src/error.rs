//! Why a sync step failed, and which failures are worth retrying.

use std::time::Duration;

use neve_store::StoreError;
use neve_upstream::RpcError;

/// Why a sync step failed.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// A call to the upstream failed.
    #[error("{step}: {source}")]
    Rpc {
        /// What was being done.
        step: &'static str,
        /// The error.
        source: RpcError,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The upstream sent a block that is not consistent or does not verify;
    /// it was not stored and will be fetched again.
    #[error("block {height} refused: {reason}")]
    Refused {
        /// Its height.
        height: u64,
        /// Why.
        reason: String,
    },
    /// The upstream does not have a block it announced (behind, or pruned).
    #[error("the upstream has no block {0}")]
    Missing(u64),
    /// A write to the store panicked: its in-memory view may be half
    /// updated, so nothing writes to it again until neve restarts (which
    /// recovers the files to the last acknowledged block).
    #[error("the store's writer panicked mid-write; restart neve to recover the store")]
    WriterPoisoned,
    /// The stored chain and the upstream's share no block within the depth.
    #[error("no common ancestor within {depth} blocks below {from}: refusing to roll back further")]
    ReorgTooDeep {
        /// The configured depth.
        depth: u64,
        /// Where the search started.
        from: u64,
    },
}

pub(crate) fn rpc(step: &'static str) -> impl FnOnce(RpcError) -> IngestError {
    move |source| IngestError::Rpc { step, source }
}

impl IngestError {
    /// How long the upstream asked us to stay away (a 429's `Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            IngestError::Rpc {
                source:
                    RpcError::Http {
                        retry_after: Some(seconds),
                        ..
                    },
                ..
            } => Some(Duration::from_secs(*seconds)),
            _ => None,
        }
    }

    /// Whether the same step may succeed later without anyone acting.
    pub fn is_transient(&self) -> bool {
        match self {
            IngestError::Rpc { .. } | IngestError::Refused { .. } | IngestError::Missing(_) => true,
            IngestError::Store(_)
            | IngestError::WriterPoisoned
            | IngestError::ReorgTooDeep { .. } => false,
        }
    }
}
