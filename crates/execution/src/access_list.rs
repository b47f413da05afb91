//! `eth_createAccessList` as geth makes it (`internal/ethapi/api.go`
//! `AccessList`, `eth/tracers/logger/access_list_tracer.go`).
//!
//! An access list changes what the call costs (listed accounts and slots
//! start warm), and what it costs can change what it does: a call that
//! branches on `GAS`, or one that ran out of gas, can reach accounts and
//! slots it did not before. So geth does not trace once: it runs the call
//! with the list found so far, traces what that run touches on top of the
//! list, and stops when a run adds nothing. neve repeats that loop over
//! the same pinned state with the same tracer rules, so the list, the gas
//! and the error it answers are geth's.
//!
//! The tracer records what geth's records, no more and no less: not what
//! revm's journal warmed (which includes `CREATE` targets, the coinbase
//! and 7702 delegation targets, none of which geth lists), but what a few
//! opcodes name on the stack as they are about to execute.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_eips::eip7702::SignedAuthorization;
use alloy_primitives::{Address, B256, U256};
use revm::Inspector;
use revm::bytecode::opcode;
use revm::context_interface::transaction::AuthorizationTr;
use revm::interpreter::interpreter_types::{InputsTr, Jumps, LoopControl, StackTr};
use revm::interpreter::{Interpreter, InterpreterTypes};
use revm::precompile::{PrecompileSpecId, Precompiles};
use revm::primitives::hardfork::SpecId;

use crate::error::CallError;
use crate::run::{Ended, Pinned, Request, Run, run_inspected};

/// Most runs one access list may take. geth loops until the list stops
/// growing, with no bound but the request's timeout; each run's tracer
/// starts from the previous list, so the list only grows and in practice
/// settles in two or three runs. A call still growing after this many is
/// not answered here ([`CallError::Unsupported`]: the node answers it, so
/// the answer stays geth's). Default is 16.
pub const MAX_ROUNDS: usize = 16;

/// geth's `logger.AccessListTracer`: the accounts and storage slots a run
/// names, on top of the list it was seeded with, less excluded accounts.
///
/// As an [`Inspector`] it looks at each instruction before it executes:
/// - `SLOAD`/`SSTORE` (stack ≥ 1): the slot on top of the stack, of the
///   executing contract. Not checked against the exclusions, as in geth:
///   the sender, the callee and precompiles are listed when their storage
///   is touched.
/// - `EXTCODECOPY`/`EXTCODEHASH`/`EXTCODESIZE`/`BALANCE`/`SELFDESTRUCT`
///   (stack ≥ 1): the address on top of the stack, unless excluded.
/// - `CALL`/`CALLCODE`/`DELEGATECALL`/`STATICCALL` (stack ≥ 5): the
///   address second from the top, unless excluded.
#[derive(Clone, Debug, Default)]
pub struct AccessListTracer {
    /// Accounts never added by an address opcode (slots still are).
    excluded: HashSet<Address>,
    /// Accounts and their slots, ordered as geth's output is: by address
    /// bytes, then by slot bytes.
    list: BTreeMap<Address, BTreeSet<B256>>,
}

impl AccessListTracer {
    /// A tracer seeded with `initial` (the caller's list, or the previous
    /// run's), never adding an account in `excluded` by address.
    ///
    /// As geth's `NewAccessListTracer`: an entry of `initial` whose
    /// address is excluded is dropped whole, its slots with it; the rest
    /// are merged (duplicate addresses and slots collapse).
    pub fn new(initial: &AccessList, excluded: HashSet<Address>) -> Self {
        let mut list: BTreeMap<Address, BTreeSet<B256>> = BTreeMap::new();
        for item in &initial.0 {
            if excluded.contains(&item.address) {
                continue;
            }
            list.entry(item.address)
                .or_default()
                .extend(item.storage_keys.iter().copied());
        }
        AccessListTracer { excluded, list }
    }

    /// The list as geth answers it: sorted by address bytes, each
    /// account's slots sorted ascending, an account without slots listed
    /// with empty `storageKeys`.
    pub fn access_list(&self) -> AccessList {
        AccessList(
            self.list
                .iter()
                .map(|(address, slots)| AccessListItem {
                    address: *address,
                    storage_keys: slots.iter().copied().collect(),
                })
                .collect(),
        )
    }

    /// Whether both hold the same accounts with the same slots (geth's
    /// `Equal`: set equality; the exclusions are not compared).
    pub fn equal(&self, other: &AccessListTracer) -> bool {
        self.list == other.list
    }

