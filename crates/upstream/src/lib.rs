//! upstream: talks JSON-RPC to the node neve follows.
//!
//! Owns the HTTP transport to an upstream node (keep-alive connection pool,
//! per-call timeout, batches) and the typed errors a call can end in. It keeps
//! results as raw JSON bytes ([`RawValue`]) so callers can store exactly what
//! the node sent; it knows nothing of the store or of serving.
//!
//! Start at [`RpcClient`]: [`RpcClient::call`] for one typed call,
//! [`RpcClient::call_raw`] for bytes as received, [`RpcClient::batch`] for
//! many calls in one HTTP request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as _;
use hyper::{Method, Request, StatusCode, Uri, header};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

pub use serde_json::Value;

mod capabilities;
pub use capabilities::StateWindow;

/// How long one HTTP exchange may take before it fails with
/// [`RpcError::Timeout`]. Generous because a loaded node can take seconds to
/// answer a large batch; callers that want less use [`RpcClient::with_timeout`].
/// Default is 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How much of an unexpected body an error keeps, so logs show what the
/// upstream said without copying a whole block into a message.
const ERROR_SNIPPET_BYTES: usize = 256;

/// Largest answer body read from an upstream or fallback: a block with its
/// receipts and raw RLP is a few MiB on mainnet, a batch of them tens; a
/// body past this is refused (a broken or hostile peer cannot make neve
/// buffer without bound). Default is 256 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 256 << 20;

/// A JSON-RPC call that failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The URL could not be parsed as an `http://` URI.
    #[error("invalid upstream URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// Connecting, sending or receiving failed below HTTP.
    #[error("transport error talking to {url}: {reason}")]
    Transport {
        /// The endpoint.
        url: String,
        /// The underlying error, rendered.
        reason: String,
    },
    /// The exchange took longer than the client's timeout.
    #[error("{url} did not answer within {timeout:?}")]
    Timeout {
        /// The endpoint.
        url: String,
        /// The timeout that elapsed.
        timeout: Duration,
    },
    /// The node answered with a non-2xx HTTP status.
    #[error("HTTP {status} from {url}: {snippet}")]
    Http {
        /// The status code.
        status: u16,
        /// The value of a `Retry-After` header in seconds, if any.
        retry_after: Option<u64>,
        /// The endpoint.
        url: String,
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
        url: String,
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
    /// timeouts, 429 and 5xx), as opposed to an answer that will not change.
    pub fn is_transient(&self) -> bool {
        match self {
            RpcError::Transport { .. } | RpcError::Timeout { .. } => true,
            RpcError::Http { status, .. } => *status == 429 || *status >= 500,
            RpcError::InvalidUrl { .. }
            | RpcError::Malformed { .. }
            | RpcError::TooLarge { .. }
            | RpcError::Rpc { .. } => false,
        }
    }
}

/// One element of a batch answer: the raw result, or the error the node gave
/// for that element.
pub type BatchItem = Result<Box<RawValue>, RpcError>;

/// A batch's answer as received, decoded on demand.
#[derive(Debug)]
pub struct BatchAnswer {
    bytes: Bytes,
    first: u64,
    count: usize,
}

impl BatchAnswer {
    /// Each call's answer, in the order the calls were given, borrowed from
    /// the body: the result's raw bytes, or the node's error for that call.
    pub fn items(&self) -> Result<Vec<Result<&RawValue, RpcError>>, RpcError> {
        let bytes = &self.bytes;
        if self.count == 0 {
            return Ok(Vec::new());
        }
        let responses: Vec<ResponseObject<'_>> = match decode(bytes) {
            Ok(responses) => responses,
            // A node answers a whole batch with one error object when it
            // refuses the batch itself (too large, rate limited).
            Err(malformed) => match decode::<ResponseObject<'_>>(bytes) {
                Ok(single) => return Err(into_result(single).err().unwrap_or(malformed)),
                Err(_) => return Err(malformed),
            },
        };
        let mut by_id: HashMap<u64, ResponseObject<'_>> = HashMap::with_capacity(responses.len());
        for response in responses {
            if let Some(id) = response.id {
                by_id.insert(id, response);
            }
        }
        (0..self.count as u64)
            .map(|i| {
                by_id
                    .remove(&(self.first + i))
                    .map(into_result)
                    .ok_or_else(|| RpcError::Malformed {
                        reason: format!("batch answer lacks id {}", self.first + i),
                        snippet: snippet(bytes),
                    })
            })
            .collect()
    }
}

/// A JSON-RPC client over HTTP/1.1 with a keep-alive pool; cheap to clone.
#[derive(Clone, Debug)]
pub struct RpcClient {
    url: String,
    uri: Uri,
    http: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
    max_response_bytes: usize,
    authorization: Option<hyper::header::HeaderValue>,
    next_id: std::sync::Arc<AtomicU64>,
}

