//! Every JSON-RPC error code neve answers with, named once and mapped to
//! the wire here (the codes are JSON-RPC 2.0's, plus geth's for limits).

/// A JSON-RPC error code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    /// -32700: the body is not JSON.
    ParseError,
    /// -32600: not a request (bad envelope, empty or oversized batch,
    /// nesting too deep, body too large or not received in time).
    InvalidRequest,
    /// -32601: a method neve does not serve (with HTTP 421 over HTTP).
    MethodNotFound,
    /// -32602: bad parameters; the message names the parameter.
    InvalidParams,
    /// -32603: neve failed while answering.
    Internal,
    /// -32001: a miss over a WebSocket, where no HTTP 421 can be sent
    /// ("resource unavailable" in the JSON-RPC server range).
    Unavailable,
    /// -32005: a server-side limit (geth's code for it): a log query's
    /// work budget, subscriptions per connection, slots per request, a
    /// client's request rate.
    LimitExceeded,
    /// 3: a call that reverted; the revert data is the error's `data`
    /// (geth's code for it).
    ExecutionReverted,
    /// -32000: a call that failed otherwise (a halt, a pre-check, an
    /// override that does not apply), with geth's message.
    ExecutionFailed,
    /// -32003: the rest of a batch whose answers passed
    /// [`crate::config::DEFAULT_MAX_BATCH_ANSWER_BYTES`] (geth's code and message).
    ResponseTooLarge,
}

impl ErrorCode {
    /// The number sent on the wire.
    pub const fn code(self) -> i64 {
        match self {
            ErrorCode::ParseError => -32700,
            ErrorCode::InvalidRequest => -32600,
            ErrorCode::MethodNotFound => -32601,
            ErrorCode::InvalidParams => -32602,
            ErrorCode::Internal => -32603,
            ErrorCode::Unavailable => -32001,
            ErrorCode::LimitExceeded => -32005,
            ErrorCode::ResponseTooLarge => -32003,
            ErrorCode::ExecutionReverted => 3,
            ErrorCode::ExecutionFailed => -32000,
        }
    }
}

/// `"error":{"code":…,"message":…}`: the one place a code reaches the wire.
pub(crate) fn error_member(code: ErrorCode, message: &str) -> String {
    let message = serde_json::to_string(message).expect("strings serialise");
    format!(
        "\"error\":{{\"code\":{},\"message\":{message}}}",
        code.code()
    )
}

/// `"error":{"code":…,"message":…,"data":…}`, `data` already JSON (no
/// `data` when empty), the message escaped as a Go node's is: a node's
/// words passed on byte for byte.
pub(crate) fn error_member_with_data(code: ErrorCode, message: &str, data: &str) -> String {
    let message = go_escaped(&serde_json::to_string(message).expect("strings serialise"));
    if data.is_empty() {
        return format!(
            "\"error\":{{\"code\":{},\"message\":{message}}}",
            code.code()
        );
    }
    format!(
        "\"error\":{{\"code\":{},\"message\":{message},\"data\":{data}}}",
        code.code()
    )
}

/// JSON text escaped as Go's `encoding/json` escapes it (`<`, `>`, `&`,
/// U+2028 and U+2029), so a revert reason reads byte for byte as geth's.
fn go_escaped(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code())
    }
}
