//! A stored block replayed over its parent's verified state, as geth's
//! tracers replay it: its system calls first (EIP-4788's beacon root,
//! EIP-2935's parent hash; not traced), then its transactions in order,
//! each with every check a block's transactions get, the ones traced
//! under the request's tracer. Each transaction must reproduce its
//! verified receipt (status, cumulative gas, logs): a replay that does
//! not is not the chain's, and no trace of it is served.

use alloy_consensus::Transaction as _;
use alloy_eips::Typed2718 as _;
use alloy_primitives::{Address, B256, Bytes, TxKind};
use alloy_rpc_types_trace::geth::{
    GethDebugBuiltInTracerType, GethDebugTracerType, GethDebugTracingOptions, GethTrace,
};
use revm::context::either::Either;
use revm::context::result::ResultAndState;
use revm::context::result::{EVMError, ExecutionResult};
use revm::context::{BlockEnv, CfgEnv, TxEnv};
use revm::database::CacheDB;
use revm::handler::SystemCallEvm;
use revm::handler::system_call::SYSTEM_ADDRESS;
use revm::primitives::hardfork::SpecId;
use revm::{
    Context, DatabaseCommit, DatabaseRef, ExecuteEvm, InspectEvm, MainBuilder, MainContext,
};
use revm_inspectors::tracing::{DebugInspector, TransactionContext};

use crate::args::CallArgs;
use crate::block::BlockFacts;
use crate::db::{Needs, Never, VerifiedDb};
use crate::overrides::block_env;
use crate::post_states::Unproved;
use crate::rules::{Dialect, Fork};
use crate::run::{MEMORY_LIMIT, Pinned};
use crate::system::{BEACON_ROOTS, HISTORY_STORAGE, REQUEST_QUEUES};

use super::along::Along;
use super::flat::Place;
use super::inputs::{BlockTx, ReceiptFacts, ReplayBlock};
use super::inspector::{Budget, TraceInspector};
use super::limits::{Limits, Stopped};
use super::native::{LookedUp, TxFacts};
use super::options::{TraceOptions, Tracer};
use super::post_state::PostState;
use super::struct_log::StructLogger;

/// Which of a block's transactions are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// Every one (`debug_traceBlockBy*`).
    All,
    /// The one at this index, after those before it run untraced
    /// (`debug_traceTransaction`).
    One(usize),
    /// None: those before this index run, to reach the state a traced
    /// call at it runs over (`debug_traceCall`'s `txIndex`).
    Before(usize),
}

/// Each traced transaction's hash and its trace, as geth's JSON.
pub type Traces = Vec<(B256, Vec<u8>)>;

/// Why a replay gives no trace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// It read state not held: fetch these (at the pinned block), then
    /// again.
    #[error("state to fetch")]
    Needs(Needs),
    /// `BLOCKHASH` of a block not stored: not answerable here.
    #[error("outside the tail")]
    OutsideTail,
    /// A call neve refuses as geth does (its arguments, its overrides).
    #[error("{0}")]
    Call(crate::error::CallError),
    /// Rules or a block neve does not replay (coreth's, rules it cannot
    /// name, a block not its pinned parent's child).
    #[error("not replayed here")]
    Unsupported,
    /// The replay did not reproduce the block's verified receipts.
    #[error("transaction {index}: {what}")]
    Diverged {
        /// The first transaction that differs.
        index: usize,
        /// How.
        what: String,
    },
    /// A bound stopped it.
    #[error("stopped: {0:?}")]
    Stopped(Stopped),
    /// revm failed.
    #[error("{0}")]
    Internal(String),
}

impl From<Stopped> for ReplayError {
    fn from(stopped: Stopped) -> Self {
        ReplayError::Stopped(stopped)
    }
}

