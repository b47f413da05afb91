//! The load engine: HTTP/1.1 keep-alive connections sending a workload's
//! requests, closed loop (each connection sends when its last answer
//! arrived) or open loop (requests are due on a fixed schedule and latency
//! counts from when each was due, so a stalled target is charged for the
//! requests it held back: no coordinated omission).

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Uri};
use hyper_util::rt::TokioIo;
use neve_upstream::tls::Io;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use tokio::net::TcpStream;

use crate::classify::{Outcome, classify, classify_static};
use crate::stats::{self, Outcomes};
use crate::target::{Endpoint, TargetKind};

/// How long one request may take before it counts as unanswered.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What to send, prepared once per target: URIs and header values are
/// parsed here, so a request costs a few reference-count bumps.
#[derive(Clone)]
pub struct Plan {
    endpoint: Endpoint,
    kind: TargetKind,
    host: HeaderValue,
    /// (URI, body): one URI and many bodies (RPC), or many URIs (static).
    requests: Arc<Vec<(Uri, Bytes)>>,
}

impl Plan {
    /// JSON-RPC bodies posted to the endpoint's path.
    pub fn rpc(endpoint: Endpoint, bodies: Vec<Bytes>) -> Plan {
        let uri: Uri = format!("{}{}", endpoint.path, endpoint.query)
            .parse()
            .expect("a parsed URL's path and query are a URI");
        let requests = bodies.into_iter().map(|b| (uri.clone(), b)).collect();
        Plan::new(endpoint, TargetKind::Rpc, requests)
    }

    /// `GET <prefix>/<slug>/<i>.json` for each member of a workload of `size`.
    pub fn static_files(endpoint: Endpoint, slug: &str, size: usize) -> Plan {
        let prefix = endpoint.path.trim_end_matches('/').to_owned();
        let requests = (0..size)
            .map(|i| {
                let uri = format!("{prefix}/{slug}/{i}.json")
                    .parse()
                    .expect("slugs are URI-safe");
                (uri, Bytes::new())
            })
            .collect();
        Plan::new(endpoint, TargetKind::Static, requests)
    }

    fn new(endpoint: Endpoint, kind: TargetKind, requests: Vec<(Uri, Bytes)>) -> Plan {
        Plan {
            host: HeaderValue::from_str(&endpoint.authority)
                .expect("an authority is a header value"),
            endpoint,
            kind,
            requests: Arc::new(requests),
        }
    }

