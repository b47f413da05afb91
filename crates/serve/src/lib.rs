//! serve: the block tail over JSON-RPC, from prepared bytes.
//!
//! Owns the HTTP side of neve on one socket: `POST /` JSON-RPC (single and
//! batch), `GET /health`, `GET /health/ready`, `GET /metrics` and
//! `GET /blocks?from=&to=` (NDJSON export). A call is: parse the small
//! request, look the answer up in the store, write the envelope and the
//! stored bytes — no JSON tree of stored data, no re-parsing of responses.
//!
//! # The 421 contract
//!
//! - A lookup neve cannot answer with authority (a height, hash or
//!   transaction outside the tail or not yet ingested, a tag it cannot
//!   resolve, a log range not fully stored) is answered with HTTP 421 and
//!   `{"jsonrpc":"2.0","id":…,"result":null}`.
//! - A method neve does not serve: HTTP 421 with error -32601.
//! - A state read (balance, nonce, code, storage, proof) is answered from
//!   `neve_state`'s verified nodes at a stored block's `stateRoot`; when a
//!   node is missing, the [`StateAccess`]'s fetcher is asked and waited for
//!   up to [`ServeConfig::state_fetch_timeout`], then it is a 421 like any
//!   other miss.
//! - A batch is answered element by element; its status is 421 when any
//!   element is a miss, so a front end can retry the whole batch elsewhere.
//! - With a fallback node configured, misses are forwarded to it instead and
//!   its answers returned in their place.
//! - Bad input never reaches the store: -32700 (not JSON), -32600 (not a
//!   request, empty or oversized batch), -32602 (bad parameters, naming
//!   which), 413 (body over the limit), 503 (connection limit or shutting
//!   down); slow clients are cut off by timeouts.
//!
//! It reads the store only through `neve_store::Reader` and learns about the
//! upstream only through [`ChainView`]; it does not depend on ingest.
//! Start at [`serve`].

mod body;
mod clients;
mod config;
mod cors;
mod errors;
mod events;
mod export;
mod fallback;
mod health;
mod listen;
mod methods;
mod metrics;
pub mod params;
mod prescan;
mod residency;
mod rpc;
mod stall;
#[cfg(test)]
mod tests;
mod ws;

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::value::RawValue;

pub use body::Chunks;
pub use clients::{BYTES_PER_UNIT, DEFAULT_CLIENT_RATE, MAX_TRACKED_CLIENTS};
pub use config::{
    ChainView, DEFAULT_BODY_TIMEOUT, DEFAULT_DRAIN_TIMEOUT, DEFAULT_IDLE_TIMEOUT,
    DEFAULT_LATEST_GRACE, DEFAULT_LOGS_BUDGET_BLOCKS, DEFAULT_LOGS_BUDGET_BYTES,
    DEFAULT_LOGS_MAX_RANGE, DEFAULT_LOGS_MAX_RESULTS, DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BATCH_ANSWER_BYTES, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_STATE_FETCH_TIMEOUT, ServeConfig, StateAccess, UpstreamHealth,
};
pub use cors::{Origins, PREFLIGHT_MAX_AGE_SECONDS};
pub use errors::ErrorCode;
pub use fallback::{DEFAULT_FALLBACK_IN_FLIGHT, DEFAULT_FALLBACK_METHODS};
pub(crate) use listen::until_stopped;
pub use listen::{ADMIN_MAX_CONNECTIONS, Listeners, serve};
pub use methods::logs::{MAX_QUEUED_SCANS, SCAN_INLINE_BLOCKS};
pub use metrics::Metrics;
pub use rpc::Outcome;

use methods::logs;
use rpc::{Call, Context, Reply, envelope, error_element};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The fallback URL is not usable.
    #[error("fallback: {0}")]
    Fallback(#[from] neve_upstream::RpcError),
}

/// A slot under `--max-connections`, held by a connection and by the
/// WebSocket session it may upgrade to.
type ConnectionPermit = Arc<tokio::sync::OwnedSemaphorePermit>;

struct Server {
    ctx: Arc<Context>,
    /// Threads for long `eth_getLogs` scans (see [`scan_pool`]); more
    /// wait their turn rather than crowd out serving.
    scans: neve_store::background::Pool,
    /// Reads of stored pages not in memory ([`IO_THREADS`]).
    io: neve_store::background::Pool,
    events: tokio::sync::broadcast::Sender<events::Event>,
    metrics: Arc<Metrics>,
    shutting_down: AtomicBool,
    /// Turns true when the server starts draining.
    stopping: tokio::sync::watch::Receiver<bool>,
    fallback: Option<fallback::Fallback>,
    fetch: Option<Arc<dyn neve_state::Fetch>>,
    /// Per-address work budgets, when `--client-rate` is set.
    clients: Option<clients::ClientBudget>,
    /// Places for `/blocks` exports in flight ([`export::MAX_EXPORTS`]).
    exports: Arc<tokio::sync::Semaphore>,
    started: Instant,
}

/// Long log scans run on their own threads at a lower priority than the
/// workers that answer (and on the background CPUs when they are set), so
/// a flood of them takes only the CPU serving leaves; at most half the
/// background cores (at least one) scan at once.
/// Threads that read stored pages not in memory for requests. Each mostly
/// waits for the disk, so there are more than cores: the device's queue,
/// not the CPU, bounds them.
pub(crate) const IO_THREADS: usize = 16;

