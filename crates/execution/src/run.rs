//! One run of a call at a pinned block: the EVM's configuration as geth
//! sets it for calls (nonce and EIP-3607 checks off, no block gas limit
//! and no per-transaction cap beyond [`GAS_CAP`], base fees read as 0 when
//! the call names no fee), the block's environment from its verified
//! header, the overrides applied, and revm's result in geth's terms; on
//! Avalanche's C-chain, coreth's (`coreth.rs`, and [`Dialect::Coreth`]
//! below).

use alloy_primitives::{B256, Bytes, TxKind, U256};
use neve_state::{HotKey, State};
use revm::bytecode::OpCode;
use revm::context::either::Either;
use revm::context::result::{EVMError, ExecutionResult, HaltReason};
use revm::context::{BlockEnv, CfgEnv, TxEnv};
use revm::context_interface::block::BlobExcessGasAndPrice;
use revm::database::CacheDB;
use revm::interpreter::interpreter_types::{Jumps, StackTr};
use revm::interpreter::{Interpreter, InterpreterTypes};
use revm::primitives::hardfork::SpecId;
use revm::state::AccountInfo;
use revm::{Context, Database, ExecuteEvm, InspectEvm, Inspector, MainBuilder, MainContext};

use crate::args::{BlockOverrides, CallArgs, StateOverride};
use crate::block::BlockFacts;
use crate::coreth::{ChainPrecompiles, KeyedDb};
use crate::db::{Needs, VerifiedDb};
use crate::error::CallError;
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

    fn charge(&self, gas: u64) {
        self.spent.set(self.spent.get().saturating_add(gas));
    }

    /// A database over the pinned block's verified state.
    fn database(&self) -> VerifiedDb<'_> {
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
type RunDb<'a> = KeyedDb<'a, CacheDB<&'a VerifiedDb<'a>>>;

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

/// Runs `request` at `pinned`, with `gas` instead of the request's when
/// given (the estimator's probes).
pub fn run(pinned: &Pinned<'_>, request: &Request, gas: Option<u64>) -> Result<Run, CallError> {
    execute(pinned, request, gas, None)
}

/// [`run`], watched by an access-list tracer (`eth_createAccessList`).
pub(crate) fn run_inspected(
    pinned: &Pinned<'_>,
    request: &Request,
    gas: Option<u64>,
    tracer: &mut crate::tracer::AccessListTracer,
) -> Result<Run, CallError> {
    execute(pinned, request, gas, Some(tracer))
}