/// Replays `block` over `pinned` (its parent), tracing `which` of its
/// transactions with `options` (and `along`'s companions beside them),
/// within `limits`.
pub(crate) fn replay(
    pinned: &Pinned<'_>,
    block: &ReplayBlock,
    which: Which,
    options: &TraceOptions,
    along: Option<&mut Along>,
    limits: &Limits,
) -> Result<Traces, ReplayError> {
    let fork = fork_of(pinned, block)?;
    if let Some(unproved) = pinned.unproved {
        return Err(needs_over_unproved(
            pinned, unproved, block, &fork, which, options, limits,
        ));
    }
    let db = parent_state(pinned, &block.facts);
    let mut overlay = CacheDB::new(&db);
    let mut post_state = PostState::wanted(pinned, block, which == Which::All);
    let (traces, diverged) = run_block(
        pinned,
        block,
        &fork,
        &mut overlay,
        which,
        options,
        along,
        limits,
        &mut post_state,
    )?;
    finish(&db, diverged)?;
    post_state.keep(pinned, block, &mut overlay, limits.late());
    Ok(traces)
}

/// What `block` reads that is not held, learnt by running it whole and
/// untraced over its parent's post-state as `unproved` holds it (the
/// parent's changes as its replay left them, over the grandparent's
/// verified state) while that post-state is being proved, rather than
/// after: the keys it names are fetched against the parent's own verified
/// root, beside the proving, and the run that answers reads only verified
/// state. [`ReplayError::Needs`], or [`ReplayError::Unsupported`] when it
/// names nothing, stopped otherwise, or `which` is not the whole block (a
/// transaction's trace copies none of its parent's changes): nothing it
/// computes is served.
fn needs_over_unproved(
    pinned: &Pinned<'_>,
    unproved: &Unproved,
    block: &ReplayBlock,
    fork: &Fork,
    which: Which,
    options: &TraceOptions,
    limits: &Limits,
) -> ReplayError {
    if which != Which::All {
        return ReplayError::Unsupported;
    }
    let db = parent_state(pinned, &block.facts).with_below(unproved.below);
    // Codes of accounts the parent changed without running them: a run
    // that reaches one not held names it.
    for (address, account) in unproved.accounts.iter() {
        let hash = account.info.code_hash;
        if account.info.code.is_none() && !pinned.state.has_code(&hash.0) {
            db.note_code_owner(hash, *address);
        }
    }
    let mut overlay = CacheDB::new(&db);
    overlay.cache.accounts = unproved.accounts.clone();
    overlay
        .cache
        .contracts
        .extend(unproved.codes.iter().cloned());
    let ran = run_block(
        pinned,
        block,
        fork,
        &mut overlay,
        Which::Before(block.txs.len()),
        options,
        None,
        limits,
        &mut PostState::none(),
    );
    // What the post-state's withdrawals read, fetched with the rest, as a
    // run over verified state does (else the block's post-state would not
    // be kept).
    if ran.is_ok() && db.has_needs() {
        for (address, _) in block.withdrawals.iter().flatten() {
            let _ = DatabaseRef::basic_ref(&overlay, *address);
        }
    }
    let counters = &pinned.state.counters;
    counters
        .post_state_overlays
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    match ran.and_then(|_| finish(&db, None)) {
        Err(ReplayError::Needs(needs)) => {
            counters
                .post_state_overlay_fetches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ReplayError::Needs(needs)
        }
        _ => ReplayError::Unsupported,
    }
}

/// The rules `block` runs under, if neve replays it over `pinned`: its
/// parent's child, under rules neve names and its header agrees with, on
/// a chain whose EVM is Ethereum's.
pub(crate) fn fork_of(pinned: &Pinned<'_>, block: &ReplayBlock) -> Result<Fork, ReplayError> {
    let facts = &block.facts;
    let fork = pinned
        .rules
        .at(facts.timestamp)
        .ok_or(ReplayError::Unsupported)?;
    if fork.dialect != Dialect::Ethereum
        || facts.contradicts(&fork)
        || facts.parent_hash != pinned.block.hash
        || facts.number != pinned.block.number + 1
    {
        return Err(ReplayError::Unsupported);
    }
    Ok(fork)
}

