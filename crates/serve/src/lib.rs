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
//!
//! # Where things are, from the ground up
//!
//! - The ground: `errors`, `params`, `body` (the response body), `prescan`,
//!   `stall`, `clients`, `fallback`, `cors` and `config`.
//! - `rpc/`: the vocabulary of one call (the request, the reply and its
//!   envelope, the context a call reads with, how a method is declared),
//!   below every handler.
//! - `methods/`: a file per family of methods, and the table of them.
//! - `metrics` and `events`: counters, and the chain events subscribers
//!   hear.
//! - `server/`: the HTTP side: admission, one call, the batch, the
//!   WebSocket, the operators' pages, the listeners.
//!
//! No module imports one above it.

mod body;
mod clients;
mod config;
mod cors;
mod errors;
mod events;
mod fallback;
mod methods;
mod metrics;
pub mod params;
mod prescan;
mod rpc;
mod server;
mod stall;
#[cfg(test)]
mod tests;

pub use body::Chunks;
pub use clients::{BYTES_PER_UNIT, DEFAULT_CLIENT_RATE, MAX_TRACKED_CLIENTS};
pub use config::{
    ChainView, DEFAULT_BODY_TIMEOUT, DEFAULT_CALL_MEMO_BYTES, DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_LATEST_GRACE, DEFAULT_LOGS_BUDGET_BLOCKS,
    DEFAULT_LOGS_BUDGET_BYTES, DEFAULT_LOGS_MAX_RANGE, DEFAULT_LOGS_MAX_RESULTS, DEFAULT_MAX_BATCH,
    DEFAULT_MAX_BATCH_ANSWER_BYTES, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_STATE_FETCH_TIMEOUT, DEFAULT_TRACE_MEMO_BYTES, ServeConfig, StateAccess,
    UpstreamHealth,
};
pub use cors::{Origins, PREFLIGHT_MAX_AGE_SECONDS};
pub use errors::ErrorCode;
pub use fallback::{DEFAULT_FALLBACK_IN_FLIGHT, DEFAULT_FALLBACK_METHODS};
pub use methods::logs::{MAX_QUEUED_SCANS, SCAN_INLINE_BLOCKS};
pub use metrics::Metrics;
pub use rpc::Outcome;
pub use server::listen::{ADMIN_MAX_CONNECTIONS, Listeners, ServeError, serve};
