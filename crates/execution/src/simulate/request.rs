//! What a simulation asks (geth's `simOpts`), and the limits on it.

use serde::Deserialize;

use crate::args::{BlockOverrides, CallArgs, StateOverride};

use super::error::{Refusal, SimError, refused};

/// Most simulated blocks in one request, gaps included, counted from the
/// pinned block: geth's `maxSimulateBlocks`. Default is 256.
pub const MAX_BLOCKS: u64 = 256;

/// Most calls in one simulated block: geth's `maxSimulateCallsPerBlock`.
/// Default is 5,000.
pub const MAX_CALLS_PER_BLOCK: usize = 5_000;

/// Most calls in one request: geth's `maxSimulateTotalCalls`. Default is
/// 10,000. Their work together is bounded by gas: every call draws on one
/// budget of [`crate::GAS_CAP`] for the whole request, as in geth.
pub const MAX_CALLS: usize = 10_000;

/// Most bytes of blocks one answer may hold. Gas bounds what calls return
/// and log, the request's size bounds what it echoes (full transactions);
/// this is the backstop, below a batch's answer cap: an answer past it is
/// the node's (421). Default is 20 MiB.
pub const MAX_ANSWER_BYTES: usize = 20 << 20;

/// `eth_simulateV1`'s first parameter.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimulateRequest {
    /// The blocks to simulate, in order.
    #[serde(default)]
    pub block_state_calls: Vec<SimBlock>,
    /// Ether transfers as ERC-7528 logs in the calls' logs.
    #[serde(default)]
    pub trace_transfers: bool,
    /// Nonces, base fees and balances checked as for a real block.
    #[serde(default)]
    pub validation: bool,
    /// Transactions whole rather than by hash.
    #[serde(default)]
    pub return_full_transactions: bool,
}

/// One simulated block as asked.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimBlock {
    /// Its header fields, where given.
    #[serde(default)]
    pub block_overrides: Option<BlockOverrides>,
    /// State set before its calls.
    #[serde(default)]
    pub state_overrides: Option<StateOverride>,
    /// Its calls, in order.
    #[serde(default)]
    pub calls: Vec<CallArgs>,
}

impl SimulateRequest {
    /// geth's checks before anything is read, in its order and words.
    pub(super) fn check_limits(&self) -> Result<(), SimError> {
        let blocks = &self.block_state_calls;
        if blocks.is_empty() {
            return Err(refused(Refusal::InvalidParams, "empty input"));
        }
        if blocks.len() as u64 > MAX_BLOCKS {
            return Err(refused(Refusal::ClientLimitExceeded, "too many blocks"));
        }
        let mut total = 0usize;
        for block in blocks {
            if block.calls.len() > MAX_CALLS_PER_BLOCK {
                return Err(refused(
                    Refusal::ClientLimitExceeded,
                    format!(
                        "too many calls in block: {} > {MAX_CALLS_PER_BLOCK}",
                        block.calls.len()
                    ),
                ));
            }
            total += block.calls.len();
            if total > MAX_CALLS {
                return Err(refused(
                    Refusal::ClientLimitExceeded,
                    format!("too many calls: {total} > {MAX_CALLS}"),
                ));
            }
        }
        Ok(())
    }
}