/// The parent's verified state as `facts`' block reads it: `BLOCKHASH`
/// of its parent and older.
pub(crate) fn parent_state<'a>(pinned: &Pinned<'a>, facts: &BlockFacts) -> VerifiedDb<'a> {
    VerifiedDb::new(
        pinned.state,
        pinned.block.state_root,
        facts.number,
        pinned.block_hash,
    )
    .with_codes(pinned.codes)
}

/// What a replay over `db` came to once it ran: state to fetch first, a
/// miss, a replay unlike the chain (`diverged`), or its traces.
pub(crate) fn finish(
    db: &VerifiedDb<'_>,
    diverged: Option<ReplayError>,
) -> Result<(), ReplayError> {
    if db.outside_tail() {
        return Err(ReplayError::OutsideTail);
    }
    let needs = db.take_needs();
    if !needs.is_empty() {
        return Err(ReplayError::Needs(needs));
    }
    if db.unsure() {
        return Err(ReplayError::Unsupported);
    }
    diverged.map_or(Ok(()), Err)
}

/// Traces of the transactions `which` names, and how the replay first
/// differed from the block's receipts, if it did.
type BlockRun = (Traces, Option<ReplayError>);

/// Runs `block`'s system calls and transactions (as `which` says) over
/// `overlay`, committing each, the traced ones under `options` (and
/// `along`'s companions); what they change recorded in `post_state`, and
/// after a whole block its closing system calls too.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_block(
    pinned: &Pinned<'_>,
    block: &ReplayBlock,
    fork: &Fork,
    overlay: &mut CacheDB<&VerifiedDb<'_>>,
    which: Which,
    options: &TraceOptions,
    mut along: Option<&mut Along>,
    limits: &Limits,
    post_state: &mut PostState,
) -> Result<BlockRun, ReplayError> {
    let facts = &block.facts;
    let last = match which {
        Which::All => block.txs.len(),
        Which::One(index) => index + 1,
        Which::Before(index) => index,
    };
    if last > block.txs.len() || block.receipts.len() < last {
        return Err(ReplayError::Unsupported);
    }
    let spec = fork.spec;
    let block_env = block_env(facts, fork, &CallArgs::default());
    let mut cfg = CfgEnv::new_with_spec(spec);
    cfg.chain_id = pinned.chain_id;
    cfg.memory_limit = MEMORY_LIMIT;
    cfg.blob_base_fee_update_fraction = fork.blob_base_fee_update_fraction;
    let mut evm = Context::mainnet()
        .with_db(overlay)
        .with_block(block_env.clone())
        .with_cfg(cfg)
        .build_mainnet_with_inspector(TraceInspector::Idle);

    // Before the transactions, untraced: EIP-4788, then EIP-2935.
    let mut system_calls: Vec<(Address, Bytes)> = Vec::new();
    if spec.is_enabled_in(SpecId::CANCUN)
        && let Some(root) = facts.parent_beacon_block_root
    {
        system_calls.push((BEACON_ROOTS, root.to_vec().into()));
    }
    if spec.is_enabled_in(SpecId::PRAGUE) {
        system_calls.push((HISTORY_STORAGE, facts.parent_hash.to_vec().into()));
    }
    for (contract, data) in system_calls {
        let done = match evm.system_call_with_caller(SYSTEM_ADDRESS, contract, data) {
            Ok(done) => done,
            Err(EVMError::Database(never)) => match never {},
            Err(other) => return Err(ReplayError::Internal(other.to_string())),
        };
        pinned.charge(done.result.gas().total_gas_spent());
        let mut state = done.state;
        state.remove(&SYSTEM_ADDRESS);
        post_state.record(&state);
        evm.ctx.journaled_state.database.commit(state);
    }

    let mut traces = Vec::new();
    let mut answer_bytes = 0usize;
    let mut cumulative = 0u64;
    let mut logs_before = 0u64;
    let mut diverged: Option<ReplayError> = None;
    let mut differs = |index: usize, what: String| {
        diverged.get_or_insert(ReplayError::Diverged { index, what });
    };
    // What a stop comes to: the state to fetch, when the run has read
    // anything not held (its stop says nothing of the chain's run), else
    // the stop.
    let stopped = |db: &VerifiedDb<'_>| -> Result<(), ReplayError> {
        match limits.stopped() {
            Ok(()) => Ok(()),
            Err(_) if db.has_needs() => Err(ReplayError::Needs(db.take_needs())),
            Err(stop) => Err(stop.into()),
        }
    };
    let mut charged = 0u64;
    for (index, (tx, receipt)) in block.txs[..last].iter().zip(&block.receipts).enumerate() {
        if limits.late() {
            stopped(evm.ctx.journaled_state.database.db)?;
        }
        let db = evm.ctx.journaled_state.database.db;
        if let Some(enough) = pinned.enough_needs
            && db.needed_keys() > enough
        {
            // What it came to, as a finished run's (it has needs).
            return Err(finish(db, None).expect_err("a run with needs"));
        }
        // Charged the gas its receipt says before it runs: a run a bound
        // stops costs the client all the same.
        pinned.charge(receipt.cumulative_gas.saturating_sub(charged));
        charged = charged.max(receipt.cumulative_gas);
        // A round that already read what is not held traces nothing: its
        // answer is the state to fetch.
        let traced = !evm.ctx.journaled_state.database.db.has_needs()
            && match which {
                Which::All => true,
                Which::One(_) => index + 1 == last,
                Which::Before(_) => false,
            };
        let env = tx_env(tx);
        evm.inspector = if traced {
            let runs = along.as_deref_mut().and_then(Along::runs_now);
            tracer(runs.unwrap_or(options), limits, limits.room(answer_bytes))
        } else {
            TraceInspector::Idle
        };
        let ran = if traced {
            evm.inspect_tx(env.clone())
        } else {
            evm.transact(env.clone())
        };
        let done = match ran {
            Ok(done) => done,
            Err(EVMError::Transaction(invalid)) => {
                // A transaction of a verified block is valid: the state
                // read was not the chain's (not held yet, or a replay
                // unlike the node's).
                // (Its gas stays charged: what bounds the request's
                // fetches is the gas of the runs they stand for.)
                let overlay: &CacheDB<&VerifiedDb<'_>> = evm.ctx.journaled_state.database;
                if overlay.db.has_needs() && matches!(which, Which::One(_)) && index + 1 == last {
                    // The traced one, refused over state not held, names
                    // what its run certainly reads besides (its recipient
                    // and the block's beneficiary it pays, through the
                    // block's changes so far): a cold trace takes one
                    // round of proofs fewer (a transfer's, one in all).
                    if let TxKind::Call(to) = env.kind {
                        let _ = DatabaseRef::basic_ref(overlay, to);
                    }
                    let _ = DatabaseRef::basic_ref(overlay, block_env.beneficiary);
                }
                stopped(evm.ctx.journaled_state.database.db)?;
                differs(index, format!("refused: {invalid}"));
                continue;
            }
            Err(EVMError::Database(never)) => match never {},
            Err(other) => {
                stopped(evm.ctx.journaled_state.database.db)?;
                return Err(ReplayError::Internal(other.to_string()));
            }
        };
        stopped(evm.ctx.journaled_state.database.db)?;
        let gas_used = done.result.gas().tx_gas_used();
        cumulative += gas_used;
        if let Some(what) = unlike(&done.result, cumulative, receipt) {
            differs(index, what);
        }
        let log_offset = logs_before;
        logs_before += receipt.logs.len() as u64;
        if traced {
            let inspector = std::mem::replace(&mut evm.inspector, TraceInspector::Idle);
            let view: &CacheDB<&VerifiedDb<'_>> = evm.ctx.journaled_state.database;
            let traced_tx = Traced {
                context: TransactionContext {
                    block_hash: Some(facts.hash),
                    tx_index: Some(index),
                    tx_hash: Some(tx.hash),
                },
                env: &env,
                block_env: &block_env,
                done: &done,
                log_offset,
                call: false,
                options,
                spec,
            };
            let room = limits.room(answer_bytes);
            let db = view.db;
            let clean = !db.has_needs();
            let out = written(inspector, &traced_tx, view, room, along.as_deref_mut())?;
            if let Some(along) = along.as_deref_mut()
                && clean
                && db.has_needs()
                && along.asked != prestate()
            {
                // Only the prestate companion reads state when written
                // (code, accounts before): what it missed is not the
                // asked trace's to fetch.
                let _ = db.take_needs();
                along.drop_kind(&prestate());
            }
            answer_bytes += out.len();
            if !limits.holds(answer_bytes) {
                return Err(Stopped::TooLarge.into());
            }
            if let Some(along) = along.as_deref_mut() {
                along.keep_within(answer_bytes, limits.room(0));
            }
            traces.push((tx.hash, out));
        }
        post_state.record(&done.state);
        evm.ctx.journaled_state.database.commit(done.state);
    }
    // After a whole block: EIP-7685's requests, whose queues' storage the
    // post-state holds, and the withdrawals' recipients. Only for the
    // post-state: what they read that is not held is fetched only with
    // what the trace itself needs, never for them alone.
    if post_state.wanted_still() && diverged.is_none() {
        let db = evm.ctx.journaled_state.database.db;
        if db.has_needs() {
            for (address, _) in block.withdrawals.iter().flatten() {
                let _ = db.basic_ref(*address);
            }
        } else if spec.is_enabled_in(SpecId::PRAGUE) {
            for (_, queue) in REQUEST_QUEUES {
                match evm.system_call_with_caller(SYSTEM_ADDRESS, queue, Bytes::new()) {
                    Ok(done) if done.result.is_success() => {
                        pinned.charge(done.result.gas().total_gas_spent());
                        let mut state = done.state;
                        state.remove(&SYSTEM_ADDRESS);
                        post_state.record(&state);
                        evm.ctx.journaled_state.database.commit(state);
                    }
                    Err(EVMError::Database(never)) => match never {},
                    Ok(_) | Err(_) => {
                        post_state.give_up();
                        break;
                    }
                }
            }
            let db = evm.ctx.journaled_state.database.db;
            if db.has_needs() {
                // The queues' storage not held: no post-state, and nothing
                // fetched for it alone.
                let _ = db.take_needs();
                post_state.give_up();
            }
        }
    }
    Ok((traces, diverged))
}

