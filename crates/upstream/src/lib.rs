//! upstream: talks JSON-RPC to the node neve follows.
//!
//! Owns the HTTP transport to an upstream node (keep-alive connection pool,
//! TLS, credentials, per-call timeout, batches cut to what the endpoint
//! accepts, one request budget with `Retry-After` obeyed) and the typed
//! errors a call can end in, which show URLs only redacted. It keeps
//! results as raw JSON bytes ([`RawValue`](serde_json::value::RawValue)) so callers can store exactly what
//! the node sent; it knows nothing of the store or of serving.
//!
//! Start at [`RpcClient`]: [`RpcClient::call`] for one typed call,
//! [`RpcClient::call_raw`] for bytes as received, [`RpcClient::batch`] for
//! many calls in one HTTP request.

pub use serde_json::Value;

mod batch;
mod calls;
mod capabilities;
mod client;
mod endpoint;
mod error;
mod pacing;
mod quantity;
mod redacted;
pub mod tls;
mod transport;
mod wire;
pub mod ws;
pub use batch::{BatchAnswer, BatchItem};
pub use capabilities::StateWindow;
pub use client::{DEFAULT_MAX_BATCH, DEFAULT_MAX_RESPONSE_BYTES, DEFAULT_TIMEOUT, RpcClient};
pub use endpoint::{Credentials, Endpoint};
pub use error::{RpcError, error_chain};
pub use pacing::{Pacing, PacingStats, TooLate, jitter, parse_retry_after, retry_after_of};
pub use quantity::{Quantity, parse_quantity, quantity};
pub use redacted::{MASK, RedactedUrl};
pub use transport::BodyStream;
