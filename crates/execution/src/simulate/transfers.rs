//! geth's simulation log tracer (`internal/ethapi/logtracer.go`) as a
//! revm inspector: each call's logs, kept per call frame so a frame that
//! failed drops its own, numbered across the block (a dropped log still
//! used its number, as in geth), and with `traceTransfers` every ether
//! move (a call's or creation's value, not `DELEGATECALL`'s or
//! `CALLCODE`'s; a self-destruct's balance) as an ERC-7528 `Transfer` log
//! from `0xEeee…EEeE`.

use alloy_primitives::{Address, B256, Bytes, U256, address, b256};
use revm::Inspector;
use revm::interpreter::{CallInputs, CallOutcome, CallScheme, CreateInputs, CreateOutcome};
use revm::primitives::Log;

/// `Transfer(address,address,uint256)`.
const TRANSFER_TOPIC: B256 =
    b256!("0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef");
/// ERC-7528's address for ether.
const ETHER: Address = address!("0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE");

/// One log as a call's answer shows it (its block's and transaction's
/// fields are the block's to fill).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SimLog {
    pub(crate) address: Address,
    pub(crate) topics: Vec<B256>,
    pub(crate) data: Bytes,
    /// Its number in the block.
    pub(crate) index: u64,
    pub(crate) tx_index: usize,
}

/// The tracer of one block.
pub(crate) struct Transfers {
    trace_transfers: bool,
    /// Logs of every open frame, the outermost first.
    frames: Vec<Vec<SimLog>>,
    /// Where a creation's transfer waits for its address: (frame, log).
    pending_creations: Vec<Option<(usize, usize)>>,
    count: u64,
    tx_index: usize,
}

impl Transfers {
    pub(crate) fn new(trace_transfers: bool) -> Self {
        Transfers {
            trace_transfers,
            frames: Vec::new(),
            pending_creations: Vec::new(),
            count: 0,
            tx_index: 0,
        }
    }

    /// A new call, the block's `index`th, starts.
    pub(crate) fn start(&mut self, index: usize) {
        self.frames.clear();
        self.pending_creations.clear();
        self.tx_index = index;
    }

    /// The finished call's logs (none if it failed).
    pub(crate) fn finish(&mut self) -> Vec<SimLog> {
        let logs = if self.frames.is_empty() {
            Vec::new()
        } else {
            self.frames.swap_remove(0)
        };
        self.frames.clear();
        logs
    }

    fn capture(&mut self, address: Address, topics: Vec<B256>, data: Bytes) -> Option<usize> {
        let index = self.count;
        self.count += 1;
        let frame = self.frames.last_mut()?;
        frame.push(SimLog {
            address,
            topics,
            data,
            index,
            tx_index: self.tx_index,
        });
        Some(frame.len() - 1)
    }

    fn transfer(&mut self, from: Address, to: Address, value: U256) -> Option<usize> {
        if !self.trace_transfers {
            return None;
        }
        self.capture(
            ETHER,
            vec![TRANSFER_TOPIC, from.into_word(), to.into_word()],
            Bytes::from(value.to_be_bytes::<32>().to_vec()),
        )
    }

    fn enter(&mut self) {
        self.frames.push(Vec::new());
    }

    /// A frame ends: its logs join its parent's unless it failed; the
    /// outermost frame's are kept or dropped.
    fn exit(&mut self, failed: bool) {
        if self.frames.len() <= 1 {
            if failed && let Some(top) = self.frames.first_mut() {
                top.clear();
            }
            return;
        }
        let frame = self.frames.pop().unwrap_or_default();
        if !failed && let Some(parent) = self.frames.last_mut() {
            parent.extend(frame);
        }
    }
}

/// The frame operations the inspector's hooks make, for tests.
#[cfg(test)]
pub(crate) struct FrameOps<'a>(&'a mut Transfers);

#[cfg(test)]
impl FrameOps<'_> {
    pub(crate) fn push_frame(&mut self) {
        self.0.enter();
    }

    pub(crate) fn pop_frame(&mut self, failed: bool) {
        self.0.exit(failed);
    }
}

#[cfg(test)]
impl Transfers {
    pub(crate) fn frames_for_test(&mut self, op: impl FnOnce(&mut FrameOps<'_>)) {
        op(&mut FrameOps(self));
    }
}

impl<CTX> Inspector<CTX> for Transfers {
    fn log(&mut self, _: &mut CTX, log: Log) {
        self.capture(
            log.address,
            log.data.topics().to_vec(),
            log.data.data.clone(),
        );
    }

    fn call(&mut self, _: &mut CTX, inputs: &mut CallInputs) -> Option<CallOutcome> {
        self.enter();
        let moves = !matches!(
            inputs.scheme,
            CallScheme::DelegateCall | CallScheme::CallCode
        );
        if let Some(value) = inputs.value.transfer()
            && moves
            && value > U256::ZERO
        {
            self.transfer(inputs.caller, inputs.target_address, value);
        }
        None
    }

    fn call_end(&mut self, _: &mut CTX, _: &CallInputs, outcome: &mut CallOutcome) {
        self.exit(!outcome.result.result.is_ok());
    }

    fn create(&mut self, _: &mut CTX, inputs: &mut CreateInputs) -> Option<CreateOutcome> {
        self.enter();
        let pending = if inputs.value() > U256::ZERO {
            // The new address is known when the creation ends; the log's
            // place and number are taken now, as geth takes them.
            self.transfer(inputs.caller(), Address::ZERO, inputs.value())
                .map(|log| (self.frames.len() - 1, log))
        } else {
            None
        };
        self.pending_creations.push(pending);
        None
    }

    fn create_end(&mut self, _: &mut CTX, _: &CreateInputs, outcome: &mut CreateOutcome) {
        if let Some(Some((frame, log))) = self.pending_creations.pop()
            && let Some(address) = outcome.address
            && let Some(log) = self.frames.get_mut(frame).and_then(|f| f.get_mut(log))
        {
            log.topics[2] = address.into_word();
        }
        self.exit(!outcome.result.result.is_ok());
    }

    fn selfdestruct(&mut self, contract: Address, target: Address, value: U256) {
        if value > U256::ZERO {
            self.transfer(contract, target, value);
        }
    }
}