/// A transaction just traced, before its state is committed.
pub(crate) struct Traced<'a> {
    pub(crate) context: TransactionContext,
    pub(crate) env: &'a TxEnv,
    pub(crate) block_env: &'a BlockEnv,
    pub(crate) done: &'a ResultAndState,
    /// Logs before it in its block, as its state counted them.
    pub(crate) log_offset: u64,
    /// A call traced, not a block's transaction.
    pub(crate) call: bool,
    /// The tracer's options, and the rules it ran under.
    pub(crate) options: &'a TraceOptions,
    pub(crate) spec: SpecId,
}

/// Bytes a native tracer's trace of one transaction starts with: a
/// transfer's `callTracer` or `prestateTracer` trace is a few hundred, and
/// a vector grown from nothing is reallocated some six times on the way.
/// A trace shorter than this holds this much (a longer one grows as
/// before): at most this much more per trace than growing would hold, and
/// only until the block's answer is joined.
const NATIVE_TRACE_START: usize = 512;

/// The trace `inspector` recorded of `traced`, as geth writes it, in at
/// most `room` bytes; `view` is the state before it. With `along`, the
/// inspector ran its mux: the asked tracer's part is the trace, the
/// companions' parts go to `along`.
pub(crate) fn written<DB: DatabaseRef<Error = Never>>(
    inspector: TraceInspector,
    traced: &Traced<'_>,
    mut view: DB,
    room: usize,
    mut along: Option<&mut Along>,
) -> Result<Vec<u8>, ReplayError> {
    let done = traced.done;
    let gas_used = done.result.gas().tx_gas_used();
    let mut out = Vec::new();
    match inspector {
        TraceInspector::Struct(logger) => {
            let (failed, output) = match &done.result {
                ExecutionResult::Success { output, .. } => (false, output.data().clone()),
                ExecutionResult::Revert { output, .. } => (true, output.clone()),
                ExecutionResult::Halt { .. } => (true, Bytes::new()),
            };
            (*logger).finish(&mut out, gas_used, failed, &output)?;
            if out.len() > room {
                return Err(Stopped::TooLarge.into());
            }
        }
        TraceInspector::Native(mut native, budget) => {
            if let Some(lookups) = &budget.lookups {
                // geth's prestate tracer looks up EIP-7702's authorities and
                // delegates, and a creation's address even when it fails:
                // not followed here, the node's.
                let delegates = done.state.values().any(|account| {
                    account
                        .info
                        .code
                        .as_ref()
                        .is_some_and(|code| code.is_eip7702())
                });
                if traced.env.tx_type == 4 || delegates || lookups.unsure {
                    match along.as_deref_mut() {
                        // Only the companion is unsure: it alone goes.
                        Some(along) if along.asked != prestate() => {
                            along.drop_kind(&prestate());
                        }
                        _ => return Err(Stopped::Unsure.into()),
                    }
                }
            }
            let trace = native
                .get_result(
                    Some(traced.context),
                    traced.env,
                    traced.block_env,
                    done,
                    &mut view,
                )
                .map_err(|e| ReplayError::Internal(e.to_string()))?;
            let account_before = |address: Address| match view.basic_ref(address) {
                Ok(info) => info,
                Err(never) => match never {},
            };
            let facts = TxFacts {
                log_offset: traced.log_offset,
                account_before: &account_before,
                after: &done.state,
                halts: &budget.halts,
                looked_up: budget.lookups.as_ref().map(|lookups| LookedUp {
                    lookups,
                    always: [
                        traced.env.caller,
                        match traced.env.kind {
                            TxKind::Call(to) => to,
                            // A creation's address is looked up as made.
                            TxKind::Create => traced.env.caller,
                        },
                        traced.block_env.beneficiary,
                    ],
                }),
                flat: match &traced.options.tracer {
                    Tracer::FlatCall(config) => Some((
                        *config,
                        Place {
                            block_hash: traced.context.block_hash,
                            block_number: if traced.call {
                                0
                            } else {
                                traced.block_env.number.saturating_to()
                            },
                            tx_hash: traced.context.tx_hash,
                            tx_index: traced.context.tx_index.unwrap_or(0) as u64,
                        },
                        precompiles(traced.spec),
                    )),
                    _ => None,
                },
            };
            out.reserve(NATIVE_TRACE_START);
            let capped = |out: &mut Vec<u8>, trace, room| {
                let mut writer = Capped { out, room };
                super::native::write(trace, &facts, &mut writer).map_err(|_| Stopped::TooLarge)
            };
            match (trace, along) {
                (GethTrace::MuxTracer(mux), Some(along)) => {
                    // The asked tracer's part first: the companions get
                    // the room it leaves.
                    let mut parts: Vec<_> = mux.0.into_iter().collect();
                    parts.sort_by_key(|(kind, _)| *kind != along.asked);
                    for (kind, part) in parts {
                        if kind == along.asked {
                            capped(&mut out, part, room)?;
                        } else if along.runs(&kind) {
                            let mut trace = Vec::with_capacity(NATIVE_TRACE_START);
                            let hash = traced.context.tx_hash.unwrap_or_default();
                            match capped(
                                &mut trace,
                                part,
                                along.room(room.saturating_sub(out.len())),
                            ) {
                                Ok(()) => along.add(&kind, hash, trace),
                                Err(_) => along.drop_all(),
                            }
                        }
                    }
                }
                (trace, _) => capped(&mut out, trace, room)?,
            }
        }
        TraceInspector::Idle => {}
    }
    Ok(out)
}

