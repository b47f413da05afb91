//! A stored block replayed over its parent's verified state, as geth's
//! tracers replay it: its system calls first (EIP-4788's beacon root,
//! EIP-2935's parent hash; not traced), then its transactions in order,
//! each with every check a block's transactions get, the ones traced
//! under the request's tracer. Each transaction must reproduce its
//! verified receipt (status, cumulative gas, logs): a replay that does
//! not is not the chain's, and no trace of it is served.

use alloy_consensus::Transaction as _;
use alloy_eips::Typed2718 as _;
use alloy_primitives::{Address, B256, Bytes};
use revm::context::either::Either;
use revm::context::result::{EVMError, ExecutionResult};
use revm::context::{CfgEnv, TxEnv};
use revm::database::CacheDB;
use revm::handler::SystemCallEvm;
use revm::handler::system_call::SYSTEM_ADDRESS;
use revm::primitives::hardfork::SpecId;
use revm::{
    Context, DatabaseCommit, DatabaseRef, ExecuteEvm, InspectEvm, MainBuilder, MainContext,
};
use revm_inspectors::tracing::{DebugInspector, TransactionContext};

use crate::args::CallArgs;
use crate::db::{Needs, VerifiedDb};
use crate::overrides::block_env;
use crate::rules::Dialect;
use crate::run::{MEMORY_LIMIT, Pinned};
use crate::system::{BEACON_ROOTS, HISTORY_STORAGE};

use super::inputs::{BlockTx, ReceiptFacts, ReplayBlock};
use super::inspector::{Budget, TraceInspector};
use super::limits::{Limits, Stopped};
use super::native::TxFacts;
use super::options::{TraceOptions, Tracer};
use super::struct_log::StructLogger;

/// Which of a block's transactions are traced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// Every one (`debug_traceBlockBy*`).
    All,
    /// The one at this index, after those before it run untraced
    /// (`debug_traceTransaction`).
    One(usize),
}

/// What a replay came to.
#[derive(Debug)]
pub enum Replayed {
    /// Each traced transaction's hash and its trace, as geth's JSON.
    Traced(Vec<(B256, Vec<u8>)>),
    /// It read state not held: fetch these (at the parent), then again.
    Needs(Needs),
    /// `BLOCKHASH` of a block not stored: not answerable here.
    OutsideTail,
}

/// Why a replay gives no trace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
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
/// transactions with `options`, within `limits`.
pub(crate) fn replay(
    pinned: &Pinned<'_>,
    block: &ReplayBlock,
    which: Which,
    options: &TraceOptions,
    limits: &Limits,
) -> Result<Replayed, ReplayError> {
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
    let last = match which {
        Which::All => block.txs.len(),
        Which::One(index) => index + 1,
    };
    if last > block.txs.len() || block.receipts.len() < last {
        return Err(ReplayError::Unsupported);
    }
    let spec = fork.spec;
    // `BLOCKHASH` as the block sees it: its parent's and older.
    let db = VerifiedDb::new(
        pinned.state,
        pinned.block.state_root,
        facts.number,
        pinned.block_hash,
    )
    .with_codes(pinned.codes);
    let mut overlay = CacheDB::new(&db);
    let block_env = block_env(facts, &fork, &CallArgs::default());
    let mut cfg = CfgEnv::new_with_spec(spec);
    cfg.chain_id = pinned.chain_id;
    cfg.memory_limit = MEMORY_LIMIT;
    cfg.blob_base_fee_update_fraction = fork.blob_base_fee_update_fraction;
    let mut evm = Context::mainnet()
        .with_db(&mut overlay)
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
    for (index, (tx, receipt)) in block.txs[..last].iter().zip(&block.receipts).enumerate() {
        if limits.late() {
            return Err(Stopped::Timeout.into());
        }
        let traced = which == Which::All || index + 1 == last;
        let env = tx_env(tx);
        evm.inspector = if traced {
            tracer(options, limits)
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
                limits.stopped()?;
                differs(index, format!("refused: {invalid}"));
                continue;
            }
            Err(EVMError::Database(never)) => match never {},
            Err(other) => {
                limits.stopped()?;
                return Err(ReplayError::Internal(other.to_string()));
            }
        };
        pinned.charge(done.result.gas().total_gas_spent());
        limits.stopped()?;
        let gas_used = done.result.gas().tx_gas_used();
        cumulative += gas_used;
        if let Some(what) = unlike(&done.result, cumulative, receipt) {
            differs(index, what);
        }
        let log_offset = logs_before;
        logs_before += receipt.logs.len() as u64;
        if traced {
            let inspector = std::mem::replace(&mut evm.inspector, TraceInspector::Idle);
            let mut out = Vec::new();
            match inspector {
                TraceInspector::Struct(logger) => {
                    let (failed, output) = match &done.result {
                        ExecutionResult::Success { output, .. } => (false, output.data().clone()),
                        ExecutionResult::Revert { output, .. } => (true, output.clone()),
                        ExecutionResult::Halt { .. } => (true, Bytes::new()),
                    };
                    (*logger).finish(&mut out, gas_used, failed, &output)?;
                }
                TraceInspector::Native(mut native, _) => {
                    let context = TransactionContext {
                        block_hash: Some(facts.hash),
                        tx_index: Some(index),
                        tx_hash: Some(tx.hash),
                    };
                    let mut view: &CacheDB<&VerifiedDb<'_>> = &*evm.ctx.journaled_state.database;
                    let trace = native
                        .get_result(Some(context), &env, &block_env, &done, &mut view)
                        .map_err(|e| ReplayError::Internal(e.to_string()))?;
                    let code_hash_before = |address: Address| -> Option<B256> {
                        match view.basic_ref(address) {
                            Ok(info) => info.map(|info| info.code_hash),
                            Err(never) => match never {},
                        }
                    };
                    let facts = TxFacts {
                        log_offset,
                        gas_used,
                        code_hash_before: &code_hash_before,
                        after: &done.state,
                    };
                    let mut writer = Capped {
                        out: &mut out,
                        room: limits.room(answer_bytes),
                    };
                    if super::native::write(trace, &facts, &mut writer).is_err() {
                        return Err(Stopped::TooLarge.into());
                    }
                }
                TraceInspector::Idle => {}
            }
            answer_bytes += out.len();
            if !limits.holds(answer_bytes) {
                return Err(Stopped::TooLarge.into());
            }
            traces.push((tx.hash, out));
        }
        evm.ctx.journaled_state.database.commit(done.state);
    }
    drop(evm);
    if db.outside_tail() {
        return Ok(Replayed::OutsideTail);
    }
    let needs = db.take_needs();
    if !needs.is_empty() {
        return Ok(Replayed::Needs(needs));
    }
    if db.unsure() {
        return Err(ReplayError::Unsupported);
    }
    match diverged {
        Some(error) => Err(error),
        None => Ok(Replayed::Traced(traces)),
    }
}

/// The tracer `options` name, bounded by `limits`.
fn tracer(options: &TraceOptions, limits: &Limits) -> TraceInspector {
    match &options.tracer {
        Tracer::StructLogger(config) => {
            TraceInspector::Struct(Box::new(StructLogger::new(*config, limits.clone())))
        }
        Tracer::Native(native) => match DebugInspector::new(native.clone()) {
            Ok(inspector) => {
                TraceInspector::Native(Box::new(inspector), Budget::new(limits.clone()))
            }
            // Options were checked when parsed; a tracer revm-inspectors
            // refuses is the node's.
            Err(_) => {
                limits.stop(Stopped::Unsure);
                TraceInspector::Idle
            }
        },
    }
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
