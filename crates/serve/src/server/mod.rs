//! The HTTP side of a call, on one socket: the [`Server`] every request
//! is answered with, and, a file a concern, from the ground up:
//!
//! - `offload.rs`: the scan threads and the I/O threads, each with a
//!   bounded queue, for work a request waits on off the async workers;
//! - `call.rs`: one call, alone or in a batch: parsed, validated, answered
//!   from what neve holds, or handed on as deferred work; and finished;
//! - `execute.rs`: calls executed on the call threads, with the rounds of
//!   fetches their misses need;
//! - `batch.rs`: a batch's elements, the deferred ones (scan threads, I/O
//!   threads, state fetches) and the one account of
//!   `--max-batch-answer-bytes`;
//! - `respond.rs`: a body answered: a single call, or a batch;
//! - `admission.rs`: what a request may cost before it is answered:
//!   `--client-rate`, the body's size, time and shape;
//! - `ws.rs` and `upgrade.rs`: the WebSocket session and the upgrade to it;
//! - `health.rs`, `export.rs`, `residency.rs`: what operators read;
//! - `route.rs`: one HTTP request, by listener, method and path;
//! - `listen.rs`: the listeners, their connections, and the drain.
//!
//! This file holds what they share and nothing that answers: the server's
//! parts and the shapes of a response. It imports none of them.

mod admission;
mod batch;
mod call;
mod execute;
mod export;
mod flights;
mod health;
mod heap;
pub(crate) mod listen;
mod offload;
mod residency;
mod respond;
mod route;
#[cfg(test)]
pub(crate) mod tests;
mod upgrade;
pub(crate) mod ws;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Response, StatusCode};

use crate::body::Chunks;
use crate::clients::{self, ClientBudget};
use crate::events::Event;
use crate::fallback::Fallback;
use crate::metrics::Metrics;
use crate::rpc::Context;

/// A slot under `--max-connections`, held by a connection and by the
/// WebSocket session it may upgrade to.
type ConnectionPermit = Arc<tokio::sync::OwnedSemaphorePermit>;

/// What every request is answered with: the call's context, the pools off
/// the async workers, the chain's events, the metrics, and what admission
/// and the drain keep.
pub(crate) struct Server {
    pub(crate) ctx: Arc<Context>,
    /// Threads for long `eth_getLogs` scans (see [`offload::scan_pool`]); more
    /// wait their turn rather than crowd out serving.
    scans: neve_pool::Pool,
    /// Reads of stored pages not in memory ([`offload::IO_THREADS`]).
    io: Arc<neve_pool::Pool>,
    /// Calls executing ([`execute::call_pool`]).
    calls: neve_pool::Pool,
    events: tokio::sync::broadcast::Sender<Event>,
    metrics: Arc<Metrics>,
    shutting_down: AtomicBool,
    /// Turns true when the server starts draining.
    stopping: tokio::sync::watch::Receiver<bool>,
    fallback: Option<Fallback>,
    fetch: Option<Arc<dyn neve_state::Fetch>>,
    /// Per-address work budgets, when `--client-rate` is set (shared with
    /// the call threads, which charge gas as it is spent).
    clients: Option<Arc<ClientBudget>>,
    /// Places for `/blocks` exports in flight ([`export::MAX_EXPORTS`]).
    exports: Arc<tokio::sync::Semaphore>,
    /// Traces in flight, shared by identical ones ([`flights`]).
    flights: Arc<flights::Flights>,
    started: Instant,
}

tokio::task_local! {
    /// The address a request being answered came from: what the call
    /// threads charge the gas of its runs to, as they spend it
    /// (`execute.rs`), so a client that hangs up mid-batch has paid for
    /// what ran.
    pub(super) static CLIENT: std::net::IpAddr;
}

/// Returns once `stop` is true (or its sender is gone).
async fn until_stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        let stopped = *stop.borrow_and_update();
        if stopped || stop.changed().await.is_err() {
            return;
        }
    }
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

impl Server {
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
}
