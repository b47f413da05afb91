//! A fault-injecting HTTP proxy in front of a real node, for the faults a
//! real node will not produce on demand: 429 with `Retry-After`, 5xx,
//! answers slower than the client's timeout, truncated and garbage bodies,
//! a tampered transaction inside a block, being down (a restart), a head
//! that lags (an upstream behind its follower after a restart), bodies that
//! never end and streams that stall. `GET`s (another neve's `/health` and
//! `/blocks`) are forwarded too.
//!
//! Faults follow a fixed schedule over the requests, so a test is repeatable.

mod bodies;
mod control;
mod cutting;
mod kinds;
mod proxy;
mod rewrite;

pub use bodies::{DRIP_BYTES, DRIP_EVERY};
pub use control::Control;
pub use cutting::CuttingProxy;
pub use kinds::{Fault, FieldLie, StateTamper};
pub use proxy::FaultProxy;
