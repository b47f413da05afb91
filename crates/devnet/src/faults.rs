//! A fault-injecting HTTP proxy in front of a real node, for the faults a
//! real node will not produce on demand: 429 with `Retry-After`, 5xx,
//! answers slower than the client's timeout, truncated and garbage bodies,
//! a tampered transaction inside a block, being down (a restart), a head
//! that lags (an upstream behind its follower after a restart), bodies that
//! never end and streams that stall. `GET`s (another neve's `/health` and
//! `/blocks`) are forwarded too.
//!
//! Faults follow a fixed schedule over the requests, so a test is repeatable.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use neve_upstream::RpcClient;

/// What the proxy does to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward it untouched.
    Pass,
    /// 429 with `Retry-After: 1`.
    TooManyRequests,
    /// 503.
    ServerError,
    /// Forward it, but answer after this long.
    Slow(Duration),
    /// Forward it and cut the answer in half.
    Truncate,
    /// Answer with something that is not JSON.
    Garbage,
    /// Change a transaction's `value` in the next answer, this one or a
    /// later one, that carries a block with full transactions.
    TamperBlock,
    /// Answer 200 with a body that never ends (and holds no newline).
    Endless,
    /// Send the first 4 KiB of the real answer (all of it if shorter), then
    /// nothing, without ever ending the body.
    Stall,
    /// Send the first half of the real answer, then reset the connection.
    Reset,
    /// Forward it, with a batch answer's elements in reverse order.
    Reorder,
    /// Forward it whole, but a slice at a time: [`DRIP_BYTES`] every
    /// [`DRIP_EVERY`] (a slow link; for `/blocks` streams).
    Drip,
    /// Answer 200 with a JSON-RPC error for each call, as a provider over
    /// its quota does (-32005 "daily request limit reached").
    OverQuota,
    /// 429 with `Retry-After: 86400`, as a provider out of its day's quota.
    RetryTomorrow,
}

/// What [`Fault::Drip`] sends at a time.
pub const DRIP_BYTES: usize = 4096;
/// How often [`Fault::Drip`] sends.
pub const DRIP_EVERY: Duration = Duration::from_millis(20);

/// An answer sent [`DRIP_BYTES`] at a time, [`DRIP_EVERY`] apart.
struct Drip {
    rest: Bytes,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl hyper::body::Body for Drip {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        if self.rest.is_empty() {
            return std::task::Poll::Ready(None);
        }
        if let Some(wait) = self.wait.as_mut() {
            std::task::ready!(wait.as_mut().poll(cx));
        }
        self.wait = Some(Box::pin(tokio::time::sleep(DRIP_EVERY)));
        let take = self.rest.len().min(DRIP_BYTES);
        let piece = self.rest.split_to(take);
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(piece))))
    }
}

/// A lie about state, told in the next answer that carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateTamper {
    /// The `balance` an `eth_getProof` answer states.
    Balance,
    /// The `nonce` it states.
    Nonce,
    /// The first storage `value` it states.
    StorageValue,
    /// A byte of the last node of its `accountProof`.
    ProofNode,
    /// A byte of an `eth_getCode` answer.
    CodeByte,
}

/// A lie about a field of a block answer (block, receipts and raw parts,
/// as ingest fetches them in one batch) that no hash covers, told once in
/// the next answer that carries full transactions and the text it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldLie {
    /// The last digit of a string changed (`0` to `1`, anything else to
    /// `0`): the value of the first `"field":"…"` after `after`, or, with
    /// `field` empty, the string `after` ends inside.
    Digit {
        /// Where to start looking.
        after: &'static str,
        /// The key whose value changes.
        field: &'static str,
    },
    /// As `Digit`, for the last `"field":"…"` before the first `before`
    /// (a field of the object that holds `before` further on).
    DigitBefore {
        /// Where to look back from.
        before: &'static str,
        /// The key whose value changes.
        field: &'static str,
    },
    /// The first `from` replaced by `to`.
    Replace {
        /// Text to find.
        from: &'static str,
        /// What it becomes.
        to: &'static str,
    },
}

