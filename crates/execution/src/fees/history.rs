//! `eth_feeHistory` as geth's `feehistory.go` computes it, the
//! percentile checks with geth's texts, and Go's float format for the
//! ratios.

use super::*;

/// `eth_feeHistory`'s result before JSON encoding.
///
/// For a zero-block answer (blockCount 0, or nothing retrievable) geth
/// encodes `{"oldestBlock":"0x0","gasUsedRatio":null}`: the empty vectors
/// here stand for geth's nil slices, and the caller encodes them so.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FeeHistory {
    /// Height of the first block of the range.
    pub oldest_block: u64,
    /// Per block, the effective tip at each requested percentile; `None`
    /// when no percentiles were requested (the field is then omitted).
    pub reward: Option<Vec<Vec<u128>>>,
    /// Per block its base fee (0 before London), plus the next block's.
    pub base_fee_per_gas: Vec<u128>,
    /// Per block `gasUsed / gasLimit`.
    pub gas_used_ratio: Vec<f64>,
    /// Per block its blob base fee (0 before Cancun), plus the next
    /// block's.
    pub base_fee_per_blob_gas: Vec<u128>,
    /// Per block `blobGasUsed / (maxBlobs * 131072)` (0 before Cancun).
    pub blob_gas_used_ratio: Vec<f64>,
}

/// geth's checks of `eth_feeHistory`'s `rewardPercentiles`, with its exact
/// messages: more than 100 entries, an entry outside `[0, 100]` (`%f`,
/// six decimals), or an entry not strictly above the one before.
///
/// geth answers a blockCount of 0 before checking percentiles, so a caller
/// should run this only for a non-zero count.
///
/// # Errors
///
/// The message geth returns (JSON-RPC code -32000).
pub fn validate_percentiles(percentiles: &[f64]) -> Result<(), String> {
    if percentiles.len() > MAX_REWARD_PERCENTILES {
        return Err(format!(
            "invalid reward percentile: over the query limit {MAX_REWARD_PERCENTILES}"
        ));
    }
    for (index, &p) in percentiles.iter().enumerate() {
        // geth tests `p < 0 || p > 100`, which lets NaN through; JSON
        // cannot carry NaN, so the range form below answers the same.
        if !(0.0..=100.0).contains(&p) {
            return Err(format!("invalid reward percentile: {p:.6}"));
        }
        if index > 0 {
            let previous = percentiles[index - 1];
            if p <= previous {
                return Err(format!(
                    "invalid reward percentile: #{}:{previous:.6} >= #{index}:{p:.6}",
                    index - 1
                ));
            }
        }
    }
    Ok(())
}

/// One block's reward row (geth's `processBlock`): transactions
/// stable-sorted ascending by effective tip; for each percentile `p` the
/// tip of the first transaction at which the running sum of receipt gas
/// reaches `uint64(block.gasUsed * p / 100)` (the last one at most). A
/// block without transactions gives zeros.
pub fn block_rewards(block: &BlockFees, percentiles: &[f64]) -> Vec<u128> {
    if block.txs.is_empty() {
        return vec![0; percentiles.len()];
    }
    let mut sorted: Vec<(u128, u64)> = block.txs.iter().map(|tx| (tx.tip, tx.gas_used)).collect();
    sorted.sort_by_key(|&(tip, _)| tip);
    let last = sorted.len() - 1;
    let mut index = 0;
    let mut sum = sorted[0].1;
    let mut row = Vec::with_capacity(percentiles.len());
    for &p in percentiles {
        // Go's float-to-uint64 conversion truncates; the value lies in
        // [0, gasUsed], where Rust's `as` does the same.
        let threshold = (block.gas_used as f64 * p / 100.0) as u64;
        while sum < threshold && index < last {
            index += 1;
            sum = sum.wrapping_add(sorted[index].1);
        }
        row.push(sorted[index].0);
    }
    row
}

/// A block as [`fee_history`] reads it: its header-level facts, and its
/// reward row for the asked percentiles (asked only when there are some).
pub trait FeeHistoryBlock {
    /// Its header-level facts.
    fn head(&self) -> BlockHead;
    /// Its reward row ([`block_rewards`]).
    fn rewards(&self, percentiles: &[f64]) -> Vec<u128>;
}

impl FeeHistoryBlock for BlockFees {
    fn head(&self) -> BlockHead {
        BlockHead::of(self)
    }

    fn rewards(&self, percentiles: &[f64]) -> Vec<u128> {
        block_rewards(self, percentiles)
    }
}

impl FeeHistoryBlock for HistoryBlock {
    fn head(&self) -> BlockHead {
        self.head
    }

    /// Zeros when read without rewards (a caller's mistake: it read the
    /// range for no percentiles).
    fn rewards(&self, percentiles: &[f64]) -> Vec<u128> {
        debug_assert!(self.rewards.is_some(), "rewards asked of a head");
        match &self.rewards {
            Some(rewards) => rewards.at(self.head.gas_used, percentiles),
            None => vec![0; percentiles.len()],
        }
    }
}

