//! `debug_traceCall`: a call traced as geth traces it, with `eth_call`'s
//! defaults, checks and overrides: over the state after a stored block,
//! or, with geth's `txIndex`, in that block over its parent's state and
//! the block's transactions before that index (replayed and proved
//! against their receipts like a block's trace).

use std::cell::Cell;

use alloy_primitives::U256;
use revm::context::result::EVMError;
use revm::database::CacheDB;
use revm::{Context, InspectEvm, MainBuilder, MainContext};
use revm_inspectors::tracing::TransactionContext;

use crate::coreth::{ChainPrecompiles, KeyedDb};
use crate::db::VerifiedDb;
use crate::overrides::apply_state_overrides;
use crate::rules::Dialect;
use crate::run::{Pinned, Request, check_chain_id, setup_at};

use super::inputs::ReplayBlock;
use super::limits::{Limits, MAX_TRACE_BYTES};
use super::options::TraceOptions;
use super::post_state::PostState;
use super::replay::{
    ReplayError, Traced, Which, finish, fork_of, parent_state, run_block, tracer, written,
};

/// Traces `request` at `pinned` (the state after it), or with `at`
/// (a block, `pinned` its parent, and an index of its transactions) in
/// that block after the transactions before the index.
pub fn trace_call(
    pinned: &Pinned<'_>,
    request: &Request,
    options: &TraceOptions,
    at: Option<(&ReplayBlock, usize)>,
    since: std::time::Instant,
) -> Result<Vec<u8>, ReplayError> {
    let limits = Limits::new(since, options.timeout, MAX_TRACE_BYTES);
    // A call learns what to fetch by running over verified state alone.
    if pinned.fork.dialect != Dialect::Ethereum || pinned.unproved.is_some() {
        return Err(ReplayError::Unsupported);
    }
    check_chain_id(pinned, &request.args).map_err(ReplayError::Call)?;
    let overrides = request.block.as_ref();
    let (db, facts, fork) = match at {
        Some((block, _)) => {
            if overrides.is_some_and(|o| o.number.is_some()) {
                // geth's next-number rule rewires the header's parent here
                // in ways neve does not follow: the node's.
                return Err(ReplayError::Unsupported);
            }
            let fork = fork_of(pinned, block)?;
            // The call's environment follows the block's rules, which
            // its pinned parent's set up.
            if fork != pinned.fork {
                return Err(ReplayError::Unsupported);
            }
            (parent_state(pinned, &block.facts), &block.facts, fork)
        }
        None => {
            // geth's block override of the next number makes the pinned
            // block the parent `BLOCKHASH` reads.
            let next = U256::from(pinned.block.number + 1);
            let height = match overrides.and_then(|o| o.number) {
                Some(number) if number == next => pinned.block.number + 1,
                _ => pinned.block.number,
            };
            let db = VerifiedDb::new(
                pinned.state,
                pinned.block.state_root,
                height,
                pinned.block_hash,
            )
            .with_codes(pinned.codes);
            (db, pinned.block, pinned.fork)
        }
    };
    if overrides
        .and_then(|o| o.number)
        .is_some_and(|number| number < U256::from(facts.number))
    {
        // geth's rules by number (London and before) are not `eth_config`'s.
        return Err(ReplayError::Unsupported);
    }
    let spec = match overrides.and_then(|o| o.time) {
        Some(time) => {
            pinned
                .rules
                .at(time.saturating_to())
                .ok_or(ReplayError::Unsupported)?
                .spec
        }
        None => fork.spec,
    };
    let mut overlay = CacheDB::new(&db);
    let (log_offset, diverged) = match at {
        Some((block, index)) => {
            let (_, diverged) = run_block(
                pinned,
                block,
                &fork,
                &mut overlay,
                Which::Before(index),
                options,
                None,
                &limits,
                &mut PostState::none(),
            )?;
            let logs = block.receipts[..index].iter().map(|r| r.logs.len() as u64);
            (logs.sum(), diverged)
        }
        None => (0, None),
    };
    if let Some(state) = &request.state {
        apply_state_overrides(&mut overlay, state, Dialect::Ethereum).map_err(ReplayError::Call)?;
    }
    let aliased = Cell::new(false);
    let mut keyed = KeyedDb::new(overlay, Dialect::Ethereum, &aliased);
    let setup =
        setup_at(pinned, facts, request, None, spec, &mut keyed).map_err(ReplayError::Call)?;
    let mut evm = Context::mainnet()
        .with_db(keyed)
        .with_block(setup.block.clone())
        .with_cfg(setup.cfg.clone())
        .build_mainnet_with_inspector(tracer(options, &limits, MAX_TRACE_BYTES))
        .with_precompiles(ChainPrecompiles::new(Dialect::Ethereum, spec));
    let ran = evm.inspect_tx(setup.tx.clone());
    // A run a bound stopped is charged all the gas it could have spent.
    pinned.charge(match &ran {
        Ok(done) => done.result.gas().total_gas_spent(),
        Err(_) => setup.tx.gas_limit,
    });
    if let Err(stop) = limits.stopped() {
        // A run over state not held says nothing: fetch it first.
        return Err(match db.has_needs() {
            true => ReplayError::Needs(db.take_needs()),
            false => stop.into(),
        });
    }
    let out = match ran {
        Ok(done) => {
            let inspector =
                std::mem::replace(&mut evm.inspector, super::inspector::TraceInspector::Idle);
            let traced = Traced {
                context: TransactionContext::default(),
                env: &setup.tx,
                block_env: &setup.block,
                done: &done,
                log_offset,
                call: true,
                options,
                spec,
            };
            let view = evm.ctx.journaled_state.database.inner();
            written(inspector, &traced, view, MAX_TRACE_BYTES, None)
        }
        // geth words its refusal as "tracing failed: …", neve as a call:
        // the node's.
        Err(EVMError::Transaction(_)) => Err(ReplayError::Unsupported),
        Err(EVMError::Database(never)) => match never {},
        Err(other) => Err(ReplayError::Internal(other.to_string())),
    };
    drop(evm);
    finish(&db, diverged)?;
    out
}
