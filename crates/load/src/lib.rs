//! load: the traffic generator behind `neve load`.
//!
//! Funds a set of sender accounts (from geth's unlocked dev account, or from
//! a funder key elsewhere), deploys a small token, then signs and sends a
//! realistic mix of transactions in batched `eth_sendRawTransaction` calls:
//! ETH transfers of every pre-blob type (legacy, access-list, dynamic-fee),
//! token transfers that emit `Transfer` logs, transfers to fresh addresses
//! and contract creations. It backs off when the node pushes back, keeps a
//! bounded number of transactions in flight, can cap the rate, and counts
//! what the chain actually included.
//!
//! Start at [`run`] with a [`LoadConfig`]; it returns a [`LoadReport`].
//! Knows nothing of neve's store or server: it only needs a node's RPC.

mod chain;
mod config;
mod deploy;
mod error;
mod funding;
mod mix;
mod report;
mod run;
mod sending;
mod signing;
pub mod token;
mod vocabulary;

pub use config::{
    DEFAULT_ACCOUNTS, DEFAULT_BATCH_SIZE, DEFAULT_CONCURRENT_BATCHES, DEFAULT_MAX_IN_FLIGHT,
    DRAIN_TIMEOUT, LoadConfig,
};
pub use deploy::deploy;
pub use error::LoadError;
pub use mix::TxKind;
pub use report::{LoadReport, Progress};
pub use run::run;