impl FieldLie {
    /// `body` with the lie told, or `None` when it does not carry the field.
    pub fn tell(self, body: &[u8]) -> Option<Vec<u8>> {
        let text = std::str::from_utf8(body).ok()?;
        if !text.contains("\"transactions\":[{") {
            return None;
        }
        let change_string_at = |at: usize| {
            let end = at + text[at..].find('"')?;
            let digit = end.checked_sub(1).filter(|d| *d >= at)?;
            let mut bytes = body.to_vec();
            bytes[digit] = if bytes[digit] == b'0' { b'1' } else { b'0' };
            Some(bytes)
        };
        match self {
            FieldLie::Digit { after, field } => {
                let mut at = text.find(after)? + after.len();
                if !field.is_empty() {
                    let key = format!("\"{field}\":\"");
                    at += text[at..].find(&key)? + key.len();
                }
                change_string_at(at)
            }
            FieldLie::DigitBefore { before, field } => {
                let key = format!("\"{field}\":\"");
                let end = text.find(before)?;
                change_string_at(text[..end].rfind(&key)? + key.len())
            }
            FieldLie::Replace { from, to } => text
                .contains(from)
                .then(|| text.replacen(from, to, 1).into_bytes()),
        }
    }
}

/// The proxy's switches.
#[derive(Debug, Default)]
pub struct Control {
    fail_matching: std::sync::Mutex<Option<&'static str>>,
    lacking_method: std::sync::Mutex<Option<&'static str>>,
    override_fault: std::sync::Mutex<Option<Fault>>,
    stream_fault: std::sync::Mutex<Option<Fault>>,
    state_tamper: std::sync::Mutex<Option<StateTamper>>,
    state_tampered: AtomicU64,
    requests: AtomicU64,
    down: AtomicBool,
    head_lag: AtomicU64,
    faults_served: AtomicU64,
    tamper_armed: AtomicBool,
    tampered: AtomicU64,
    sender_armed: AtomicBool,
    senders_tampered: AtomicU64,
    field_lie: std::sync::Mutex<Option<FieldLie>>,
    field_lies: AtomicU64,
}

impl Control {
    /// While set, every JSON-RPC request gets this fault instead of the
    /// schedule's.
    pub fn set_override(&self, fault: Option<Fault>) {
        *self.override_fault.lock().unwrap() = fault;
    }

    /// While set, every JSON-RPC request whose body contains this text gets
    /// 503 (a method the upstream fails to answer for a while).
    pub fn set_fail_matching(&self, text: Option<&'static str>) {
        *self.fail_matching.lock().unwrap() = text;
    }

    /// While set, the upstream lacks this method, as an older or a
    /// different node does: each call of it, alone or in a batch, is
    /// answered -32601 as geth answers an unknown method, and the rest of
    /// the request is forwarded.
    pub fn set_lacking_method(&self, method: Option<&'static str>) {
        *self.lacking_method.lock().unwrap() = method;
    }

    /// While set, every `GET /blocks` gets this fault.
    pub fn set_stream_fault(&self, fault: Option<Fault>) {
        *self.stream_fault.lock().unwrap() = fault;
    }

    /// Changes the `from` of the first transaction in the next answer that
    /// carries a block with full transactions: the one field of a block no
    /// hash covers.
    pub fn tamper_sender(&self) {
        self.sender_armed.store(true, Ordering::Relaxed);
    }

    /// Tells `lie` in the next answer that carries what it changes.
    pub fn tell(&self, lie: FieldLie) {
        *self.field_lie.lock().unwrap() = Some(lie);
    }

    /// Field lies told so far.
    pub fn field_lies(&self) -> u64 {
        self.field_lies.load(Ordering::Relaxed)
    }

