//! The one inspector a replay's EVM carries ([`TraceInspector`]): idle for
//! the transactions replayed only to reach the traced one, geth's struct
//! logger, or one of geth's native tracers (revm-inspectors') with a
//! budget beside it that counts what the tracer records (call inputs and
//! outputs, logs) against the answer's cap and halts the run past it or
//! past its deadline.

use alloy_primitives::{Address, Log, U256};
use revm::Inspector;
use revm::context_interface::ContextTr;
use revm::handler::FrameResult;
use revm::inspector::JournalExt;
use revm::interpreter::interpreter_types::Jumps;
use revm::interpreter::{
    CallInputs, CallOutcome, CreateInputs, CreateOutcome, FrameInput, InstructionResult,
    Interpreter,
};
use revm_inspectors::tracing::DebugInspector;

use super::limits::Limits;
use super::lookups::Lookups;
use super::struct_log::StructLogger;

/// Bytes a native tracer's JSON spends on a call frame or a log besides
/// their data: its keys, addresses, gas figures.
const FRAME_OVERHEAD: usize = 256;

/// The tracer of the transaction running now.
pub(crate) enum TraceInspector {
    /// None: a transaction replayed only to reach the traced one.
    Idle,
    /// geth's struct logger.
    Struct(Box<StructLogger>),
    /// A native tracer and its budget.
    Native(Box<DebugInspector>, Box<Budget>),
}

/// A frame's halt in geth's words.
pub(crate) struct Halted {
    /// The frame's number, depth first.
    pub(crate) frame: usize,
    pub(crate) words: String,
}

/// What a native tracer recorded, counted as the JSON it becomes; and
/// what geth words that revm-inspectors does not know: the opcode an
/// undefined-opcode halt stopped at, by frame.
pub(crate) struct Budget {
    limits: Limits,
    bytes: usize,
    /// The opcode of the last step begun, and the stack's length then.
    last_op: (u8, usize),
    /// Frames begun so far (their order is the call tree's, depth first).
    frames: usize,
    /// The frames running, by their number.
    running: Vec<usize>,
    /// Each frame that halted where geth's words name more than revm's:
    /// at an opcode that names none, or on its stack.
    pub(crate) halts: Vec<Halted>,
    /// What geth's prestate tracer looks up, when it runs.
    pub(crate) lookups: Option<Lookups>,
}

impl Budget {
    /// A budget; with `lookups`, noting what geth's prestate tracer
    /// would look up.
    pub(crate) fn new(limits: Limits, lookups: bool) -> Self {
        Budget {
            lookups: lookups.then(Lookups::default),
            limits,
            bytes: 0,
            last_op: (0, 0),
            frames: 0,
            running: Vec::new(),
            halts: Vec::new(),
        }
    }

    fn begin(&mut self) {
        self.running.push(self.frames);
        self.frames += 1;
    }

    fn end(&mut self, result: InstructionResult) {
        let frame = self.running.pop();
        let (op, stack_len) = self.last_op;
        let words = match result {
            InstructionResult::OpcodeNotFound => {
                Some(format!("invalid opcode: {}", super::opcodes::name(op)))
            }
            InstructionResult::StackUnderflow => super::opcodes::stack_error(op, stack_len, true),
            InstructionResult::StackOverflow => super::opcodes::stack_error(op, stack_len, false),
            _ => None,
        };
        if let (Some(frame), Some(words)) = (frame, words) {
            self.halts.push(Halted { frame, words });
        }
    }

    fn add(&mut self, data: usize) {
        self.bytes = self
            .bytes
            .saturating_add(FRAME_OVERHEAD)
            .saturating_add(data.saturating_mul(2));
        self.limits.holds(self.bytes);
    }
}

macro_rules! each {
    ($self:ident, $inner:ident => $call:expr) => {
        match $self {
            TraceInspector::Idle => Default::default(),
            TraceInspector::Struct(logger) => {
                let $inner = &mut **logger;
                $call
            }
            TraceInspector::Native(native, _) => {
                let $inner = &mut **native;
                $call
            }
        }
    };
}