    /// Records what instruction `op` names, with `stack` as it stands
    /// before it executes (bottom first) in `contract`'s frame.
    fn record(&mut self, op: u8, stack: &[U256], contract: Address) {
        let len = stack.len();
        match op {
            opcode::SLOAD | opcode::SSTORE if len >= 1 => {
                let slot = B256::from(stack[len - 1].to_be_bytes());
                self.list.entry(contract).or_default().insert(slot);
            }
            opcode::EXTCODECOPY
            | opcode::EXTCODEHASH
            | opcode::EXTCODESIZE
            | opcode::BALANCE
            | opcode::SELFDESTRUCT
                if len >= 1 =>
            {
                self.add_address(word_address(stack[len - 1]));
            }
            opcode::DELEGATECALL | opcode::CALL | opcode::STATICCALL | opcode::CALLCODE
                if len >= 5 =>
            {
                self.add_address(word_address(stack[len - 2]));
            }
            _ => {}
        }
    }

    fn add_address(&mut self, address: Address) {
        if !self.excluded.contains(&address) {
            self.list.entry(address).or_default();
        }
    }
}

/// Whether the tracer looks at instruction `op`.
const fn watched(op: u8) -> bool {
    matches!(
        op,
        opcode::SLOAD
            | opcode::SSTORE
            | opcode::EXTCODECOPY
            | opcode::EXTCODEHASH
            | opcode::EXTCODESIZE
            | opcode::BALANCE
            | opcode::SELFDESTRUCT
            | opcode::DELEGATECALL
            | opcode::CALL
            | opcode::STATICCALL
            | opcode::CALLCODE
    )
}

/// The address in a stack word: its low 20 bytes (geth's `Bytes20`).
fn word_address(word: U256) -> Address {
    Address::from_word(B256::from(word.to_be_bytes()))
}

impl<CTX, INTR: InterpreterTypes> Inspector<CTX, INTR> for AccessListTracer {
    /// geth calls its tracer's `OnOpcode` before an instruction runs, and
    /// again from its error path for an instruction that failed before
    /// being logged (out of gas, stack underflow, an invalid opcode), so
    /// every instruction the interpreter reaches is seen once. revm's
    /// `step` runs before each instruction's gas and stack checks, so
    /// recording here sees the same instructions, failing ones included.
    fn step(&mut self, interp: &mut Interpreter<INTR>, _: &mut CTX) {
        // An interpreter whose frame already ended does not run the
        // instruction under its counter; geth never sees it.
        if interp.bytecode.is_end() {
            return;
        }
        let op = interp.bytecode.opcode();
        if watched(op) {
            let contract = interp.input.target_address();
            self.record(op, interp.stack.data(), contract);
        }
    }
}

/// The accounts an access list never names by address, as geth's
/// `AccessList` gathers them: the sender, the callee (for a creation, the
/// address it creates: `from.create(nonce)`, the nonce being the call's
/// when given, else the sender's in state), the precompiles active under
/// `spec`, and the authority of each authorization geth would apply
/// (chain id 0 or `chain_id`, nonce below `u64::MAX`, signature that
/// recovers with a low `s`).
pub fn excluded_addresses(
    from: Address,
    to: Address,
    spec: SpecId,
    chain_id: u64,
    authorizations: &[SignedAuthorization],
) -> HashSet<Address> {
    let mut excluded = HashSet::from([from, to]);
    excluded.extend(
        Precompiles::new(PrecompileSpecId::from_spec_id(spec))
            .addresses()
            .copied(),
    );
    for auth in authorizations {
        let auth_chain = <SignedAuthorization as AuthorizationTr>::chain_id(auth);
        if (!auth_chain.is_zero() && auth_chain != U256::from(chain_id))
            || <SignedAuthorization as AuthorizationTr>::nonce(auth) == u64::MAX
        {
            continue;
        }
        if let Some(authority) = <SignedAuthorization as AuthorizationTr>::authority(auth) {
            excluded.insert(authority);
        }
    }
    excluded
}

/// How making an access list ended.
#[derive(Clone, Debug)]
pub enum AccessListOutcome {
    /// The list settled: geth's `{accessList, gasUsed, error}`.
    Done {
        /// The list, sorted as geth answers it.
        list: AccessList,
        /// Gas the last run used with `list` as its access list.
        gas_used: u64,
        /// How the last run failed, in geth's words (`res.Err`): a revert
        /// is plain `execution reverted`, its reason not decoded; `None`
        /// when it succeeded.
        error: Option<String>,
    },
    /// A run needed state not held (or a block outside the tail): fetch
    /// and make the list again from the start.
    Incomplete(Run),
}