    fn request(&self, index: usize) -> Request<Full<Bytes>> {
        let (uri, body) = &self.requests[index];
        let mut request = Request::new(Full::new(body.clone()));
        *request.uri_mut() = uri.clone();
        request
            .headers_mut()
            .insert(header::HOST, self.host.clone());
        if self.kind == TargetKind::Rpc {
            *request.method_mut() = Method::POST;
            request.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
        request
    }
}

/// The schedule of one run.
#[derive(Clone, Copy, Debug)]
pub struct Schedule {
    /// Connections.
    pub conns: usize,
    /// `None`: closed loop. `Some(r)`: open loop at `r` requests per second.
    pub rate: Option<f64>,
    /// Sent but not measured, first.
    pub warmup: Duration,
    /// Measured.
    pub duration: Duration,
}

/// What one run measured.
#[derive(Debug)]
pub struct Measured {
    /// Latencies of answered requests in the window, µs.
    pub histogram: Histogram<u64>,
    /// Classes of every request in the window.
    pub outcomes: Outcomes,
    /// Answers completed inside the window, per second: what the target
    /// delivered, whenever those requests were due.
    pub requests_per_second: f64,
    /// Bytes of answer bodies in the window.
    pub body_bytes: u64,
    /// Open loop: mean lateness of the client's timer for requests sent on
    /// time (excluded from their latency; the runtime's tick is 1 ms).
    pub mean_timer_lag: Option<Duration>,
}

struct Tally {
    histogram: Histogram<u64>,
    outcomes: Outcomes,
    body_bytes: u64,
    completed_in_window: u64,
    timer_lag: Duration,
    timed_sends: u64,
}

/// Runs `schedule` against `plan`.
pub async fn run(plan: &Plan, schedule: Schedule, seed: u64) -> Measured {
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(schedule.conns);
    for conn in 0..schedule.conns {
        let plan = plan.clone();
        let rng = SmallRng::seed_from_u64(seed ^ (conn as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        tasks.push(tokio::spawn(connection_loop(
            plan, schedule, conn, rng, start,
        )));
    }
    let mut histogram = stats::new_histogram();
    let mut outcomes = Outcomes::default();
    let mut body_bytes = 0;
    let mut completed = 0;
    let (mut lag, mut timed) = (Duration::ZERO, 0u64);
    for task in tasks {
        let tally = task.await.expect("a connection task does not panic");
        histogram.add(&tally.histogram).expect("same bounds");
        outcomes.merge(&tally.outcomes);
        body_bytes += tally.body_bytes;
        completed += tally.completed_in_window;
        lag += tally.timer_lag;
        timed += tally.timed_sends;
    }
    Measured {
        // Every answer counts toward throughput, rejects included: they are
        // flagged, not hidden.
        requests_per_second: completed as f64 / schedule.duration.as_secs_f64(),
        histogram,
        outcomes,
        body_bytes,
        mean_timer_lag: (timed > 0).then(|| lag.div_f64(timed as f64)),
    }
}

/// Sends every request of the plan once, unmeasured, over a few
/// connections: every target starts its sweep with the same warm caches
/// (the reference target has already answered the pool while the
/// benchmark sampled it).
pub async fn prime(plan: &Plan) {
    const CONNS: usize = 4;
    let mut tasks = Vec::new();
    for first in 0..CONNS.min(plan.requests.len()) {
        let plan = plan.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = None;
            for index in (first..plan.requests.len()).step_by(CONNS) {
                send(&plan, &mut conn, index).await;
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

async fn connection_loop(
    plan: Plan,
    schedule: Schedule,
    conn: usize,
    mut rng: SmallRng,
    start: Instant,
) -> Tally {
    let window_start = start + schedule.warmup;
    let window_end = window_start + schedule.duration;
    let mut tally = Tally {
        histogram: stats::new_histogram(),
        outcomes: Outcomes::default(),
        body_bytes: 0,
        completed_in_window: 0,
        timer_lag: Duration::ZERO,
        timed_sends: 0,
    };
    let mut conn_state: Option<Conn> = None;
    // Open loop: this connection owns every `conns`-th slot of the schedule.
    let rate = schedule.rate;
    let mut slot = conn as u64;
    loop {
        // `due` places the request in the window; `clock` is where its
        // latency starts.
        let (due, clock) = match rate {
            None => {
                let now = Instant::now();
                if now >= window_end {
                    break;
                }
                (now, now)
            }
            Some(rate) => {
                let due = start + Duration::from_secs_f64(slot as f64 / rate);
                slot += schedule.conns as u64;
                if due >= window_end {
                    break;
                }
                if Instant::now() > window_end + schedule.duration {
                    // Overloaded past a window's length of grace: what is
                    // still due goes unsent and counts as unanswered, so
                    // the run ends and says so.
                    if due >= window_start {
                        tally.outcomes.transport_errors += 1;
                    }
                    continue;
                }
                if Instant::now() < due {
                    // On time: the timer fires up to a tick (1 ms) late,
                    // which is the client's jitter, not the target's delay;
                    // it is recorded apart (`timer_lag`).
                    tokio::time::sleep_until(due.into()).await;
                    let woke = Instant::now();
                    tally.timer_lag += woke - due;
                    tally.timed_sends += 1;
                    (due, woke)
                } else {
                    // Behind: the target held this connection past the due
                    // time, and the wait is charged to it.
                    (due, due)
                }
            }
        };
        let index = rng.random_range(0..plan.requests.len());
        let answer = send(&plan, &mut conn_state, index).await;
        let done = Instant::now();
        if answer.is_some() && (window_start..=window_end).contains(&done) {
            tally.completed_in_window += 1;
        }
        // Latency and classes: every request sent (closed loop) or due
        // (open loop) in the window, however long it took, so slow answers
        // at the end of the window are not dropped from the tail.
        if due < window_start {
            continue;
        }
        match answer {
            Some((outcome, bytes)) => {
                stats::record(&mut tally.histogram, done - clock);
                tally.outcomes.add(outcome);
                tally.body_bytes += bytes;
            }
            None => tally.outcomes.transport_errors += 1,
        }
    }
    tally
}

/// What reads and writes one connection: HTTP/1 over TCP or TLS.
type Driver = http1::Connection<TokioIo<Box<dyn Io>>, Full<Bytes>>;

/// One keep-alive connection, driven by the task that sends on it: no
/// second task and no cross-task wake-up per request.
struct Conn {
    sender: SendRequest<Full<Bytes>>,
    driver: Pin<Box<Driver>>,
}

/// Sends one request on the connection, opening it first when needed.
/// `None` when no answer came (the connection is then dropped and reopened
/// for the next request).
async fn send(plan: &Plan, conn: &mut Option<Conn>, index: usize) -> Option<(Outcome, u64)> {
    let reused = conn.as_ref().is_some_and(|c| !c.sender.is_closed());
    let started = Instant::now();
    match send_once(plan, conn, index).await {
        // A kept-alive connection the server closed while it sat idle (a
        // low open-loop rate) fails at once on its next use: one retry on a
        // fresh connection, so the target is not charged for the client's
        // idle. A slow failure is the target's and is not retried.
        None if reused && started.elapsed() < Duration::from_millis(100) => {
            send_once(plan, conn, index).await
        }
        answer => answer,
    }
}

async fn send_once(plan: &Plan, conn: &mut Option<Conn>, index: usize) -> Option<(Outcome, u64)> {
    let exchange = async {
        if conn.as_ref().is_none_or(|c| c.sender.is_closed()) {
            *conn = Some(connect(&plan.endpoint).await?);
        }
        let Conn { sender, driver } = conn.as_mut().expect("connected above");
        let answer = async {
            let response = sender.send_request(plan.request(index)).await.ok()?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.ok()?.to_bytes();
            Some((status, body))
        };
        // Poll the connection beside the exchange; if it ends first (the
        // server closed it), the exchange cannot complete.
        let (status, body) = tokio::select! {
            biased;
            answer = answer => answer?,
            _ = driver.as_mut() => return None,
        };
        let outcome = match plan.kind {
            TargetKind::Rpc => classify(status, &body),
            TargetKind::Static => classify_static(status),
        };
        Some((outcome, body.len() as u64))
    };
    let answer = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .ok()
        .flatten();
    if answer.is_none() {
        *conn = None;
    }
    answer
}

async fn connect(endpoint: &Endpoint) -> Option<Conn> {
    let stream = TcpStream::connect(&endpoint.authority).await.ok()?;
    stream.set_nodelay(true).ok()?;
    let stream = neve_upstream::tls::wrap(&endpoint.host, stream, endpoint.tls)
        .await
        .ok()?;
    let (sender, driver) = http1::handshake(TokioIo::new(stream)).await.ok()?;
    Some(Conn {
        sender,
        driver: Box::pin(driver),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicU64, Ordering};

    use hyper::Response;
    use hyper::body::Incoming;
    use hyper::service::service_fn;

    /// A tiny server: answers `result` for odd ids of its counter and
    /// `null` with 421 for every fourth request, after `delay`.
    async fn server(delay: Duration) -> (Endpoint, Arc<AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = Arc::new(AtomicU64::new(0));
        let counter = served.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |_request: Request<Incoming>| {
                        let n = counter.fetch_add(1, Ordering::Relaxed);
                        async move {
                            tokio::time::sleep(delay).await;
                            let (status, body) = if n % 4 == 3 {
                                (421, r#"{"jsonrpc":"2.0","id":1,"result":null}"#)
                            } else {
                                (200, r#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#)
                            };
                            Ok::<_, Infallible>(
                                Response::builder()
                                    .status(status)
                                    .body(Full::new(Bytes::from_static(body.as_bytes())))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
        (endpoint, served)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_closed_loop_counts_every_answer_by_class() {
        let (endpoint, served) = server(Duration::from_millis(2)).await;
        let plan = Plan::rpc(endpoint, vec![Bytes::from_static(b"{}")]);
        let schedule = Schedule {
            conns: 4,
            rate: None,
            warmup: Duration::from_millis(100),
            duration: Duration::from_millis(500),
        };
        let measured = run(&plan, schedule, 1).await;
        let outcomes = measured.outcomes;
        assert!(outcomes.total() > 50, "{outcomes:?}");
        assert_eq!(outcomes.total(), outcomes.ok + outcomes.status_421);
        let share = outcomes.status_421 as f64 / outcomes.total() as f64;
        assert!((0.15..0.35).contains(&share), "{outcomes:?}");
        assert!(served.load(Ordering::Relaxed) >= outcomes.total());
        // Each request waits ≥ 2 ms, four at a time: at most ~2,000 req/s.
        assert!(
            measured.requests_per_second < 2100.0,
            "{}",
            measured.requests_per_second
        );
        assert!(measured.histogram.min() >= 2000);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_open_loop_charges_a_slow_target_for_the_queue() {
        // 20 ms per answer on one connection can do 50 req/s; ask for 200.
        let (endpoint, _) = server(Duration::from_millis(20)).await;
        let plan = Plan::rpc(endpoint, vec![Bytes::from_static(b"{}")]);
        let schedule = Schedule {
            conns: 1,
            rate: Some(200.0),
            warmup: Duration::ZERO,
            duration: Duration::from_millis(500),
        };
        let started = Instant::now();
        let measured = run(&plan, schedule, 1).await;
        // 100 requests were due in the window. Draining them would take
        // 2 s; after the window and as long again (1 s), the rest are
        // abandoned as unanswered.
        assert!(started.elapsed() < Duration::from_millis(1500));
        let outcomes = measured.outcomes;
        assert_eq!(outcomes.total(), 100, "{outcomes:?}");
        assert!(
            (40..=55).contains(&measured.histogram.len()),
            "{outcomes:?}"
        );
        assert_eq!(outcomes.transport_errors, 100 - measured.histogram.len());
        assert!(outcomes.reject_summary().unwrap().contains("no answer"));
        let latency = stats::Latency::from_histogram(&measured.histogram);
        // Answers fell ever further behind their due times.
        assert!(latency.max_ms > 400.0, "{latency:?}");
        assert!(
            measured.requests_per_second < 60.0,
            "{}",
            measured.requests_per_second
        );
    }

    #[tokio::test]
    async fn an_unreachable_target_is_counted_not_hung_on() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let endpoint = Endpoint::parse(&format!("http://127.0.0.1:{port}/")).unwrap();
        let plan = Plan::static_files(endpoint, "randblock", 3);
        let schedule = Schedule {
            conns: 1,
            rate: Some(100.0),
            warmup: Duration::ZERO,
            duration: Duration::from_millis(100),
        };
        let measured = run(&plan, schedule, 1).await;
        assert_eq!(measured.outcomes.transport_errors, 10);
        assert_eq!(measured.outcomes.rejected(), 10);
    }
}
