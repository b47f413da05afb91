//! One run of a call at a pinned block: the EVM's configuration as geth
//! sets it for calls (nonce and EIP-3607 checks off, no block gas limit
//! and no per-transaction cap beyond [`GAS_CAP`], base fees read as 0 when
//! the call names no fee), the block's environment from its verified
//! header, the overrides applied, and revm's result in geth's terms; on
//! Avalanche's C-chain, coreth's (`coreth.rs`, and [`Dialect::Coreth`]
//! below).

use alloy_primitives::{B256, Bytes, TxKind, U256};
use neve_state::{HotKey, State};
use revm::context::result::{EVMError, ExecutionResult, HaltReason};
use revm::context::{BlockEnv, CfgEnv, TxEnv};
use revm::database::CacheDB;
use revm::inspector::NoOpInspector;
use revm::primitives::hardfork::SpecId;
use revm::{Context, Database, ExecuteEvm, InspectEvm, Inspector, MainBuilder, MainContext};

use crate::args::{BlockOverrides, CallArgs, StateOverride};
use crate::block::BlockFacts;
use crate::coreth::{ChainPrecompiles, KeyedDb};
use crate::db::{Needs, VerifiedDb};
use crate::error::CallError;
use crate::halt::{LastStep, halt_message, needs_last_step};
use crate::overrides::{apply_block_overrides, apply_state_overrides, block_env};
use crate::pricing::Fees;
use crate::rules::{ChainRules, Dialect, Fork};

/// Most gas one call may use: geth's `RPCGasCap`, so a call neve answers
/// is one geth answers the same. A call asking more gets this much, and
/// with it its time: at revm's speed 50 M gas of the slowest opcodes is
/// well under geth's 5 s limit. Default is 50,000,000.
pub const GAS_CAP: u64 = 50_000_000;

/// Most bytes of EVM memory one call frame may hold. Gas bounds memory
/// (50 M gas buys about 5 MiB in one frame); this is the backstop a bug
/// in that reasoning would hit. Default is 64 MiB.
pub const MEMORY_LIMIT: u64 = 64 << 20;

/// Where a call runs: verified state, the block, the chain's rules there.
pub struct Pinned<'a> {
    /// Verified state.
    pub state: &'a State,
    /// The block (its verified header's facts).
    pub block: &'a BlockFacts,
    /// The rules in force at it (the blob base fee follows them, as in
    /// geth, whatever a block override says).
    pub fork: Fork,
    /// The chain's rules, for a run whose block overrides move it in time:
    /// geth runs it under the rules of the overridden time.
    pub rules: &'a ChainRules,
    /// Gas of every run made here, however it ended (an answer, a run
    /// that needed state not held, an error after executing): what the
    /// client is charged.
    pub spent: std::cell::Cell<u64>,
    /// The chain id.
    pub chain_id: u64,
    /// Hashes of stored verified blocks by height, for `BLOCKHASH`.
    pub block_hash: &'a (dyn Fn(u64) -> Option<B256> + Sync),
    /// Analysed code shared by calls.
    pub codes: &'a crate::db::CodeCache,
    /// A replay that has missed more accounts and slots than this stops
    /// where it is: what it reads is then fetched whole (its block's
    /// witness), and the rest of its run would only name more of it.
    /// `None`: it runs on, naming all it misses.
    pub enough_needs: Option<usize>,
    /// Where a replayed block's post-state is computed, off the answer's
    /// path; `None`: none is kept.
    pub post_states: Option<&'a crate::post_states::PostStates>,
    /// The pinned block's post-state as its replay left it, still being
    /// proved: a replay over it only learns what to fetch (at the pinned
    /// block's verified root), and answers nothing. `None`: runs read
    /// verified state alone, as answers do.
    pub unproved: Option<&'a crate::post_states::Unproved>,
}

