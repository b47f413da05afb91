//! Why a benchmark could not run: [`BenchError`].

use std::path::{Path, PathBuf};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The command line or a mix file is wrong.
    #[error("{0}")]
    Usage(String),
    /// A target could not be read.
    #[error("target {0}: {1}")]
    Target(String, String),
    /// The targets share no height.
    #[error("the targets serve no common block range: {0}")]
    NoCommonRange(String),
    /// The chain lacks what a workload needs.
    #[error("building workloads from the chain: {0}")]
    Corpus(String),
    /// Writing results failed.
    #[error("writing {0}: {1}")]
    Io(PathBuf, std::io::Error),
    /// Starting or feeding a node for the suite failed.
    #[error("{0}")]
    Setup(String),
}

impl BenchError {
    /// Wraps a failed write of `path`.
    pub(crate) fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BenchError + '_ {
        move |e| BenchError::Io(path.to_owned(), e)
    }
}
