//! upstream: talks JSON-RPC to the node neve follows.
//!
//! Owns the HTTP transport to an upstream node (keep-alive connection pool,
//! TLS, credentials, per-call timeout, batches cut to what the endpoint
//! accepts, one request budget with `Retry-After` obeyed) and the typed
//! errors a call can end in, which show URLs only redacted. It keeps
//! results as raw JSON bytes ([`RawValue`]) so callers can store exactly what
//! the node sent; it knows nothing of the store or of serving.
//!
//! Start at [`RpcClient`]: [`RpcClient::call`] for one typed call,
//! [`RpcClient::call_raw`] for bytes as received, [`RpcClient::batch`] for
//! many calls in one HTTP request.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as _;
use hyper::{Method, Request, StatusCode, Uri, header};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

pub use serde_json::Value;

mod capabilities;
mod endpoint;
mod pacing;
pub mod tls;
pub mod ws;
pub use capabilities::StateWindow;
pub use endpoint::{Credentials, Endpoint, MASK, RedactedUrl};
pub use pacing::{Pacing, PacingStats, TooLate, jitter, parse_retry_after, retry_after_of};

/// Most calls sent in one batch unless the endpoint's refusals teach fewer
/// (geth's `--rpc.batch-request-limit` default). Default is 1,000.
pub const DEFAULT_MAX_BATCH: usize = 1000;

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

/// One element of a batch answer: the raw result, or the error the node gave
/// for that element.
pub type BatchItem = Result<Box<RawValue>, RpcError>;

/// A batch's answer as received, decoded on demand: one body per batch sent
/// (a batch larger than the endpoint accepts goes out in parts).
#[derive(Debug)]
pub struct BatchAnswer {
    parts: Vec<Part>,
    /// Whose secrets the errors decoded from it are scrubbed of.
    endpoint: Endpoint,
}

/// One exchange's answer: `count` calls with ids from `first`, as an array,
/// or as one object when a single call was sent alone.
#[derive(Debug)]
struct Part {
    bytes: Bytes,
    first: u64,
    count: usize,
    single: bool,
}

impl BatchAnswer {
    /// Each call's answer, in the order the calls were given, borrowed from
    /// the body: the result's raw bytes, or the node's error for that call.
    pub fn items(&self) -> Result<Vec<Result<&RawValue, RpcError>>, RpcError> {
        let mut out = Vec::with_capacity(self.parts.iter().map(|p| p.count).sum());
        for part in &self.parts {
            part.items(&mut out)
                .map_err(|e| self.endpoint.scrub_error(e))?;
        }
        Ok(out
            .into_iter()
            .map(|item| item.map_err(|e| self.endpoint.scrub_error(e)))
            .collect())
    }
}

impl Part {
    fn items<'a>(&'a self, out: &mut Vec<Result<&'a RawValue, RpcError>>) -> Result<(), RpcError> {
        let bytes = &self.bytes;
        if self.single {
            let response: ResponseObject<'_> = decode(bytes)?;
            out.push(into_result(response));
            return Ok(());
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
        for i in 0..self.count as u64 {
            out.push(
                by_id
                    .remove(&(self.first + i))
                    .map(into_result)
                    .ok_or_else(|| RpcError::Malformed {
                        reason: format!("batch answer lacks id {}", self.first + i),
                        snippet: snippet(bytes),
                    })?,
            );
        }
        Ok(())
    }
}

/// A JSON-RPC client over HTTP/1.1 (plain or TLS) with a keep-alive pool;
/// cheap to clone, and clones share the pool, the request budget and what
/// was learnt of the endpoint's batch limit.
#[derive(Clone, Debug)]
pub struct RpcClient {
    endpoint: Endpoint,
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
    max_response_bytes: usize,
    next_id: Arc<AtomicU64>,
    pacing: Arc<Pacing>,
    max_batch: Arc<AtomicUsize>,
}

