//! One simulated block executed as geth's `processBlock` executes it: its
//! header's fields that depend on the parent (base fee, blob excess), the
//! state overrides and precompile moves, the system calls before
//! (EIP-4788's beacon root, EIP-2935's parent hash) and after (EIP-7002's
//! and EIP-7251's queues), each call with geth's defaults and checks over
//! the state the previous ones left, and the withdrawals' credit.

use std::collections::BTreeSet;

use alloy_consensus::Header;
use alloy_eips::eip4895::Withdrawal;
use alloy_primitives::{Address, B256, Bytes, Log, TxKind, U256};
use revm::context::result::{EVMError, ExecutionResult, HaltReason};
use revm::context::{BlockEnv, CfgEnv, TxEnv};
use revm::database::CacheDB;
use revm::handler::SystemCallEvm;
use revm::handler::system_call::SYSTEM_ADDRESS;
use revm::primitives::hardfork::SpecId;
use revm::state::EvmState;
use revm::{Context, Database, DatabaseCommit, InspectEvm, MainBuilder, MainContext};

use crate::args::{CallArgs, StateOverride};
use crate::db::VerifiedDb;
use crate::error::CallError;
use crate::halt::{halt_message, needs_last_step};
use crate::overrides::apply_state_overrides;
use crate::rules::Dialect;
use crate::run::{GAS_CAP, Pinned};
use crate::system::{
    BEACON_ROOTS, DEPOSIT_TOPIC, HISTORY_STORAGE, REQUEST_QUEUES, SYSTEM_CONTRACTS,
};

use super::call::{SimTx, invalid_transaction, transaction};
use super::error::{Refusal, SimError, refused};
use super::header::{self, BLOB_GAS, Parent};
use super::plan::Planned;
use super::precompiles::SimPrecompiles;
use super::request::SimulateRequest;
use super::transfers::{SimLog, Transfers};
use crate::state_root::Changes;

/// The overlay every block reads and writes.
pub(crate) type Overlay<'a> = CacheDB<&'a VerifiedDb<'a>>;

/// How one call ended, as the answer tells it.
#[derive(Clone, Debug)]
pub(crate) struct CallResult {
    pub(crate) return_data: Bytes,
    pub(crate) logs: Vec<SimLog>,
    pub(crate) gas_used: u64,
    pub(crate) max_used_gas: u64,
    pub(crate) success: bool,
    /// (reverted, message, revert data) when it failed.
    pub(crate) error: Option<(bool, String, Option<Bytes>)>,
}

/// One call run: its transaction, its result, its receipt's logs and
/// the blob gas it used.
struct Called {
    tx: SimTx,
    result: CallResult,
    receipt_logs: Vec<Log>,
    blob_gas: u64,
}

/// A block executed, before its state root and hash.
pub(crate) struct Executed {
    /// The header without `stateRoot`, roots and hash.
    pub(crate) header: Header,
    pub(crate) txs: Vec<SimTx>,
    /// Each transaction's receipt: (status, cumulative gas, logs).
    pub(crate) receipts: Vec<(bool, u64, Vec<Log>)>,
    pub(crate) calls: Vec<CallResult>,
    pub(crate) withdrawals: Option<Vec<Withdrawal>>,
    pub(crate) requests: Option<Vec<Bytes>>,
}

/// The simulated chain as it grows.
pub(crate) struct Chain<'p, 'a> {
    pinned: &'p Pinned<'a>,
    request: &'p SimulateRequest,
    parent: Parent,
    /// Gas left for the whole request: geth's `gasBudget`.
    budget: u64,
    changes: Changes,
    /// Hashes `BLOCKHASH` reads past the stored chain: the pinned block's
    /// and each simulated block's.
    hashes: Vec<(u64, B256)>,
}

