//! `neve bench`: head-to-head serving benchmarks, done the way an operator
//! should do them by hand and rarely does.
//!
//! - **Same work for every target.** Each target's valid range is discovered
//!   ([`target::discover_range`]) and the workloads draw real keys from the
//!   intersection ([`corpus`]), so a mirror and a node answer the same
//!   requests.
//! - **Only real answers count as work.** Every answer is classified
//!   ([`classify`]): a 421, any other non-2xx, a JSON-RPC error inside a 200
//!   or a `null` result flags the cell loudly as measuring the reject path.
//! - **Closed and open loop.** A connection sweep finds the knee
//!   ([`stats::knee`]) and checks Little's law; fixed-rate runs measure from
//!   each request's due time ([`driver`]).
//! - **The machine's ceiling.** A static-file server (nginx) serving the
//!   reference target's own answers shows what sending those bytes costs.
//! - **Output.** Seed-style tables, a side-by-side verdict, `results.json`
//!   and SVG/PNG plots ([`report`], [`plot`]); target CPU and RSS from /proc
//!   ([`procstat`]).
//!
//! [`tps`] pushes signed transfers into a node and reads TPS off the chain;
//! [`suite`] builds the whole headline comparison on this machine.

pub mod classify;
mod config;
pub mod corpus;
pub mod driver;
mod error;
mod measure;
mod output;
pub mod plot;
pub mod procstat;
pub mod report;
mod run;
pub mod stats;
pub mod suite;
pub mod target;
pub mod tps;
pub mod workload;

pub use config::{BenchConfig, DEFAULT_CONNS, MAX_RATE};
pub use error::BenchError;
pub use output::wrk_lua;
pub use run::run;
