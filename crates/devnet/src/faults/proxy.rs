//! [`FaultProxy`]: the HTTP proxy that applies the schedule and the
//! switches to each request it forwards.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use http_body_util::BodyExt;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use neve_upstream::RpcClient;

use super::bodies::{ProxyBody, answer, over_quota, unending};
use super::control::Control;
use super::kinds::Fault;
use super::rewrite::{lag_head, reorder, tamper, tamper_sender, tamper_state};

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

async fn handle(
    client: &RpcClient,
    schedule: &[Fault],
    control: &Control,
    request: Request<hyper::body::Incoming>,
) -> Response<ProxyBody> {
    if request.method() == hyper::Method::GET {
        return forward_get(client, control, &request).await;
    }
    let index = control.requests.fetch_add(1, Ordering::Relaxed);
    let overridden = *control.override_fault.lock().unwrap();
    let Ok(body) = request.into_body().collect().await.map(|b| b.to_bytes()) else {
        return answer(StatusCode::BAD_REQUEST, "");
    };
    let aimed = *control.method_fault.lock().unwrap();
    let aimed = aimed
        .filter(|(method, _)| body.windows(method.len()).any(|w| w == method.as_bytes()))
        .map(|(_, fault)| fault);
    let fault = aimed.or(overridden).unwrap_or_else(|| {
        schedule
            .get(index as usize % schedule.len().max(1))
            .copied()
            .unwrap_or(Fault::Pass)
    });
    if fault != Fault::Pass {
        control.faults_served.fetch_add(1, Ordering::Relaxed);
    }
    let watched = *control.watched_method.lock().unwrap();
    let _watch = watched
        .filter(|method| body.windows(method.len()).any(|w| w == method.as_bytes()))
        .map(|_| InFlight::enter(control));
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
    if let Some(response) = refusal(fault, &body) {
        return response;
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
    let forwarded = tell_lies(control, fault, &body, forwarded);
    answer(status, forwarded)
}

/// A request of the watched method in the proxy, counted while it is.
struct InFlight<'a>(&'a Control);

impl<'a> InFlight<'a> {
    fn enter(control: &'a Control) -> Self {
        control.watched_seen.fetch_add(1, Ordering::Relaxed);
        let now = control.watched_in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        control.watched_most.fetch_max(now, Ordering::Relaxed);
        InFlight(control)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.watched_in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Forwards a `GET` (another neve's `/health` and `/blocks`), a stream
/// fault applied to `/blocks`.
async fn forward_get(
    client: &RpcClient,
    control: &Control,
    request: &Request<hyper::body::Incoming>,
) -> Response<ProxyBody> {
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
    answer(status, body)
}

/// The answer of a fault that refuses a request without forwarding it
/// (429, 503, garbage, over quota), or `None` to forward it.
fn refusal(fault: Fault, body: &[u8]) -> Option<Response<ProxyBody>> {
    match fault {
        Fault::TooManyRequests => {
            let mut response = answer(StatusCode::TOO_MANY_REQUESTS, "slow down");
            response.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("1"),
            );
            Some(response)
        }
        Fault::ServerError => Some(answer(
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream unavailable",
        )),
        Fault::Garbage => Some(answer(StatusCode::OK, "<html>not json</html>")),
        Fault::OverQuota => Some(answer(StatusCode::OK, over_quota(body))),
        Fault::RetryTomorrow => {
            let mut response = answer(StatusCode::TOO_MANY_REQUESTS, "daily limit reached");
            response.headers_mut().insert(
                hyper::header::RETRY_AFTER,
                hyper::header::HeaderValue::from_static("86400"),
            );
            Some(response)
        }
        _ => None,
    }
}

/// `forwarded` with the lies the switches arm told (a tampered block,
/// sender, field or state), counted.
fn tell_lies(control: &Control, fault: Fault, body: &[u8], mut forwarded: Vec<u8>) -> Vec<u8> {
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
    if let Some((kind, aimed)) = armed
        && aimed.is_none_or(|text| body.windows(text.len()).any(|w| w == text.as_bytes()))
        && let Some(tampered) = tamper_state(&forwarded, kind)
        && control.state_tamper.lock().unwrap().take().is_some()
    {
        forwarded = tampered;
        control.state_tampered.fetch_add(1, Ordering::Relaxed);
    }
    forwarded
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