impl<CTX> Inspector<CTX> for TraceInspector
where
    CTX: ContextTr<Journal: JournalExt>,
{
    fn initialize_interp(&mut self, interp: &mut Interpreter, context: &mut CTX) {
        each!(self, inner => inner.initialize_interp(interp, context))
    }

    fn step(&mut self, interp: &mut Interpreter, context: &mut CTX) {
        if let TraceInspector::Native(_, budget) = self
            && budget.limits.tick()
        {
            super::limits::halt(interp, context);
            return;
        }
        if let TraceInspector::Native(_, budget) = self {
            budget.last_op = (interp.bytecode.opcode(), interp.stack.len());
            if let Some(lookups) = &mut budget.lookups {
                lookups.step(interp);
            }
        }
        each!(self, inner => inner.step(interp, context))
    }

    fn step_end(&mut self, interp: &mut Interpreter, context: &mut CTX) {
        if let TraceInspector::Native(_, budget) = self
            && let Some(lookups) = &mut budget.lookups
        {
            let refused = interp
                .bytecode
                .action
                .as_ref()
                .and_then(|action| action.instruction_result())
                .is_some_and(super::opcodes::refused_before_executing);
            lookups.step_end(!refused);
        }
        each!(self, inner => inner.step_end(interp, context))
    }

    fn log(&mut self, context: &mut CTX, log: Log) {
        if let TraceInspector::Native(_, budget) = self {
            budget.add(log.data.data.len() + 66 * log.data.topics().len());
        }
        each!(self, inner => Inspector::<CTX>::log(inner, context, log))
    }

    fn log_full(&mut self, interp: &mut Interpreter, context: &mut CTX, log: Log) {
        if let TraceInspector::Native(_, budget) = self {
            budget.add(log.data.data.len() + 66 * log.data.topics().len());
        }
        each!(self, inner => inner.log_full(interp, context, log))
    }

    fn call(&mut self, context: &mut CTX, inputs: &mut CallInputs) -> Option<CallOutcome> {
        if let TraceInspector::Native(_, budget) = self {
            // A flattened frame repeats its trace address: 8 bytes a level.
            budget.add(inputs.input.len() + budget.running.len() * 8);
            budget.begin();
        }
        each!(self, inner => inner.call(context, inputs))
    }

    fn call_end(&mut self, context: &mut CTX, inputs: &CallInputs, outcome: &mut CallOutcome) {
        if let TraceInspector::Native(_, budget) = self {
            budget.add(outcome.result.output.len());
            budget.end(outcome.result.result);
        }
        each!(self, inner => inner.call_end(context, inputs, outcome))
    }

    fn create(&mut self, context: &mut CTX, inputs: &mut CreateInputs) -> Option<CreateOutcome> {
        if let TraceInspector::Native(_, budget) = self {
            budget.add(inputs.init_code().len() + budget.running.len() * 8);
            budget.begin();
        }
        each!(self, inner => inner.create(context, inputs))
    }

    fn create_end(
        &mut self,
        context: &mut CTX,
        inputs: &CreateInputs,
        outcome: &mut CreateOutcome,
    ) {
        if let TraceInspector::Native(_, budget) = self {
            budget.add(outcome.result.output.len());
            budget.end(outcome.result.result);
            if let Some(lookups) = &mut budget.lookups {
                lookups.created(outcome.address);
            }
        }
        each!(self, inner => inner.create_end(context, inputs, outcome))
    }

    fn selfdestruct(&mut self, contract: Address, target: Address, value: U256) {
        each!(self, inner => Inspector::<CTX>::selfdestruct(inner, contract, target, value))
    }

    fn frame_start(
        &mut self,
        context: &mut CTX,
        frame_input: &mut FrameInput,
    ) -> Option<FrameResult> {
        each!(self, inner => inner.frame_start(context, frame_input))
    }

    fn frame_end(
        &mut self,
        context: &mut CTX,
        frame_input: &FrameInput,
        frame_result: &mut FrameResult,
    ) {
        each!(self, inner => inner.frame_end(context, frame_input, frame_result))
    }
}
