//! The accept loop: connection slots, one hyper connection per socket with
//! the write deadline around it, and the drain on shutdown.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use neve_store::Reader;
use neve_upstream::RpcClient;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::config::{ChainView, ServeConfig, StateAccess};
use crate::fallback::Fallback;
use crate::metrics::Metrics;
use crate::rpc::Context;
use crate::{clients, events, stall};

use super::offload::{io_pool, scan_pool};
use super::route::Role;
use super::{ConnectionPermit, Server, execute, export, heap, residency, until_stopped};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The fallback URL is not usable.
    #[error("fallback: {0}")]
    Fallback(#[from] neve_upstream::RpcError),
    /// The thread replayed blocks' post-states are computed on could not
    /// start.
    #[error("starting the post-state thread: {0}")]
    PostStateThread(std::io::Error),
}

/// The sockets neve answers on.
pub struct Listeners {
    /// `--listen`: JSON-RPC and WebSocket; with no admin listener, also
    /// `/health`, `/health/ready`, `/metrics` and `/blocks`.
    pub public: TcpListener,
    /// `--admin-listen`: everything, for operators, Prometheus and mirrors.
    pub admin: Option<TcpListener>,
}

/// Connections the admin listener holds at once, apart from
/// `--max-connections`: a flood of clients on the public port never keeps
/// Prometheus or a mirror out, and the admin port needs few.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;

/// Serves until `shutdown` turns true, then drains: answers readiness with
/// 503 at once, goes on serving for the drain delay (so a load balancer
/// polling readiness takes it out of its pool first), then stops
/// accepting, lets each open connection finish the request it is answering
/// (idle ones are closed at once), and returns when every connection and
/// WebSocket session has ended or the drain timeout passed.
/// Long: accepting, the drain and its deadline read as one sequence;
/// split, the listeners' state would travel between the pieces.
pub async fn serve(
    listeners: Listeners,
    reader: Reader,
    chain: Arc<dyn ChainView>,
    identity: neve_store::Identity,
    config: ServeConfig,
    state: Option<StateAccess>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<(), ServeError> {
    let fallback = config
        .fallback
        .as_deref()
        .map(RpcClient::new)
        .transpose()?
        .map(|client| Fallback::new(client, &config.fallback_methods, config.fallback_in_flight));
    let (events, _) = tokio::sync::broadcast::channel(events::SUBSCRIBER_BUFFER);
    let metrics = Arc::new(Metrics::default());
    let io = Arc::new(io_pool());
    tokio::spawn(events::watch_supervised(
        reader.clone(),
        chain.clone(),
        events.clone(),
        metrics.clone(),
        io.clone(),
    ));
    let fetch = state.as_ref().and_then(|s| s.fetch.clone());
    let clients = clients::ClientBudget::new(config.client_rate).map(Arc::new);
    let state_answers = state.is_some() && fetch.is_some() && config.state_fetch_timeout.is_some();
    // Connections and sessions close when this turns true: after the
    // drain delay, not at the signal.
    let (close, closing) = tokio::sync::watch::channel(false);
    let post_states = state
        .as_ref()
        .map(|s| neve_execution::PostStates::start(s.state.clone()))
        .transpose()
        .map_err(ServeError::PostStateThread)?;
    let server = Arc::new(Server {
        events,
        fetch,
        scans: scan_pool(),
        io,
        calls: execute::call_pool(),
        ctx: Arc::new(Context {
            reader,
            chain,
            call_rules: state
                .as_ref()
                .map_or_else(Default::default, |s| s.rules.clone()),
            call_blocks: Default::default(),
            call_codes: Default::default(),
            replay_blocks: neve_execution::HeightCache::with_entries(
                neve_execution::trace::REPLAY_BLOCKS_KEPT,
            ),
            call_answers: crate::rpc::CallMemo::new(config.call_memo_bytes),
            trace_answers: crate::rpc::CallMemo::new(config.trace_memo_bytes),
            replays_diverged: Default::default(),
            trace_asks: Default::default(),
            answers_along: Default::default(),
            blocks_prepared: Default::default(),
            proofs_ahead: Default::default(),
            fee_blocks: Default::default(),
            coreth: Context::runs_coreth(
                config.coreth_upstream,
                identity.chain_id,
                state.as_ref().map(|s| s.state.storage_keys()),
            ),
            state: state.map(|s| s.state),
            post_states,
            state_answers,
            chain_id: Bytes::from(format!("\"0x{:x}\"", identity.chain_id)),
            net_version: Bytes::from(format!("\"{}\"", identity.chain_id)),
            client_version: Bytes::from(
                serde_json::to_string(&config.client_version).expect("a string serializes"),
            ),
            genesis_hash: identity
                .genesis_hash
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            config,
        }),
        metrics,
        shutting_down: AtomicBool::new(false),
        stopping: closing,
        fallback,
        clients,
        exports: Arc::new(tokio::sync::Semaphore::new(export::MAX_EXPORTS)),
        flights: Default::default(),
        started: Instant::now(),
    });
    tokio::spawn(residency::watch(server.clone()));
    tokio::spawn(heap::watch(server.clone()));
    let signalled = {
        let server = server.clone();
        async move {
            until_stopped(shutdown).await;
            server.shutting_down.store(true, Ordering::Relaxed);
            let delay = server.ctx.config.drain_delay;
            if !delay.is_zero() {
                tracing::info!(
                    delay_ms = delay.as_millis() as u64,
                    "stopping: readiness is 503 while requests are still answered"
                );
                tokio::time::sleep(delay).await;
            }
            let _ = close.send(true);
        }
    };
    let max_connections = server.ctx.config.max_connections;
    match listeners.admin {
        None => {
            tokio::join!(
                signalled,
                accept(
                    server.clone(),
                    listeners.public,
                    Role::Everything,
                    max_connections
                )
            );
        }
        Some(admin) => {
            tokio::join!(
                signalled,
                accept(
                    server.clone(),
                    listeners.public,
                    Role::Public,
                    max_connections
                ),
                accept(
                    server.clone(),
                    admin,
                    Role::Everything,
                    ADMIN_MAX_CONNECTIONS
                ),
            );
        }
    }
    Ok(())
}

/// One listener's accept loop, with `slots` connections at most, until the
/// server closes; then its drain.
async fn accept(server: Arc<Server>, listener: TcpListener, role: Role, slots: usize) {
    let limit = Arc::new(tokio::sync::Semaphore::new(slots));
    let stopped = until_stopped(server.stopping.clone());
    tokio::pin!(stopped);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and the like: pause, don't spin.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stopped => {
                drop(listener);
                drain(&limit, slots, &server).await;
                return;
            }
        };
        let _ = stream.set_nodelay(true);
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            server
                .metrics
                .refused_connections
                .fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let mut stream = stream;
                let _ = stream
                    .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
            continue;
        };
        let server = server.clone();
        // Shared with a WebSocket session the connection upgrades to: the
        // slot is freed when both the HTTP connection and the session end.
        let permit = Arc::new(permit);
        let activity = stall::Activity::new();
        let idle_timeout = server.ctx.config.idle_timeout;
        let mut connection = tokio::spawn(serve_connection(
            server,
            stream,
            peer,
            role,
            permit,
            activity.clone(),
            idle_timeout,
        ));
        // Idle, or its headers never finished: the connection's task is
        // ended. Its own task, so no timer is polled with every request.
        tokio::spawn(async move {
            tokio::select! {
                _ = stall::idle(&activity, idle_timeout) => {}
                _ = &mut connection => return,
            }
            connection.abort();
        });
    }
}

