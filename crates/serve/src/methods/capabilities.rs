//! `eth_capabilities` (execution-apis): what neve can answer, for routers.
//! Every height it advertises is served at the instant it answers: the
//! block resources span the store's tail, and state spans the part of it
//! where neve holds the block and its upstream can prove the state. Calls
//! (`eth_call`, `eth_estimateGas`, `eth_createAccessList`) are answered
//! where `state` says, once the chain's rules are known: the schema has
//! no member of their own (it admits no other members), and a call is
//! state read through an EVM.

use crate::params::Params;
use crate::rpc::{Context, Method, NoReply, Reads, Reply};

pub(crate) const METHODS: &[Method] = &[Method::new("eth_capabilities", (0, 0), capabilities)];

fn capabilities(ctx: &Context, _: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
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
    use std::sync::Arc;

    use super::*;
    use crate::server::tests::{Following, answer, runtime, server_with};

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

    #[test]
    fn capabilities_advertise_the_tail_and_where_state_can_be_proven() {
        let runtime = runtime();
        let ask = |chain: Following, state_answers: bool| {
            let (mut server, _dir) = server_with(Arc::new(chain));
            Arc::get_mut(&mut server.ctx).unwrap().state_answers = state_answers;
            let (status, body) = answer(
                &server,
                &runtime,
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_capabilities"}"#,
            );
            assert_eq!(status, 200, "{body}");
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            body["result"].clone()
        };
        let window = |oldest, retention| {
            Some(neve_upstream::StateWindow {
                disabled: false,
                oldest,
                retention,
            })
        };
        let caps = ask(Following(true, window(0, None)), false);
        assert_eq!(caps["head"]["number"], "0x9");
        for resource in ["blocks", "tx", "receipts", "logs"] {
            assert_eq!(
                caps[resource],
                serde_json::json!({"disabled": false, "oldestBlock": "0x0"})
            );
        }
        let disabled = serde_json::json!({"disabled": true});
        assert_eq!(
            (&caps["state"], &caps["stateproofs"]),
            (&disabled, &disabled)
        );
        // An archive upstream: all of the tail.
        let caps = ask(Following(true, window(0, None)), true);
        assert_eq!(
            caps["state"],
            serde_json::json!({"disabled": false, "oldestBlock": "0x0"})
        );
        // A full node keeping 4 blocks: the newest 4 of the tail.
        let caps = ask(Following(true, window(0, Some(4))), true);
        assert_eq!(
            caps["stateproofs"],
            serde_json::json!({"disabled": false, "oldestBlock": "0x6",
                "deleteStrategy": {"type": "window", "retentionBlocks": "0x4"}})
        );
        // An upstream that says nothing is taken to keep the newest 32.
        let caps = ask(Following(true, None), true);
        assert_eq!(caps["state"]["deleteStrategy"]["retentionBlocks"], "0x20");
        // One that proves nothing, or nothing within the tail.
        let off = Some(neve_upstream::StateWindow {
            disabled: true,
            oldest: 0,
            retention: None,
        });
        assert_eq!(ask(Following(true, off), true)["state"], disabled);
        assert_eq!(
            ask(Following(true, window(50, None)), true)["state"],
            disabled
        );
    }
}