impl<'p, 'a> Chain<'p, 'a> {
    pub(crate) fn new(pinned: &'p Pinned<'a>, request: &'p SimulateRequest) -> Self {
        let base = pinned.block;
        Chain {
            pinned,
            request,
            parent: Parent {
                hash: base.hash,
                beneficiary: base.beneficiary,
                gas_limit: base.gas_limit,
                gas_used: base.gas_used,
                base_fee: base.base_fee,
                excess_blob_gas: base.excess_blob_gas,
                blob_gas_used: base.blob_gas_used,
            },
            budget: GAS_CAP,
            changes: Changes::default(),
            hashes: vec![(base.number, base.hash)],
        }
    }

    /// What the simulation changed so far, by account.
    pub(crate) fn changes(&mut self) -> &mut Changes {
        &mut self.changes
    }

    /// The block just executed got its hash.
    pub(crate) fn sealed(&mut self, number: u64, hash: B256) {
        self.parent.hash = hash;
        self.hashes.push((number, hash));
    }

    /// Executes `planned` over `overlay`.
    pub(crate) fn execute(
        &mut self,
        overlay: &mut Overlay<'a>,
        planned: &Planned<'_>,
    ) -> Result<Executed, SimError> {
        let pinned = self.pinned;
        let validate = self.request.validation;
        let fork = pinned
            .rules
            .at(planned.time)
            .ok_or(CallError::Unsupported)?;
        let spec = fork.spec;
        if fork.dialect != Dialect::Ethereum || !spec.is_enabled_in(SpecId::MERGE) {
            return Err(CallError::Unsupported.into());
        }
        let parent = self.parent.clone();
        let overrides = planned.overrides.cloned().unwrap_or_default();
        if overrides.difficulty.is_some_and(|d| !d.is_zero()) {
            // geth runs such a block before the merge, under rules neve
            // does not name.
            return Err(CallError::Unsupported.into());
        }
        if planned
            .state
            .is_some_and(|state| SYSTEM_CONTRACTS.iter().any(|a| state.contains_key(a)))
        {
            // The system calls would run the override's code: unpriced
            // work for neve, and answers geth words by crashing.
            return Err(CallError::Unsupported.into());
        }
        let cancun = spec.is_enabled_in(SpecId::CANCUN);
        let mut header = header::header(&parent, planned, &overrides, &fork, validate)?;
        let (block_env, cfg) =
            header::environment(&header, &fork, &overrides, validate, pinned.chain_id);

        // State overrides first, with the precompiles they move.
        let mut precompiles = SimPrecompiles::new(spec);
        if let Some(state) = planned.state {
            apply_overrides(overlay, state, &mut precompiles, &mut self.changes)?;
        }
        for (number, hash) in &self.hashes {
            overlay
                .cache
                .block_hashes
                .insert(U256::from(*number), *hash);
        }

        let mut evm = Context::mainnet()
            .with_db(&mut *overlay)
            .with_block(block_env)
            .with_cfg(cfg)
            .build_mainnet_with_inspector(Transfers::new(self.request.trace_transfers))
            .with_precompiles(precompiles);

        // Before the calls: EIP-4788, then EIP-2935.
        if let Some(root) = header.parent_beacon_block_root {
            let (result, state) = system_call(&mut evm, BEACON_ROOTS, root.to_vec().into())?;
            pinned.charge(result.gas().total_gas_spent());
            commit(&mut evm, state, &mut self.changes)?;
        }
        if spec.is_enabled_in(SpecId::PRAGUE) {
            let (result, state) =
                system_call(&mut evm, HISTORY_STORAGE, parent.hash.to_vec().into())?;
            pinned.charge(result.gas().total_gas_spent());
            if !result.is_success() {
                // geth's node crashes on it; not an answer.
                return Err(CallError::Unsupported.into());
            }
            commit(&mut evm, state, &mut self.changes)?;
        }

        let mut txs = Vec::with_capacity(planned.calls.len());
        let mut receipts = Vec::with_capacity(planned.calls.len());
        let mut calls = Vec::with_capacity(planned.calls.len());
        let mut used = 0u64;
        let mut blob_gas_used = 0u64;
        let mut all_logs_have_deposit = false;
        for (index, args) in planned.calls.iter().enumerate() {
            let called = self.call(&mut evm, &header, index, args, used)?;
            used += called.result.gas_used;
            blob_gas_used += called.blob_gas;
            all_logs_have_deposit |= called
                .result
                .logs
                .iter()
                .any(|log| log.topics.first() == Some(&DEPOSIT_TOPIC));
            receipts.push((called.result.success, used, called.receipt_logs));
            calls.push(called.result);
            txs.push(called.tx);
        }
        header.gas_used = used;
        if cancun {
            header.blob_gas_used = Some(blob_gas_used);
        }

        // After the calls: EIP-7685's requests.
        let requests = if spec.is_enabled_in(SpecId::PRAGUE) {
            if all_logs_have_deposit {
                return Err(CallError::Unsupported.into());
            }
            Some(self.requests(&mut evm)?)
        } else {
            None
        };
        drop(evm);

        // The withdrawals' credit, in Gwei.
        let withdrawals = spec
            .is_enabled_in(SpecId::SHANGHAI)
            .then(|| planned.withdrawals.clone());
        for withdrawal in withdrawals.iter().flatten() {
            credit(overlay, withdrawal, &mut self.changes)?;
        }

        // Its hash comes once its root is known (`sealed`).
        self.parent = Parent::of(&header, B256::ZERO);
        Ok(Executed {
            header,
            txs,
            receipts,
            calls,
            withdrawals,
            requests,
        })
    }