    /// How many answers had a sender changed.
    pub fn senders_tampered(&self) -> u64 {
        self.senders_tampered.load(Ordering::Relaxed)
    }

    /// While set, every connection is closed without an answer.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    /// Tells this lie in the next answer that carries what it changes.
    pub fn tamper_state(&self, tamper: StateTamper) {
        *self.state_tamper.lock().unwrap() = Some(tamper);
    }

    /// State answers tampered with so far.
    pub fn state_tampered(&self) -> u64 {
        self.state_tampered.load(Ordering::Relaxed)
    }

    /// Report `eth_blockNumber` this many blocks below the node's.
    pub fn set_head_lag(&self, blocks: u64) {
        self.head_lag.store(blocks, Ordering::Relaxed);
    }

    /// Requests seen.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Requests that got something other than [`Fault::Pass`].
    pub fn faults_served(&self) -> u64 {
        self.faults_served.load(Ordering::Relaxed)
    }

    /// Answers whose block was tampered with.
    pub fn tampered(&self) -> u64 {
        self.tampered.load(Ordering::Relaxed)
    }
}

/// A running proxy; stops when dropped.
pub struct FaultProxy {
    url: String,
    control: Arc<Control>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream`, applying
    /// `schedule[i % len]` to the `i`th request.
    pub async fn start(upstream: &str, schedule: Vec<Fault>) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let control = Arc::new(Control::default());
        let state = Arc::new((
            RpcClient::new(upstream).expect("upstream URL"),
            schedule,
            control.clone(),
        ));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = state.clone();
                tokio::spawn(async move {
                    if state.2.down.load(Ordering::Relaxed) {
                        return; // dropped: connection closed, nothing answered
                    }
                    let service = service_fn(move |request| {
                        let state = state.clone();
                        async move {
                            Ok::<_, Infallible>(handle(&state.0, &state.1, &state.2, request).await)
                        }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        FaultProxy { url, control, task }
    }

    /// The proxy's URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Its switches.
    pub fn control(&self) -> &Control {
        &self.control
    }
}

/// A proxy answer's body: whole, endless, stalling or cut off.
type ProxyBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// A provider's answer over its quota to `body`: a JSON-RPC error for
/// each call, with its id.
fn over_quota(body: &[u8]) -> String {
    let error = |id: &serde_json::Value| {
        serde_json::json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32005, "message": "daily request limit reached"}})
    };
    let null = serde_json::Value::Null;
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(calls)) => serde_json::Value::Array(
            calls
                .iter()
                .map(|call| error(call.get("id").unwrap_or(&null)))
                .collect(),
        )
        .to_string(),
        Ok(call) => error(call.get("id").unwrap_or(&null)).to_string(),
        Err(_) => error(&null).to_string(),
    }
}

fn answer(status: StatusCode, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

/// A body that sends `prefix`, then `x`s for ever (`endless`), an error
/// that resets the connection (`reset`), or nothing for ever.
struct Unending {
    prefix: Option<Bytes>,
    endless: bool,
    reset: bool,
}

impl hyper::body::Body for Unending {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        static XS: [u8; 64 << 10] = [b'x'; 64 << 10];
        if let Some(prefix) = self.prefix.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(prefix))));
        }
        if self.reset {
            return std::task::Poll::Ready(Some(Err(std::io::Error::other("reset mid-body"))));
        }
        if self.endless {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(
                &XS,
            )))));
        }
        // Never woken: the connection stays open with the body unfinished.
        std::task::Poll::Pending
    }
}

/// `fault` applied to a whole answer, if it is one that shapes the body as
/// it streams (the unending kinds, and [`Fault::Drip`]).
fn unending(fault: Fault, status: StatusCode, whole: &[u8]) -> Option<Response<ProxyBody>> {
    if fault == Fault::Drip {
        let body = Drip {
            rest: Bytes::copy_from_slice(whole),
            wait: None,
        };
        let mut response = Response::new(body.boxed());
        *response.status_mut() = status;
        return Some(response);
    }
    let body = match fault {
        Fault::Endless => Unending {
            prefix: None,
            endless: true,
            reset: false,
        },
        Fault::Stall => Unending {
            prefix: Some(Bytes::copy_from_slice(&whole[..whole.len().min(4096)])),
            endless: false,
            reset: false,
        },
        Fault::Reset => Unending {
            prefix: Some(Bytes::copy_from_slice(&whole[..whole.len() / 2])),
            endless: false,
            reset: true,
        },
        _ => return None,
    };
    let mut response = Response::new(body.boxed());
    *response.status_mut() = status;
    Some(response)
}

async fn handle(
    client: &RpcClient,
    schedule: &[Fault],
    control: &Control,
    request: Request<hyper::body::Incoming>,
) -> Response<ProxyBody> {
    if request.method() == hyper::Method::GET {
        let path = request
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let Ok((status, body)) = client.get(&path).await else {
            return answer(StatusCode::BAD_GATEWAY, "");
        };
        let fault = *control.stream_fault.lock().unwrap();
        if path.starts_with("/blocks")
            && let Some(fault) = fault
            && let Some(response) = unending(fault, status, &body)
        {
            control.faults_served.fetch_add(1, Ordering::Relaxed);
            return response;
        }
        return answer(status, body);
    }
    let index = control.requests.fetch_add(1, Ordering::Relaxed);
    let overridden = *control.override_fault.lock().unwrap();
    let fault = overridden.unwrap_or_else(|| {
        schedule
            .get(index as usize % schedule.len().max(1))
            .copied()
            .unwrap_or(Fault::Pass)
    });
    if fault != Fault::Pass {
        control.faults_served.fetch_add(1, Ordering::Relaxed);
    }
    let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
        return answer(StatusCode::BAD_REQUEST, "");
    };
    let failing = *control.fail_matching.lock().unwrap();
    if let Some(text) = failing
        && body.windows(text.len()).any(|w| w == text.as_bytes())
    {
        control.faults_served.fetch_add(1, Ordering::Relaxed);
        return answer(StatusCode::SERVICE_UNAVAILABLE, "upstream unavailable");
    }
    let lacking = *control.lacking_method.lock().unwrap();
    if let Some(method) = lacking
        && body.windows(method.len()).any(|w| w == method.as_bytes())
        && let Some(response) = without_method(client, control, &body, method).await
    {
        return response;
    }
    match fault {
        Fault::TooManyRequests => {
            let mut response = answer(StatusCode::TOO_MANY_REQUESTS, "slow down");
            response.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
            return response;
        }
        Fault::ServerError => {
            return answer(StatusCode::SERVICE_UNAVAILABLE, "upstream unavailable");
        }
        Fault::Garbage => return answer(StatusCode::OK, "<html>not json</html>"),
        Fault::OverQuota => return answer(StatusCode::OK, over_quota(&body)),
        Fault::RetryTomorrow => {
            let mut response = answer(StatusCode::TOO_MANY_REQUESTS, "daily limit reached");
            response.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("86400"),
            );
            return response;
        }
        _ => {}
    }
    let Ok((status, forwarded)) = client.post(body.clone()).await else {
        return answer(StatusCode::BAD_GATEWAY, "");
    };
    if let Some(response) = unending(fault, status, &forwarded) {
        return response;
    }
    let mut forwarded = forwarded.to_vec();
    let lag = control.head_lag.load(Ordering::Relaxed);
    if lag > 0 && body.windows(15).any(|w| w == b"eth_blockNumber") {
        forwarded = lag_head(&forwarded, lag);
    }
    match fault {
        Fault::Slow(delay) => tokio::time::sleep(delay).await,
        Fault::Truncate => forwarded.truncate(forwarded.len() / 2),
        Fault::Reorder => forwarded = reorder(&forwarded),
        // Which request falls on this slot depends on timing; stay armed
        // until an answer carries a block worth tampering with.
        Fault::TamperBlock => control.tamper_armed.store(true, Ordering::Relaxed),
        _ => {}
    }
    // Only on an answer that otherwise arrives intact and in time, so the
    // tampered block is what neve sees.
    let clean = matches!(fault, Fault::Pass | Fault::TamperBlock | Fault::Reorder);
    let mut lied = false;
    if clean
        && control.tamper_armed.load(Ordering::Relaxed)
        && let Some(tampered) = tamper(&forwarded)
        && control.tamper_armed.swap(false, Ordering::Relaxed)
    {
        forwarded = tampered;
        control.tampered.fetch_add(1, Ordering::Relaxed);
        lied = true;
    }
    // One lie per answer: a block refused for its changed value would
    // never show whether its changed sender is caught.
    if clean
        && !lied
        && control.sender_armed.load(Ordering::Relaxed)
        && let Some(tampered) = tamper_sender(&forwarded)
        && control.sender_armed.swap(false, Ordering::Relaxed)
    {
        forwarded = tampered;
        control.senders_tampered.fetch_add(1, Ordering::Relaxed);
    }
    let field_lie = *control.field_lie.lock().unwrap();
    if clean
        && !lied
        && let Some(lie) = field_lie
        && let Some(told) = lie.tell(&forwarded)
        && control.field_lie.lock().unwrap().take().is_some()
    {
        forwarded = told;
        control.field_lies.fetch_add(1, Ordering::Relaxed);
    }
    let armed = *control.state_tamper.lock().unwrap();
    if let Some(kind) = armed
        && let Some(tampered) = tamper_state(&forwarded, kind)
        && control.state_tamper.lock().unwrap().take().is_some()
    {
        forwarded = tampered;
        control.state_tampered.fetch_add(1, Ordering::Relaxed);
    }
    answer(status, forwarded)
}

/// Answers `body` as an upstream without `method` would: its calls get
/// -32601, the others are forwarded. `None` for a single call of another
/// method, which is handled as any request.
async fn without_method(
    client: &RpcClient,
    control: &Control,
    body: &[u8],
    method: &str,
) -> Option<Response<ProxyBody>> {
    use serde_json::{Value, json};
    let refusal = |id: &Value| {
        json!({"jsonrpc": "2.0", "id": id, "error": {
            "code": -32601,
            "message": format!("the method {method} does not exist/is not available"),
        }})
    };
    let calls = match serde_json::from_slice::<Value>(body).ok()? {
        Value::Array(calls) => calls,
        call if call["method"] == method => {
            control.faults_served.fetch_add(1, Ordering::Relaxed);
            return Some(answer(StatusCode::OK, refusal(&call["id"]).to_string()));
        }
        _ => return None,
    };
    let (refused, kept): (Vec<Value>, Vec<Value>) =
        calls.into_iter().partition(|call| call["method"] == method);
    if refused.is_empty() {
        return None;
    }
    control
        .faults_served
        .fetch_add(refused.len() as u64, Ordering::Relaxed);
    let mut answers = Vec::new();
    if !kept.is_empty() {
        let kept = serde_json::to_vec(&kept).expect("JSON");
        let Ok((status, forwarded)) = client.post(kept.into()).await else {
            return Some(answer(StatusCode::BAD_GATEWAY, ""));
        };
        match serde_json::from_slice::<Vec<Value>>(&forwarded) {
            Ok(forwarded) => answers = forwarded,
            Err(_) => return Some(answer(status, forwarded)),
        }
    }
    answers.extend(refused.iter().map(|call| refusal(&call["id"])));
    Some(answer(
        StatusCode::OK,
        serde_json::to_vec(&answers).expect("JSON"),
    ))
}

/// A batch answer with its elements in reverse order (anything else as is).
fn reorder(body: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Vec<&serde_json::value::RawValue>>(body) {
        Ok(mut items) => {
            items.reverse();
            serde_json::to_vec(&items).expect("raw values serialise")
        }
        Err(_) => body.to_vec(),
    }
}

/// A quantity made different but still well-formed.
fn other_quantity(text: &str) -> String {
    if text == "0x0" {
        "0x1".into()
    } else {
        format!("{text}0")
    }
}

/// A hex string with one digit in its middle changed.
fn flip_digit(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    let i = 2 + (bytes.len() - 2) / 2;
    bytes[i] = if bytes[i] == b'0' { b'1' } else { b'0' };
    String::from_utf8(bytes).expect("hex is ASCII")
}

/// Tells `kind`'s lie in a (batch) answer; `None` when it carries nothing
/// that lie changes.
fn tamper_state(body: &[u8], kind: StateTamper) -> Option<Vec<u8>> {
    let mut value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let items: Vec<&mut serde_json::Value> = match &mut value {
        serde_json::Value::Array(items) => items.iter_mut().collect(),
        item => vec![item],
    };
    // neve asks for code in the same batch as the account's proof; only
    // such an answer's code is touched (raw blocks are hex strings too).
    let with_proof = items.iter().any(|item| {
        item.get("result")
            .and_then(|r| r.get("accountProof"))
            .is_some()
    });
    let mut done = false;
    for item in items {
        let Some(result) = item.get_mut("result") else {
            continue;
        };
        let is_proof = result.get("accountProof").is_some();
        match kind {
            StateTamper::Balance | StateTamper::Nonce if is_proof => {
                let field = if kind == StateTamper::Balance {
                    "balance"
                } else {
                    "nonce"
                };
                let text = result[field].as_str()?.to_string();
                result[field] = other_quantity(&text).into();
                done = true;
            }
            StateTamper::StorageValue if is_proof => {
                let slot = result["storageProof"].get_mut(0)?;
                let text = slot["value"].as_str()?.to_string();
                slot["value"] = other_quantity(&text).into();
                done = true;
            }
            StateTamper::ProofNode if is_proof => {
                let node = result["accountProof"].as_array_mut()?.last_mut()?;
                let text = node.as_str()?.to_string();
                *node = flip_digit(&text).into();
                done = true;
            }
            StateTamper::CodeByte if with_proof => {
                if let Some(code) = result
                    .as_str()
                    .filter(|c| c.len() > 4 && c.starts_with("0x"))
                {
                    *result = flip_digit(code).into();
                    done = true;
                }
            }
            _ => {}
        }
    }
    done.then(|| serde_json::to_vec(&value).expect("JSON serialises"))
}

/// Rewrites every `eth_blockNumber` answer in a (batch) response `lag` lower.
fn lag_head(body: &[u8], lag: u64) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.to_vec();
    };
    let lower = |item: &mut serde_json::Value| {
        // Only quantities (heads), not hashes or objects.
        let head = item
            .get("result")
            .and_then(|r| r.as_str())
            .filter(|r| r.len() < 18)
            .and_then(neve_upstream::parse_quantity);
        if let Some(head) = head {
            item["result"] = neve_upstream::quantity(head.saturating_sub(lag)).into();
        }
    };

    match &mut value {
        serde_json::Value::Array(items) => items.iter_mut().for_each(lower),
        item => lower(item),
    }
    serde_json::to_vec(&value).expect("JSON serialises")
}

/// Changes the first transaction `value` in a body that carries full
/// transactions, keeping the JSON valid: the block no longer verifies.
/// `None` for a body without full transactions.
/// The first transaction's `from` with one digit changed, if the answer
/// carries a block with full transactions.
fn tamper_sender(body: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(body);
    let block = text.find("\"transactions\":[{")?;
    let at = block + text[block..].find("\"from\":\"0x")? + "\"from\":\"0x".len();
    let mut bytes = text.into_owned().into_bytes();
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    Some(bytes)
}

fn tamper(body: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(body);
    if !text.contains("\"transactions\":[{") {
        return None;
    }
    Some(
        text.replacen("\"value\":\"0x", "\"value\":\"0x1", 1)
            .into_bytes(),
    )
}

/// A TCP proxy that resets every connection it carries `every` after it
/// opened: a WebSocket (or any connection) that keeps dropping. Counts the
/// connections it cut; stops when dropped.
pub struct CuttingProxy {
    addr: std::net::SocketAddr,
    cuts: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for CuttingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CuttingProxy {
    /// Listens on a free loopback port and forwards to the host and port of
    /// `upstream` (a `ws://` or `http://` URL).
    pub async fn start(upstream: &str, every: Duration) -> CuttingProxy {
        let target = upstream
            .split("://")
            .nth(1)
            .unwrap_or(upstream)
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let cuts = Arc::new(AtomicU64::new(0));
        let counter = cuts.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else {
                    continue;
                };
                let (target, counter) = (target.clone(), counter.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    let copied = tokio::time::timeout(
                        every,
                        tokio::io::copy_bidirectional(&mut client, &mut server),
                    )
                    .await;
                    if copied.is_err() {
                        counter.fetch_add(1, Ordering::Relaxed);
                        // A reset, not a goodbye: nothing more is sent.
                        let _ = client.set_zero_linger();
                        let _ = server.set_zero_linger();
                    }
                });
            }
        });
        CuttingProxy { addr, cuts, task }
    }

    /// The proxy's URL with `scheme` (`ws`, `http`).
    pub fn url(&self, scheme: &str) -> String {
        format!("{scheme}://{}", self.addr)
    }

    /// Connections cut so far.
    pub fn cuts(&self) -> u64 {
        self.cuts.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_lies_change_the_named_value_only_in_block_answers() {
        let body = br#"[{"result":{"size":"0x10","transactions":[{"gas":"0x5"}]}},{"result":[{"cumulativeGasUsed":"0x5","gasUsed":"0x5"}]},{"result":["0x02f0"]}]"#;
        let told = |lie: FieldLie| String::from_utf8(lie.tell(body).unwrap()).unwrap();
        let gas_used = told(FieldLie::Digit {
            after: "cumulativeGasUsed",
            field: "gasUsed",
        });
        assert!(gas_used.contains(r#""cumulativeGasUsed":"0x5","gasUsed":"0x0""#));
        let raw = told(FieldLie::Digit {
            after: r#""result":["0x"#,
            field: "",
        });
        assert!(raw.contains(r#"["0x02f1"]"#));
        let size = told(FieldLie::Digit {
            after: "",
            field: "size",
        });
        let gas = told(FieldLie::DigitBefore {
            before: "cumulativeGasUsed",
            field: "gas",
        });
        assert!(gas.contains(r#""gas":"0x0""#));
        assert!(size.contains(r#""size":"0x11""#));
        assert_eq!(
            FieldLie::Replace { from: "x", to: "y" }.tell(br#"{"result":"0x1"}"#),
            None,
            "no block, no lie"
        );
    }

    #[test]
    fn tampering_keeps_json_valid_and_changes_a_value() {
        let body = br#"{"result":{"transactions":[{"value":"0x5"}]}}"#;
        let tampered = tamper(body).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&tampered).unwrap();
        assert_eq!(value["result"]["transactions"][0]["value"], "0x15");
        assert_eq!(tamper(br#"{"result":"0x1"}"#), None);
    }

    #[test]
    fn lagging_rewrites_heads_in_batches() {
        let body = br#"[{"id":1,"result":"0x10"},{"id":2,"result":{"a":1}}]"#;
        let value: serde_json::Value = serde_json::from_slice(&lag_head(body, 3)).unwrap();
        assert_eq!(value[0]["result"], "0xd");
        assert_eq!(value[1]["result"]["a"], 1);
    }
}