fn execute(
    pinned: &Pinned<'_>,
    request: &Request,
    gas: Option<u64>,
    tracer: Option<&mut crate::tracer::AccessListTracer>,
) -> Result<Run, CallError> {
    let args = &request.args;
    let input = args.input();
    let dialect = pinned.fork.dialect;
    let coreth = dialect == Dialect::Coreth;
    let spec = pinned.fork_for(request)?.spec;
    if coreth && !coreth_follows(request) {
        return Err(CallError::Unsupported);
    }
    // coreth does not check a call's chain id.
    if let Some(chain_id) = args.chain_id
        && !coreth
        && chain_id.to::<u64>() != pinned.chain_id
    {
        return Err(CallError::Args(crate::args::ArgsError::ChainId {
            have: chain_id.to(),
            want: pinned.chain_id,
        }));
    }
    let db = pinned.database();
    let aliased = std::cell::Cell::new(false);
    let overridden = || overridden(&db, request, dialect, &aliased);
    let mut cache = overridden()?;
    let sender = args.sender();
    let sender_nonce = match cache.basic(sender) {
        Ok(account) => account.map_or(0, |a| a.nonce),
        Err(never) => match never {},
    };
    let gas_limit = gas.unwrap_or_else(|| args.gas.map_or(GAS_CAP, |g| g.to::<u64>()).min(GAS_CAP));
    // The base fee the pre-checks see: a block override's, else the block's.
    let base_fee = match request.block.as_ref().and_then(|o| o.base_fee_per_gas) {
        Some(base_fee) => Some(base_fee.saturating_to()),
        None => pinned.block.base_fee,
    };
    let fees = Fees::of(args, base_fee, gas_limit)?;
    // A creation carrying blob hashes or authorizations: revm runs it,
    // geth refuses it among its pre-checks, after the fee checks (skipped
    // when no fee is given), blobs' before authorizations'.
    if args.to.is_none() {
        let refusal = if args.blob_versioned_hashes.is_some() {
            Some("blob transaction of type create".to_string())
        } else if args.authorization_list.is_some() {
            Some(format!(
                "EIP-7702 transaction cannot be used to create contract (sender {sender})"
            ))
        } else {
            None
        };
        if let Some(refusal) = refusal {
            if fees.fee_cap != 0 || fees.tip.is_some_and(|tip| tip != 0) {
                return Err(CallError::Unsupported);
            }
            return Err(CallError::PreCheck(format!(
                "err: {refusal} (supplied gas {gas_limit})"
            )));
        }
    }
    let mut block = block_env(pinned, args);
    if let Some(overrides) = &request.block {
        apply_block_overrides(&mut block, overrides)?;
    }
    if fees.price == 0 {
        block.basefee = 0;
    }
    let tx = TxEnv {
        tx_type: fees.tx_type(args),
        caller: sender,
        gas_limit,
        gas_price: fees.fee_cap,
        kind: args.to.map_or(TxKind::Create, TxKind::Call),
        value: args.value.unwrap_or_default(),
        data: input,
        nonce: sender_nonce,
        chain_id: Some(pinned.chain_id),
        access_list: args.access_list.clone().unwrap_or_default(),
        gas_priority_fee: fees.tip,
        blob_hashes: args.blob_versioned_hashes.clone().unwrap_or_default(),
        max_fee_per_blob_gas: args
            .max_fee_per_blob_gas
            .map_or(0, |fee| fee.saturating_to()),
        authorization_list: args
            .authorization_list
            .iter()
            .flatten()
            .cloned()
            .map(Either::Left)
            .collect(),
    };
    let mut cfg = CfgEnv::new_with_spec(spec);
    cfg.chain_id = pinned.chain_id;
    cfg.disable_nonce_check = true;
    cfg.disable_eip3607 = true;
    cfg.disable_block_gas_limit = true;
    cfg.disable_base_fee = true;
    cfg.tx_gas_limit_cap = Some(u64::MAX);
    cfg.memory_limit = MEMORY_LIMIT;
    cfg.blob_base_fee_update_fraction = pinned.fork.blob_base_fee_update_fraction;
    let context = Context::mainnet()
        .with_db(cache)
        .with_block(block.clone())
        .with_cfg(cfg.clone());
    let precompiles = || ChainPrecompiles::new(dialect, spec);
    let (result, reached_warp) = match tracer {
        None => {
            let mut evm = context.build_mainnet().with_precompiles(precompiles());
            (evm.transact(tx.clone()), evm.precompiles.reached_warp)
        }
        Some(tracer) => {
            let mut evm = context
                .build_mainnet_with_inspector(tracer)
                .with_precompiles(precompiles());
            (evm.inspect_tx(tx.clone()), evm.precompiles.reached_warp)
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
    let result = match result {
        // revm's checks passed (geth's pre-checks before `buyGas`): geth's
        // balance check past 256 bits refuses it now.
        Ok(_) if fees.past_256_bits => {
            return Err(CallError::PreCheck(format!(
                "err: {} (supplied gas {gas_limit})",
                crate::error::insufficient_past_256_bits(args)
            )));
        }
        Ok(done) => done.result,
        Err(EVMError::Transaction(invalid)) => {
            return Err(CallError::invalid(
                &invalid,
                args,
                fees.wide_fee_cap,
                gas_limit,
            ));
        }
        Err(EVMError::Database(never)) => match never {},
        Err(other) => return Err(CallError::Internal(other.to_string())),
    };
    // A call straight to a precompile that refuses its input: answered
    // in geth's words where neve is sure of them, a miss otherwise (and
    // always on coreth, whose precompiles word their own failures).
    let precompile_words = match &result {
        ExecutionResult::Halt {
            reason: HaltReason::PrecompileErrorWithContext(reason),
            ..
        } if !coreth => match crate::precompile_failure::geth_words(
            reason,
            &crate::precompile_failure::TopCall {
                to: args.to,
                input: &tx.data,
                gas_limit,
                spec,
                lists: args.access_list.as_ref().is_some_and(|l| !l.0.is_empty())
                    || args
                        .authorization_list
                        .as_ref()
                        .is_some_and(|l| !l.is_empty()),
            },
        ) {
            Some(words) => Some(words),
            None => return Err(CallError::Unsupported),
        },
        ExecutionResult::Halt {
            reason: HaltReason::PrecompileError | HaltReason::PrecompileErrorWithContext(_),
            ..
        } => return Err(CallError::Unsupported),
        _ => None,
    };
    // geth names the opcode (and the stack) a halt stopped at; revm's
    // reason does not, so a halt that needs them runs once more, watched.
    // Halts are rare, and the run is the same (same state, same inputs).
    let detail = match &result {
        ExecutionResult::Halt { reason, .. } if needs_last_step(reason) => {
            let mut watched = Context::mainnet()
                .with_db(overridden()?)
                .with_block(block)
                .with_cfg(cfg)
                .build_mainnet_with_inspector(LastStep::default())
                .with_precompiles(precompiles());
            let _ = watched.inspect_tx(tx);
            Some(watched.inspector)
        }
        _ => None,
    };
    let read = db.take_read_keys();
    // coreth refunds no gas (since Apricot Phase 1): what a run used is
    // what it spent.
    let used = |gas: &revm::context::result::ResultGas| {
        if coreth {
            gas.total_gas_spent()
        } else {
            gas.tx_gas_used()
        }
    };
    Ok(Run::Done(match result {
        ExecutionResult::Success { gas, output, .. } => Outcome {
            ended: Ended::Success,
            output: output.into_data(),
            gas_used: used(&gas),
            gas_limit,
            peak_gas: gas.total_gas_spent().max(gas.floor_gas()),
            read,
        },
        ExecutionResult::Revert { gas, output, .. } => Outcome {
            ended: Ended::Revert,
            output,
            gas_used: used(&gas),
            gas_limit,
            peak_gas: gas.total_gas_spent().max(gas.floor_gas()),
            read,
        },
        ExecutionResult::Halt { reason, gas, .. } => Outcome {
            ended: Ended::Halt(match precompile_words {
                Some(words) => words.to_string(),
                None => halt_message(&reason, detail.as_ref()),
            }),
            output: Bytes::new(),
            gas_used: used(&gas),
            gas_limit,
            peak_gas: gas.total_gas_spent().max(gas.floor_gas()),
            read,
        },
    }))
}

/// The fees a call pays, as geth derives them for a call.
pub(crate) struct Fees {
    /// The price cap revm charges against (legacy: the price).
    pub(crate) fee_cap: u128,
    /// The same, whole: what geth's balance check multiplies (revm's is
    /// at most 128 bits).
    pub(crate) wide_fee_cap: U256,
    /// Whether geth's balance check (gas × fee cap + value + blob fees)
    /// passes 256 bits: its `buyGas` refuses that, after every other
    /// pre-check, where revm (its fee cap at most 128 bits) would run.
    pub(crate) past_256_bits: bool,
    /// EIP-1559's tip, when 1559 fields were given.
    pub(crate) tip: Option<u128>,
    /// The price paid (`GASPRICE`); 0 makes `BASEFEE` read 0, as in geth.
    pub(crate) price: u128,
}

impl Fees {
    /// geth's `CallDefaults` and `ToMessage` for a call, then its London
    /// pre-checks (skipped when no fee is given), which neve makes itself
    /// because revm's base-fee check is off for calls.
    fn of(args: &CallArgs, base_fee: Option<u64>, gas: u64) -> Result<Fees, CallError> {
        let wide = |v: U256| -> u128 { v.saturating_to() };
        if args.gas_price.is_some()
            && (args.max_fee_per_gas.is_some() || args.max_priority_fee_per_gas.is_some())
        {
            return Err(crate::args::ArgsError::BothFeeKinds.into());
        }
        let Some(base_fee) = base_fee else {
            // Before London only the legacy price counts.
            let price = args.gas_price.unwrap_or_default();
            return Ok(Fees {
                fee_cap: wide(price),
                wide_fee_cap: price,
                past_256_bits: args.balance_needed(gas, price).is_none(),
                tip: None,
                price: wide(price),
            });
        };
        let (fee_cap, tip, legacy) = match args.gas_price {
            Some(price) => (price, price, true),
            None => (
                args.max_fee_per_gas.unwrap_or_default(),
                args.max_priority_fee_per_gas.unwrap_or_default(),
                false,
            ),
        };
        let base = U256::from(base_fee);
        let price = if fee_cap.is_zero() && tip.is_zero() {
            U256::ZERO
        } else {
            (tip.saturating_add(base)).min(fee_cap)
        };
        if !fee_cap.is_zero() || !tip.is_zero() {
            let sender = args.sender();
            let failed = |message: String| {
                CallError::PreCheck(format!("err: {message} (supplied gas {gas})"))
            };
            if tip > fee_cap {
                return Err(failed(format!(
                    "max priority fee per gas higher than max fee per gas: address {sender}, maxPriorityFeePerGas: {tip}, maxFeePerGas: {fee_cap}"
                )));
            }
            if fee_cap < base {
                return Err(failed(format!(
                    "max fee per gas less than block base fee: address {sender}, maxFeePerGas: {fee_cap}, baseFee: {base_fee}"
                )));
            }
        }
        Ok(Fees {
            fee_cap: wide(fee_cap),
            wide_fee_cap: fee_cap,
            past_256_bits: args.balance_needed(gas, fee_cap).is_none(),
            tip: (!legacy).then(|| wide(tip)),
            price: wide(price),
        })
    }

    fn tx_type(&self, args: &CallArgs) -> u8 {
        if args.authorization_list.is_some() {
            4
        } else if args.blob_versioned_hashes.is_some() {
            3
        } else if self.tip.is_some() {
            2
        } else if args.access_list.is_some() {
            1
        } else {
            0
        }
    }
}

fn block_env(pinned: &Pinned<'_>, args: &CallArgs) -> BlockEnv {
    let facts = pinned.block;
    let merged = pinned.fork.spec.is_enabled_in(SpecId::MERGE);
    // coreth's PREVRANDAO is the header's difficulty (1; 0 at genesis).
    let random = match pinned.fork.dialect {
        Dialect::Ethereum => facts.mix_hash,
        Dialect::Coreth => B256::from(facts.difficulty.to_be_bytes()),
    };
    // geth reads BASEFEE as 0 when the price paid is 0 (set by the
    // caller, after the overrides), and BLOBBASEFEE as 0 only when the
    // blob fee cap is zero: given as zero, or left out of a call carrying
    // blob hashes (geth's `CallDefaults` makes it zero then).
    let zero_blob_fee = match args.max_fee_per_blob_gas {
        Some(fee) => fee.is_zero(),
        None => args.blob_versioned_hashes.is_some(),
    };
    BlockEnv {
        number: U256::from(facts.number),
        beneficiary: facts.beneficiary,
        timestamp: U256::from(facts.timestamp),
        gas_limit: facts.gas_limit,
        basefee: facts.base_fee.unwrap_or(0),
        difficulty: facts.difficulty,
        prevrandao: merged.then_some(random),
        blob_excess_gas_and_price: facts.excess_blob_gas.map(|excess| {
            match (pinned.fork.blob_base_fee_update_fraction, zero_blob_fee) {
                (Some(fraction), false) => BlobExcessGasAndPrice::new(excess, fraction),
                _ => BlobExcessGasAndPrice {
                    excess_blob_gas: excess,
                    blob_gasprice: 0,
                },
            }
        }),
        ..Default::default()
    }
}

fn apply_block_overrides(
    block: &mut BlockEnv,
    overrides: &BlockOverrides,
) -> Result<(), CallError> {
    if overrides.beacon_root.is_some() {
        return Err(CallError::Override(
            "block override \"beaconRoot\" is not supported for this RPC method".into(),
        ));
    }
    if overrides.withdrawals.is_some() {
        return Err(CallError::Override(
            "block override \"withdrawals\" is not supported for this RPC method".into(),
        ));
    }
    if let Some(number) = overrides.number {
        block.number = number;
    }
    if let Some(difficulty) = overrides.difficulty {
        block.difficulty = difficulty;
    }
    if let Some(time) = overrides.time {
        block.timestamp = U256::from(time.to::<u64>());
    }
    if let Some(gas_limit) = overrides.gas_limit {
        block.gas_limit = gas_limit.to();
    }
    if let Some(coinbase) = overrides.fee_recipient {
        block.beneficiary = coinbase;
    }
    if let Some(random) = overrides.prev_randao {
        block.prevrandao = Some(random);
    }
    if let Some(base_fee) = overrides.base_fee_per_gas {
        block.basefee = base_fee.saturating_to();
    }
    if let Some(blob_base_fee) = overrides.blob_base_fee {
        let excess = block
            .blob_excess_gas_and_price
            .map_or(0, |b| b.excess_blob_gas);
        block.blob_excess_gas_and_price = Some(BlobExcessGasAndPrice {
            excess_blob_gas: excess,
            blob_gasprice: blob_base_fee.saturating_to(),
        });
    }
    Ok(())
}

fn apply_state_overrides(
    cache: &mut CacheDB<&VerifiedDb<'_>>,
    overrides: &StateOverride,
    dialect: Dialect,
) -> Result<(), CallError> {
    for (address, account) in overrides {
        if account.state.is_some() && account.state_diff.is_some() {
            return Err(CallError::Override(format!(
                "account {address} has both 'state' and 'stateDiff'"
            )));
        }
        if account.move_precompile_to_address.is_some() {
            // Moving a precompile changes which addresses run native code;
            // neve does not: the node answers it.
            return Err(CallError::Unsupported);
        }
        let mut info: AccountInfo = match cache.basic(*address) {
            Ok(info) => info.unwrap_or_default(),
            Err(never) => match never {},
        };
        if let Some(nonce) = account.nonce {
            info.nonce = nonce.to();
        }
        if let Some(balance) = account.balance {
            info.balance = balance;
        }
        if let Some(code) = &account.code {
            info.code_hash = alloy_primitives::keccak256(code);
            info.code = Some(crate::db::bytecode(code.clone()));
        }
        cache.insert_account_info(*address, info);
        if let Some(state) = &account.state {
            let slots = state
                .iter()
                .map(|(slot, value)| (U256::from_be_bytes(slot.0), U256::from_be_bytes(value.0)));
            cache
                .replace_account_storage(*address, slots.collect())
                .unwrap_or_else(|never| match never {});
        }
        if let Some(diff) = &account.state_diff {
            for (slot, value) in diff {
                // coreth keys `stateDiff` by its storage rule, and `state`
                // as given (so a key the rule changes is never read).
                let mut slot = U256::from_be_bytes(slot.0);
                if dialect == Dialect::Coreth {
                    slot = crate::coreth::cell(slot);
                }
                cache
                    .insert_account_storage(*address, slot, U256::from_be_bytes(value.0))
                    .unwrap_or_else(|never| match never {});
            }
        }
    }
    Ok(())
}

/// The last instruction a run stepped into, and the stack it found: the
/// instruction a top-level halt stopped at.
#[derive(Clone, Copy, Debug, Default)]
struct LastStep {
    opcode: u8,
    stack_len: usize,
}

impl<CTX, INTR: InterpreterTypes> Inspector<CTX, INTR> for LastStep {
    fn step(&mut self, interp: &mut Interpreter<INTR>, _: &mut CTX) {
        self.opcode = interp.bytecode.opcode();
        self.stack_len = interp.stack.len();
    }
}

fn needs_last_step(reason: &HaltReason) -> bool {
    matches!(
        reason,
        HaltReason::OpcodeNotFound
            | HaltReason::NotActivated
            | HaltReason::StackUnderflow
            | HaltReason::StackOverflow
    )
}

/// geth's message for a halt (`core/vm/errors.go`), with the instruction
/// it stopped at where geth names it.
fn halt_message(reason: &HaltReason, last: Option<&LastStep>) -> String {
    let last = last.copied().unwrap_or_default();
    let info = OpCode::info_by_op(last.opcode);
    match reason {
        HaltReason::OpcodeNotFound | HaltReason::NotActivated => {
            return match OpCode::new(last.opcode) {
                Some(op) => format!("invalid opcode: {}", op.as_str()),
                None => format!("invalid opcode: opcode {:#x} not defined", last.opcode),
            };
        }
        HaltReason::StackUnderflow => {
            let required = info.map_or(0, |i| i.inputs());
            return format!("stack underflow ({} <=> {required})", last.stack_len);
        }
        HaltReason::StackOverflow => {
            let limit = info.map_or(1024, |i| 1024 + i.inputs() as usize - i.outputs() as usize);
            return format!("stack limit reached {} ({limit})", last.stack_len);
        }
        _ => {}
    }
    match reason {
        HaltReason::OutOfGas(_) => "out of gas",
        HaltReason::OpcodeNotFound
        | HaltReason::NotActivated
        | HaltReason::StackUnderflow
        | HaltReason::StackOverflow => unreachable!("named above"),
        HaltReason::InvalidFEOpcode => "invalid opcode: INVALID",
        HaltReason::InvalidJump => "invalid jump destination",
        HaltReason::OutOfOffset => "return data out of bounds",
        HaltReason::CreateCollision => "contract address collision",
        HaltReason::PrecompileError | HaltReason::PrecompileErrorWithContext(_) => {
            "precompile failed"
        }
        HaltReason::NonceOverflow => "nonce uint64 overflow",
        HaltReason::CreateContractSizeLimit => "max code size exceeded",
        HaltReason::CreateContractStartingWithEF => "invalid code: must not begin with 0xef",
        HaltReason::CreateInitCodeSizeLimit => "max initcode size exceeded",
        HaltReason::OverflowPayment => "gas uint64 overflow",
        HaltReason::StateChangeDuringStaticCall | HaltReason::CallNotAllowedInsideStatic => {
            "write protection"
        }
        HaltReason::OutOfFunds => "insufficient balance for transfer",
        HaltReason::CallTooDeep => "max call depth exceeded",
    }
    .to_string()
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
