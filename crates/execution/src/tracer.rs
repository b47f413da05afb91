//! geth's access-list tracer (`eth/tracers/logger/access_list_tracer.go`)
//! as a revm [`Inspector`]: the accounts and slots a run names on the
//! stack as a few opcodes are about to execute, not what revm's journal
//! warmed (which includes `CREATE` targets, the coinbase and 7702
//! delegation targets, none of which geth lists). `access_list.rs` runs
//! the loop that uses it; a run takes one through `run.rs`.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_primitives::{Address, B256, U256};
use revm::Inspector;
use revm::bytecode::opcode;
use revm::interpreter::interpreter_types::{InputsTr, Jumps, LoopControl, StackTr};
use revm::interpreter::{Interpreter, InterpreterTypes};

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
    pub(crate) excluded: HashSet<Address>,
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