/// Requests' cold reads waiting for or running on the I/O threads; past
/// this, a cold read is a miss (421) at once, counted, so a flood of them
/// queues nowhere unbounded.
pub(crate) const MAX_QUEUED_COLD_READS: u64 = 256;

/// Bytes of answers read from the disk (into memory of their own, not the
/// page cache) that may be held at once, from the read until the answer
/// is written out: 64 MiB, a few dozen full blocks of ~1,400
/// transactions. Past it a cold read is a miss (421) at once, counted like
/// a full queue: clients that read slowly cannot make cold answers pile
/// up in the heap. Default is 64 MiB.
pub(crate) const MAX_COLD_ANSWER_BYTES: u64 = 64 << 20;

/// A cold answer's bytes, counted in [`MAX_COLD_ANSWER_BYTES`] until they
/// are dropped (written out, or their client gone).
struct ColdBytes {
    bytes: Bytes,
    held: Arc<AtomicU64>,
}

impl AsRef<[u8]> for ColdBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for ColdBytes {
    fn drop(&mut self) {
        self.held
            .fetch_sub(self.bytes.len() as u64, Ordering::Relaxed);
    }
}

/// `reply` with its chunks counted in `held` until they are dropped.
fn count_cold(reply: Reply, held: &Arc<AtomicU64>) -> Reply {
    let Reply::Result(chunks) = reply else {
        return reply;
    };
    Reply::Result(
        chunks
            .into_iter()
            .map(|bytes| {
                held.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Bytes::from_owner(ColdBytes {
                    bytes,
                    held: held.clone(),
                })
            })
            .collect(),
    )
}

fn io_pool() -> neve_store::background::Pool {
    neve_store::background::Pool::serving("neve-io", IO_THREADS)
}

fn scan_pool() -> neve_store::background::Pool {
    let cores = neve_store::background::background_threads();
    neve_store::background::Pool::new("neve-scan", (cores / 2).max(1))
}

fn response(status: StatusCode, content_type: &'static str, body: Chunks) -> Response<Chunks> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn not_found() -> Response<Chunks> {
    response(
        StatusCode::NOT_FOUND,
        "text/plain",
        Chunks::new(vec![Bytes::from_static(b"not found\n")]),
    )
}

fn json_response(status: StatusCode, chunks: Vec<Bytes>) -> Response<Chunks> {
    response(status, "application/json", Chunks::new(chunks))
}

/// Why a request body was not read whole.
enum BodyError {
    /// Past the body size limit.
    TooLarge,
    /// A batch too large or nesting too deep, seen while it streamed in.
    Refused(prescan::Refusal),
    /// The connection failed mid-body.
    Broken,
}

