//! TPS runs: push N signed transfers from M accounts into a node with the
//! traffic generator, then read per-block TPS, average TPS and block times
//! off the chain itself (block timestamps and transaction counts), not off
//! the sender's clock.

use std::fmt::Write as _;
use std::time::Duration;

use neve_upstream::{RpcClient, parse_quantity, quantity};
use serde::{Deserialize, Serialize};

use crate::error::BenchError;

/// What to push.
#[derive(Clone, Debug)]
pub struct TpsConfig {
    /// The node's HTTP JSON-RPC URL.
    pub rpc_url: String,
    /// Transfers to send.
    pub transactions: u64,
    /// Sender accounts.
    pub accounts: usize,
    /// A funded key; `None` uses geth `--dev`'s unlocked account.
    pub funder_key: Option<String>,
    /// Give up sending after this long.
    pub max_duration: Duration,
}

/// One block of the run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct BlockTps {
    /// Height.
    pub number: u64,
    /// Transactions in it.
    pub transactions: u64,
    /// Its timestamp, seconds.
    pub timestamp: u64,
    /// Seconds since the previous block.
    pub block_time: u64,
    /// transactions ÷ block time (`None` for a same-second block).
    pub tps: Option<f64>,
}

/// What the chain says about the run.
#[derive(Clone, Debug, Serialize)]
pub struct TpsReport {
    /// Transfers sent and accepted by the node.
    pub sent: u64,
    /// Of those, included in blocks.
    pub included: u64,
    /// Per block, from the first with the run's transactions to the last.
    pub blocks: Vec<BlockTps>,
    /// All transactions in those blocks ÷ (last timestamp − the timestamp
    /// of the block before the first).
    pub average_tps: Option<f64>,
    /// Mean seconds between blocks.
    pub mean_block_time: Option<f64>,
    /// Included ÷ wall-clock inclusion window (sender's view, for contrast).
    pub wall_clock_tps: f64,
}

#[derive(Deserialize)]
struct Header {
    number: String,
    timestamp: String,
    #[serde(default)]
    transactions: Vec<serde_json::Value>,
}

/// Pushes the transfers and reads the chain.
pub async fn run(
    config: &TpsConfig,
    progress: impl FnMut(&neve_load::Progress),
) -> Result<TpsReport, BenchError> {
    let mut load = neve_load::LoadConfig::new(config.rpc_url.clone(), config.max_duration);
    load.max_transactions = Some(config.transactions);
    load.transfers_only = true;
    load.accounts = config.accounts;
    load.funder_key = config.funder_key.clone();
    let report = neve_load::run(load, progress)
        .await
        .map_err(|e| BenchError::Setup(format!("sending transfers: {e}")))?;
    let client = RpcClient::new(&config.rpc_url).map_err(|e| BenchError::Setup(e.to_string()))?;
    let mut headers = Vec::new();
    for height in report.first_block.saturating_sub(1)..=report.last_block {
        let header: Option<Header> = client
            .call("eth_getBlockByNumber", (quantity(height), false))
            .await
            .map_err(|e| BenchError::Setup(format!("reading block {height}: {e}")))?;
        let header =
            header.ok_or_else(|| BenchError::Setup(format!("block {height} is missing")))?;
        headers.push((
            parse_quantity(&header.number).unwrap_or(height),
            parse_quantity(&header.timestamp).unwrap_or(0),
            header.transactions.len() as u64,
        ));
    }
    let (blocks, average_tps, mean_block_time) = per_block(&headers);
    Ok(TpsReport {
        sent: report.progress.accepted,
        included: report.progress.included,
        blocks,
        average_tps,
        mean_block_time,
        wall_clock_tps: report.included_per_second(),
    })
}

/// From (number, timestamp, transactions) of consecutive blocks (the first
/// being the one before the run): the run's blocks, trimmed to those between
/// the first and last with transactions, average TPS and mean block time.
pub fn per_block(headers: &[(u64, u64, u64)]) -> (Vec<BlockTps>, Option<f64>, Option<f64>) {
    let first = headers.iter().skip(1).position(|h| h.2 > 0).map(|i| i + 1);
    let last = headers.iter().rposition(|h| h.2 > 0);
    let (Some(first), Some(last)) = (first, last) else {
        return (Vec::new(), None, None);
    };
    let blocks: Vec<BlockTps> = (first..=last)
        .map(|i| {
            let (number, timestamp, transactions) = headers[i];
            let block_time = timestamp.saturating_sub(headers[i - 1].1);
            BlockTps {
                number,
                transactions,
                timestamp,
                block_time,
                tps: (block_time > 0).then(|| transactions as f64 / block_time as f64),
            }
        })
        .collect();
    let span = headers[last].1.saturating_sub(headers[first - 1].1);
    let total: u64 = blocks.iter().map(|b| b.transactions).sum();
    let average = (span > 0).then(|| total as f64 / span as f64);
    let mean_block_time = (span > 0).then(|| span as f64 / blocks.len() as f64);
    (blocks, average, mean_block_time)
}

impl TpsReport {
    /// The per-block table and the averages.
    pub fn render(&self) -> String {
        let mut out =
            String::from("| block | transactions | block time s | TPS |\n|---|---|---|---|\n");
        for b in &self.blocks {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                b.number,
                b.transactions,
                b.block_time,
                b.tps.map_or("-".into(), |t| format!("{t:.0}"))
            );
        }
        let _ = writeln!(
            out,
            "\n{} sent, {} included in {} blocks; average TPS from block timestamps: {}; mean block time: {}; sender's wall clock: {:.0} TPS",
            self.sent,
            self.included,
            self.blocks.len(),
            self.average_tps
                .map_or("- (all in one second)".into(), |t| format!("{t:.1}")),
            self.mean_block_time
                .map_or("-".into(), |t| format!("{t:.2} s")),
            self.wall_clock_tps
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tps_comes_from_timestamps_and_counts() {
        // Block 10 precedes the run; 11 is empty (setup), 12–14 carry it, 15 is empty.
        let headers = [
            (10, 100, 5),
            (11, 102, 0),
            (12, 104, 300),
            (13, 106, 500),
            (14, 107, 100),
            (15, 109, 0),
        ];
        let (blocks, average, block_time) = per_block(&headers);
        assert_eq!(
            blocks.iter().map(|b| b.number).collect::<Vec<_>>(),
            vec![12, 13, 14]
        );
        assert_eq!(blocks[0].block_time, 2);
        assert_eq!(blocks[0].tps, Some(150.0));
        assert_eq!(blocks[2].tps, Some(100.0));
        // 900 transactions from t=102 to t=107.
        assert_eq!(average, Some(180.0));
        assert!((block_time.unwrap() - 5.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn same_second_blocks_have_no_rate_and_nothing_is_nothing() {
        let (blocks, average, _) = per_block(&[(1, 50, 0), (2, 50, 10), (3, 50, 10)]);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0].tps, None);
        assert_eq!(average, None);
        assert_eq!(per_block(&[(1, 1, 0), (2, 2, 0)]).0, vec![]);
        assert_eq!(per_block(&[]).0, vec![]);
    }
}
