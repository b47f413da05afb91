//! What a run reports: [`Progress`] while it goes on, [`LoadReport`] at the
//! end.

use std::time::Duration;

use alloy_primitives::Address;

use crate::mix::TxKind;

/// A snapshot while the run goes on.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Time since sending started.
    pub elapsed: Duration,
    /// Transactions signed and sent.
    pub sent: u64,
    /// Transactions the node accepted into its pool.
    pub accepted: u64,
    /// Transactions the node refused.
    pub rejected: u64,
    /// Transactions included in blocks since sending started.
    pub included: u64,
    /// Blocks since sending started.
    pub blocks: u64,
    /// The node's head.
    pub head: u64,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// The chain id the node reported.
    pub chain_id: u64,
    /// The deployed token (its `Transfer` logs are part of the traffic).
    pub token: Address,
    /// The first block produced while sending.
    pub first_block: u64,
    /// The head at the end.
    pub last_block: u64,
    /// Final counters.
    pub progress: Progress,
    /// Sent transactions per kind, in [`TxKind::ALL`] order.
    pub sent_by_kind: Vec<(TxKind, u64)>,
    /// From the start of sending to the last block that included something.
    pub inclusion_window: Duration,
    /// Wall time of setup (funding and token deployment).
    pub setup_time: Duration,
}

impl LoadReport {
    /// Included transactions per second over the inclusion window.
    pub fn included_per_second(&self) -> f64 {
        let seconds = self.inclusion_window.as_secs_f64();
        if seconds > 0.0 {
            self.progress.included as f64 / seconds
        } else {
            0.0
        }
    }

    /// Mean transactions per block.
    pub fn tx_per_block(&self) -> f64 {
        if self.progress.blocks == 0 {
            0.0
        } else {
            self.progress.included as f64 / self.progress.blocks as f64
        }
    }

    /// A few human-readable lines.
    pub fn render(&self) -> String {
        let p = &self.progress;
        let kinds: Vec<String> = self
            .sent_by_kind
            .iter()
            .map(|(kind, n)| format!("{}={n}", kind.name()))
            .collect();
        format!(
            "chain {} | setup {:.1}s | token {}\n\
             sent {} accepted {} rejected {} | included {} in {} blocks ({}..={}) \
             over {:.1}s: {:.0} tx/s, {:.1} tx/block\n\
             mix: {}",
            self.chain_id,
            self.setup_time.as_secs_f64(),
            self.token,
            p.sent,
            p.accepted,
            p.rejected,
            p.included,
            p.blocks,
            self.first_block,
            self.last_block,
            self.inclusion_window.as_secs_f64(),
            self.included_per_second(),
            self.tx_per_block(),
            kinds.join(" "),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_rates_follow_the_counters() {
        let report = LoadReport {
            chain_id: 1,
            token: Address::ZERO,
            first_block: 1,
            last_block: 10,
            progress: Progress {
                included: 2000,
                blocks: 10,
                ..Default::default()
            },
            sent_by_kind: vec![],
            inclusion_window: Duration::from_secs(2),
            setup_time: Duration::ZERO,
        };
        assert_eq!(report.included_per_second(), 1000.0);
        assert_eq!(report.tx_per_block(), 200.0);
    }
}