/// An error answered from a request's headers alone, with `Retry-After`;
/// the connection closes with it, so its body is never read.
fn refused_unread(
    status: StatusCode,
    code: ErrorCode,
    message: &str,
    retry_after_seconds: u64,
) -> Response<Chunks> {
    let mut answer = json_response(status, error_element(code, message));
    let headers = answer.headers_mut();
    headers.insert(
        hyper::header::RETRY_AFTER,
        HeaderValue::from(retry_after_seconds),
    );
    headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// A request's `Content-Length`, if it gave one.
fn declared_length(request: &Request<Incoming>) -> Option<u64> {
    request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// What a request's body turned out to be, for its client's budget.
#[derive(Default)]
struct Received {
    /// Bytes read.
    bytes: usize,
    /// A batch's elements seen (0 for a single call).
    calls: usize,
}

/// Bytes of an answer.
fn answer_len(chunks: &[Bytes]) -> usize {
    chunks.iter().map(Bytes::len).sum()
}

/// The answer to a batch element after the batch's answers passed
/// [`ServeConfig::max_batch_answer_bytes`]: -32003 for a call, nothing for a
/// notification.
fn response_too_large(raw: &RawValue) -> (Vec<Bytes>, Outcome) {
    let id = match serde_json::from_str::<rpc::Call<'_>>(raw.get()) {
        Ok(call) => match call.id {
            Some(id) => id.get().as_bytes(),
            None => return (Vec::new(), Outcome::Ok),
        },
        Err(_) => b"null",
    };
    let reply = Reply::Error(ErrorCode::ResponseTooLarge, "response too large".into());
    (envelope(id, reply), Outcome::Error)
}

impl Server {
    async fn handle(
        self: &Arc<Self>,
        request: Request<Incoming>,
        permit: ConnectionPermit,
        client: IpAddr,
        new_connection: bool,
        role: listen::Role,
    ) -> Response<Chunks> {
        let answers_calls = request.uri().path() == "/"
            && (request.method() == Method::POST || is_websocket_upgrade(&request));
        // A public listener beside an admin one answers calls on `/` and
        // nothing else: health, metrics and the bulk export stay private.
        if role == listen::Role::Public && request.uri().path() != "/" {
            return not_found();
        }
        // The export streams whole blocks: under the budget too.
        let exports = request.uri().path() == "/blocks";
        if answers_calls && let Some(behind) = self.shedding() {
            return self.shed(behind);
        }
        let mut prepaid = 0.0;
        if answers_calls || exports {
            match self.admit(client, &request) {
                Ok(units) => prepaid = units,
                Err(wait) => {
                    // Held first: a client sending one request at a time
                    // cannot outpace its budget by being refused quickly.
                    let hold = wait.min(clients::REFUSAL_HOLD);
                    tokio::time::sleep(hold).await;
                    return self.rate_limited(wait - hold);
                }
            }
        }
        if is_websocket_upgrade(&request) {
            if let Some(origin) = cors::origin(request.headers())
                && !self.ctx.config.ws_origins.allows(origin.as_bytes())
            {
                return response(
                    StatusCode::FORBIDDEN,
                    "text/plain",
                    Chunks::new(vec![Bytes::from_static(
                        b"WebSocket from this origin not allowed (--ws-origins)\n",
                    )]),
                );
            }
            return self.upgrade(request, permit, client);
        }
        match (request.method(), request.uri().path()) {
            (&Method::POST, "/") => {
                // No header lookup on the hot path unless CORS is on.
                let origin = (self.ctx.config.cors_origins != Origins::None)
                    .then(|| cors::origin(request.headers()).cloned())
                    .flatten();
                let mut answer = self.rpc(request, client, new_connection, prepaid).await;
                cors::allow(&mut answer, &self.ctx.config.cors_origins, origin);
                answer
            }
            (&Method::OPTIONS, "/") => cors::preflight(
                &self.ctx.config.cors_origins,
                cors::origin(request.headers()),
                request.headers(),
            ),
            (&Method::GET, "/health") => {
                json_response(StatusCode::OK, vec![Bytes::from(self.health())])
            }
            (&Method::GET, "/health/ready") => self.ready(),
            (&Method::GET, "/metrics") => {
                let mut text = String::with_capacity(8192);
                self.metrics.render(&mut text);
                self.ctx.chain.render_metrics(&mut text);
                let stats = self.ctx.reader.stats();
                for (name, help, value) in [
                    ("neve_store_bytes", "Bytes of segment files.", stats.bytes),
                    (
                        "neve_store_segments",
                        "Segment files.",
                        stats.segments as u64,
                    ),
                    (
                        "neve_store_min_height",
                        "Lowest stored height.",
                        stats.min_height.unwrap_or(0),
                    ),
                    (
                        "neve_store_max_height",
                        "Highest stored height.",
                        stats.max_contiguous_height.unwrap_or(0),
                    ),
                    (
                        "neve_store_corrupt_reads_total",
                        "Reads answered as misses because a record failed its checksum.",
                        stats.corrupt_reads,
                    ),
                    (
                        "neve_http_max_connections",
                        "Most open connections on the public listener (--max-connections).",
                        self.ctx.config.max_connections as u64,
                    ),
                    (
                        "neve_store_retain_blocks",
                        "Newest blocks the store keeps (--retain-blocks); 0: all.",
                        self.ctx.config.retain_blocks.unwrap_or(0),
                    ),
                    (
                        "neve_store_retain_bytes",
                        "Bytes the store is kept under (--retain-bytes); 0: no byte budget.",
                        self.ctx.config.retain_bytes.unwrap_or(0),
                    ),
                    (
                        "neve_store_write_failing",
                        "1 while writing to the store fails (a full disk): what is stored is served, nothing new arrives.",
                        self.ctx.chain.store_write_error().is_some() as u64,
                    ),
                ]
                .into_iter()
                .chain(
                    self.state_figures()
                        .into_iter()
                        .map(|(name, _, help, value)| (name, help, value)),
                ) {
                    let kind = if name.ends_with("_total") {
                        "counter"
                    } else {
                        "gauge"
                    };
                    text.push_str(&format!(
                        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
                    ));
                }
                response(
                    StatusCode::OK,
                    "text/plain; version=0.0.4",
                    Chunks::new(vec![Bytes::from(text)]),
                )
            }
            (&Method::GET, "/blocks") => self.export(request.uri().query().unwrap_or(""), client),
            (_, "/") => json_response(
                StatusCode::METHOD_NOT_ALLOWED,
                error_element(ErrorCode::InvalidRequest, "JSON-RPC requests are POSTed"),
            ),
            _ => not_found(),
        }
    }

    /// Accepts a WebSocket handshake and serves the socket on its own task.
    fn upgrade(
        self: &Arc<Self>,
        mut request: Request<Incoming>,
        permit: ConnectionPermit,
        client: IpAddr,
    ) -> Response<Chunks> {
        let key = request
            .headers()
            .get(hyper::header::SEC_WEBSOCKET_KEY)
            .map(|k| k.as_bytes().to_vec());
        let Some(key) = key else {
            return response(
                StatusCode::BAD_REQUEST,
                "text/plain",
                Chunks::new(vec![Bytes::from_static(b"missing Sec-WebSocket-Key\n")]),
            );
        };
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
        let server = self.clone();
        tokio::spawn(async move {
            if let Ok(upgraded) = hyper::upgrade::on(&mut request).await {
                ws::serve(server, upgraded, client).await;
            }
            drop(permit);
        });
        let mut answer = response(
            StatusCode::SWITCHING_PROTOCOLS,
            "text/plain",
            Chunks::empty(),
        );
        let headers = answer.headers_mut();
        headers.remove(CONTENT_TYPE);
        headers.insert(
            hyper::header::UPGRADE,
            HeaderValue::from_static("websocket"),
        );
        headers.insert(
            hyper::header::CONNECTION,
            HeaderValue::from_static("Upgrade"),
        );
        headers.insert(
            hyper::header::SEC_WEBSOCKET_ACCEPT,
            HeaderValue::from_str(&accept).expect("base64 is a header value"),
        );
        answer
    }

    async fn rpc(
        &self,
        request: Request<Incoming>,
        client: IpAddr,
        new_connection: bool,
        prepaid: f64,
    ) -> Response<Chunks> {
        let limit = self.ctx.config.max_body_bytes;
        let declared_too_large = declared_length(&request).is_some_and(|len| len > limit as u64);
        let mut received = Received::default();
        let answer = if declared_too_large {
            // Refused unread.
            self.too_large()
        } else {
            let read = tokio::time::timeout(
                self.ctx.config.body_timeout,
                self.read_body(request.into_body(), limit, &mut received),
            );
            match read.await {
                Ok(Ok(body)) => self.respond(&body).await,
                Ok(Err(BodyError::TooLarge)) => self.too_large(),
                Ok(Err(BodyError::Refused(refusal))) => {
                    if matches!(refusal, prescan::Refusal::TooManyElements(_)) {
                        self.metrics.batch_too_large.fetch_add(1, Ordering::Relaxed);
                    }
                    // The rest of the body is never read: the connection
                    // ends with this answer.
                    let mut answer = self.failed(
                        error_element(ErrorCode::InvalidRequest, &refusal.message()),
                        1,
                    );
                    answer
                        .headers_mut()
                        .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
                    answer
                }
                Ok(Err(BodyError::Broken)) | Err(_) => json_response(
                    StatusCode::REQUEST_TIMEOUT,
                    error_element(
                        ErrorCode::InvalidRequest,
                        "request body not received in time",
                    ),
                ),
            }
        };
        if self.clients.is_some() {
            let answer_bytes = hyper::body::Body::size_hint(answer.body())
                .exact()
                .unwrap_or(0);
            let errors = match answer.extensions().get::<clients::Errors>() {
                Some(errors) => errors.0,
                // 413 and 408 carry no mark; they are errors too (a 421
                // miss is not).
                None => usize::from(matches!(
                    answer.status(),
                    StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
                )),
            };
            let spent = clients::Spent {
                calls: received.calls,
                errors,
                bytes: received.bytes as u64 + answer_bytes,
                new_connection,
            };
            self.charge(client, spent, prepaid);
        }
        answer
    }

    /// Books what `client` made neve spend under `--client-rate`, less
    /// the `prepaid` units booked when it was admitted; returns how long
    /// until it is out of debt, if it is in debt.
    fn charge(&self, client: IpAddr, spent: clients::Spent, prepaid: f64) -> Option<Duration> {
        let clients = self.clients.as_ref()?;
        let now = Instant::now();
        clients.charge(client, (spent.units() - prepaid).max(0.0), now);
        clients.admit(client, now).err()
    }

    /// A 200 answer of error elements, marked with how many for the
    /// client's budget ([`clients::Errors`]) when budgets are kept.
    fn failed(&self, chunks: Vec<Bytes>, errors: usize) -> Response<Chunks> {
        let mut answer = json_response(StatusCode::OK, chunks);
        self.mark_errors(&mut answer, errors);
        answer
    }

    /// Marks `answer` with its error elements, for `--client-rate` (not
    /// kept, and nothing allocated, without it).
    fn mark_errors(&self, answer: &mut Response<Chunks>, errors: usize) {
        if self.clients.is_some() {
            answer.extensions_mut().insert(clients::Errors(errors));
        }
    }

    /// Whether `client` is within its `--client-rate` budget. If so, books
    /// what `request` costs at least (a call and its declared body), so
    /// requests sent in parallel on many connections count as they
    /// arrive, and returns those units; if not, how long until it is.
    fn admit(&self, client: IpAddr, request: &Request<Incoming>) -> Result<f64, Duration> {
        let Some(clients) = &self.clients else {
            return Ok(0.0);
        };
        let now = Instant::now();
        clients.admit(client, now)?;
        let declared = declared_length(request).unwrap_or(0);
        let units = clients::Spent {
            calls: 1,
            bytes: declared.min(self.ctx.config.max_body_bytes as u64),
            ..clients::Spent::default()
        }
        .units();
        clients.charge(client, units, now);
        Ok(units)
    }

    /// 429 with -32005 and `Retry-After` (`wait`, at least a second),
    /// answered before the body is read; the connection closes with it.
    fn rate_limited(&self, wait: Duration) -> Response<Chunks> {
        self.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        let message = format!(
            "too many requests from this address (--client-rate {}); retry after {seconds} s",
            self.ctx.config.client_rate
        );
        refused_unread(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::LimitExceeded,
            &message,
            seconds,
        )
    }

    /// Reads a request body of at most `limit` bytes, refusing it at the
    /// first byte that makes it a batch too large or nesting too deep
    /// ([`prescan`]); `received` counts what was read, refused or not.
    async fn read_body(
        &self,
        mut body: Incoming,
        limit: usize,
        received: &mut Received,
    ) -> Result<Bytes, BodyError> {
        let mut prescan = prescan::Prescan::new(self.ctx.config.max_batch);
        let mut frames: Vec<Bytes> = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(|_| BodyError::Broken)?.into_data() else {
                continue; // trailers
            };
            received.bytes += data.len();
            if received.bytes > limit {
                return Err(BodyError::TooLarge);
            }
            let scanned = prescan.feed(&data);
            received.calls = prescan.elements();
            scanned.map_err(BodyError::Refused)?;
            frames.push(data);
        }
        // One frame, the usual case, is kept as it came.
        Ok(match frames.len() {
            1 => frames.pop().expect("one frame"),
            _ => frames.concat().into(),
        })
    }

    /// Answers a JSON-RPC body (single or batch).
    async fn respond(&self, body: &Bytes) -> Response<Chunks> {
        self.respond_over(body, false).await
    }

    /// Answers a JSON-RPC body; over a WebSocket, misses are errors.
    async fn respond_over(&self, body: &Bytes, over_ws: bool) -> Response<Chunks> {
        if body.trim_ascii_start().first() == Some(&b'[') {
            self.batch(body, over_ws).await
        } else {
            self.single(body, over_ws).await
        }
    }

    fn too_large(&self) -> Response<Chunks> {
        self.metrics.too_large.fetch_add(1, Ordering::Relaxed);
        let message = format!(
            "request body larger than {} bytes",
            self.ctx.config.max_body_bytes
        );
        json_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            error_element(ErrorCode::InvalidRequest, &message),
        )
    }

    /// Answers one element; returns its chunks and outcome.
    async fn element(&self, raw: &RawValue, over_ws: bool) -> (Vec<Bytes>, Outcome) {
        let mut budget = self.ctx.logs_budget();
        match self.first_pass(raw, over_ws, &mut budget) {
            FirstPass::Done(chunks, outcome) => (chunks, outcome),
            FirstPass::Silent => (Vec::new(), Outcome::Ok),
            FirstPass::Scan(call, plan, started) => {
                let reply = self
                    .scan_off_workers(vec![*plan], budget)
                    .await
                    .pop()
                    .expect("one reply per plan");
                self.finish(&call, reply, started, over_ws, false)
            }
            FirstPass::Fetch(call, requests, started) => {
                self.fetch_through(call, requests, started, over_ws).await
            }
            FirstPass::Cold(call, started) => {
                let reply = self
                    .read_cold(vec![(call.to_owned_call(), 0)], usize::MAX)
                    .await
                    .pop();
                let reply = reply.expect("one reply per call");
                self.finish(&call, reply, started, over_ws, false)
            }
        }
    }

    /// Answers one element from what neve holds, or names what a state read
    /// needs fetched.
    fn first_pass<'a>(
        &self,
        raw: &'a RawValue,
        over_ws: bool,
        budget: &mut logs::Budget,
    ) -> FirstPass<'a> {
        let call: Call<'_> = match serde_json::from_str(raw.get()) {
            Ok(call) => call,
            Err(_) => {
                return FirstPass::Done(
                    error_element(ErrorCode::InvalidRequest, "invalid request"),
                    Outcome::Error,
                );
            }
        };
        match call.validate() {
            rpc::Validity::Call => {}
            // Nothing to answer, and a read has no effect to perform.
            rpc::Validity::Notification => return FirstPass::Silent,
            rpc::Validity::Invalid { echo_id } => {
                let id = match call.id {
                    Some(id) if echo_id => id.get().as_bytes(),
                    _ => b"null",
                };
                let reply = Reply::Error(ErrorCode::InvalidRequest, "invalid request".into());
                return FirstPass::Done(envelope(id, reply), Outcome::Error);
            }
        }
        let started = Instant::now();
        if call.method == "eth_getLogs" {
            let reply = match self.ctx.logs_plan(call.params, rpc::Reads::InMemory) {
                // The block a hash names is not in memory: planned again,
                // and scanned, on the I/O threads.
                Err(Reply::Cold) => return FirstPass::Cold(call, started),
                Err(reply) => reply,
                Ok(plan) => {
                    match budget.charge_blocks(plan.blocks(), self.ctx.config.logs_budget_blocks) {
                        Err(reply) => reply,
                        // Only a short range is checked for being in memory.
                        Ok(())
                            if budget.fits_inline(plan.blocks())
                                && plan.in_memory(&self.ctx)
                                && budget.take_inline(plan.blocks()) =>
                        {
                            logs::scan(&self.ctx, &plan, budget)
                        }
                        Ok(()) => return FirstPass::Scan(call, Box::new(plan), started),
                    }
                }
            };
            let (chunks, outcome) = self.finish(&call, reply, started, over_ws, false);
            return FirstPass::Done(chunks, outcome);
        }
        match self
            .ctx
            .call(&call.method, call.params, rpc::Reads::InMemory)
        {
            Reply::Fetch(requests) if self.fetch.is_some() => {
                FirstPass::Fetch(call, requests, started)
            }
            Reply::Cold => FirstPass::Cold(call, started),
            reply => {
                let (chunks, outcome) = self.finish(&call, reply, started, over_ws, false);
                FirstPass::Done(chunks, outcome)
            }
        }
    }

    /// Answers calls that need stored pages not in memory on the I/O
    /// threads, in order, so no async worker waits for the disk; past
    /// [`MAX_QUEUED_COLD_READS`] they are misses at once. Each call comes
    /// with the bytes of the answers before it in its batch; once those and
    /// the cold answers read before it pass `cap`, it is not read but
    /// answered "response too large", as the batch's cut will answer it:
    /// a batch of cold elements holds at most its cap (and one answer).
    async fn read_cold(&self, calls: Vec<(rpc::OwnedCall, usize)>, cap: usize) -> Vec<Reply> {
        let queue = OffWorkers {
            pool: &self.io,
            queued: |m| &m.cold_reads_queued,
            refused: |m| &m.cold_reads_refused,
            admitted: Some(|m| &m.cold_reads),
            max_queued: MAX_QUEUED_COLD_READS,
            what: "reading",
        };
        let ctx = self.ctx.clone();
        let count = calls.len();
        let metrics = self.metrics.clone();
        self.off_workers(
            queue,
            count,
            || Reply::Miss,
            move || {
                let mut read = 0usize;
                let held = &metrics.cold_answer_bytes;
                calls
                    .iter()
                    .map(|((method, params), before)| {
                        if before.saturating_add(read) > cap {
                            return Reply::Error(
                                ErrorCode::ResponseTooLarge,
                                "response too large".into(),
                            );
                        }
                        if held.load(Ordering::Relaxed) > MAX_COLD_ANSWER_BYTES {
                            metrics.cold_reads_refused.fetch_add(1, Ordering::Relaxed);
                            return Reply::Miss;
                        }
                        let reply = ctx.call(method, params.as_deref(), rpc::Reads::FromDisk);
                        if let Reply::Result(chunks) = &reply {
                            read += chunks.iter().map(Bytes::len).sum::<usize>();
                        }
                        count_cold(reply, held)
                    })
                    .collect()
            },
        )
        .await
    }

    /// Scans log queries in order on a scan thread, so a long scan never
    /// holds an async worker nor competes with one for the CPU; they share
    /// what is left of the request's budget.
    async fn scan_off_workers(
        &self,
        plans: Vec<logs::Plan>,
        mut budget: logs::Budget,
    ) -> Vec<Reply> {
        let queue = OffWorkers {
            pool: &self.scans,
            queued: |m| &m.scans_queued,
            refused: |m| &m.scans_refused,
            admitted: None,
            max_queued: logs::MAX_QUEUED_SCANS,
            what: "scanning logs",
        };
        let busy = format!(
            "too many log scans queued (at most {}); try again",
            logs::MAX_QUEUED_SCANS
        );
        let refused = move || Reply::Error(ErrorCode::LimitExceeded, busy.clone());
        let ctx = self.ctx.clone();
        let count = plans.len();
        self.off_workers(queue, count, refused, move || {
            plans
                .iter()
                .map(|plan| logs::scan(&ctx, plan, &mut budget))
                .collect()
        })
        .await
    }

    /// Runs `work` (the replies to `count` calls) on `queue`'s pool. It is
    /// counted as queued from here until it ends on its thread, so a client
    /// that leaves does not free a place its work still takes; past the
    /// queue's bound every call gets `refused()` at once, counted (and the
    /// calls let in are counted in `admitted`). A panic
    /// answers each call with an internal error.
    async fn off_workers(
        &self,
        queue: OffWorkers<'_>,
        count: usize,
        refused: impl Fn() -> Reply,
        work: impl FnOnce() -> Vec<Reply> + Send + 'static,
    ) -> Vec<Reply> {
        let queued = (queue.queued)(&self.metrics);
        if queued.fetch_add(1, Ordering::Relaxed) >= queue.max_queued {
            queued.fetch_sub(1, Ordering::Relaxed);
            (queue.refused)(&self.metrics).fetch_add(count as u64, Ordering::Relaxed);
            return (0..count).map(|_| refused()).collect();
        }
        if let Some(admitted) = queue.admitted {
            admitted(&self.metrics).fetch_add(count as u64, Ordering::Relaxed);
        }
        let metrics = self.metrics.clone();
        let gauge = queue.queued;
        let done = queue
            .pool
            .run(move || {
                let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                gauge(&metrics).fetch_sub(1, Ordering::Relaxed);
                done
            })
            .await;
        done.unwrap_or_else(|_| {
            let message = format!("internal error while {}", queue.what);
            (0..count)
                .map(|_| Reply::Error(ErrorCode::Internal, message.clone()))
                .collect()
        })
    }

    /// Fetches what a state read needs (waiting up to the deadline, or not
    /// at all with fetching in the background only), then reads again.
    async fn fetch_through(
        &self,
        call: Call<'_>,
        requests: Vec<neve_state::FetchRequest>,
        started: Instant,
        over_ws: bool,
    ) -> (Vec<Bytes>, Outcome) {
        self.await_fetches(requests).await;
        let reply = self.fetched_reply(&call);
        self.finish(&call, reply, started, over_ws, true)
    }

    /// Starts the fetches a state read needs and waits for them, at most
    /// `--state-fetch-timeout-ms`; each runs to its end even if nobody
    /// waits.
    async fn await_fetches(&self, requests: Vec<neve_state::FetchRequest>) {
        let fetch = self.fetch.as_ref().expect("first_pass checked");
        let waits: Vec<_> = requests.into_iter().map(|r| fetch.fetch(r)).collect();
        if let Some(deadline) = self.ctx.config.state_fetch_timeout {
            let _ = tokio::time::timeout(deadline, futures_util::future::join_all(waits)).await;
        }
    }

    /// A state read answered once its fetches are done: from the store,
    /// or a miss when they did not bring what it needs in time.
    fn fetched_reply(&self, call: &Call<'_>) -> Reply {
        if self.ctx.config.state_fetch_timeout.is_none() {
            return Reply::Miss;
        }
        match self
            .ctx
            .call(&call.method, call.params, rpc::Reads::InMemory)
        {
            Reply::Fetch(_) | Reply::Cold => Reply::Miss,
            reply => reply,
        }
    }

    /// The envelope of a reply, and the metrics: per method, and for a
    /// state read whether it was a hit, an answer after `fetched`, or a miss.
    fn finish(
        &self,
        call: &Call<'_>,
        reply: Reply,
        started: Instant,
        over_ws: bool,
        fetched: bool,
    ) -> (Vec<Bytes>, Outcome) {
        let id = call.id.map_or(&b"null"[..], |id| id.get().as_bytes());
        let outcome = reply.outcome();
        let index = methods::method_index(&call.method);
        if let Some(state) = &self.ctx.state
            && methods::is_state_method(index)
        {
            let counter = match (outcome, fetched) {
                (Outcome::Ok, false) => Some(&state.counters.hits),
                (Outcome::Ok, true) => Some(&state.counters.fetched),
                (Outcome::Miss, _) => Some(&state.counters.misses),
                (Outcome::Error, _) => None,
            };
            if let Some(counter) = counter {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        // A WebSocket has no HTTP status to carry 421: say it in the answer.
        let reply = match reply {
            Reply::Miss | Reply::Fetch(_) if over_ws => Reply::Error(
                ErrorCode::Unavailable,
                "not available from this mirror; ask a full node".into(),
            ),
            other => other,
        };
        self.metrics.record(index, outcome, started.elapsed());
        (envelope(id, reply), outcome)
    }

    async fn single(&self, body: &Bytes, over_ws: bool) -> Response<Chunks> {
        let Ok(raw) = serde_json::from_slice::<&RawValue>(body) else {
            return self.failed(error_element(ErrorCode::ParseError, "parse error"), 1);
        };
        let (chunks, outcome) = self.element(raw, over_ws).await;
        if chunks.is_empty() {
            // A notification: geth answers 200 with an empty body.
            return response(StatusCode::OK, "application/json", Chunks::empty());
        }
        if outcome == Outcome::Miss {
            if let Some(fallback) = &self.fallback
                && fallback.allows_request(raw)
            {
                return match fallback.forward(body.clone()).await {
                    Some((status, answer)) => json_response(status, vec![answer]),
                    None => json_response(StatusCode::MISDIRECTED_REQUEST, chunks),
                };
            }
            return json_response(StatusCode::MISDIRECTED_REQUEST, chunks);
        }
        if outcome == Outcome::Error {
            return self.failed(chunks, 1);
        }
        json_response(StatusCode::OK, chunks)
    }

    async fn batch(&self, body: &Bytes, over_ws: bool) -> Response<Chunks> {
        let Ok(elements) = serde_json::from_slice::<Vec<&RawValue>>(body) else {
            return self.failed(error_element(ErrorCode::ParseError, "parse error"), 1);
        };
        if elements.is_empty() {
            return self.failed(error_element(ErrorCode::InvalidRequest, "empty batch"), 1);
        }
        if elements.len() > self.ctx.config.max_batch {
            self.metrics.batch_too_large.fetch_add(1, Ordering::Relaxed);
            let message = format!(
                "batch of {} exceeds the limit of {}",
                elements.len(),
                self.ctx.config.max_batch
            );
            return self.failed(error_element(ErrorCode::InvalidRequest, &message), 1);
        }
        // Everything held is answered in one pass; only state reads that
        // need fetching wait, all at once.
        let mut answers = Vec::with_capacity(elements.len());
        let mut fetches = Vec::new();
        let mut fetched = Vec::new();
        let mut scans = Vec::new();
        let mut colds = Vec::new();
        let mut budget = self.ctx.logs_budget();
        // Bytes of the answers built so far: every one counts as it is
        // built, deferred ones (a log scan, a state fetch; their sizes not
        // known yet, each bounded by its own budget) or not, so once the
        // count passes the cap nothing more is built. When some were
        // deferred, a pass below counts them all again in order, as geth
        // cuts a batch.
        let mut answered = 0usize;
        let mut deferred = false;
        for (i, raw) in elements.iter().enumerate() {
            if answered > self.ctx.config.max_batch_answer_bytes {
                answers.push(response_too_large(raw));
                continue;
            }
            match self.first_pass(raw, over_ws, &mut budget) {
                FirstPass::Done(chunks, outcome) => {
                    answered += answer_len(&chunks);
                    answers.push((chunks, outcome))
                }
                FirstPass::Silent => answers.push((Vec::new(), Outcome::Ok)),
                FirstPass::Scan(call, plan, started) => {
                    deferred = true;
                    answers.push((Vec::new(), Outcome::Miss));
                    scans.push((i, call, *plan, started));
                }
                FirstPass::Fetch(call, requests, started) => {
                    deferred = true;
                    answers.push((Vec::new(), Outcome::Miss));
                    // Only the fetches run now; the answers are built below,
                    // in order, each counted against the cap first.
                    fetches.push(self.await_fetches(requests));
                    fetched.push((i, call, started));
                }
                FirstPass::Cold(call, started) => {
                    deferred = true;
                    answers.push((Vec::new(), Outcome::Miss));
                    colds.push((i, call, started, answered));
                }
            }
        }
        if !colds.is_empty() {
            let owned = colds
                .iter()
                .map(|(_, call, _, before)| (call.to_owned_call(), *before))
                .collect();
            let replies = self
                .read_cold(owned, self.ctx.config.max_batch_answer_bytes)
                .await;
            for ((i, call, started, _), reply) in colds.into_iter().zip(replies) {
                answers[i] = self.finish(&call, reply, started, over_ws, false);
            }
        }
        if !scans.is_empty() {
            let (targets, plans): (Vec<_>, Vec<_>) = scans
                .into_iter()
                .map(|(i, call, plan, started)| ((i, call, started), plan))
                .unzip();
            let replies = self.scan_off_workers(plans, budget).await;
            for ((i, call, started), reply) in targets.into_iter().zip(replies) {
                answers[i] = self.finish(&call, reply, started, over_ws, false);
            }
        }
        futures_util::future::join_all(fetches).await;
        if !fetched.is_empty() {
            let mut bytes = 0;
            let mut fetched = fetched.into_iter().peekable();
            for (i, raw) in elements.iter().enumerate() {
                if let Some((_, call, started)) = fetched.next_if(|(at, ..)| *at == i) {
                    answers[i] = if bytes > self.ctx.config.max_batch_answer_bytes {
                        response_too_large(raw)
                    } else {
                        let reply = self.fetched_reply(&call);
                        self.finish(&call, reply, started, over_ws, true)
                    };
                }
                if bytes <= self.ctx.config.max_batch_answer_bytes {
                    bytes += answer_len(&answers[i].0);
                }
            }
        }
        let misses: Vec<usize> = (0..answers.len())
            .filter(|i| answers[*i].1 == Outcome::Miss)
            .filter(|i| {
                self.fallback
                    .as_ref()
                    .is_some_and(|f| f.allows_request(elements[*i]))
            })
            .collect();
        if let Some(fallback) = &self.fallback
            && !misses.is_empty()
            && let Some(filled) = fallback.forward_misses(&elements, &misses).await
        {
            for (index, answer) in misses.iter().zip(filled) {
                answers[*index] = (vec![answer], Outcome::Ok);
            }
            deferred = true; // the node's answers are not counted yet
        }
        if deferred {
            let mut bytes = 0;
            for (raw, answer) in elements.iter().zip(answers.iter_mut()) {
                if bytes > self.ctx.config.max_batch_answer_bytes {
                    *answer = response_too_large(raw);
                } else {
                    bytes += answer_len(&answer.0);
                }
            }
        }
        let any_miss = answers.iter().any(|(_, outcome)| *outcome == Outcome::Miss);
        let errors = answers
            .iter()
            .filter(|(_, outcome)| *outcome == Outcome::Error)
            .count();
        // Notifications have no place in the answer; a batch of nothing
        // but notifications is answered with an empty body, as geth does.
        answers.retain(|(answer, _)| !answer.is_empty());
        if answers.is_empty() {
            return response(StatusCode::OK, "application/json", Chunks::empty());
        }
        let mut chunks = Vec::with_capacity(answers.len() * 3 + 2);
        chunks.push(Bytes::from_static(b"["));
        for (i, (answer, _)) in answers.into_iter().enumerate() {
            if i > 0 {
                chunks.push(Bytes::from_static(b","));
            }
            chunks.extend(answer);
        }
        chunks.push(Bytes::from_static(b"]"));
        let status = if any_miss {
            StatusCode::MISDIRECTED_REQUEST
        } else {
            StatusCode::OK
        };
        let mut answer = json_response(status, chunks);
        self.mark_errors(&mut answer, errors);
        answer
    }
}

/// A pool for work a request waits on off the async workers, and the
/// gauge, counter and bound of its queue.
struct OffWorkers<'p> {
    pool: &'p neve_store::background::Pool,
    queued: fn(&Metrics) -> &AtomicU64,
    refused: fn(&Metrics) -> &AtomicU64,
    /// Counts the calls let in, if anything does.
    admitted: Option<fn(&Metrics) -> &AtomicU64>,
    max_queued: u64,
    /// What the work does, for the message of a panic.
    what: &'static str,
}

/// An element after the pass over what neve holds.
enum FirstPass<'a> {
    /// Answered (or refused).
    Done(Vec<Bytes>, Outcome),
    /// A notification: valid, and answered with nothing.
    Silent,
    /// A log query too long to scan on an async worker.
    Scan(Call<'a>, Box<logs::Plan>, Instant),
    /// A state read that needs fetching first.
    Fetch(Call<'a>, Vec<neve_state::FetchRequest>, Instant),
    /// A read of stored pages that are not in memory: answered on the I/O
    /// threads.
    Cold(Call<'a>, Instant),
}

fn is_websocket_upgrade(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}