impl Pinned<'_> {
    /// The rules a run of `request` executes under: the pinned block's,
    /// or, with a `time` block override, those in force at that time (as
    /// geth derives them from the overridden block context). A time no
    /// known rules cover is a miss, and so is a `number` override below
    /// the pinned block: geth's rules by number (London and before) are
    /// ones `eth_config` does not tell.
    pub fn fork_for(&self, request: &Request) -> Result<Fork, CallError> {
        let overrides = request.block.as_ref();
        if overrides
            .and_then(|o| o.number)
            .is_some_and(|number| number < U256::from(self.block.number))
        {
            return Err(CallError::Unsupported);
        }
        match overrides.and_then(|o| o.time) {
            Some(time) => self
                .rules
                .at(time.saturating_to())
                .ok_or(CallError::Unsupported),
            None => Ok(self.fork),
        }
    }

    pub(crate) fn charge(&self, gas: u64) {
        self.spent.set(self.spent.get().saturating_add(gas));
    }

    /// A database over the pinned block's verified state.
    pub(crate) fn database(&self) -> VerifiedDb<'_> {
        VerifiedDb::new(
            self.state,
            self.block.state_root,
            self.block.number,
            self.block_hash,
        )
        .with_codes(self.codes)
    }
}

/// The database a run reads: `db` with the request's state overrides over
/// it, under the dialect's storage key rule.
pub type RunDb<'a> = KeyedDb<'a, CacheDB<&'a VerifiedDb<'a>>>;

/// `db` with the request's state overrides over it; `aliased` is set if
/// the run asks for one coreth storage cell by both its keys.
fn overridden<'a>(
    db: &'a VerifiedDb<'a>,
    request: &Request,
    dialect: Dialect,
    aliased: &'a std::cell::Cell<bool>,
) -> Result<RunDb<'a>, CallError> {
    let mut cache = CacheDB::new(db);
    if let Some(overrides) = &request.state {
        apply_state_overrides(&mut cache, overrides, dialect)?;
    }
    Ok(KeyedDb::new(cache, dialect, aliased))
}

/// Whether coreth's rules for `request` are ones neve follows: not its
/// block overrides (named and applied otherwise than geth's), EIP-7702
/// authorizations (Prague's, which coreth ignores), or an access list
/// naming warp (charged by its predicates).
fn coreth_follows(request: &Request) -> bool {
    request.block.is_none()
        && request.args.authorization_list.is_none()
        && !request
            .args
            .access_list
            .as_ref()
            .is_some_and(|list| list.iter().any(|item| item.address == crate::coreth::WARP))
}

/// What a call asks, whole.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The transaction's arguments.
    pub args: CallArgs,
    /// State overrides.
    pub state: Option<StateOverride>,
    /// Block overrides.
    pub block: Option<BlockOverrides>,
}

/// How a run that executed ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// It returned.
    Success,
    /// It reverted (`output` is the revert data).
    Revert,
    /// It halted; geth's message for why.
    Halt(String),
}

/// A run that executed over held state only.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// How it ended.
    pub ended: Ended,
    /// Returned or revert data.
    pub output: Bytes,
    /// Gas used, refunds applied (a receipt's `gasUsed`).
    pub gas_used: u64,
    /// The gas limit it ran with.
    pub gas_limit: u64,
    /// Gas used before refunds (at least the calldata floor): geth's
    /// `MaxUsedGas`, the estimator's optimistic start.
    pub peak_gas: u64,
    /// Every account and slot read, for the hot set and access lists.
    pub read: Vec<HotKey>,
}

/// A run's result.
#[derive(Clone, Debug)]
pub enum Run {
    /// Executed over held state: an answer.
    Done(Outcome),
    /// It read state not held: fetch these, then run again.
    Needs(Needs),
    /// `BLOCKHASH` of a block not stored: not answerable here.
    OutsideTail,
}

/// The EVM context a run executes in: what an inspector handed to
/// [`run_inspected`] watches.
pub type RunContext<'a> = Context<BlockEnv, TxEnv, CfgEnv, RunDb<'a>>;

/// Runs `request` at `pinned`, with `gas` instead of the request's when
/// given (the estimator's probes).
pub fn run(pinned: &Pinned<'_>, request: &Request, gas: Option<u64>) -> Result<Run, CallError> {
    execute::<NoOpInspector>(pinned, request, gas, None)
}

/// [`run`], watched by `inspector` as it executes: any revm inspector (the
/// access-list tracer, a tracer of geth's formats). A halt that needs its
/// instruction named runs once more, watched by neve's own inspector only.
pub fn run_inspected<I>(
    pinned: &Pinned<'_>,
    request: &Request,
    gas: Option<u64>,
    inspector: &mut I,
) -> Result<Run, CallError>
where
    I: for<'a> Inspector<RunContext<'a>>,
{
    execute(pinned, request, gas, Some(inspector))
}