impl<T: FeeHistoryBlock + ?Sized> FeeHistoryBlock for &T {
    fn head(&self) -> BlockHead {
        (**self).head()
    }

    fn rewards(&self, percentiles: &[f64]) -> Vec<u128> {
        (**self).rewards(percentiles)
    }
}

/// `eth_feeHistory` over `blocks` (oldest first, consecutive heights,
/// already resolved and truncated by the caller as geth does): see
/// [`fee_history_of`], which this is for blocks read in full.
///
/// `next_base_fee` is the last `baseFeePerGas` entry: geth's
/// `IsLondon(newest + 1) ? CalcBaseFee(newest) : 0`, i.e.
/// [`next_base_fee`] of the newest block from London on.
///
/// `next_blob_base_fee` is the last `baseFeePerBlobGas` entry. geth
/// derives it from the newest block **with the newest block's own time**
/// for both the schedule and the Osaka rule: see
/// [`history_next_blob_base_fee`].
///
/// `blob_params` gives the blob schedule in force at a timestamp (`None`
/// before Cancun).
pub fn fee_history(
    blocks: &[&BlockFees],
    percentiles: &[f64],
    next_base_fee: u128,
    next_blob_base_fee: u128,
    blob_params: impl Fn(u64) -> Option<BlobParams>,
) -> FeeHistory {
    fee_history_of(
        blocks,
        percentiles,
        next_base_fee,
        next_blob_base_fee,
        blob_params,
    )
}

/// `eth_feeHistory` over `blocks` of any [`FeeHistoryBlock`] form (those
/// read in full, or [`HistoryCache::blocks`]' heads and rewards); the
/// arguments are [`fee_history`]'s.
pub fn fee_history_of<B: FeeHistoryBlock>(
    blocks: &[B],
    percentiles: &[f64],
    next_base_fee: u128,
    next_blob_base_fee: u128,
    blob_params: impl Fn(u64) -> Option<BlobParams>,
) -> FeeHistory {
    let Some(first) = blocks.first() else {
        return FeeHistory::default();
    };
    let first = first.head();
    debug_assert!(
        blocks
            .windows(2)
            .all(|pair| pair[1].head().number == pair[0].head().number + 1),
        "fee history blocks must be consecutive, oldest first"
    );
    let count = blocks.len();
    let mut history = FeeHistory {
        oldest_block: first.number,
        reward: (!percentiles.is_empty()).then(|| Vec::with_capacity(count)),
        base_fee_per_gas: Vec::with_capacity(count + 1),
        gas_used_ratio: Vec::with_capacity(count),
        base_fee_per_blob_gas: Vec::with_capacity(count + 1),
        blob_gas_used_ratio: Vec::with_capacity(count),
    };
    for row in blocks {
        let block = row.head();
        let params = blob_params(block.timestamp);
        history.base_fee_per_gas.push(block.base_fee.unwrap_or(0));
        history
            .gas_used_ratio
            .push(block.gas_used as f64 / block.gas_limit as f64);
        let blob_fee = match (block.excess_blob_gas, params) {
            (Some(excess), Some(params)) => blob_base_fee(excess, params.update_fraction),
            _ => 0,
        };
        history.base_fee_per_blob_gas.push(blob_fee);
        let blob_ratio = match (block.blob_gas_used, params) {
            (Some(used), Some(params)) => {
                let max_blob_gas = params.max_blobs.wrapping_mul(BLOB_GAS_PER_BLOB);
                if max_blob_gas == 0 {
                    0.0
                } else {
                    used as f64 / max_blob_gas as f64
                }
            }
            _ => 0.0,
        };
        history.blob_gas_used_ratio.push(blob_ratio);
        if let Some(rows) = history.reward.as_mut() {
            rows.push(row.rewards(percentiles));
        }
    }
    history.base_fee_per_gas.push(next_base_fee);
    history.base_fee_per_blob_gas.push(next_blob_base_fee);
    history
}

/// Formats a float as Go's `encoding/json` does (how geth writes
/// `gasUsedRatio` and `blobGasUsedRatio`): the shortest decimal that reads
/// back to the same value, in plain form, or in exponent form when the
/// magnitude is below 1e-6 or at least 1e21 (`1e-7`, `1.5e+21`; negative
/// exponents without zero padding, positive ones with a `+`).
///
/// Non-finite values are not JSON; geth's encoder fails the whole answer
/// on them (`json: unsupported value`). This returns `null` for them so the
/// output stays valid JSON; a caller wanting geth's failure checks
/// `is_finite` first.
pub fn go_float(v: f64) -> String {
    if !v.is_finite() {
        return "null".to_owned();
    }
    let abs = v.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` is shortest-digits too: `1e-7`, `1.5e21`.
        let text = format!("{v:e}");
        if text.contains("e-") {
            text
        } else {
            text.replacen('e', "e+", 1)
        }
    } else {
        // Rust's `{}` is the shortest round-trip decimal, never in
        // exponent form: `0.5`, `1`, `100000000000000000000`.
        format!("{v}")
    }
}
