//! execution: runs calls, never blocks. `eth_call`, `eth_estimateGas` and
//! `eth_createAccessList` execute with revm against neve's verified state
//! at one pinned block, with geth's semantics as the judge.
//!
//! What it owns: the EVM's database over verified state ([`VerifiedDb`]:
//! trie nodes reached from a verified `stateRoot`, code by its verified
//! hash, `BLOCKHASH` from stored verified headers), the call's arguments
//! and overrides, the chain's rules by time ([`ChainRules`]), and the
//! answers in geth's terms. What it must not do: fetch, speak HTTP or
//! JSON-RPC, or answer from state it did not read through the verified
//! store: a run that needed anything not held returns what it needed
//! ([`Run::Needs`]), never a result.
//!
//! Start at [`run()`], then [`VerifiedDb`].

mod access_list;
mod args;
mod block;
mod coreth;
mod db;
mod error;
mod estimate;
pub mod fees;
mod go_json;
mod halt;
mod overrides;
mod post_states;
mod precompile_failure;
mod pricing;
mod revert;
mod rules;
mod run;
pub mod simulate;
mod state_root;
mod system;
pub mod trace;
mod tracer;

pub use access_list::{
    AccessListOutcome, AccessListRequest, MAX_ROUNDS, access_list_request, create_access_list,
    excluded_addresses,
};
pub use args::{AccountOverride, ArgsError, BlockOverrides, CallArgs, StateOverride};
pub use block::{BlockFacts, FACTS_CACHED, FactsCache, HeaderForks, HeightCache};
pub use db::{CODE_CACHE_BYTES, CodeCache, Needs, VerifiedDb};
pub use error::CallError;
pub use estimate::{ERROR_RATIO, Estimate, estimate};
pub use go_json::go_escaped;
pub use post_states::{PostStates, Unproved};
pub use revert::revert_message;
pub use revm::primitives::hardfork::SpecId;
pub use rules::{ChainRules, Dialect, Fork, RulesCell};
pub use run::{
    Ended, GAS_CAP, MEMORY_LIMIT, Outcome, Pinned, Request, Run, RunContext, RunDb, run,
    run_inspected,
};
pub use tracer::AccessListTracer;
