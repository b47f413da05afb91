//! Traces, as geth's `debug_trace*` answer them: a stored block replayed
//! over its parent's verified state (`replay.rs`), its transactions under
//! geth's struct logger (`struct_log.rs`, written straight into the
//! answer) or one of geth's native tracers (revm-inspectors'), each
//! replay proved against the block's verified receipts. neve never
//! executes blocks to follow the chain: a block is replayed only to
//! answer a trace asked of it.
//!
//! Start at [`trace`], then [`ReplayBlock`] and [`TraceConfig`].

mod along;
mod call;
mod flat;
mod hex;
mod inputs;
mod inspector;
mod limits;
mod lookups;
mod native;
mod opcodes;
mod options;
mod post_state;
mod replay;
mod struct_log;

pub use along::joins_others;
pub use call::trace_call;
pub use flat::FlatConfig;
pub use inputs::{BlockTx, REPLAY_BLOCKS_KEPT, ReceiptFacts, ReplayBlock, Unreadable};
pub use limits::{MAX_TRACE_BYTES, MAX_TRACE_TIME, Stopped};
pub use options::{
    DEFAULT_TIMEOUT, LoggerConfig, TRACE_CONFIG_KEYS, TraceConfig, TraceOptions, Tracer,
    Unsupported, keys_read_alike,
};
pub use replay::{ReplayError, Traces, Which};

use crate::run::Pinned;

/// Replays `block` over `pinned` (its parent's verified state), tracing
/// `which` of its transactions as `options` ask, within
/// [`MAX_TRACE_TIME`] (or the options' shorter timeout) counted from
/// `since` (when the request's first run began: its runs after fetches
/// share one bound) and [`MAX_TRACE_BYTES`].
pub fn trace(
    pinned: &Pinned<'_>,
    block: &ReplayBlock,
    which: Which,
    options: &TraceOptions,
    since: std::time::Instant,
) -> Result<Traces, ReplayError> {
    let limits = limits::Limits::new(since, options.timeout, MAX_TRACE_BYTES);
    replay::replay(pinned, block, which, options, None, &limits)
}

/// A whole block's traces as [`trace`] makes them, with those of the
/// `offered` tracers that run alongside the asked one in the same replay
/// (see `along.rs`): each offered one's traces by its place, `None` for
/// one that did not run beside it or was dropped.
pub fn trace_block_along(
    pinned: &Pinned<'_>,
    block: &ReplayBlock,
    options: &TraceOptions,
    offered: &[TraceOptions],
    since: std::time::Instant,
) -> Result<(Traces, Vec<Option<Traces>>), ReplayError> {
    let limits = limits::Limits::new(since, options.timeout, MAX_TRACE_BYTES);
    let mut along = along::Along::new(options, offered, since);
    let traces = replay::replay(pinned, block, Which::All, options, along.as_mut(), &limits)?;
    let companions = match along {
        Some(along) => along.into_traces(offered.len()),
        None => (0..offered.len()).map(|_| None).collect(),
    };
    Ok((traces, companions))
}

/// A block's traces as geth answers `debug_traceBlockBy*`:
/// `[{"txHash":"0x..","result":..},..]`.
pub fn block_answer(traces: &[(alloy_primitives::B256, Vec<u8>)]) -> Vec<u8> {
    let bytes = traces.iter().map(|(_, t)| t.len() + 90).sum::<usize>();
    let mut out = Vec::with_capacity(bytes + 2);
    out.push(b'[');
    for (i, (hash, trace)) in traces.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"txHash\":\"0x");
        hex::hex_into(&mut out, hash.as_slice());
        out.extend_from_slice(b"\",\"result\":");
        out.extend_from_slice(trace);
        out.push(b'}');
    }
    out.push(b']');
    out
}
