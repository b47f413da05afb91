//! A halt in geth's words (`core/vm/errors.go`): the message, and, where
//! geth names them, the instruction it stopped at and the stack it found
//! (revm's reason does not say them, so such a run is watched again by
//! [`LastStep`]).

use revm::Inspector;
use revm::bytecode::OpCode;
use revm::context::result::HaltReason;
use revm::interpreter::interpreter_types::{Jumps, StackTr};
use revm::interpreter::{Interpreter, InterpreterTypes};

/// The last instruction a run stepped into, and the stack it found: the
/// instruction a top-level halt stopped at.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LastStep {
    opcode: u8,
    stack_len: usize,
}

impl<CTX, INTR: InterpreterTypes> Inspector<CTX, INTR> for LastStep {
    fn step(&mut self, interp: &mut Interpreter<INTR>, _: &mut CTX) {
        self.opcode = interp.bytecode.opcode();
        self.stack_len = interp.stack.len();
    }
}

pub(crate) fn needs_last_step(reason: &HaltReason) -> bool {
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
pub(crate) fn halt_message(reason: &HaltReason, last: Option<&LastStep>) -> String {
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
