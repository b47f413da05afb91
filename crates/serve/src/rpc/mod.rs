//! The vocabulary of one JSON-RPC call, shared by every method family and
//! by the server, and below both: the request as it arrives
//! ([`request`]), the answer and its envelope ([`reply`]), what a call
//! reads with and the lookups every family shares ([`context`], and the
//! price oracle's in [`oracle`]), calls' answers kept by block
//! ([`call_memo`]) and the configurations blocks are traced with lately
//! ([`trace_asks`]), the proofs a block's traces offer ahead of the next
//! block ([`proofs_ahead`]), work charged beyond a run's gas ([`charge`]), how a
//! family declares a method ([`method`]), and how every executed method
//! runs at its pinned block ([`execute`]). Nothing here knows a method by
//! name, and nothing here imports a family or the server.

mod call_memo;
pub(crate) mod charge;
mod context;
mod execute;
mod method;
mod oracle;
mod proofs_ahead;
mod reply;
mod request;
mod trace_asks;

pub(crate) use call_memo::{CallMemo, MemoCounts};
pub(crate) use context::{Context, Reads, Waits};
pub(crate) use execute::{
    Alongside, Job, Locate, Located, Parse, Pin, PinnedRun, Ran, TraceKeys, answered, failure,
};
pub(crate) use method::{Method, Runs};
pub(crate) use proofs_ahead::{MAX_AHEAD_BATCHES, ProofsAhead};
pub use reply::Outcome;
pub(crate) use reply::{NoReply, Reply, count, envelope, error_element, hex_quantity};
pub(crate) use request::{Call, OwnedCall, Validity};
pub(crate) use trace_asks::TraceAsks;