/// A run's transaction and its environment, as geth sets them for a call.
pub(crate) struct Setup {
    spec: SpecId,
    dialect: Dialect,
    fees: Fees,
    gas_limit: u64,
    pub(crate) block: BlockEnv,
    pub(crate) tx: TxEnv,
    pub(crate) cfg: CfgEnv,
}

fn execute<I>(
    pinned: &Pinned<'_>,
    request: &Request,
    gas: Option<u64>,
    inspector: Option<&mut I>,
) -> Result<Run, CallError>
where
    I: for<'a> Inspector<RunContext<'a>>,
{
    let dialect = pinned.fork.dialect;
    let spec = pinned.fork_for(request)?.spec;
    if dialect == Dialect::Coreth && !coreth_follows(request) {
        return Err(CallError::Unsupported);
    }
    check_chain_id(pinned, &request.args)?;
    let db = pinned.database();
    let aliased = std::cell::Cell::new(false);
    let overridden = || overridden(&db, request, dialect, &aliased);
    let mut cache = overridden()?;
    let setup = setup(pinned, request, gas, spec, &mut cache)?;
    let context = Context::mainnet()
        .with_db(cache)
        .with_block(setup.block.clone())
        .with_cfg(setup.cfg.clone());
    let precompiles = || ChainPrecompiles::new(dialect, spec);
    let (result, reached_warp) = match inspector {
        None => {
            let mut evm = context.build_mainnet().with_precompiles(precompiles());
            (evm.transact(setup.tx.clone()), evm.precompiles.reached_warp)
        }
        Some(inspector) => {
            let mut evm = context
                .build_mainnet_with_inspector(inspector)
                .with_precompiles(precompiles());
            (
                evm.inspect_tx(setup.tx.clone()),
                evm.precompiles.reached_warp,
            )
        }
    };
    // Charged whatever comes of it: a run that then needs state not held,
    // or is not answered here, cost its work all the same.
    if let Ok(done) = &result {
        pinned.charge(done.result.gas().total_gas_spent());
    }
    if db.outside_tail() {
        return Ok(Run::OutsideTail);
    }
    let needs = db.take_needs();
    if !needs.is_empty() {
        return Ok(Run::Needs(needs));
    }
    // What coreth would answer otherwise than this run: not an answer.
    if reached_warp || aliased.get() || db.unsure() {
        return Err(CallError::Unsupported);
    }
    let result = executed(result, request, &setup)?;
    let precompile_words = precompile_words(&result, request, &setup)?;
    // geth names the opcode (and the stack) a halt stopped at; revm's
    // reason does not, so a halt that needs them runs once more, watched.
    // Halts are rare, and the run is the same (same state, same inputs).
    let detail = match &result {
        ExecutionResult::Halt { reason, .. } if needs_last_step(reason) => {
            let mut watched = Context::mainnet()
                .with_db(overridden()?)
                .with_block(setup.block.clone())
                .with_cfg(setup.cfg.clone())
                .build_mainnet_with_inspector(LastStep::default())
                .with_precompiles(precompiles());
            let _ = watched.inspect_tx(setup.tx.clone());
            Some(watched.inspector)
        }
        _ => None,
    };
    let read = db.take_read_keys();
    Ok(Run::Done(outcome(
        result,
        &setup,
        precompile_words,
        detail.as_ref(),
        read,
    )))
}

/// What revm's run came to, or geth's refusal of it before it executed.
fn executed(
    result: Result<
        revm::context::result::ExecResultAndState<ExecutionResult, revm::state::EvmState>,
        EVMError<crate::db::Never>,
    >,
    request: &Request,
    setup: &Setup,
) -> Result<ExecutionResult, CallError> {
    match result {
        // revm's checks passed (geth's pre-checks before `buyGas`): geth's
        // balance check past 256 bits refuses it now.
        Ok(_) if setup.fees.past_256_bits => Err(CallError::PreCheck(format!(
            "err: {} (supplied gas {})",
            crate::error::insufficient_past_256_bits(&request.args),
            setup.gas_limit
        ))),
        Ok(done) => Ok(done.result),
        Err(EVMError::Transaction(invalid)) => Err(CallError::invalid(
            &invalid,
            &request.args,
            setup.fees.wide_fee_cap,
            setup.gas_limit,
        )),
        Err(EVMError::Database(never)) => match never {},
        Err(other) => Err(CallError::Internal(other.to_string())),
    }
}