/// How pacing lets a request go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Admission {
    /// Within the budget, after any refusal's pause ([`Pacing::admit_by`]).
    Paced,
    /// At once, past a pause ([`RpcClient::probe`]).
    Probe,
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
    /// A client for `url` (`http://` or `https://`, credentials in any form
    /// [`Endpoint`] reads).
    pub fn new(url: &str) -> Result<Self, RpcError> {
        RpcClient::for_endpoint(Endpoint::parse(url)?)
    }

    /// A client for a parsed endpoint (with headers added).
    pub fn for_endpoint(endpoint: Endpoint) -> Result<Self, RpcError> {
        if !matches!(endpoint.uri().scheme_str(), Some("http" | "https")) {
            return Err(RpcError::InvalidUrl {
                url: endpoint.shown().clone(),
                reason: "JSON-RPC goes over http:// or https://".into(),
            });
        }
        let tls = match tls::client_config() {
            Ok(config) => config,
            Err(reason) if endpoint.is_tls() => {
                return Err(RpcError::InvalidUrl {
                    url: endpoint.shown().clone(),
                    reason,
                });
            }
            // A plain-HTTP client never uses it.
            Err(_) => tls::untrusting(),
        };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(RpcClient {
            endpoint,
            http,
            timeout: DEFAULT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            next_id: Default::default(),
            pacing: Arc::new(Pacing::new(0.0)),
            max_batch: Arc::new(AtomicUsize::new(DEFAULT_MAX_BATCH)),
        })
    }

    /// The same client drawing on `pacing` (a budget shared with every
    /// other client of the same upstream).
    pub fn with_pacing(mut self, pacing: Arc<Pacing>) -> Self {
        self.pacing = pacing;
        self
    }

    /// The same client sharing `other`'s request budget and learnt batch
    /// limit (a client of the same upstream with a pool of its own).
    pub fn sharing_limits_of(mut self, other: &RpcClient) -> Self {
        self.pacing = other.pacing.clone();
        self.max_batch = other.max_batch.clone();
        self
    }

    /// The pacing this client draws on.
    pub fn pacing(&self) -> &Arc<Pacing> {
        &self.pacing
    }

    /// The same client sending at most `calls` calls per batch (at least
    /// one); the endpoint's refusals may lower it further.
    pub fn with_max_batch(mut self, calls: usize) -> Self {
        self.max_batch = Arc::new(AtomicUsize::new(calls.max(1)));
        self
    }

    /// The most calls a batch carries now (set, or learnt from refusals).
    pub fn max_batch(&self) -> usize {
        self.max_batch.load(Ordering::Relaxed)
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
        if let Ok(endpoint) = self
            .endpoint
            .clone()
            .with_header(&format!("Authorization: Bearer {token}"))
        {
            self.endpoint = endpoint;
        }
        self
    }

    /// The URL this client posts to, redacted.
    pub fn url(&self) -> &str {
        self.endpoint.shown().as_str()
    }

    /// The endpoint (credentials included) this client posts to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Calls `method` and decodes its result as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, RpcError> {
        let raw = self.call_raw(method, params).await?;
        self.decode_result(method, &raw)
    }

    /// Calls `method` even while a refusal's pause (a 429's or 503's
    /// `Retry-After`, or a backoff) holds every other request, and decodes
    /// its result as `T`. Only when it decodes has the endpoint served
    /// again: then the pause ends for every client sharing this one's
    /// pacing ([`Pacing::resume`]); a JSON-RPC error (a quota's -32005),
    /// a body that is not JSON-RPC (a proxy's HTML page) or a result of
    /// another shape ends nothing, whatever its HTTP status. For one cheap
    /// call (`eth_blockNumber`) every few seconds at most: it finds a
    /// provider's recovery within seconds rather than at the end of a
    /// pause of minutes.
    pub async fn probe<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, RpcError> {
        let raw = self
            .call_raw_admitted(method, params, Admission::Probe)
            .await?;
        let value = self.decode_result(method, &raw)?;
        self.pacing.resume();
        Ok(value)
    }

    /// A call's result decoded as `T`, or [`RpcError::Malformed`].
    fn decode_result<T: DeserializeOwned>(
        &self,
        method: &str,
        raw: &RawValue,
    ) -> Result<T, RpcError> {
        serde_json::from_str(raw.get()).map_err(|e| {
            self.endpoint.scrub_error(RpcError::Malformed {
                reason: format!("result of {method} does not decode: {e}"),
                snippet: snippet(raw.get().as_bytes()),
            })
        })
    }

    /// Calls `method` and returns its result as the bytes the node sent.
    pub async fn call_raw(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<Box<RawValue>, RpcError> {
        self.call_raw_admitted(method, params, Admission::Paced)
            .await
    }

    async fn call_raw_admitted(
        &self,
        method: &str,
        params: impl Serialize,
        admission: Admission,
    ) -> Result<Box<RawValue>, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(&RequestObject {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })
        .expect("request serialises");
        let (_, bytes) = self
            .post_unscrubbed(Bytes::from(body), admission)
            .await
            .map_err(|e| self.endpoint.scrub_error(e))?;
        decode::<ResponseObject<'_>>(&bytes)
            .and_then(into_result)
            .map(ToOwned::to_owned)
            .map_err(|e| self.endpoint.scrub_error(e))
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
        'again: loop {
            let cap = self.max_batch();
            let mut parts = Vec::with_capacity(calls.len().div_ceil(cap));
            for chunk in calls.chunks(cap) {
                let first = self
                    .next_id
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                let single = chunk.len() == 1 && cap == 1;
                let requests: Vec<_> = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, (method, params))| RequestObject {
                        jsonrpc: "2.0",
                        id: first + i as u64,
                        method,
                        params,
                    })
                    .collect();
                let body = if single {
                    serde_json::to_vec(&requests[0])
                } else {
                    serde_json::to_vec(&requests)
                }
                .expect("request serialises");
                let (status, bytes) = self.post(Bytes::from(body)).await?;
                if chunk.len() > 1 && refuses_batch(status, &bytes, chunk.len()) {
                    let fewer = (chunk.len() / 2).max(1);
                    let before = self.max_batch.fetch_min(fewer, Ordering::Relaxed);
                    if before > fewer {
                        tracing::warn!(
                            url = %self.endpoint,
                            calls = chunk.len(),
                            now = fewer,
                            answer = %self.endpoint.scrub(&snippet(&bytes)),
                            "the upstream refused a batch; sending smaller batches"
                        );
                    }
                    continue 'again;
                }
                parts.push(Part {
                    bytes,
                    first,
                    count: chunk.len(),
                    single,
                });
            }
            return Ok(BatchAnswer {
                parts,
                endpoint: self.endpoint.clone(),
            });
        }
    }

    /// Posts a prepared body and returns the status and body as received.
    /// Non-2xx statuses other than those a JSON-RPC server uses for request
    /// errors (400, 421 and friends carry JSON-RPC bodies) are errors.
    pub async fn post(&self, body: Bytes) -> Result<(StatusCode, Bytes), RpcError> {
        self.post_unscrubbed(body, Admission::Paced)
            .await
            .map_err(|e| self.endpoint.scrub_error(e))
    }

    async fn post_unscrubbed(
        &self,
        body: Bytes,
        admission: Admission,
    ) -> Result<(StatusCode, Bytes), RpcError> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.endpoint.uri().clone())
            .header(header::CONTENT_TYPE, "application/json");
        for (name, value) in self.endpoint.headers() {
            request = request.header(name, value.clone());
        }
        let request = request.body(Full::new(body)).expect("request builds");
        let deadline = match admission {
            Admission::Paced => self.admitted().await?,
            Admission::Probe => {
                self.pacing.admit_probe();
                tokio::time::Instant::now() + self.timeout
            }
        };
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| self.transport(&e))?;
            let status = response.status();
            let retry_after = retry_after_of(response.headers());
            let bytes = self.read_capped(response.into_body()).await?;
            match self.judge(status, retry_after) {
                Ok(()) => Ok((status, bytes)),
                Err(code) => Err(self.refusal(code, retry_after, &bytes)),
            }
        };
        tokio::time::timeout_at(deadline, exchange)
            .await
            .map_err(|_| self.timed_out())?
    }

    /// Waits for pacing to let a request go, within the request's timeout
    /// (the pause is inside the request's time: one that cannot start in
    /// time is a miss now, not a wait); the deadline the request then has.
    async fn admitted(&self) -> Result<tokio::time::Instant, RpcError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.pacing
            .admit_by(deadline)
            .await
            .map_err(|_| self.timed_out())?;
        Ok(deadline)
    }

    fn timed_out(&self) -> RpcError {
        RpcError::Timeout {
            url: self.endpoint.shown().clone(),
            timeout: self.timeout,
        }
    }

    /// [`RpcError::Http`] for a status [`RpcClient::judge`] refused.
    fn refusal(&self, status: u16, retry_after: Option<Duration>, body: &[u8]) -> RpcError {
        RpcError::Http {
            status,
            retry_after: retry_after.map(|d| d.as_secs_f64().ceil() as u64),
            url: self.endpoint.shown().clone(),
            snippet: self.endpoint.scrub(&snippet(body)),
        }
    }

    /// Whether an answer's status is one a JSON-RPC server answers with
    /// (2xx, and 400 or 421 with a JSON-RPC body), telling the pacing of
    /// refusals and answers. `Err` carries a status that is an error.
    fn judge(&self, status: StatusCode, retry_after: Option<Duration>) -> Result<(), u16> {
        let code = status.as_u16();
        if code == 429 || code == 503 {
            self.pacing.refused(retry_after);
            return Err(code);
        }
        if matches!(code, 401 | 403 | 407) || status.is_server_error() {
            return Err(code);
        }
        self.pacing.answered();
        Ok(())
    }

    /// `GET path` on the same host (for another neve's `/health` and
    /// `/blocks`), returning the status and a stream of body chunks. Only
    /// the response headers are bounded by the client's timeout; the stream
    /// is read at the caller's pace.
    pub async fn get_stream(
        &self,
        path_and_query: &str,
    ) -> Result<(StatusCode, BodyStream), RpcError> {
        let mut parts = self.endpoint.uri().clone().into_parts();
        parts.path_and_query = Some(path_and_query.parse().map_err(
            |e: hyper::http::uri::InvalidUri| RpcError::InvalidUrl {
                url: RedactedUrl::of(path_and_query),
                reason: e.to_string(),
            },
        )?);
        let uri = Uri::from_parts(parts).map_err(|e| RpcError::InvalidUrl {
            url: self.endpoint.shown().clone(),
            reason: e.to_string(),
        })?;
        let mut request = Request::builder().method(Method::GET).uri(uri);
        for (name, value) in self.endpoint.headers() {
            request = request.header(name, value.clone());
        }
        let request = request
            .body(Full::new(Bytes::new()))
            .expect("request builds");
        let deadline = self.admitted().await?;
        let response = tokio::time::timeout_at(deadline, self.http.request(request))
            .await
            .map_err(|_| self.timed_out())?
            .map_err(|e| self.transport(&e))?;
        let status = response.status();
        let retry_after = retry_after_of(response.headers());
        // A 5xx is the caller's to judge (another neve's /health answers
        // 503 with a body worth reading); a refused key or 429 is not.
        if let Err(code @ (401 | 403 | 407 | 429)) = self.judge(status, retry_after) {
            return Err(self.refusal(code, retry_after, b""));
        }
        Ok((
            status,
            BodyStream {
                body: response.into_body(),
                url: self.endpoint.shown().clone(),
            },
        ))
    }

    /// `GET path`, whole body (for small documents such as `/health`).
    pub async fn get(&self, path_and_query: &str) -> Result<(StatusCode, Bytes), RpcError> {
        let (status, stream) = self.get_stream(path_and_query).await?;
        let body = tokio::time::timeout(self.timeout, self.read_capped(stream.body))
            .await
            .map_err(|_| self.timed_out())??;
        Ok((status, body))
    }

    /// Reads a whole body, refusing one over the client's limit as soon as
    /// its `Content-Length` or its bytes so far pass it: an endless or huge
    /// answer costs at most the limit.
    async fn read_capped(&self, body: hyper::body::Incoming) -> Result<Bytes, RpcError> {
        let too_large = || RpcError::TooLarge {
            url: self.endpoint.shown().clone(),
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
            Err(error) => Err(self.transport(&*error)),
        }
    }

    fn transport(&self, e: &dyn std::error::Error) -> RpcError {
        let reason = self.endpoint.scrub(&error_chain(e));
        let reason = match tls::hint(&reason) {
            Some(hint) => format!("{reason}; {hint}"),
            None => reason,
        };
        RpcError::Transport {
            url: self.endpoint.shown().clone(),
            reason,
        }
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

/// Largest answer [`refuses_batch`] reads as a possible refusal of the
/// batch itself. Default is 64 KiB.
const REFUSAL_BYTES: usize = 64 << 10;

/// Whether an answer to a batch of `calls` calls refuses the batch as such
/// (too many calls, or batches not offered), not the calls in it: HTTP
/// 413; one error object instead of an array; or, as geth answers past
/// `--rpc.batch-request-limit`, an array shorter than the batch holding
/// that error. The error is geth's invalid-request code or says `batch`.
fn refuses_batch(status: StatusCode, bytes: &[u8], calls: usize) -> bool {
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

/// The body of a streamed GET, chunk by chunk.
pub struct BodyStream {
    body: hyper::body::Incoming,
    url: RedactedUrl,
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
                        reason: error_chain(&e),
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

/// A JSON-RPC quantity result (`"0x1a"`) as a `u64`: anything else (a
/// number, `null`, an object, a string that is not a quantity) fails to
/// decode, so a caller asking for one knows the answer had its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity(pub u64);

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        parse_quantity(&text)
            .map(Quantity)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a quantity")))
    }
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
    fn http_and_https_urls_are_accepted_and_refusals_hide_the_key() {
        assert!(RpcClient::new("http://127.0.0.1:8545").is_ok());
        assert!(RpcClient::new("https://127.0.0.1:8545/?token=s3cret").is_ok());
        let refused = RpcClient::new("ws://127.0.0.1:8546/?token=s3cret").unwrap_err();
        assert!(matches!(refused, RpcError::InvalidUrl { .. }));
        assert!(!refused.to_string().contains("s3cret"), "{refused}");
    }

    /// Issue 32 (5): a gateway that echoes the path ("Cannot POST
    /// /v3/KEY") in a 404 page or in a 200 that is not JSON-RPC, or a
    /// JSON-RPC error quoting the key: no error the client returns holds
    /// the key. A fault a real node does not produce, so a fake gateway.
    #[tokio::test]
    async fn texts_from_the_upstream_reach_errors_scrubbed_of_its_secrets() {
        const KEY: &str = "a1b2c3d4e5f6a7b8c9d0";
        let answers = [
            format!(
                "HTTP/1.1 404 Not Found\r\ncontent-type: text/html\r\ncontent-length: {{len}}\r\n\r\n<pre>Cannot POST /v3/{KEY}?apikey={KEY}</pre>"
            ),
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {{len}}\r\n\r\n<pre>Cannot POST /v3/{KEY}</pre>"
            ),
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {{len}}\r\n\r\n{{{{\"jsonrpc\":\"2.0\",\"id\":0,\"error\":{{{{\"code\":-32000,\"message\":\"bad key {KEY}\"}}}}}}}}"
            ),
            format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {{len}}\r\n\r\n[{{{{\"id\":5,\"result\":\"{KEY}\"}}}}]"
            ),
        ];
        for answer in answers {
            let (head, body) = answer.split_once("\r\n\r\n").unwrap();
            let response = format!(
                "{}\r\n\r\n{body}",
                head.replace("{len}", &body.len().to_string())
            );
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let server = tokio::spawn(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                for _ in 0..2 {
                    let Ok((mut socket, _)) = listener.accept().await else {
                        return;
                    };
                    let mut buffer = vec![0u8; 64 << 10];
                    let _ = socket.read(&mut buffer).await;
                    let _ = socket.write_all(response.as_bytes()).await;
                }
            });
            let client = RpcClient::new(&format!("http://127.0.0.1:{port}/v3/{KEY}?apikey={KEY}"))
                .unwrap()
                .with_max_batch(1);
            let single = client.call::<String>("eth_chainId", ()).await.unwrap_err();
            assert!(!format!("{single} {single:?}").contains(KEY), "{single}");
            if let Ok(items) = client
                .batch(&[("eth_chainId", ()), ("eth_chainId", ())])
                .await
            {
                for item in items {
                    if let Err(error) = item {
                        assert!(!format!("{error} {error:?}").contains(KEY), "{error}");
                    }
                }
            } else if let Err(error) = client.batch(&[("eth_chainId", ())]).await {
                assert!(!format!("{error} {error:?}").contains(KEY), "{error}");
            }
            server.abort();
        }
    }

    /// An HTTP server on 127.0.0.1 answering every request with what
    /// `answer` holds at the time (a whole response, `{len}` standing for
    /// the body's length), one request a connection; and how many requests
    /// it has read.
    async fn canned(answer: Arc<std::sync::Mutex<String>>) -> (u16, Arc<AtomicU64>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicU64::new(0));
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let mut read = Vec::new();
                let mut buffer = [0u8; 4096];
                // The headers, then as much body as they declare.
                let whole = loop {
                    let Ok(n @ 1..) = socket.read(&mut buffer).await else {
                        break false;
                    };
                    read.extend_from_slice(&buffer[..n]);
                    let text = String::from_utf8_lossy(&read);
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text[..end]
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap())
                            })
                            .unwrap_or(0);
                        if read.len() >= end + 4 + length {
                            break true;
                        }
                    }
                };
                if !whole {
                    continue;
                }
                seen.fetch_add(1, Ordering::SeqCst);
                let answer = answer.lock().unwrap().clone();
                let (head, body) = answer.split_once("\r\n\r\n").unwrap();
                let response = format!(
                    "{}\r\nconnection: close\r\n\r\n{body}",
                    head.replace("{len}", &body.len().to_string())
                );
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        (port, requests)
    }

    /// Issue 42 (5): while a day's `Retry-After` holds every request, a
    /// probe still goes; only a result of the shape asked for ends the
    /// pause (an error answered with 200, a proxy's page or a `null`
    /// leaves it), and then every request goes again.
    #[tokio::test]
    async fn a_probe_goes_through_a_pause_and_only_a_result_ends_it() {
        let ok = |body: &str| format!("HTTP/1.1 200 OK\r\ncontent-length: {{len}}\r\n\r\n{body}");
        let answer = Arc::new(std::sync::Mutex::new(String::from(
            "HTTP/1.1 429 Too Many Requests\r\nretry-after: 86400\r\ncontent-length: {len}\r\n\r\nslow down",
        )));
        let (port, requests) = canned(answer.clone()).await;
        let client = RpcClient::new(&format!("http://127.0.0.1:{port}")).unwrap();
        let refused = client.call::<Quantity>("eth_blockNumber", ()).await;
        assert!(
            matches!(refused, Err(RpcError::Http { status: 429, .. })),
            "{refused:?}"
        );
        assert!(client.pacing().is_paused());
        // Everything else honours the pause: failed at once, nothing sent.
        let held = client.call::<Quantity>("eth_blockNumber", ()).await;
        assert!(matches!(held, Err(RpcError::Timeout { .. })), "{held:?}");
        assert_eq!(requests.load(Ordering::SeqCst), 1);
        let not_served = [
            ok(
                r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"daily request limit reached"}}"#,
            ),
            ok("<html><body>Service over quota</body></html>"),
            ok(r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
            ok(r#"{"jsonrpc":"2.0","id":1,"result":{"number":"0x2a"}}"#),
            ok(r#"{"jsonrpc":"2.0","id":1,"result":"0x2a"#),
        ];
        for (sent, body) in (2..).zip(not_served) {
            *answer.lock().unwrap() = body.clone();
            let probed = client.probe::<Quantity>("eth_blockNumber", ()).await;
            assert!(probed.is_err(), "{body}: {probed:?}");
            assert_eq!(requests.load(Ordering::SeqCst), sent, "{body}");
            assert!(client.pacing().is_paused(), "{body} ended the pause");
        }
        *answer.lock().unwrap() = ok(r#"{"jsonrpc":"2.0","id":1,"result":"0x2a"}"#);
        let probed = client.probe::<Quantity>("eth_blockNumber", ()).await;
        assert_eq!(probed.unwrap(), Quantity(42));
        assert!(!client.pacing().is_paused());
        assert_eq!(
            client
                .call::<Quantity>("eth_blockNumber", ())
                .await
                .unwrap(),
            Quantity(42)
        );
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

    /// Fuzz target: an upstream's answer to a batch of three calls (or to a
    /// call sent alone): decoded into three items, refused as a whole, or
    /// judged a refusal of the batch itself, never a panic.
    #[test]
    fn fuzz_batch_answers() {
        let seeds: Vec<Vec<u8>> = [
            r#"[{"jsonrpc":"2.0","id":7,"result":"0x1"},{"jsonrpc":"2.0","id":9,"result":{"a":[1]}},{"jsonrpc":"2.0","id":8,"error":{"code":-32601,"message":"no"}}]"#,
            r#"[{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"batch too large"}}]"#,
            r#"{"jsonrpc":"2.0","id":7,"result":null}"#,
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let dictionary: [&[u8]; 7] = [
            b"\"id\":",
            b"18446744073709551615",
            b"\"error\":",
            b"\"result\":",
            b"null",
            b"[",
            b"batch",
        ];
        let report =
            neve_devnet::fuzz::run("batch answers", &seeds, &dictionary, 64 << 10, |input| {
                let _ = refuses_batch(StatusCode::OK, input, 3);
                for single in [false, true] {
                    let answer = BatchAnswer {
                        parts: vec![Part {
                            bytes: Bytes::copy_from_slice(input),
                            first: 7,
                            count: if single { 1 } else { 3 },
                            single,
                        }],
                        endpoint: Endpoint::parse("http://127.0.0.1:8545").unwrap(),
                    };
                    if let Ok(items) = answer.items() {
                        assert_eq!(items.len(), if single { 1 } else { 3 });
                    }
                }
            });
        eprintln!("batch answers: {report}");
    }
}
