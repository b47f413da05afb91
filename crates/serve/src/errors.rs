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
    /// geth's codes for a simulation it refuses as a whole
    /// (`eth_simulateV1`: -38010 … -38026, and -32015 for a call's own
    /// failure inside its answer), by the refusal's kind.
    Simulation(neve_execution::simulate::Refusal),
    /// -32015: a simulated call the EVM failed (inside the answer).
    VmError,
    /// -32000: a trace geth refuses before replaying (the genesis block
    /// has no parent state), with geth's message.
    NotTraceable,
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
            ErrorCode::ExecutionFailed | ErrorCode::NotTraceable => -32000,
            ErrorCode::VmError => -32015,
            ErrorCode::Simulation(refusal) => {
                use neve_execution::simulate::Refusal;
                match refusal {
                    Refusal::InvalidParams => -32602,
                    Refusal::NonceTooLow => -38010,
                    Refusal::NonceTooHigh => -38011,
                    Refusal::BaseFeeTooLow => -38012,
                    Refusal::IntrinsicGas => -38013,
                    Refusal::InsufficientFunds => -38014,
                    Refusal::BlockGasLimitReached => -38015,
                    Refusal::BlockNumberInvalid => -38020,
                    Refusal::BlockTimestampInvalid => -38021,
                    Refusal::SenderIsNotEoa => -38024,
                    Refusal::MaxInitCodeSizeExceeded => -38025,
                    Refusal::ClientLimitExceeded => -38026,
                    Refusal::Internal => -32603,
                    Refusal::Failed => -32000,
                }
            }
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
    let message =
        neve_execution::go_escaped(&serde_json::to_string(message).expect("strings serialise"));
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

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.code())
    }
}
