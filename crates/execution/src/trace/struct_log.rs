//! geth's struct logger (`eth/tracers/logger`), as a revm inspector that
//! writes each step as geth's legacy JSON straight into the answer: one
//! buffer, capped, never a tree of steps. A step is begun where revm
//! calls `step` (before the instruction, as geth's `OnOpcode`) and
//! written at `step_end`, once its gas cost is known.
//!
//! What geth words otherwise than neve can (a step that fails before it
//! executes: geth logs its full cost and an error of its own words) makes
//! the trace unsure, and the answer the node's.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use alloy_primitives::{Address, B256};
use revm::Inspector;
use revm::bytecode::opcode;
use revm::context_interface::{ContextTr, JournalTr};
use revm::interpreter::interpreter_types::{InputsTr, Jumps, ReturnData};
use revm::interpreter::{FrameInput, InstructionResult, Interpreter, InterpreterAction};

use crate::go_json::go_escaped;

use super::limits::Limits;
use super::options::LoggerConfig;

/// One step begun: what geth writes of it before its cost, and what its
/// end needs.
struct Begun {
    /// Bytes of `{"pc":..,"op":"..","gas":..,"gasCost":` (and the comma
    /// before it) at the end of the steps written.
    head_len: usize,
    /// Gas left before it.
    gas: u64,
    op: u8,
    /// The contract whose storage an `SLOAD` or `SSTORE` reads or writes,
    /// and the slot.
    slot: Option<(Address, B256)>,
    /// The transaction's refund counter before it, and its frame's part.
    refund: i64,
    frame_refund: i64,
    /// The stack's length before it (geth's stack errors name it).
    stack_len: usize,
}

/// geth's struct logger over one transaction.
pub(crate) struct StructLogger {
    config: LoggerConfig,
    /// The `structLogs` elements written so far, comma separated.
    logs: Vec<u8>,
    /// The step begun, its head already in `logs`.
    begun: Option<Begun>,
    /// The step's fields after its cost, written at its start.
    tail: Vec<u8>,
    /// Bytes of `,"depth":..` at the start of `tail` (an error follows it).
    depth_len: usize,
    /// Steps written: the first takes no comma.
    count: usize,
    /// Bytes of steps so far, as geth counts them against `limit`.
    result_size: usize,
    /// Each contract's slots read or written so far in the transaction.
    storage: HashMap<Address, BTreeMap<B256, B256>>,
    /// The refund counter of each frame below the current one, at its
    /// last step: geth's counter is the transaction's, revm's a frame's.
    refunds: Vec<i64>,
    limits: Limits,
    /// Bytes its steps may take: what the answer has room for.
    room: usize,
    unsure: bool,
}

impl StructLogger {
    pub(crate) fn new(config: LoggerConfig, limits: Limits, room: usize) -> Self {
        StructLogger {
            config,
            logs: Vec::new(),
            begun: None,
            tail: Vec::new(),
            depth_len: 0,
            count: 0,
            result_size: 0,
            storage: HashMap::new(),
            refunds: Vec::new(),
            limits,
            room,
            unsure: false,
        }
    }

    /// geth's result: `{"gas":..,"failed":..,"returnValue":"0x..","structLogs":[..]}`
    /// into `out`; `gas` is the receipt's, `output` what the transaction
    /// returned (or its revert data).
    pub(crate) fn finish(
        self,
        out: &mut Vec<u8>,
        gas: u64,
        failed: bool,
        output: &[u8],
    ) -> Result<(), super::limits::Stopped> {
        self.limits.stopped()?;
        if self.unsure {
            return Err(super::limits::Stopped::Unsure);
        }
        let _ = write!(
            out,
            "{{\"gas\":{gas},\"failed\":{failed},\"returnValue\":\"0x"
        );
        super::hex::hex_into(out, output);
        out.extend_from_slice(b"\",\"structLogs\":[");
        out.extend_from_slice(&self.logs);
        out.extend_from_slice(b"]}");
        Ok(())
    }

    /// Stack, return data and memory as geth writes them after `depth`.
    fn write_tail(&mut self, interp: &Interpreter, depth: usize) {
        let tail = &mut self.tail;
        tail.clear();
        let _ = write!(tail, ",\"depth\":{depth}");
        self.depth_len = tail.len();
        if !self.config.disable_stack {
            tail.extend_from_slice(b",\"stack\":[");
            for (i, value) in interp.stack.data().iter().enumerate() {
                if i > 0 {
                    tail.push(b',');
                }
                let _ = write!(tail, "\"{value:#x}\"");
            }
            tail.push(b']');
        }
        if self.config.enable_return_data {
            let data = interp.return_data.buffer();
            if !data.is_empty() {
                tail.extend_from_slice(b",\"returnData\":\"0x");
                super::hex::hex_into(tail, data);
                tail.push(b'"');
            }
        }
        if self.config.enable_memory {
            let memory = interp.memory.context_memory();
            if !memory.is_empty() {
                tail.extend_from_slice(b",\"memory\":[");
                for (i, word) in memory.chunks(32).enumerate() {
                    if i > 0 {
                        tail.push(b',');
                    }
                    let mut padded = [0u8; 32];
                    padded[..word.len()].copy_from_slice(word);
                    tail.extend_from_slice(b"\"0x");
                    super::hex::hex_into(tail, &padded);
                    tail.push(b'"');
                }
                tail.push(b']');
            }
        }
    }
}