/// The transaction, block and configuration of a run of `request`, after
/// geth's checks that come before executing (chain id, fees, a creation
/// that cannot be one).
fn setup(
    pinned: &Pinned<'_>,
    request: &Request,
    gas: Option<u64>,
    spec: SpecId,
    cache: &mut RunDb<'_>,
) -> Result<Setup, CallError> {
    setup_at(pinned, pinned.block, request, gas, spec, cache)
}

/// [`setup`] in the environment of `facts` (a traced call at a
/// transaction of a block runs in that block, over its parent's state).
pub(crate) fn setup_at(
    pinned: &Pinned<'_>,
    facts: &BlockFacts,
    request: &Request,
    gas: Option<u64>,
    spec: SpecId,
    cache: &mut RunDb<'_>,
) -> Result<Setup, CallError> {
    let args = &request.args;
    let dialect = pinned.fork.dialect;
    let sender = args.sender();
    let sender_nonce = match cache.basic(sender) {
        Ok(account) => account.map_or(0, |a| a.nonce),
        Err(never) => match never {},
    };
    let gas_limit = gas.unwrap_or_else(|| args.gas.map_or(GAS_CAP, |g| g.to::<u64>()).min(GAS_CAP));
    // The base fee the pre-checks see: a block override's, else the block's.
    let base_fee = match request.block.as_ref().and_then(|o| o.base_fee_per_gas) {
        Some(base_fee) => Some(base_fee.saturating_to()),
        None => facts.base_fee,
    };
    let fees = Fees::of(args, base_fee, gas_limit)?;
    refuse_impossible_creation(args, &fees, gas_limit)?;
    let mut block = block_env(facts, &pinned.fork, args);
    if let Some(overrides) = &request.block {
        apply_block_overrides(&mut block, overrides)?;
    }
    if fees.price == 0 {
        block.basefee = 0;
    }
    let tx = args.with_lists(TxEnv {
        tx_type: fees.tx_type(args),
        caller: sender,
        gas_limit,
        gas_price: fees.fee_cap,
        kind: args.to.map_or(TxKind::Create, TxKind::Call),
        value: args.value.unwrap_or_default(),
        data: args.input(),
        nonce: sender_nonce,
        chain_id: Some(pinned.chain_id),
        gas_priority_fee: fees.tip,
        ..Default::default()
    });
    let mut cfg = CfgEnv::new_with_spec(spec);
    cfg.chain_id = pinned.chain_id;
    cfg.disable_nonce_check = true;
    cfg.disable_eip3607 = true;
    cfg.disable_block_gas_limit = true;
    cfg.disable_base_fee = true;
    cfg.tx_gas_limit_cap = Some(u64::MAX);
    cfg.memory_limit = MEMORY_LIMIT;
    cfg.blob_base_fee_update_fraction = pinned.fork.blob_base_fee_update_fraction;
    Ok(Setup {
        spec,
        dialect,
        fees,
        gas_limit,
        block,
        tx,
        cfg,
    })
}

/// A call's chain id, where it names one, is the chain's (coreth does not
/// check it).
pub(crate) fn check_chain_id(pinned: &Pinned<'_>, args: &CallArgs) -> Result<(), CallError> {
    match args.chain_id {
        Some(chain_id)
            if pinned.fork.dialect != Dialect::Coreth
                && chain_id.to::<u64>() != pinned.chain_id =>
        {
            Err(CallError::Args(crate::args::ArgsError::ChainId {
                have: chain_id.to(),
                want: pinned.chain_id,
            }))
        }
        _ => Ok(()),
    }
}