/// The tracer `options` name, bounded by `limits`.
pub(crate) fn tracer(options: &TraceOptions, limits: &Limits, room: usize) -> TraceInspector {
    match &options.tracer {
        Tracer::StructLogger(config) => {
            TraceInspector::Struct(Box::new(StructLogger::new(*config, limits.clone(), room)))
        }
        Tracer::FlatCall(_) => {
            let call = GethDebugTracingOptions {
                tracer: Some(GethDebugTracerType::BuiltInTracer(
                    GethDebugBuiltInTracerType::CallTracer,
                )),
                ..Default::default()
            };
            native_tracer(call, limits)
        }
        Tracer::Native(native) => native_tracer(native.clone(), limits),
    }
}

/// A native tracer of `options`, bounded by `limits`.
fn native_tracer(options: GethDebugTracingOptions, limits: &Limits) -> TraceInspector {
    let lookups = runs_prestate(&options);
    match DebugInspector::new(options) {
        Ok(inspector) => TraceInspector::Native(
            Box::new(inspector),
            Box::new(Budget::new(limits.clone(), lookups)),
        ),
        // Options were checked when parsed; a tracer revm-inspectors
        // refuses is the node's.
        Err(_) => {
            limits.stop(Stopped::Unsure);
            TraceInspector::Idle
        }
    }
}

