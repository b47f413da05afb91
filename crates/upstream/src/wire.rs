//! The JSON-RPC objects on the wire: requests sent, responses and error
//! objects read back, and how an answer is judged a refusal of a batch.

use hyper::StatusCode;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::{RpcError, snippet};

#[derive(Serialize)]
pub(crate) struct RequestObject<'a, P: Serialize> {
    pub(crate) jsonrpc: &'static str,
    pub(crate) id: u64,
    pub(crate) method: &'a str,
    pub(crate) params: P,
}

#[derive(serde::Deserialize)]
pub(crate) struct ResponseObject<'a> {
    #[serde(default)]
    pub(crate) id: Option<u64>,
    #[serde(borrow, default)]
    pub(crate) result: Option<&'a RawValue>,
    #[serde(default)]
    pub(crate) error: Option<ErrorObject>,
}

#[derive(serde::Deserialize)]
pub(crate) struct ErrorObject {
    pub(crate) code: i64,
    #[serde(default)]
    pub(crate) message: String,
}

pub(crate) fn decode<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, RpcError> {
    serde_json::from_slice(bytes).map_err(|e| RpcError::Malformed {
        reason: e.to_string(),
        snippet: snippet(bytes),
    })
}

pub(crate) fn into_result(response: ResponseObject<'_>) -> Result<&RawValue, RpcError> {
    if let Some(error) = response.error {
        return Err(RpcError::Rpc {
            code: error.code,
            message: error.message,
        });
    }
    // `"result": null` and a missing result both mean null to a caller.
    Ok(response.result.unwrap_or(RawValue::NULL))
}

/// Largest answer [`refuses_batch`] reads as a possible refusal of the
/// batch itself. Default is 64 KiB.
const REFUSAL_BYTES: usize = 64 << 10;

/// Whether an answer to a batch of `calls` calls refuses the batch as such
/// (too many calls, or batches not offered), not the calls in it: HTTP
/// 413; one error object instead of an array; or, as geth answers past
/// `--rpc.batch-request-limit`, an array shorter than the batch holding
/// that error. The error is geth's invalid-request code or says `batch`.
pub(crate) fn refuses_batch(status: StatusCode, bytes: &[u8], calls: usize) -> bool {
    if status == StatusCode::PAYLOAD_TOO_LARGE {
        return true;
    }
    // A refusal is a few hundred bytes; a large body is calls answered, and
    // parsing it here would decode it twice (and on the async worker).
    if bytes.len() > REFUSAL_BYTES {
        return false;
    }
    let about_batch = |response: &ResponseObject<'_>| {
        response.error.as_ref().is_some_and(|error| {
            error.code == -32600 || error.message.to_ascii_lowercase().contains("batch")
        })
    };
    if let Ok(responses) = serde_json::from_slice::<Vec<ResponseObject<'_>>>(bytes) {
        return responses.len() < calls && responses.iter().any(about_batch);
    }
    match serde_json::from_slice::<ResponseObject<'_>>(bytes) {
        Ok(single) => about_batch(&single),
        Err(_) => status == StatusCode::BAD_REQUEST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_missing_results_both_read_as_null() {
        let with_null: ResponseObject<'_> =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":1,"result":null}"#).unwrap();
        assert_eq!(into_result(with_null).unwrap().get(), "null");
        let missing: ResponseObject<'_> =
            serde_json::from_str(r#"{"jsonrpc":"2.0","id":1}"#).unwrap();
        assert_eq!(into_result(missing).unwrap().get(), "null");
    }

    #[test]
    fn results_keep_the_bytes_as_received() {
        let body = r#"{"jsonrpc":"2.0","id":7,"result":{"b":1,  "a":[2]}}"#;
        let response: ResponseObject<'_> = serde_json::from_str(body).unwrap();
        assert_eq!(response.id, Some(7));
        assert_eq!(into_result(response).unwrap().get(), r#"{"b":1,  "a":[2]}"#);
    }

    #[test]
    fn error_objects_become_rpc_errors_that_are_not_transient() {
        let response: ResponseObject<'_> = serde_json::from_str(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"nope"}}"#,
        )
        .unwrap();
        let error = into_result(response).unwrap_err();
        assert!(matches!(error, RpcError::Rpc { code: -32601, .. }));
        assert!(!error.is_transient());
    }

    #[test]
    fn a_batch_refused_as_such_is_told_from_refused_calls() {
        let ok = StatusCode::OK;
        // geth past --rpc.batch-request-limit (v1.17.5, checked).
        let geth =
            br#"[{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"batch too large"}}]"#;
        assert!(refuses_batch(ok, geth, 3));
        let single =
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch too large"}}"#;
        assert!(refuses_batch(ok, single, 3));
        let not_offered =
            br#"{"id":null,"error":{"code":-32000,"message":"Batch requests are not supported"}}"#;
        assert!(refuses_batch(ok, not_offered, 2));
        assert!(refuses_batch(StatusCode::PAYLOAD_TOO_LARGE, b"<html>", 2));
        assert!(refuses_batch(StatusCode::BAD_REQUEST, b"<html>", 2));
        // Every call answered, some with errors: the calls were refused.
        let answered = br#"[{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no batch"}},{"id":2,"result":1}]"#;
        assert!(!refuses_batch(ok, answered, 2));
        let limited = br#"{"id":null,"error":{"code":-32005,"message":"limit exceeded"}}"#;
        assert!(!refuses_batch(ok, limited, 2));
    }
}
