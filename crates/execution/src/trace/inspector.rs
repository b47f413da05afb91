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
use revm::interpreter::{
    CallInputs, CallOutcome, CreateInputs, CreateOutcome, FrameInput, Interpreter,
};
use revm_inspectors::tracing::DebugInspector;

use super::limits::Limits;
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
    Native(Box<DebugInspector>, Budget),
}

/// What a native tracer recorded, counted as the JSON it becomes.
pub(crate) struct Budget {
    limits: Limits,
    bytes: usize,
}

impl Budget {
    pub(crate) fn new(limits: Limits) -> Self {
        Budget { limits, bytes: 0 }
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
            interp.halt_fatal();
            return;
        }
        each!(self, inner => inner.step(interp, context))
    }

    fn step_end(&mut self, interp: &mut Interpreter, context: &mut CTX) {
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
            budget.add(inputs.input.len());
        }
        each!(self, inner => inner.call(context, inputs))
    }

    fn call_end(&mut self, context: &mut CTX, inputs: &CallInputs, outcome: &mut CallOutcome) {
        if let TraceInspector::Native(_, budget) = self {
            budget.add(outcome.result.output.len());
        }
        each!(self, inner => inner.call_end(context, inputs, outcome))
    }

    fn create(&mut self, context: &mut CTX, inputs: &mut CreateInputs) -> Option<CreateOutcome> {
        if let TraceInspector::Native(_, budget) = self {
            budget.add(inputs.init_code().len());
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