/// geth's prestate tracer's kind.
fn prestate() -> GethDebugTracerType {
    GethDebugTracerType::BuiltInTracer(GethDebugBuiltInTracerType::PreStateTracer)
}

/// Whether `options` run geth's prestate tracer (alone or in a mux).
fn runs_prestate(options: &GethDebugTracingOptions) -> bool {
    let prestate = prestate();
    match &options.tracer {
        Some(tracer) if *tracer == prestate => true,
        Some(GethDebugTracerType::BuiltInTracer(GethDebugBuiltInTracerType::MuxTracer)) => options
            .tracer_config
            .clone()
            .into_mux_config()
            .is_ok_and(|mux| mux.0.contains_key(&prestate)),
        _ => false,
    }
}

/// The precompiles' addresses under `spec`.
fn precompiles(spec: SpecId) -> Vec<Address> {
    let spec = revm::precompile::PrecompileSpecId::from_spec_id(spec);
    revm::precompile::Precompiles::new(spec)
        .addresses()
        .copied()
        .collect()
}

/// How a transaction's run differs from its receipt, if it does.
fn unlike(result: &ExecutionResult, cumulative: u64, receipt: &ReceiptFacts) -> Option<String> {
    if result.is_success() != receipt.success {
        return Some(format!(
            "success {} where its receipt says {}",
            result.is_success(),
            receipt.success
        ));
    }
    if cumulative != receipt.cumulative_gas {
        return Some(format!(
            "cumulative gas {cumulative} where its receipt says {}",
            receipt.cumulative_gas
        ));
    }
    if result.logs() != receipt.logs.as_slice() {
        return Some("logs unlike its receipt's".into());
    }
    None
}