impl<CTX: ContextTr> Inspector<CTX> for StructLogger {
    fn step(&mut self, interp: &mut Interpreter, context: &mut CTX) {
        if self.limits.tick() {
            super::limits::halt(interp, context);
            return;
        }
        // geth stops logging once its output passed `limit`.
        if self.config.limit != 0 && self.result_size as i64 > self.config.limit {
            return;
        }
        let depth = context.journal_ref().depth();
        let op = interp.bytecode.opcode();
        let gas = interp.gas.remaining();
        // The transaction's refund counter: this frame's and those below.
        self.refunds.resize(depth.saturating_sub(1), 0);
        let refund = self.refunds.iter().sum::<i64>() + interp.gas.refunded();
        let stack = interp.stack.data();
        let top = |n: usize| stack.len().checked_sub(n + 1).map(|i| stack[i]);
        let slot = match op {
            opcode::SLOAD | opcode::SSTORE if !self.config.disable_storage => {
                top(0).map(|key| (interp.input.target_address(), B256::from(key.to_be_bytes())))
            }
            _ => None,
        };
        if op == opcode::SSTORE
            && let (Some((address, key)), Some(value)) = (slot, top(1))
        {
            self.storage
                .entry(address)
                .or_default()
                .insert(key, B256::from(value.to_be_bytes()));
        }
        let start = self.logs.len();
        if self.count > 0 {
            self.logs.push(b',');
        }
        let _ = write!(
            self.logs,
            "{{\"pc\":{},\"op\":\"{}\",\"gas\":{gas},\"gasCost\":",
            interp.bytecode.pc(),
            super::opcodes::name(op)
        );
        self.write_tail(interp, depth);
        self.begun = Some(Begun {
            head_len: self.logs.len() - start,
            gas,
            op,
            slot,
            refund,
            frame_refund: interp.gas.refunded(),
            stack_len: interp.stack.len(),
        });
    }

    fn step_end(&mut self, interp: &mut Interpreter, context: &mut CTX) {
        let Some(begun) = self.begun.take() else {
            return;
        };
        let depth = context.journal_ref().depth();
        // Remembered for the frames this step may call into.
        if self.refunds.len() < depth {
            self.refunds.resize(depth, 0);
        }
        if let Some(last) = depth.checked_sub(1) {
            self.refunds[last] = interp.gas.refunded();
        }
        let result = interp
            .bytecode
            .action
            .as_ref()
            .and_then(|action| action.instruction_result());
        // geth logs a step its stack refuses with the words of its error
        // (and the opcode's constant gas, which revm charged too).
        let error = match result {
            Some(InstructionResult::StackUnderflow) => {
                super::opcodes::stack_error(begun.op, begun.stack_len, true)
            }
            Some(InstructionResult::StackOverflow) => {
                super::opcodes::stack_error(begun.op, begun.stack_len, false)
            }
            _ => None,
        };
        if error.is_none() && result.is_some_and(super::opcodes::refused_before_executing) {
            // Out of gas before it executed: geth logs the cost it could
            // not pay, which revm does not tell.
            self.unsure = true;
        }
        // geth's cost of a creation leaves out the gas it hands the new
        // frame (a call's includes it, as revm's does).
        let handed = match &interp.bytecode.action {
            Some(InterpreterAction::NewFrame(FrameInput::Create(inputs))) => inputs.gas_limit(),
            _ => 0,
        };
        let cost = begun
            .gas
            .saturating_sub(interp.gas.remaining())
            .saturating_sub(handed);
        // geth reads the refund counter once the step's gas is priced,
        // which for SSTORE and SELFDESTRUCT counts their own refund.
        let refund = match begun.op {
            opcode::SSTORE | opcode::SELFDESTRUCT => {
                begun.refund - begun.frame_refund + interp.gas.refunded()
            }
            _ => begun.refund,
        };
        let before = self.logs.len() - begun.head_len;
        let _ = write!(self.logs, "{cost}");
        let depth_len = self.depth_len;
        self.logs.extend_from_slice(&self.tail[..depth_len]);
        if let Some(error) = error {
            self.logs.extend_from_slice(b",\"error\":");
            self.logs.extend_from_slice(
                go_escaped(&serde_json::to_string(&error).unwrap_or_default()).as_bytes(),
            );
        }
        self.logs.extend_from_slice(&self.tail[depth_len..]);
        if let Some((address, key)) = begun.slot {
            if begun.op == opcode::SLOAD
                && let Some(value) = interp.stack.data().last()
            {
                self.storage
                    .entry(address)
                    .or_default()
                    .insert(key, B256::from(value.to_be_bytes()));
            }
            if let Some(slots) = self.storage.get(&address) {
                self.logs.extend_from_slice(b",\"storage\":{");
                for (i, (key, value)) in slots.iter().enumerate() {
                    if i > 0 {
                        self.logs.push(b',');
                    }
                    let _ = write!(self.logs, "\"{key}\":\"{value}\"");
                }
                self.logs.push(b'}');
            }
        }
        if refund != 0 {
            let _ = write!(self.logs, ",\"refund\":{}", refund.max(0));
        }
        self.logs.push(b'}');
        self.count += 1;
        // geth counts each step's bytes without the comma between them.
        self.result_size += self.logs.len() - before - usize::from(self.count > 1);
        if self.logs.len() > self.room {
            self.limits.stop(super::limits::Stopped::TooLarge);
            super::limits::halt(interp, context);
        }
    }
}