/// A creation carrying blob hashes or authorizations: revm runs it, geth
/// refuses it among its pre-checks, after the fee checks (skipped when no
/// fee is given), blobs' before authorizations'.
fn refuse_impossible_creation(
    args: &CallArgs,
    fees: &Fees,
    gas_limit: u64,
) -> Result<(), CallError> {
    if args.to.is_some() {
        return Ok(());
    }
    let refusal = if args.blob_versioned_hashes.is_some() {
        "blob transaction of type create".to_string()
    } else if args.authorization_list.is_some() {
        format!(
            "EIP-7702 transaction cannot be used to create contract (sender {})",
            args.sender()
        )
    } else {
        return Ok(());
    };
    if fees.fee_cap != 0 || fees.tip.is_some_and(|tip| tip != 0) {
        return Err(CallError::Unsupported);
    }
    Err(CallError::PreCheck(format!(
        "err: {refusal} (supplied gas {gas_limit})"
    )))
}

/// A call straight to a precompile that refuses its input: answered in
/// geth's words where neve is sure of them, a miss otherwise (and always
/// on coreth, whose precompiles word their own failures).
fn precompile_words(
    result: &ExecutionResult,
    request: &Request,
    setup: &Setup,
) -> Result<Option<&'static str>, CallError> {
    let args = &request.args;
    match result {
        ExecutionResult::Halt {
            reason: HaltReason::PrecompileErrorWithContext(reason),
            ..
        } if setup.dialect != Dialect::Coreth => crate::precompile_failure::geth_words(
            reason,
            &crate::precompile_failure::TopCall {
                to: args.to,
                input: &setup.tx.data,
                gas_limit: setup.gas_limit,
                spec: setup.spec,
                lists: args.access_list.as_ref().is_some_and(|l| !l.0.is_empty())
                    || args
                        .authorization_list
                        .as_ref()
                        .is_some_and(|l| !l.is_empty()),
            },
        )
        .map(Some)
        .ok_or(CallError::Unsupported),
        ExecutionResult::Halt {
            reason: HaltReason::PrecompileError | HaltReason::PrecompileErrorWithContext(_),
            ..
        } => Err(CallError::Unsupported),
        _ => Ok(None),
    }
}

/// revm's result in geth's terms.
fn outcome(
    result: ExecutionResult,
    setup: &Setup,
    precompile_words: Option<&'static str>,
    detail: Option<&LastStep>,
    read: Vec<HotKey>,
) -> Outcome {
    // coreth refunds no gas (since Apricot Phase 1): what a run used is
    // what it spent.
    let used = |gas: &revm::context::result::ResultGas| {
        if setup.dialect == Dialect::Coreth {
            gas.total_gas_spent()
        } else {
            gas.tx_gas_used()
        }
    };
    let gas_limit = setup.gas_limit;
    let peak = |gas: &revm::context::result::ResultGas| gas.total_gas_spent().max(gas.floor_gas());
    match result {
        ExecutionResult::Success { gas, output, .. } => Outcome {
            ended: Ended::Success,
            output: output.into_data(),
            gas_used: used(&gas),
            gas_limit,
            peak_gas: peak(&gas),
            read,
        },
        ExecutionResult::Revert { gas, output, .. } => Outcome {
            ended: Ended::Revert,
            output,
            gas_used: used(&gas),
            gas_limit,
            peak_gas: peak(&gas),
            read,
        },
        ExecutionResult::Halt { reason, gas, .. } => Outcome {
            ended: Ended::Halt(match precompile_words {
                Some(words) => words.to_string(),
                None => halt_message(&reason, detail),
            }),
            output: Bytes::new(),
            gas_used: used(&gas),
            gas_limit,
            peak_gas: peak(&gas),
            read,
        },
    }
}

/// The sender's balance at `pinned` after the request's overrides, or the
/// run that says what reading it needs.
pub(crate) fn sender_balance(
    pinned: &Pinned<'_>,
    request: &Request,
) -> Result<Result<U256, Run>, CallError> {
    let db = pinned.database();
    let aliased = std::cell::Cell::new(false);
    let mut cache = overridden(&db, request, pinned.fork.dialect, &aliased)?;
    let balance = match cache.basic(request.args.sender()) {
        Ok(account) => account.map_or(U256::ZERO, |a| a.balance),
        Err(never) => match never {},
    };
    let needs = db.take_needs();
    Ok(if needs.is_empty() {
        Ok(balance)
    } else {
        Err(Run::Needs(needs))
    })
}
