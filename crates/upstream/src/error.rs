//! How a call to the upstream fails: [`RpcError`], and the helpers that
//! render what went wrong (an error's causes, the start of a body).

use std::time::Duration;

use crate::redacted::RedactedUrl;

/// How much of an unexpected body an error keeps, so logs show what the
/// upstream said without copying a whole block into a message.
const ERROR_SNIPPET_BYTES: usize = 256;

/// A JSON-RPC call that failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The URL could not be parsed, or names a scheme this client does not
    /// speak.
    #[error("invalid upstream URL {url}: {reason}")]
    InvalidUrl {
        /// The URL as given, redacted.
        url: RedactedUrl,
        /// Why it was refused.
        reason: String,
    },
    /// Connecting, sending or receiving failed below HTTP.
    #[error("transport error talking to {url}: {reason}")]
    Transport {
        /// The endpoint.
        url: RedactedUrl,
        /// The underlying error, rendered.
        reason: String,
    },
    /// The exchange took longer than the client's timeout.
    #[error("{url} did not answer within {timeout:?}")]
    Timeout {
        /// The endpoint.
        url: RedactedUrl,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The node answered with a status that is not a JSON-RPC answer:
    /// 401 and 403 (the key), 429 and 5xx.
    #[error("HTTP {status} from {url}{}: {snippet}", advice(*status))]
    Http {
        /// The status code.
        status: u16,
        /// The value of a `Retry-After` header in seconds, if any.
        retry_after: Option<u64>,
        /// The endpoint.
        url: RedactedUrl,
        /// The start of the body.
        snippet: String,
    },
    /// The body was not the JSON-RPC response that was asked for.
    #[error("malformed JSON-RPC response: {reason}: {snippet}")]
    Malformed {
        /// What was wrong.
        reason: String,
        /// The start of the body.
        snippet: String,
    },
    /// The answer's body was larger than the client accepts.
    #[error("{url} sent a body over {limit} bytes; not read further")]
    TooLarge {
        /// The endpoint.
        url: RedactedUrl,
        /// The client's limit.
        limit: usize,
    },
    /// The node answered with a JSON-RPC error object.
    #[error("JSON-RPC error {code}: {message}")]
    Rpc {
        /// The error code.
        code: i64,
        /// The error message.
        message: String,
    },
}

impl RpcError {
    /// Whether retrying the same call later may succeed (transport trouble,
    /// timeouts, 429 and 5xx, and a refused key, which an operator may fix
    /// or a provider restore while neve keeps serving its tail), as opposed
    /// to an answer that will not change.
    pub fn is_transient(&self) -> bool {
        match self {
            RpcError::Transport { .. } | RpcError::Timeout { .. } => true,
            RpcError::Http { status, .. } => {
                matches!(*status, 401 | 403 | 408 | 429) || *status >= 500
            }
            RpcError::InvalidUrl { .. }
            | RpcError::Malformed { .. }
            | RpcError::TooLarge { .. }
            | RpcError::Rpc { .. } => false,
        }
    }
}

/// What to do about a status, appended to its message.
fn advice(status: u16) -> &'static str {
    match status {
        401 | 403 => {
            " (the endpoint refused the credentials: check the key in the URL or --upstream-header)"
        }
        429 => " (rate limited: waiting as asked; --upstream-rps sets neve's own budget)",
        _ => "",
    }
}

/// An error and its causes, `: `-joined: hyper's own message ("client
/// error (Connect)") says nothing of a refused certificate below it.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

/// The start of a body, as kept in an error.
pub(crate) fn snippet(bytes: &[u8]) -> String {
    let end = bytes.len().min(ERROR_SNIPPET_BYTES);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