/// Counts an open connection while it lives, whichever way its task ends.
struct Open(Arc<Server>);

impl Open {
    fn new(server: Arc<Server>) -> Open {
        server.metrics.connections.fetch_add(1, Ordering::Relaxed);
        Open(server)
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.metrics.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One connection: hyper serving requests on it until it closes or
/// upgrades, or the server stops.
async fn serve_connection(
    server: Arc<Server>,
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    role: Role,
    permit: ConnectionPermit,
    activity: Arc<stall::Activity>,
    idle_timeout: Duration,
) {
    let _open = Open::new(server.clone());
    let first = AtomicBool::new(true);
    let service = service_fn(|request| {
        let server = server.clone();
        let permit = permit.clone();
        let new_connection = first.swap(false, Ordering::Relaxed);
        let in_hand = activity.request();
        async move {
            let answer = server
                .handle(request, permit, peer.ip(), new_connection, role)
                .await;
            drop(in_hand);
            Ok::<_, Infallible>(answer)
        }
    });
    // No header-read timer per request: `stall::idle` ends a connection
    // that brings no whole request for the idle timeout.
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true)
        .serve_connection(
            TokioIo::new(stall::WriteDeadline::new(
                stream,
                idle_timeout,
                activity.clone(),
            )),
            service,
        )
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => {}
        _ = until_stopped(server.stopping.clone()) => {
            // Finish the request being answered, then close.
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        }
    }
}

/// Waits until every connection slot is free again (each connection and
/// WebSocket session holds one until it ends), or the drain timeout.
async fn drain(limit: &tokio::sync::Semaphore, slots: usize, server: &Server) {
    let open = server.metrics.connections.load(Ordering::Relaxed);
    tracing::info!(connections = open, "draining");
    let slots = u32::try_from(slots).unwrap_or(u32::MAX);
    let timeout = server.ctx.config.drain_timeout;
    match tokio::time::timeout(timeout, limit.acquire_many(slots)).await {
        Ok(_) => tracing::info!("drained"),
        Err(_) => tracing::warn!(
            connections = server.metrics.connections.load(Ordering::Relaxed),
            timeout_ms = timeout.as_millis() as u64,
            "drain timed out; closing what is left"
        ),
    }
}
