//! What an upstream says it can prove state at: the `stateproofs` part of
//! its `eth_capabilities` answer (execution-apis), which geth and another
//! neve give. neve serves state only where both it holds the block and its
//! upstream can prove the state.

use serde_json::Value;

use crate::quantity::parse_quantity;

/// The blocks an upstream can prove state at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateWindow {
    /// It proves no state at all.
    pub disabled: bool,
    /// The oldest block it could prove when it answered.
    pub oldest: u64,
    /// Blocks below its head it keeps state for, when it keeps a sliding
    /// window (`deleteStrategy` `window`); `None`: all from `oldest` on.
    pub retention: Option<u64>,
}

impl StateWindow {
    /// The `stateproofs` member of an `eth_capabilities` result; `None`
    /// when the answer does not have one in the shape the spec gives.
    pub fn from_capabilities(result: &Value) -> Option<StateWindow> {
        let proofs = result.get("stateproofs")?;
        let disabled = proofs.get("disabled")?.as_bool()?;
        let quantity = |v: &Value| v.as_str().and_then(parse_quantity);
        let oldest = match proofs.get("oldestBlock") {
            Some(v) => quantity(v)?,
            None => 0,
        };
        let retention = match proofs.get("deleteStrategy") {
            Some(strategy) if strategy.get("type")?.as_str()? == "window" => {
                Some(quantity(strategy.get("retentionBlocks")?)?)
            }
            Some(_) => return None,
            None => None,
        };
        Some(StateWindow {
            disabled,
            oldest,
            retention,
        })
    }

    /// The oldest block it can prove while its head is `head`.
    pub fn oldest_at(&self, head: u64) -> u64 {
        let sliding = self
            .retention
            .map_or(0, |keep| (head + 1).saturating_sub(keep));
        self.oldest.max(sliding)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn geths_answers_are_read() {
        // geth 1.17, a full node and an archive node.
        let full = json!({"stateproofs": {"disabled": false, "oldestBlock": "0x0",
            "deleteStrategy": {"type": "window", "retentionBlocks": "0x80"}}});
        let window = StateWindow::from_capabilities(&full).unwrap();
        assert_eq!(window.retention, Some(128));
        assert_eq!(window.oldest_at(100), 0);
        assert_eq!(window.oldest_at(1_000), 873);
        let archive = json!({"stateproofs": {"disabled": false, "oldestBlock": "0x0"}});
        let window = StateWindow::from_capabilities(&archive).unwrap();
        assert_eq!((window.retention, window.oldest_at(1_000)), (None, 0));
        let off = json!({"stateproofs": {"disabled": true}});
        assert!(StateWindow::from_capabilities(&off).unwrap().disabled);
    }

    #[test]
    fn other_shapes_are_not_guessed_at() {
        for odd in [
            json!({}),
            json!({"stateproofs": {"oldestBlock": "0x0"}}),
            json!({"stateproofs": {"disabled": false, "oldestBlock": 5}}),
            json!({"stateproofs": {"disabled": false, "deleteStrategy": {"type": "epoch"}}}),
        ] {
            assert_eq!(StateWindow::from_capabilities(&odd), None, "{odd}");
        }
    }
}
