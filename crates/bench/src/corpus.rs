//! Real keys from the chain itself: heights, block and transaction hashes,
//! addresses that hold balances, and a contract with logs and its topics.
//! Workloads draw from these, so every request asks for something that
//! exists in the common range.

use std::collections::HashMap;
use std::ops::RangeInclusive;

use neve_upstream::{RpcClient, parse_quantity, quantity};
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

use crate::error::BenchError;

/// Blocks whose hashes-only form is read to find transactions.
const SCANNED_BLOCKS: usize = 200;
/// Receipts read to find addresses.
const SCANNED_RECEIPTS: usize = 64;
/// The width of a log window, as the seeds' scripts used.
pub const LOG_WINDOW: u64 = 10;
/// Windows scanned for logs across the range, and their width.
const LOG_SCAN_WINDOWS: u64 = 8;
const LOG_SCAN_BLOCKS: u64 = 20;

/// Keys sampled from the common range.
#[derive(Clone, Debug, Default)]
pub struct Corpus {
    /// The range every target serves.
    pub range: (u64, u64),
    /// Heights, sampled uniformly.
    pub heights: Vec<u64>,
    /// (height, hash) of scanned blocks.
    pub blocks: Vec<(u64, String)>,
    /// (height, transaction count) of scanned blocks that have transactions.
    pub blocks_with_txs: Vec<(u64, usize)>,
    /// Transaction hashes from the scanned blocks.
    pub txs: Vec<String>,
    /// Senders and recipients seen in receipts.
    pub addresses: Vec<String>,
    /// The contract that logged most in the scanned windows, and its topics.
    pub log_address: Option<String>,
    /// Heights where `log_address` logged, in the scanned windows.
    pub log_heights: Vec<u64>,
    /// First topics (event signatures) seen from `log_address`.
    pub log_topics: Vec<String>,
}

#[derive(Deserialize)]
struct HashesOnlyBlock {
    hash: String,
    #[serde(default)]
    transactions: Vec<String>,
}

#[derive(Deserialize)]
struct Receipt {
    from: String,
    #[serde(default)]
    to: Option<String>,
}

#[derive(Deserialize)]
struct Log {
    address: String,
    #[serde(rename = "blockNumber", default)]
    block_number: Option<String>,
    #[serde(default)]
    topics: Vec<String>,
}

impl Corpus {
    /// Samples keys from `client` (the reference target) over `range`.
    pub async fn sample(
        client: &RpcClient,
        range: RangeInclusive<u64>,
        samples: usize,
        seed: u64,
    ) -> Result<Corpus, BenchError> {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (low, high) = (*range.start(), *range.end());
        let span = high - low + 1;
        let heights: Vec<u64> = if span <= samples as u64 {
            range.clone().collect()
        } else {
            (0..samples).map(|_| rng.random_range(low..=high)).collect()
        };
        let fail =
            |what: &str, e: neve_upstream::RpcError| BenchError::Corpus(format!("{what}: {e}"));

        let mut corpus = Corpus {
            range: (low, high),
            ..Corpus::default()
        };
        for &height in heights.iter().take(SCANNED_BLOCKS) {
            let block: Option<HashesOnlyBlock> = client
                .call("eth_getBlockByNumber", (quantity(height), false))
                .await
                .map_err(|e| fail("reading a block", e))?;
            let Some(block) = block else { continue };
            if !block.transactions.is_empty() {
                corpus
                    .blocks_with_txs
                    .push((height, block.transactions.len()));
            }
            corpus.txs.extend(block.transactions);
            corpus.blocks.push((height, block.hash));
        }
        corpus.heights = heights;

        let sampled: Vec<String> = corpus
            .txs
            .choose_multiple(&mut rng, SCANNED_RECEIPTS)
            .cloned()
            .collect();
        // Addresses and logs only enrich some workloads: a target that
        // refuses these reads leaves them empty, and a workload that needs
        // them says so.
        for tx in sampled {
            let receipt: Option<Receipt> = client
                .call("eth_getTransactionReceipt", [&tx])
                .await
                .unwrap_or(None);
            if let Some(receipt) = receipt {
                corpus.addresses.push(receipt.from);
                corpus.addresses.extend(receipt.to);
            }
        }
        corpus.addresses.sort();
        corpus.addresses.dedup();

        // Logs: small windows spread over the range (small, so no log cap
        // of a node or a neve is hit), newest first.
        let mut by_address: HashMap<String, (Vec<u64>, Vec<String>)> = HashMap::new();
        let span = high - low + 1;
        for window in 0..LOG_SCAN_WINDOWS {
            let to = high - span * window / LOG_SCAN_WINDOWS;
            let from = to.saturating_sub(LOG_SCAN_BLOCKS - 1).max(low);
            let filter = serde_json::json!({"fromBlock": quantity(from), "toBlock": quantity(to)});
            let Ok(logs) = client.call::<Vec<Log>>("eth_getLogs", [filter]).await else {
                continue;
            };
            for log in logs {
                let (heights, topics) = by_address.entry(log.address.to_lowercase()).or_default();
                heights.extend(log.block_number.as_deref().and_then(parse_quantity));
                topics.extend(log.topics.into_iter().take(1));
            }
        }
        if let Some((address, (mut heights, mut topics))) =
            by_address.into_iter().max_by_key(|(_, (h, _))| h.len())
        {
            heights.sort_unstable();
            heights.dedup();
            topics.sort();
            topics.dedup();
            corpus.log_address = Some(address);
            corpus.log_heights = heights;
            corpus.log_topics = topics;
        }
        Ok(corpus)
    }

    /// A log window `[from, from + LOG_WINDOW - 1]` inside the range that
    /// holds a block where the log contract logged (when any was seen), so
    /// log requests return logs rather than time the empty-bloom path.
    pub fn log_window(&self, rng: &mut SmallRng) -> (u64, u64) {
        let (low, high) = self.range;
        let last_start = high.saturating_sub(LOG_WINDOW - 1).max(low);
        let from = match self.log_heights.choose(rng) {
            Some(&logged) => {
                let earliest = logged.saturating_sub(LOG_WINDOW - 1).max(low);
                rng.random_range(earliest..=logged.min(last_start).max(earliest))
            }
            None => rng.random_range(low..=last_start),
        };
        (from, (from + LOG_WINDOW - 1).min(high))
    }
}
