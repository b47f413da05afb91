//! `eth_simulateV1` as geth v1.17.5 answers it (`internal/ethapi/simulate.go`):
//! a chain of simulated blocks on top of one pinned block, each with its
//! block overrides, state overrides and calls, state carried from call to
//! call and block to block in one overlay over the verified database.
//!
//! Every simulated block is returned whole, as geth assembles it: its
//! `stateRoot` is the pinned block's verified trie with the simulation's
//! changes applied (`root.rs`: the nodes on every changed path, and the
//! nodes a deletion collapses into, are read from the verified store or
//! named for fetching), and its transactions, receipts, bloom and hash
//! follow (`assemble.rs`). What neve cannot do as geth does (a fork it
//! cannot name, coreth's chains, a deposit log, a precompile it cannot
//! word) is [`CallError::Unsupported`] for the whole request, never a
//! partial answer.
//!
//! Rooms: `request.rs` (what is asked, geth's limits), `plan.rs` (numbers
//! and times filled and checked, gaps as empty blocks), `block.rs` (one
//! block's execution), `transfers.rs` (geth's log tracer, ERC-7528
//! transfers), `precompiles.rs` (moved precompiles), `root.rs`,
//! `assemble.rs` (the block and its JSON).

mod assemble;
mod block;
mod call;
mod error;
mod header;
mod plan;
mod precompiles;
mod request;
#[cfg(test)]
mod tests;
mod transfers;

pub use error::{CallCodes, Refusal, SimError};
pub use request::{
    MAX_ANSWER_BYTES, MAX_BLOCKS, MAX_CALLS, MAX_CALLS_PER_BLOCK, SimBlock, SimulateRequest,
};

use alloy_primitives::B256;
use neve_state::HotKey;
use revm::database::CacheDB;

use crate::db::Needs;
use crate::error::CallError;
use crate::rules::Dialect;
use crate::run::Pinned;

/// What a simulation came to.
#[derive(Debug)]
pub enum Simulated {
    /// The answer's `result`, JSON, and the keys read (for the hot set).
    Done(String, Vec<HotKey>),
    /// State to fetch first (then simulate again).
    Needs(Needs),
    /// `BLOCKHASH` of a block outside the stored tail.
    OutsideTail,
}

/// Simulates `request` on top of `pinned`.
pub fn simulate(
    pinned: &Pinned<'_>,
    request: &SimulateRequest,
    codes: CallCodes,
) -> Result<Simulated, SimError> {
    if pinned.fork.dialect == Dialect::Coreth {
        // avalanchego does not answer it, and coreth's blocks are not
        // assembled as geth's.
        return Err(CallError::Unsupported.into());
    }
    request.check_limits()?;
    let blocks = plan::plan(pinned.block, &request.block_state_calls)?;
    let db = pinned.database();
    let mut overlay = CacheDB::new(&db);
    let mut chain = block::Chain::new(pinned, request);
    // The answer, written block by block (at most one block beside it).
    let mut json = String::new();
    // Roots that need nodes not held do not stop the simulation: the
    // blocks after still run (their own keys are the same whatever the
    // root), so one round fetches what every block's root needs.
    let mut pending = Needs::default();
    let unheld = |pending: Needs| {
        if db.outside_tail() {
            return Some(Simulated::OutsideTail);
        }
        let mut needs = db.take_needs();
        merge(&mut needs, pending);
        (!needs.is_empty()).then_some(Simulated::Needs(needs))
    };
    for planned in &blocks {
        let executed = match chain.execute(&mut overlay, planned) {
            Ok(executed) => executed,
            // A refusal over state not held means nothing.
            Err(error) => return unheld(pending).ok_or(error),
        };
        let root = match crate::state_root::state_root(
            crate::state_root::Base {
                state: pinned.state,
                root: pinned.block.state_root,
            },
            &overlay.cache.accounts,
            chain.changes(),
        ) {
            Ok(crate::state_root::Root::Hash(root)) => root,
            Ok(crate::state_root::Root::Needs(needs)) => {
                merge(&mut pending, needs);
                B256::ZERO
            }
            Err(error) => return unheld(pending).ok_or(error.into()),
        };
        if !pending.is_empty() {
            // This run is not the answer: what the later blocks need is
            // all it is for, and their keys do not depend on this hash.
            chain.sealed(planned.number, B256::ZERO);
            continue;
        }
        let block = assemble::assemble(&executed, root, request.return_full_transactions, codes);
        if json.len() + block.json.len() + 2 > MAX_ANSWER_BYTES {
            return Err(CallError::Unsupported.into());
        }
        chain.sealed(planned.number, block.hash);
        json.push(if json.is_empty() { '[' } else { ',' });
        json.push_str(&block.json);
    }
    if let Some(incomplete) = unheld(pending) {
        return Ok(incomplete);
    }
    json.push(']');
    Ok(Simulated::Done(json, db.take_read_keys()))
}

fn merge(into: &mut Needs, more: Needs) {
    for (address, (slots, code)) in more.accounts {
        let entry = into.accounts.entry(address).or_default();
        entry.0.extend(slots);
        entry.1 |= code;
    }
}