    /// One call of the block, run as geth's simulation runs it; `used` is
    /// the block's gas so far.
    fn call(
        &mut self,
        evm: &mut SimEvm<'_, 'a>,
        header: &Header,
        index: usize,
        args: &CallArgs,
        used: u64,
    ) -> Result<Called, SimError> {
        let validate = self.request.validation;
        let remaining = header.gas_limit - used;
        let sender = args.sender();
        let state_nonce = match evm.ctx.journaled_state.database.basic(sender) {
            Ok(account) => account.map_or(0, |a| a.nonce),
            Err(never) => match never {},
        };
        let nonce = args.nonce.map_or(state_nonce, |nonce| nonce.to::<u64>());
        let asked = args.gas.map_or(remaining, |g| g.to::<u64>());
        if remaining < asked {
            return Err(refused(
                Refusal::BlockGasLimitReached,
                format!("block gas limit reached: remaining: {remaining}, required: {asked}"),
            ));
        }
        let gas = asked.min(self.budget);
        let capped = gas < asked;
        let tx = transaction(args, sender, nonce, gas, self.pinned.chain_id)?;
        let base_fee = header.base_fee_per_gas.unwrap_or_default();
        // geth skips the base fee check only for a call without fees.
        evm.ctx.cfg.disable_base_fee = !validate && tx.fee_cap == 0 && tx.tip == 0;
        evm.inspector.start(index);
        if !validate
            && args.blob_versioned_hashes.is_some()
            && args.max_fee_per_blob_gas.is_none_or(|fee| fee.is_zero())
        {
            // geth skips the blob fee check then; revm does not.
            return Err(CallError::Unsupported.into());
        }
        // geth without validation lets a nonce at its maximum wrap to 0;
        // revm refuses it. The sender's nonce is not read while a call
        // runs, so the call runs from one below and lands on 0. Without
        // validation the nonce revm checks is the state's (geth's is not
        // checked at all).
        let wraps = !validate && state_nonce == u64::MAX && tx.to.is_some();
        let run_nonce = match (validate, wraps) {
            (true, _) => nonce,
            (false, true) => u64::MAX - 1,
            (false, false) => state_nonce,
        };
        let env = args.with_lists(TxEnv {
            tx_type: tx.tx_type,
            caller: sender,
            gas_limit: gas,
            gas_price: tx.fee_cap,
            kind: tx.to.map_or(TxKind::Create, TxKind::Call),
            value: tx.value,
            data: tx.input.clone(),
            nonce: run_nonce,
            chain_id: Some(tx.chain_id),
            gas_priority_fee: (tx.tx_type != 0).then_some(tx.tip),
            ..Default::default()
        });
        if wraps {
            set_nonce(evm, sender, u64::MAX - 1);
        }
        let done = match evm.inspect_tx(env) {
            Ok(done) => done,
            Err(EVMError::Transaction(invalid)) => {
                return Err(invalid_transaction(&invalid, args, &tx, base_fee, gas));
            }
            Err(EVMError::Database(never)) => match never {},
            Err(other) => return Err(CallError::Internal(other.to_string()).into()),
        };
        self.pinned.charge(done.result.gas().total_gas_spent());
        let result = done.result;
        self.changes.record(&done.state)?;
        evm.ctx.journaled_state.database.commit(done.state);
        if wraps {
            set_nonce(evm, sender, 0);
        }
        let gas_used = result.gas().tx_gas_used();
        let peak = result.gas().total_gas_spent().max(result.gas().floor_gas());
        self.budget = self.budget.saturating_sub(gas_used);
        let logs = evm.inspector.finish();
        let (return_data, error, receipt_logs) = match result {
            ExecutionResult::Success { output, logs, .. } => (output.into_data(), None, logs),
            ExecutionResult::Revert { output, .. } => (
                Bytes::new(),
                Some((true, crate::revert::revert_message(&output), Some(output))),
                Vec::new(),
            ),
            ExecutionResult::Halt { reason, .. } => {
                if needs_last_step(&reason)
                    || matches!(
                        reason,
                        HaltReason::PrecompileError | HaltReason::PrecompileErrorWithContext(_)
                    )
                {
                    // geth names the opcode or the precompile's own words:
                    // not told here, the node's.
                    return Err(CallError::Unsupported.into());
                }
                let mut message = halt_message(&reason, None);
                if capped {
                    message.push_str(" (gas limit was capped by the RPC server's global gas cap)");
                }
                (Bytes::new(), Some((false, message, None)), Vec::new())
            }
        };
        let success = error.is_none();
        Ok(Called {
            // Only a blob transaction's blobs count (geth's receipts).
            blob_gas: if tx.tx_type == 3 {
                BLOB_GAS
                    * args
                        .blob_versioned_hashes
                        .as_ref()
                        .map_or(0, |h| h.len() as u64)
            } else {
                0
            },
            result: CallResult {
                return_data,
                logs: if success { logs } else { Vec::new() },
                gas_used,
                max_used_gas: peak,
                success,
                error,
            },
            receipt_logs,
            tx,
        })
    }