/// Makes `request`'s access list at `pinned` as geth's `AccessList` does:
/// start from the request's list (entries of `excluded` accounts dropped),
/// then run the call with the current list as its access list under a
/// tracer seeded with that list, until a run's tracer holds exactly the
/// list it started from. `excluded` is [`excluded_addresses`]'s set.
///
/// A run refused before executing (geth's consensus errors) is this
/// function's error; the caller words it as geth does (`failed to apply
/// transaction: <hash> err: <message>`).
pub fn create_access_list(
    pinned: &Pinned<'_>,
    request: &Request,
    excluded: HashSet<Address>,
) -> Result<AccessListOutcome, CallError> {
    let initial = request.args.access_list.clone().unwrap_or_default();
    let mut previous = AccessListTracer::new(&initial, excluded);
    let mut round = request.clone();
    for _ in 0..MAX_ROUNDS {
        let list = previous.access_list();
        // Always a list, if empty: the run is an EIP-2930 (or later)
        // transaction, as geth's is.
        round.args.access_list = Some(list.clone());
        let mut tracer = AccessListTracer::new(&list, previous.excluded.clone());
        let outcome = match run_inspected(pinned, &round, None, &mut tracer)? {
            Run::Done(outcome) => outcome,
            other => return Ok(AccessListOutcome::Incomplete(other)),
        };
        if tracer.equal(&previous) {
            return Ok(AccessListOutcome::Done {
                list,
                gas_used: outcome.gas_used,
                error: failure(&outcome.ended),
            });
        }
        previous = tracer;
    }
    Err(CallError::Unsupported)
}

