//! The vocabulary of one JSON-RPC call, shared by every method family and
//! by the server, and below both: the request as it arrives
//! ([`request`]), the answer and its envelope ([`reply`]), what a call
//! reads with and the lookups every family shares ([`context`], and the
//! price oracle's in [`oracle`]), and how a family declares a method
//! ([`method`]). Nothing here knows a method by
//! name, and nothing here imports a family or the server.

mod context;
mod method;
mod oracle;
mod reply;
mod request;

pub(crate) use context::{Context, Pages, Reads};
pub(crate) use method::Method;
pub use reply::Outcome;
pub(crate) use reply::{Reply, Stop, count, envelope, error_element, hex_quantity};
pub(crate) use request::{Call, OwnedCall, Validity};