    /// EIP-7002's and EIP-7251's queues, read by system calls after the
    /// block's calls: the block's requests (EIP-7685).
    fn requests(&mut self, evm: &mut SimEvm<'_, 'a>) -> Result<Vec<Bytes>, SimError> {
        let mut found = Vec::new();
        for (kind, queue) in REQUEST_QUEUES {
            let (result, state) = system_call(evm, queue, Bytes::new())?;
            self.pinned.charge(result.gas().total_gas_spent());
            commit(evm, state, &mut self.changes)?;
            match result {
                ExecutionResult::Success { output, .. } if !output.data().is_empty() => {
                    let mut request = vec![kind];
                    request.extend_from_slice(output.data());
                    found.push(Bytes::from(request));
                }
                ExecutionResult::Success { .. } => {}
                _ => return Err(CallError::Unsupported.into()),
            }
        }
        Ok(found)
    }
}

/// The block's state overrides, as geth applies them: a precompile moved
/// (refused when the account is none, or its destination overridden
/// too), every overridden precompile no longer one, then the accounts.
fn apply_overrides(
    overlay: &mut Overlay<'_>,
    state: &StateOverride,
    precompiles: &mut SimPrecompiles,
    changes: &mut Changes,
) -> Result<(), SimError> {
    let mut moved_to = BTreeSet::new();
    for (address, account) in state {
        if moved_to.contains(address) {
            return Err(refused(
                Refusal::Failed,
                format!("account {address} has already been overridden by a precompile"),
            ));
        }
        let is_precompile = precompiles.contains(address);
        if let Some(destination) = account.move_precompile_to_address {
            if !is_precompile {
                return Err(refused(
                    Refusal::Failed,
                    format!("account {address} is not a precompile"),
                ));
            }
            if state.contains_key(&destination) {
                return Err(refused(
                    Refusal::Failed,
                    format!("account {destination} is already overridden"),
                ));
            }
            precompiles.move_to(*address, destination);
            moved_to.insert(destination);
        }
        if is_precompile {
            precompiles.remove(address);
        }
    }
    let accounts: StateOverride = state
        .iter()
        .map(|(address, account)| {
            let mut account = account.clone();
            account.move_precompile_to_address = None;
            (*address, account)
        })
        .collect();
    apply_state_overrides(overlay, &accounts, Dialect::Ethereum).map_err(|e| match e {
        CallError::Override(message) => refused(Refusal::Failed, message),
        other => other.into(),
    })?;
    for (address, account) in state {
        let sets_nothing = account.nonce.is_none()
            && account.code.is_none()
            && account.balance.is_none()
            && account.state.is_none()
            && account.state_diff.is_none();
        if sets_nothing {
            // A move alone changes no account (geth creates none).
            continue;
        }
        changes.overridden(
            *address,
            account.state.is_some(),
            account
                .state
                .iter()
                .chain(account.state_diff.iter())
                .flat_map(|slots| slots.keys().map(|slot| U256::from_be_bytes(slot.0))),
        )?;
    }
    Ok(())
}