/// geth's `res.Err.Error()` for how a run ended.
fn failure(ended: &Ended) -> Option<String> {
    match ended {
        Ended::Success => None,
        Ended::Revert => Some("execution reverted".to_string()),
        Ended::Halt(message) => Some(message.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: u8) -> B256 {
        B256::with_last_byte(n)
    }

    fn item(address: Address, slots: &[u8]) -> AccessListItem {
        AccessListItem {
            address,
            storage_keys: slots.iter().map(|n| slot(*n)).collect(),
        }
    }

    fn word(address: Address) -> U256 {
        U256::from_be_slice(address.as_slice())
    }

    #[test]
    fn seeding_drops_excluded_entries_whole_and_merges_the_rest() {
        let (a, b, x) = (
            Address::repeat_byte(0xa),
            Address::repeat_byte(0xb),
            Address::repeat_byte(0xee),
        );
        let initial = AccessList(vec![
            item(b, &[2, 1]),
            item(x, &[9]),
            item(a, &[]),
            item(b, &[1, 3]),
        ]);
        let tracer = AccessListTracer::new(&initial, HashSet::from([x]));
        assert_eq!(
            tracer.access_list(),
            AccessList(vec![item(a, &[]), item(b, &[1, 2, 3])])
        );
    }

    #[test]
    fn slots_ignore_exclusions_and_addresses_respect_them() {
        let (contract, other, excluded) = (
            Address::repeat_byte(0xc0),
            Address::repeat_byte(0x0b),
            Address::with_last_byte(1),
        );
        let mut tracer =
            AccessListTracer::new(&AccessList::default(), HashSet::from([contract, excluded]));
        tracer.record(opcode::SLOAD, &[U256::from(7)], contract);
        tracer.record(opcode::SSTORE, &[U256::from(1), U256::from(5)], contract);
        tracer.record(opcode::BALANCE, &[word(excluded)], contract);
        tracer.record(opcode::EXTCODEHASH, &[word(other)], contract);
        assert_eq!(
            tracer.access_list(),
            AccessList(vec![item(other, &[]), item(contract, &[5, 7])])
        );
    }

    #[test]
    fn calls_name_the_second_word_from_the_top() {
        let (callee, contract) = (Address::repeat_byte(0x22), Address::repeat_byte(0xc0));
        let mut tracer = AccessListTracer::new(&AccessList::default(), HashSet::new());
        // gas on top, the callee below it: [retLen, retOff, argLen, argOff, callee, gas].
        let stack = [
            U256::ZERO,
            U256::ZERO,
            U256::ZERO,
            U256::ZERO,
            word(callee),
            U256::from(100_000),
        ];
        tracer.record(opcode::STATICCALL, &stack, contract);
        assert_eq!(tracer.access_list(), AccessList(vec![item(callee, &[])]));
        // Too short a stack records nothing (geth's thresholds: 1 and 5).
        let mut short = AccessListTracer::default();
        short.record(opcode::CALL, &stack[2..], contract);
        short.record(opcode::SLOAD, &[], contract);
        short.record(opcode::BALANCE, &[], contract);
        assert!(short.access_list().0.is_empty());
        // An address word's high bytes are ignored.
        let mut high = AccessListTracer::default();
        high.record(
            opcode::EXTCODESIZE,
            &[word(callee) | (U256::from(1) << 200)],
            contract,
        );
        assert_eq!(high.access_list(), AccessList(vec![item(callee, &[])]));
    }

    #[test]
    fn equality_is_set_equality_of_accounts_and_slots() {
        let (a, b) = (Address::repeat_byte(0xa), Address::repeat_byte(0xb));
        let one = AccessListTracer::new(
            &AccessList(vec![item(a, &[1, 2]), item(b, &[])]),
            HashSet::new(),
        );
        let same = AccessListTracer::new(
            &AccessList(vec![item(b, &[]), item(a, &[2]), item(a, &[1])]),
            HashSet::from([Address::repeat_byte(0xff)]),
        );
        let fewer_slots = AccessListTracer::new(
            &AccessList(vec![item(a, &[1]), item(b, &[])]),
            HashSet::new(),
        );
        let fewer_accounts =
            AccessListTracer::new(&AccessList(vec![item(a, &[1, 2])]), HashSet::new());
        assert!(one.equal(&same) && same.equal(&one));
        assert!(!one.equal(&fewer_slots) && !fewer_slots.equal(&one));
        assert!(!one.equal(&fewer_accounts) && !fewer_accounts.equal(&one));
    }

    #[test]
    fn empty_slots_serialize_as_an_empty_array() {
        let tracer = AccessListTracer::new(
            &AccessList(vec![item(Address::repeat_byte(0xa), &[])]),
            HashSet::new(),
        );
        let json = serde_json::to_string(&tracer.access_list()).unwrap();
        assert_eq!(
            json,
            r#"[{"address":"0x0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a","storageKeys":[]}]"#
        );
    }

    #[test]
    fn exclusions_hold_sender_callee_and_the_forks_precompiles() {
        let (from, to) = (Address::repeat_byte(0xf), Address::repeat_byte(0x7));
        let berlin = excluded_addresses(from, to, SpecId::BERLIN, 1, &[]);
        assert!(berlin.contains(&from) && berlin.contains(&to));
        assert!(berlin.contains(&Address::with_last_byte(1)));
        assert!(berlin.contains(&Address::with_last_byte(9)));
        assert!(!berlin.contains(&Address::with_last_byte(0x0a)));
        let cancun = excluded_addresses(from, to, SpecId::CANCUN, 1, &[]);
        assert!(cancun.contains(&Address::with_last_byte(0x0a)));
    }

    /// The tracer as revm drives it: a contract reads a slot of its own
    /// (excluded, still listed), the balance of another account and of
    /// the sender (excluded), and calls a third.
    #[test]
    fn revm_drives_the_tracer_as_geth_drives_its_own() {
        use alloy_primitives::{Bytes, TxKind};
        use revm::bytecode::Bytecode;
        use revm::context::TxEnv;
        use revm::database::{CacheDB, EmptyDB};
        use revm::state::AccountInfo;
        use revm::{Context, InspectEvm, MainBuilder, MainContext};

        let caller = Address::repeat_byte(0xca);
        let contract = Address::repeat_byte(0xc0);
        let read = Address::repeat_byte(0xaa);
        let called = Address::repeat_byte(0xbb);
        // PUSH1 7, SLOAD, POP
        let mut code = vec![0x60, 0x07, 0x54, 0x50];
        // PUSH20 read, BALANCE, POP; PUSH20 caller, BALANCE, POP
        for address in [read, caller] {
            code.push(0x73);
            code.extend_from_slice(address.as_slice());
            code.extend([0x31, 0x50]);
        }
        // PUSH1 0 (x4), PUSH20 called, GAS, STATICCALL, POP, STOP
        code.extend([0x60, 0, 0x60, 0, 0x60, 0, 0x60, 0, 0x73]);
        code.extend_from_slice(called.as_slice());
        code.extend([0x5a, 0xfa, 0x50, 0x00]);
        let mut db = CacheDB::new(EmptyDB::new());
        db.insert_account_info(
            contract,
            AccountInfo::from_bytecode(Bytecode::new_raw(Bytes::from(code))),
        );
        let mut tracer =
            AccessListTracer::new(&AccessList::default(), HashSet::from([caller, contract]));
        {
            let mut evm = Context::mainnet()
                .with_db(db)
                .build_mainnet_with_inspector(&mut tracer);
            let done = evm
                .inspect_tx(TxEnv {
                    caller,
                    kind: TxKind::Call(contract),
                    gas_limit: 1_000_000,
                    ..Default::default()
                })
                .unwrap();
            assert!(done.result.is_success(), "{:?}", done.result);
        }
        assert_eq!(
            tracer.access_list(),
            AccessList(vec![
                item(read, &[]),
                item(called, &[]),
                item(contract, &[7])
            ])
        );
    }
}
