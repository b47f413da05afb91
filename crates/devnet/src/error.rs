//! Why a node could not be started: [`DevnetError`].

use crate::tools::ToolError;

/// Why a node could not be started.
#[derive(Debug, thiserror::Error)]
pub enum DevnetError {
    /// A pinned binary is not installed.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// A filesystem or process-spawn step failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// A setup step of the node itself failed (init, import, engine call).
    #[error("{step} failed: {detail}")]
    Setup {
        /// The step.
        step: String,
        /// What the node said.
        detail: String,
    },
    /// The node exited or did not answer in time.
    #[error("{name} did not become ready: {reason}\n--- last log lines ---\n{log_tail}")]
    NotReady {
        /// Which node.
        name: String,
        /// Exit status or timeout.
        reason: String,
        /// The end of its log.
        log_tail: String,
    },
}

/// Wraps an I/O failure as [`DevnetError::Io`] with what was being done.
pub(crate) fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> DevnetError {
    let context = context.into();
    move |source| DevnetError::Io { context, source }
}
