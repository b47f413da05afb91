//! What bounds one trace request's run: a deadline (geth's `timeout`,
//! within neve's own [`MAX_TRACE_TIME`]) and the answer's bytes
//! ([`MAX_TRACE_BYTES`]). A tracer checks them as it records; past either
//! it halts the run, and the answer is the node's (421): a trace neve
//! cut short is not geth's.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// Longest one trace request runs on a call thread, whatever its
/// `timeout` asks: geth's default trace timeout. Default is 5 s.
pub const MAX_TRACE_TIME: Duration = Duration::from_secs(5);

/// Most bytes of one trace answer, and of what its tracers record on the
/// way (a struct log of a block of loops is gigabytes: past this it is
/// the node's). Default is 32 MiB.
pub const MAX_TRACE_BYTES: usize = 32 << 20;

/// Halts the run `interp` belongs to, as revm takes a halt from outside:
/// the context's error set first (a fatal halt without one is a panic in
/// revm's post-execution).
pub(crate) fn halt<CTX: revm::context_interface::ContextTr>(
    interp: &mut revm::interpreter::Interpreter,
    context: &mut CTX,
) {
    if context.error().is_ok() {
        *context.error() = Err(revm::context_interface::context::ContextError::Custom(
            "trace stopped".into(),
        ));
    }
    interp.halt_fatal();
}

/// Steps between two looks at the clock.
const STEPS_PER_CHECK: u32 = 4096;

/// Why a trace stopped short of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Past its deadline.
    Timeout,
    /// Its answer would pass [`MAX_TRACE_BYTES`].
    TooLarge,
    /// It reached something geth words otherwise than neve can.
    Unsure,
}

/// One request's bounds, shared by the tracers of its transactions.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    deadline: Instant,
    cap: usize,
    ticks: Cell<u32>,
    stopped: std::rc::Rc<Cell<Option<Stopped>>>,
}

impl Limits {
    /// Bounds from `since`: `timeout` (within [`MAX_TRACE_TIME`]) and
    /// `cap` bytes.
    pub(crate) fn new(since: Instant, timeout: Duration, cap: usize) -> Self {
        Limits {
            deadline: since + timeout.min(MAX_TRACE_TIME),
            cap,
            ticks: Cell::new(0),
            stopped: Default::default(),
        }
    }

    /// One step: whether the run must stop (now past its deadline, or
    /// stopped before).
    pub(crate) fn tick(&self) -> bool {
        if self.stopped.get().is_some() {
            return true;
        }
        let ticks = self.ticks.get() + 1;
        if ticks < STEPS_PER_CHECK {
            self.ticks.set(ticks);
            return false;
        }
        self.ticks.set(0);
        self.late()
    }

    /// Whether the deadline passed (noted as the reason to stop).
    pub(crate) fn late(&self) -> bool {
        if Instant::now() >= self.deadline {
            self.stop(Stopped::Timeout);
        }
        self.stopped.get().is_some()
    }

    /// Whether `bytes` recorded so far are within the cap (noted as the
    /// reason to stop when not).
    pub(crate) fn holds(&self, bytes: usize) -> bool {
        if bytes > self.cap {
            self.stop(Stopped::TooLarge);
        }
        self.stopped.get().is_none()
    }

    pub(crate) fn stop(&self, why: Stopped) {
        if self.stopped.get().is_none() {
            self.stopped.set(Some(why));
        }
    }

    /// `Err` with the reason once stopped.
    pub(crate) fn stopped(&self) -> Result<(), Stopped> {
        self.stopped.get().map_or(Ok(()), Err)
    }

    /// Bytes an answer may still take, `used` taken already.
    pub(crate) fn room(&self, used: usize) -> usize {
        self.cap.saturating_sub(used)
    }
}
