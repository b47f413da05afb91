//! Which accounts and slots geth's prestate tracer looks up
//! (`native/prestate.go`): the sender, the recipient and the coinbase,
//! then, for each step that executed (not one refused for its gas or
//! stack), the slot of an `SLOAD` or `SSTORE`, the account of a
//! `BALANCE`, `EXTCODE*`, `SELFDESTRUCT` or call, and each contract
//! created. revm loads more than geth looks up (a slot an `SSTORE` out of
//! gas priced, an account an access list warmed): what revm-inspectors
//! reports is cut to this set.

use std::collections::HashSet;

use alloy_primitives::{Address, B256};
use revm::bytecode::opcode;
use revm::interpreter::Interpreter;
use revm::interpreter::interpreter_types::{InputsTr, Jumps};

/// A step's lookup, kept until the step is known to have executed.
#[derive(Clone, Copy)]
enum Pending {
    Slot(Address, B256),
    Account(Address),
}

/// What geth's prestate tracer looked up in one transaction.
#[derive(Default)]
pub(crate) struct Lookups {
    pub(crate) accounts: HashSet<Address>,
    pub(crate) slots: HashSet<(Address, B256)>,
    /// A creation failed before it had an address (geth looks up the
    /// address it would have had).
    pub(crate) unsure: bool,
    pending: Option<Pending>,
}

impl Lookups {
    /// A step begins: what it would look up.
    pub(crate) fn step(&mut self, interp: &Interpreter) {
        let stack = interp.stack.data();
        let top = |n: usize| stack.len().checked_sub(n + 1).map(|i| stack[i]);
        let address_at = |n: usize| top(n).map(|word| Address::from_word(B256::from(word)));
        self.pending = match interp.bytecode.opcode() {
            opcode::SLOAD | opcode::SSTORE => {
                top(0).map(|slot| Pending::Slot(interp.input.target_address(), B256::from(slot)))
            }
            opcode::EXTCODECOPY
            | opcode::EXTCODEHASH
            | opcode::EXTCODESIZE
            | opcode::BALANCE
            | opcode::SELFDESTRUCT => address_at(0).map(Pending::Account),
            opcode::DELEGATECALL | opcode::CALL | opcode::STATICCALL | opcode::CALLCODE
                if stack.len() >= 5 =>
            {
                address_at(1).map(Pending::Account)
            }
            _ => None,
        };
    }

    /// The step ended; `executed` unless refused before it ran.
    pub(crate) fn step_end(&mut self, executed: bool) {
        match self.pending.take() {
            Some(Pending::Slot(address, slot)) if executed => {
                self.slots.insert((address, slot));
            }
            Some(Pending::Account(address)) if executed => {
                self.accounts.insert(address);
            }
            _ => {}
        }
    }

    /// A creation ended, with the address it made (`None`: it failed
    /// before having one).
    pub(crate) fn created(&mut self, address: Option<Address>) {
        match address {
            Some(address) => {
                self.accounts.insert(address);
            }
            None => self.unsure = true,
        }
    }
}