type SimEvm<'e, 'a> = revm::context::Evm<
    Context<BlockEnv, TxEnv, CfgEnv, &'e mut Overlay<'a>>,
    Transfers,
    revm::handler::instructions::EthInstructions<
        revm::interpreter::interpreter::EthInterpreter,
        Context<BlockEnv, TxEnv, CfgEnv, &'e mut Overlay<'a>>,
    >,
    SimPrecompiles,
    revm::handler::EthFrame,
>;

/// A system call (from geth's system address, 30M gas, no fee).
fn system_call(
    evm: &mut SimEvm<'_, '_>,
    contract: Address,
    data: Bytes,
) -> Result<(ExecutionResult, EvmState), SimError> {
    match evm.system_call_with_caller(SYSTEM_ADDRESS, contract, data) {
        Ok(done) => Ok((done.result, done.state)),
        Err(EVMError::Database(never)) => match never {},
        Err(other) => Err(CallError::Internal(other.to_string()).into()),
    }
}

/// A system call's changes, without the system address (which geth
/// leaves as it was).
fn commit(
    evm: &mut SimEvm<'_, '_>,
    mut state: EvmState,
    changes: &mut Changes,
) -> Result<(), SimError> {
    state.remove(&SYSTEM_ADDRESS);
    changes.record(&state)?;
    evm.ctx.journaled_state.database.commit(state);
    Ok(())
}

fn set_nonce(evm: &mut SimEvm<'_, '_>, address: Address, nonce: u64) {
    match evm.ctx.journaled_state.database.load_account(address) {
        Ok(account) => account.info.nonce = nonce,
        Err(never) => match never {},
    }
}

/// A withdrawal's credit: its amount in Gwei, to its address.
fn credit(
    overlay: &mut Overlay<'_>,
    withdrawal: &Withdrawal,
    changes: &mut Changes,
) -> Result<(), SimError> {
    let amount = U256::from(withdrawal.amount) * U256::from(1_000_000_000u64);
    let mut info = match overlay.basic(withdrawal.address) {
        Ok(info) => info.unwrap_or_default(),
        Err(never) => match never {},
    };
    info.balance = info.balance.saturating_add(amount);
    overlay.insert_account_info(withdrawal.address, info);
    changes.touched(withdrawal.address)?;
    Ok(())
}
