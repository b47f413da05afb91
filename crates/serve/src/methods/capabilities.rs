//! `eth_capabilities` (execution-apis): what neve can answer, for routers.
//! Every height it advertises is served at the instant it answers: the
//! block resources span the store's tail, and state spans the part of it
//! where neve holds the block and its upstream can prove the state.

use crate::params::Params;
use crate::rpc::{Context, Method, Reads, Reply, Stop};

pub(crate) const METHODS: &[Method] = &[Method::new("eth_capabilities", (0, 0), capabilities)];

fn capabilities(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, Stop> {
    Ok(ctx.capabilities())
}

/// The blocks an upstream that does not say (no `eth_capabilities`) is
/// taken to prove state at: the newest 32, the smallest recent-state window
/// of the nodes neve follows (coreth's default `state-history`).
pub const ASSUMED_UPSTREAM_STATE_WINDOW: u64 = 32;

const DISABLED: &str = r#"{"disabled":true}"#;

fn quantity(value: u64) -> String {
    format!("\"0x{value:x}\"")
}

fn resource(oldest: u64, retention: Option<u64>) -> String {
    let strategy = retention.map_or_else(String::new, |keep| {
        format!(
            r#","deleteStrategy":{{"type":"window","retentionBlocks":{}}}"#,
            quantity(keep)
        )
    });
    format!(
        r#"{{"disabled":false,"oldestBlock":{}{strategy}}}"#,
        quantity(oldest)
    )
}

/// The window a router may count on: `--retain-blocks`, unless a byte
/// budget (`--retain-bytes`) may prune sooner, when no window is promised
/// and `oldestBlock` alone says what is held.
fn block_window(retain_blocks: Option<u64>, retain_bytes: Option<u64>) -> Option<u64> {
    match retain_bytes {
        Some(_) => None,
        None => retain_blocks,
    }
}

impl Context {
    /// The `eth_capabilities` answer; a miss while nothing is stored.
    pub(crate) fn capabilities(&self) -> Reply {
        let stats = self.reader.stats();
        let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) else {
            return Reply::Miss;
        };
        let Some(head) = self.reader.block(max) else {
            return Reply::Miss;
        };
        let window = block_window(self.config.retain_blocks, self.config.retain_bytes);
        let tail = resource(min, window);
        let state = self.state_capability(min, max, window);
        Reply::json(format!(
            r#"{{"head":{{"number":{},"hash":"0x{}"}},"state":{state},"tx":{tail},"logs":{tail},"receipts":{tail},"blocks":{tail},"stateproofs":{state}}}"#,
            quantity(max),
            alloy_primitives::hex::encode(head.hash()),
        ))
    }

    /// State reads are answered where the block is stored and the upstream
    /// can prove its state; disabled while they would be 421 (no state
    /// layer, or no fetching through).
    fn state_capability(&self, min: u64, max: u64, window: Option<u64>) -> String {
        if !self.state_answers {
            return DISABLED.into();
        }
        let upstream_head = self.chain.upstream_head().unwrap_or(max).max(max);
        let (upstream_oldest, upstream_retention) = match self.chain.upstream_state_window() {
            Some(window) if window.disabled => return DISABLED.into(),
            Some(window) => (window.oldest_at(upstream_head), window.retention),
            None => (
                (upstream_head + 1).saturating_sub(ASSUMED_UPSTREAM_STATE_WINDOW),
                Some(ASSUMED_UPSTREAM_STATE_WINDOW),
            ),
        };
        let oldest = min.max(upstream_oldest);
        if oldest > max {
            return DISABLED.into();
        }
        let retention = match (upstream_retention, window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        resource(oldest, retention)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_say_their_window_only_when_there_is_one() {
        assert_eq!(
            resource(5, None),
            r#"{"disabled":false,"oldestBlock":"0x5"}"#
        );
        assert_eq!(
            resource(0, Some(65_536)),
            r#"{"disabled":false,"oldestBlock":"0x0","deleteStrategy":{"type":"window","retentionBlocks":"0x10000"}}"#
        );
    }

    #[test]
    fn a_byte_budget_promises_no_window() {
        assert_eq!(block_window(Some(65_536), None), Some(65_536));
        assert_eq!(block_window(Some(65_536), Some(1 << 30)), None);
        assert_eq!(block_window(None, None), None);
    }
}