#[derive(Serialize)]
struct RequestObject<'a, P: Serialize> {
    jsonrpc: &'static str,
    id: u64,
    method: &'a str,
    params: P,
}

#[derive(serde::Deserialize)]
struct ResponseObject<'a> {
    #[serde(default)]
    id: Option<u64>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorObject>,
}

#[derive(serde::Deserialize)]
struct ErrorObject {
    code: i64,
    #[serde(default)]
    message: String,
}

impl RpcClient {
    /// A client for `url` (`http://host:port/path`).
    pub fn new(url: &str) -> Result<Self, RpcError> {
        let uri: Uri =
            url.parse()
                .map_err(|e: hyper::http::uri::InvalidUri| RpcError::InvalidUrl {
                    url: url.to_owned(),
                    reason: e.to_string(),
                })?;
        if uri.scheme_str() != Some("http") {
            return Err(RpcError::InvalidUrl {
                url: url.to_owned(),
                reason: "only http:// upstreams are supported".into(),
            });
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(RpcClient {
            url: url.to_owned(),
            uri,
            http,
            timeout: DEFAULT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            authorization: None,
            next_id: Default::default(),
        })
    }

    /// The same client with another limit on answer bodies; see
    /// [`DEFAULT_MAX_RESPONSE_BYTES`].
    pub fn with_max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }

    /// The per-exchange timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same client with another per-exchange timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same client sending `Authorization: Bearer <token>` (the engine
    /// API's JWT) with every request.
    pub fn with_bearer_token(mut self, token: &str) -> Self {
        self.authorization = hyper::header::HeaderValue::from_str(&format!("Bearer {token}")).ok();
        self
    }

    /// The URL this client posts to.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Calls `method` and decodes its result as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, RpcError> {
        let raw = self.call_raw(method, params).await?;
        serde_json::from_str(raw.get()).map_err(|e| RpcError::Malformed {
            reason: format!("result of {method} does not decode: {e}"),
            snippet: snippet(raw.get().as_bytes()),
        })
    }

    /// Calls `method` and returns its result as the bytes the node sent.
    pub async fn call_raw(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<Box<RawValue>, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(&RequestObject {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })
        .expect("request serialises");
        let (_, bytes) = self.post(Bytes::from(body)).await?;
        let response: ResponseObject<'_> = decode(&bytes)?;
        into_result(response).map(ToOwned::to_owned)
    }

    /// Sends `calls` as one JSON-RPC batch and returns one item per call, in
    /// the order given (the node may answer in any order). Fails as a whole
    /// only when the exchange itself fails or the answer is not a batch
    /// answering every call.
    pub async fn batch<P: Serialize>(
        &self,
        calls: &[(&str, P)],
    ) -> Result<Vec<BatchItem>, RpcError> {
        let answer = self.send_batch(calls).await?;
        Ok(answer
            .items()?
            .into_iter()
            .map(|item| item.map(ToOwned::to_owned))
            .collect())
    }

    /// Sends a batch and returns its answer undecoded: decoding a large
    /// answer is CPU work a caller may want done off its async workers
    /// (see [`BatchAnswer::items`]).
    pub async fn send_batch<P: Serialize>(
        &self,
        calls: &[(&str, P)],
    ) -> Result<BatchAnswer, RpcError> {
        if calls.is_empty() {
            return Ok(BatchAnswer {
                bytes: Bytes::from_static(b"[]"),
                first: 0,
                count: 0,
            });
        }
        let first = self
            .next_id
            .fetch_add(calls.len() as u64, Ordering::Relaxed);
        let requests: Vec<_> = calls
            .iter()
            .enumerate()
            .map(|(i, (method, params))| RequestObject {
                jsonrpc: "2.0",
                id: first + i as u64,
                method,
                params,
            })
            .collect();
        let body = serde_json::to_vec(&requests).expect("request serialises");
        let (_, bytes) = self.post(Bytes::from(body)).await?;
        Ok(BatchAnswer {
            bytes,
            first,
            count: calls.len(),
        })
    }

    /// Posts a prepared body and returns the status and body as received.
    /// Non-2xx statuses other than those a JSON-RPC server uses for request
    /// errors (400, 421 and friends carry JSON-RPC bodies) are errors.
    pub async fn post(&self, body: Bytes) -> Result<(StatusCode, Bytes), RpcError> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.uri.clone())
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(value) = &self.authorization {
            request = request.header(header::AUTHORIZATION, value.clone());
        }
        let request = request.body(Full::new(body)).expect("request builds");
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| self.transport(e))?;
            let status = response.status();
            let retry_after = response
                .headers()
                .get(header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let bytes = self.read_capped(response.into_body()).await?;
            if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
                return Err(RpcError::Http {
                    status: status.as_u16(),
                    retry_after,
                    url: self.url.clone(),
                    snippet: snippet(&bytes),
                });
            }
            Ok((status, bytes))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| RpcError::Timeout {
                url: self.url.clone(),
                timeout: self.timeout,
            })?
    }

    /// `GET path` on the same host (for another neve's `/health` and
    /// `/blocks`), returning the status and a stream of body chunks. Only
    /// the response headers are bounded by the client's timeout; the stream
    /// is read at the caller's pace.
    pub async fn get_stream(
        &self,
        path_and_query: &str,
    ) -> Result<(StatusCode, BodyStream), RpcError> {
        let mut parts = self.uri.clone().into_parts();
        parts.path_and_query = Some(path_and_query.parse().map_err(
            |e: hyper::http::uri::InvalidUri| RpcError::InvalidUrl {
                url: path_and_query.to_owned(),
                reason: e.to_string(),
            },
        )?);
        let uri = Uri::from_parts(parts).map_err(|e| RpcError::InvalidUrl {
            url: self.url.clone(),
            reason: e.to_string(),
        })?;
        let request = Request::builder()
            .method(Method::GET)
            .uri(uri)
            .body(Full::new(Bytes::new()))
            .expect("request builds");
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| RpcError::Timeout {
                url: self.url.clone(),
                timeout: self.timeout,
            })?
            .map_err(|e| self.transport(e))?;
        let status = response.status();
        Ok((
            status,
            BodyStream {
                body: response.into_body(),
                url: self.url.clone(),
            },
        ))
    }

    /// `GET path`, whole body (for small documents such as `/health`).
    pub async fn get(&self, path_and_query: &str) -> Result<(StatusCode, Bytes), RpcError> {
        let (status, stream) = self.get_stream(path_and_query).await?;
        let body = tokio::time::timeout(self.timeout, self.read_capped(stream.body))
            .await
            .map_err(|_| RpcError::Timeout {
                url: self.url.clone(),
                timeout: self.timeout,
            })??;
        Ok((status, body))
    }

    /// Reads a whole body, refusing one over the client's limit as soon as
    /// its `Content-Length` or its bytes so far pass it: an endless or huge
    /// answer costs at most the limit.
    async fn read_capped(&self, body: hyper::body::Incoming) -> Result<Bytes, RpcError> {
        let too_large = || RpcError::TooLarge {
            url: self.url.clone(),
            limit: self.max_response_bytes,
        };
        if body
            .size_hint()
            .exact()
            .is_some_and(|n| n > self.max_response_bytes as u64)
        {
            return Err(too_large());
        }
        match http_body_util::Limited::new(body, self.max_response_bytes)
            .collect()
            .await
        {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Err(error) => Err(self.transport(error)),
        }
    }

    fn transport(&self, e: impl std::fmt::Display) -> RpcError {
        RpcError::Transport {
            url: self.url.clone(),
            reason: e.to_string(),
        }
    }
}