/// A block's transaction as revm runs it.
fn tx_env(tx: &BlockTx) -> TxEnv {
    let t = &tx.tx;
    TxEnv {
        tx_type: t.ty(),
        caller: tx.sender,
        gas_limit: t.gas_limit(),
        gas_price: t.max_fee_per_gas(),
        kind: t.kind(),
        value: t.value(),
        data: t.input().clone(),
        nonce: t.nonce(),
        chain_id: t.chain_id(),
        access_list: t.access_list().cloned().unwrap_or_default(),
        gas_priority_fee: t.max_priority_fee_per_gas(),
        blob_hashes: t
            .blob_versioned_hashes()
            .map(<[B256]>::to_vec)
            .unwrap_or_default(),
        max_fee_per_blob_gas: t.max_fee_per_blob_gas().unwrap_or(0),
        authorization_list: t
            .authorization_list()
            .map(|list| list.iter().cloned().map(Either::Left).collect())
            .unwrap_or_default(),
    }
}

/// A writer that refuses past `room` bytes: a native tracer's JSON is
/// written straight into the answer, never past its cap.
struct Capped<'a> {
    out: &'a mut Vec<u8>,
    room: usize,
}

impl std::io::Write for Capped<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if bytes.len() > self.room {
            return Err(std::io::Error::other("past the trace's cap"));
        }
        self.room -= bytes.len();
        self.out.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