/// The body of a streamed GET, chunk by chunk.
pub struct BodyStream {
    body: hyper::body::Incoming,
    url: String,
}

impl BodyStream {
    /// The next chunk, or `None` at the end.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, RpcError> {
        loop {
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(RpcError::Transport {
                        url: self.url.clone(),
                        reason: e.to_string(),
                    });
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

fn decode<'a, T: serde::Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, RpcError> {
    serde_json::from_slice(bytes).map_err(|e| RpcError::Malformed {
        reason: e.to_string(),
        snippet: snippet(bytes),
    })
}

fn into_result(response: ResponseObject<'_>) -> Result<&RawValue, RpcError> {
    if let Some(error) = response.error {
        return Err(RpcError::Rpc {
            code: error.code,
            message: error.message,
        });
    }
    // `"result": null` and a missing result both mean null to a caller.
    Ok(response.result.unwrap_or(RawValue::NULL))
}

fn snippet(bytes: &[u8]) -> String {
    let end = bytes.len().min(ERROR_SNIPPET_BYTES);
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// Parses a JSON-RPC quantity (`"0x1a"`) into a `u64`.
pub fn parse_quantity(text: &str) -> Option<u64> {
    let digits = text.strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// Formats a `u64` as a JSON-RPC quantity (`0x1a`).
pub fn quantity(value: u64) -> String {
    format!("0x{value:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_trip_and_reject_non_hex() {
        assert_eq!(parse_quantity("0x0"), Some(0));
        assert_eq!(parse_quantity("0x1a"), Some(26));
        assert_eq!(parse_quantity(&quantity(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_quantity("1a"), None);
        assert_eq!(parse_quantity("0x"), None);
        assert_eq!(parse_quantity("0x1ffffffffffffffff"), None);
    }

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
    fn only_http_urls_are_accepted() {
        assert!(RpcClient::new("http://127.0.0.1:8545").is_ok());
        assert!(matches!(
            RpcClient::new("ws://127.0.0.1:8546"),
            Err(RpcError::InvalidUrl { .. })
        ));
    }
}
