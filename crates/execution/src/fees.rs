//! Fees: geth v1.17's gas price oracle (`eth_gasPrice`,
//! `eth_maxPriorityFeePerGas`) and fee history (`eth_feeHistory`), plus the
//! EIP-1559 / EIP-4844 / EIP-7918 fee formulas they lean on
//! (`eth_baseFee`-style next base fee, `eth_blobBaseFee`).
//!
//! Why a module of its own: these answers are pure arithmetic over blocks
//! and receipts neve already holds verified, and the judge is geth's
//! `eth/gasprice` package, quirks included. Keeping the arithmetic here, free
//! of I/O and of the JSON-RPC server, lets it be tested number by number;
//! the server fetches, caches and encodes.
//!
//! What is reproduced, and where we knowingly differ:
//!
//! - Effective tips use geth's 256-bit wrapping arithmetic: when a fee cap
//!   is below the base fee (never in a mined block) the tip is the tip cap,
//!   as `EffectiveGasTip` yields before its ignored `ErrGasFeeCapTooLow`.
//! - [`suggest_tip_cap`] keeps no memory between heads. geth seeds an empty
//!   block's sample with its *previous* answer (`lastPrice`, initially the
//!   miner's gas price, 1,000,000 wei); we seed it with
//!   [`OracleConfig::default_price`]. Passing the previous head's answer as
//!   `default_price` reproduces geth exactly.
//! - geth samples blocks concurrently; when the "one more block" rule is in
//!   play its outcome can depend on goroutine arrival order. We process
//!   blocks in launch order (newest first, extra blocks last), the order a
//!   quiet node sees.
//! - In fee history geth writes entry `i + 1` of `baseFeePerGas` and
//!   `baseFeePerBlobGas` twice (block `i`'s "next" value and block `i + 1`'s
//!   own), last writer wins. On a canonical chain both agree except for the
//!   blob fee at a fork boundary; we always take the block's own value.
//! - Where geth would panic (division by a zero gas target, blob update
//!   fraction or blob maximum) we return a value instead; documented per
//!   function.

use std::borrow::Borrow;
use std::collections::VecDeque;

use alloy_primitives::{Address, U256};
use serde::Deserialize;

/// Transactions sampled per block by the oracle (geth's `sampleNumber`).
pub const SAMPLE_NUMBER: usize = 3;

/// Most reward percentiles one `eth_feeHistory` call may ask for (geth's
/// `maxQueryLimit`).
pub const MAX_REWARD_PERCENTILES: usize = 100;

/// Blob gas one blob consumes (`params.BlobTxBlobGasPerBlob`, 2^17).
pub const BLOB_GAS_PER_BLOB: u64 = 1 << 17;

/// The lowest blob base fee (`params.BlobTxMinBlobGasprice`).
pub const MIN_BLOB_BASE_FEE: u64 = 1;

/// EIP-7918's execution-gas cost per blob (`params.BlobBaseCost`, 2^13).
pub const BLOB_BASE_COST: u64 = 1 << 13;

/// The first London block's base fee (`params.InitialBaseFee`, 1 gwei).
pub const INITIAL_BASE_FEE: u128 = 1_000_000_000;

const GWEI: u128 = 1_000_000_000;

/// One transaction as the fee logic sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxFee {
    /// The effective tip per gas against the block's base fee:
    /// `min(tipCap, feeCap - baseFee)`, or the tip cap when the block has no
    /// base fee. Legacy and access-list transactions have both caps equal
    /// to their gas price.
    pub tip: u128,
    /// Gas the transaction used, from its receipt.
    pub gas_used: u64,
    /// The transaction's sender.
    pub sender: Address,
}

/// What the oracle and fee history read of one block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFees {
    /// Height.
    pub number: u64,
    /// Base fee per gas, from London on.
    pub base_fee: Option<u128>,
    /// Gas used by the whole block.
    pub gas_used: u64,
    /// The block's gas limit.
    pub gas_limit: u64,
    /// Blob gas used, from Cancun on.
    pub blob_gas_used: Option<u64>,
    /// Excess blob gas, from Cancun on.
    pub excess_blob_gas: Option<u64>,
    /// Seconds since the epoch (selects the blob schedule).
    pub timestamp: u64,
    /// The fee recipient; its own transactions are not sampled.
    pub coinbase: Address,
    /// The block's transactions, in block order.
    pub txs: Vec<TxFee>,
}

/// The fields of `eth_getBlockByNumber(n, true)` fees need; the rest is
/// skipped unread.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BlockJson {
    number: U256,
    #[serde(default)]
    base_fee_per_gas: Option<U256>,
    gas_used: U256,
    gas_limit: U256,
    #[serde(default)]
    blob_gas_used: Option<U256>,
    #[serde(default)]
    excess_blob_gas: Option<U256>,
    timestamp: U256,
    miner: Address,
    #[serde(default)]
    transactions: Vec<TxJson>,
}

/// A full transaction object's pricing fields and sender.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TxJson {
    #[serde(default)]
    gas_price: Option<U256>,
    #[serde(default)]
    max_fee_per_gas: Option<U256>,
    #[serde(default)]
    max_priority_fee_per_gas: Option<U256>,
    from: Address,
}

impl TxJson {
    /// `(feeCap, tipCap)`: the 1559 pair when the transaction carries one
    /// (types 2, 3 and 4), else its gas price for both (types 0 and 1).
    /// For 1559 transactions geth's JSON `gasPrice` is the effective price
    /// paid, not a cap, so it must not be used for them.
    fn caps(&self) -> Option<(U256, U256)> {
        match (self.max_fee_per_gas, self.max_priority_fee_per_gas) {
            (Some(fee_cap), Some(tip_cap)) => Some((fee_cap, tip_cap)),
            _ => self.gas_price.map(|price| (price, price)),
        }
    }
}

/// A receipt's gas used (`eth_getBlockReceipts` element).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReceiptJson {
    gas_used: U256,
}

fn small(value: U256, field: &str) -> Result<u64, String> {
    u64::try_from(value).map_err(|_| format!("{field} does not fit 64 bits"))
}

fn wide(value: U256, field: &str) -> Result<u128, String> {
    u128::try_from(value).map_err(|_| format!("{field} does not fit 128 bits"))
}

/// geth's `EffectiveGasTip` in its 256-bit arithmetic: the subtraction
/// wraps when the fee cap is below the base fee, so the minimum is then the
/// tip cap (geth returns that value alongside an error both callers ignore).
fn effective_tip(fee_cap: U256, tip_cap: U256, base_fee: Option<u128>) -> U256 {
    match base_fee {
        None => tip_cap,
        Some(base) => tip_cap.min(fee_cap.wrapping_sub(U256::from(base))),
    }
}

impl BlockFees {
    /// Reads a block from geth's `eth_getBlockByNumber(n, true)` JSON object
    /// and its `eth_getBlockReceipts` JSON array (receipts in transaction
    /// order). Unknown fields are ignored.
    ///
    /// # Errors
    ///
    /// Malformed JSON, a hashes-only block, a transaction without prices,
    /// a receipt count that differs from the transaction count, or a value
    /// too wide for its field (an effective tip above 2^128 included).
    pub fn from_json(block: &[u8], receipts: &[u8]) -> Result<Self, String> {
        let raw: BlockJson =
            serde_json::from_slice(block).map_err(|err| format!("block JSON: {err}"))?;
        let receipts: Vec<ReceiptJson> =
            serde_json::from_slice(receipts).map_err(|err| format!("receipts JSON: {err}"))?;
        if receipts.len() != raw.transactions.len() {
            return Err(format!(
                "block has {} transactions but {} receipts",
                raw.transactions.len(),
                receipts.len()
            ));
        }
        let base_fee = raw
            .base_fee_per_gas
            .map(|fee| wide(fee, "baseFeePerGas"))
            .transpose()?;
        let mut txs = Vec::with_capacity(raw.transactions.len());
        for (index, (tx, receipt)) in raw.transactions.iter().zip(&receipts).enumerate() {
            let (fee_cap, tip_cap) = tx
                .caps()
                .ok_or_else(|| format!("transaction {index} has no gasPrice"))?;
            let tip = u128::try_from(effective_tip(fee_cap, tip_cap, base_fee))
                .map_err(|_| format!("transaction {index}: effective tip does not fit 128 bits"))?;
            txs.push(TxFee {
                tip,
                gas_used: small(receipt.gas_used, "receipt gasUsed")?,
                sender: tx.from,
            });
        }
        Ok(Self {
            number: small(raw.number, "number")?,
            base_fee,
            gas_used: small(raw.gas_used, "gasUsed")?,
            gas_limit: small(raw.gas_limit, "gasLimit")?,
            blob_gas_used: raw
                .blob_gas_used
                .map(|used| small(used, "blobGasUsed"))
                .transpose()?,
            excess_blob_gas: raw
                .excess_blob_gas
                .map(|excess| small(excess, "excessBlobGas"))
                .transpose()?,
            timestamp: small(raw.timestamp, "timestamp")?,
            coinbase: raw.miner,
            txs,
        })
    }
}

/// The oracle's settings, geth's `FullNodeGPO` defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OracleConfig {
    /// Blocks sampled back from the head (geth `--gpo.blocks`, 20); up to
    /// twice as many when blocks yield a single value. 0 is treated as 1.
    pub blocks: u64,
    /// Percentile of the sampled tips answered (geth `--gpo.percentile`,
    /// 60); above 100 is treated as 100.
    pub percentile: u64,
    /// Cap on the answer (geth `--gpo.maxprice`, 500 gwei); 0 is treated
    /// as the default, as geth does.
    pub max_price: u128,
    /// Tips below this are not sampled (geth `--gpo.ignoreprice`, 2 wei);
    /// 0 is treated as the default, as geth does.
    pub ignore_price: u128,
    /// The value an empty block contributes (and the answer when nothing
    /// can be sampled). geth uses its previous answer here, starting from
    /// the miner's gas price, 1,000,000 wei (`GWei / 1000`); pass the
    /// previous head's answer to reproduce geth across heads.
    pub default_price: u128,
}

impl Default for OracleConfig {
    fn default() -> Self {
        Self {
            blocks: 20,
            percentile: 60,
            max_price: 500 * GWEI,
            ignore_price: 2,
            default_price: GWEI / 1000,
        }
    }
}

/// The tips the oracle samples from one block (geth's `getBlockValues`):
/// the [`SAMPLE_NUMBER`] lowest effective tips, ascending, among
/// transactions whose tip is at least `ignore_price` and whose sender is
/// not the block's coinbase. Empty for an empty block or one holding only
/// the coinbase's or ignored transactions.
pub fn block_tip_samples(block: &BlockFees, ignore_price: u128) -> Vec<u128> {
    // geth sorts all transactions by tip and walks them in order; the
    // values it keeps depend only on the multiset of eligible tips, so
    // filtering first gives the same answer.
    let mut tips: Vec<u128> = block
        .txs
        .iter()
        .filter(|tx| tx.tip >= ignore_price && tx.sender != block.coinbase)
        .map(|tx| tx.tip)
        .collect();
    tips.sort_unstable();
    tips.truncate(SAMPLE_NUMBER);
    tips
}

/// geth's `SuggestTipCap` for the chain whose head is at height `head`:
/// the answer of `eth_maxPriorityFeePerGas`, and with [`gas_price`] of
/// `eth_gasPrice`.
///
/// Samples blocks `head`, `head - 1`, … (never block 0), up to
/// `config.blocks` of them, through `block` (by height). Each contributes
/// its [`block_tip_samples`], or `config.default_price` when it has none.
/// When a block contributes exactly one value, one more (older) block is
/// sampled, provided `values so far + 1 + blocks outstanding < 2 * blocks`
/// and the next height is above 0. All values are sorted and the one at
/// `(len - 1) * percentile / 100` is answered, capped at `max_price`.
///
/// Returns `None` when `block` does not have a height it was asked for
/// (geth fails the call when reading a block errs; a block it reads as
/// absent without error would count as empty there).
pub fn suggest_tip_cap<B, F>(head: u64, mut block: F, config: &OracleConfig) -> Option<u128>
where
    F: FnMut(u64) -> Option<B>,
    B: Borrow<BlockFees>,
{
    let blocks = usize::try_from(config.blocks.max(1)).unwrap_or(usize::MAX);
    let limit = blocks.saturating_mul(2);
    let percentile = usize::try_from(config.percentile.min(100)).unwrap_or(100);
    let max_price = if config.max_price == 0 {
        OracleConfig::default().max_price
    } else {
        config.max_price
    };
    let ignore_price = if config.ignore_price == 0 {
        OracleConfig::default().ignore_price
    } else {
        config.ignore_price
    };

    // Heights launched and not yet processed (geth's `exp` is its length),
    // processed in launch order.
    let mut outstanding = VecDeque::new();
    let mut next = head;
    while outstanding.len() < blocks && next > 0 {
        outstanding.push_back(next);
        next -= 1;
    }
    let mut values: Vec<u128> = Vec::new();
    while let Some(number) = outstanding.pop_front() {
        let fetched = block(number)?;
        let fetched: &BlockFees = fetched.borrow();
        let mut sample = block_tip_samples(fetched, ignore_price);
        if sample.is_empty() {
            sample.push(config.default_price);
        }
        if sample.len() == 1 && values.len() + 1 + outstanding.len() < limit && next > 0 {
            outstanding.push_back(next);
            next -= 1;
        }
        values.extend(sample);
    }
    let price = if values.is_empty() {
        config.default_price
    } else {
        values.sort_unstable();
        values[(values.len() - 1) * percentile / 100]
    };
    Some(price.min(max_price))
}

/// `eth_gasPrice`: the suggested tip plus the **head** block's own base fee
/// (not the next block's), or the tip alone before London. Saturates where
/// geth's big integers would not (far beyond any real fee).
pub fn gas_price(tip: u128, head_base_fee: Option<u128>) -> u128 {
    tip.saturating_add(head_base_fee.unwrap_or(0))
}

/// A blob schedule entry as fee history needs it, for one block's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobParams {
    /// Most blobs a block may hold.
    pub max_blobs: u64,
    /// The blob base fee update fraction.
    pub update_fraction: u64,
}

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

/// `eth_feeHistory` over `blocks` (oldest first, consecutive heights,
/// already resolved and truncated by the caller as geth does).
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
    let Some(first) = blocks.first() else {
        return FeeHistory::default();
    };
    debug_assert!(
        blocks
            .windows(2)
            .all(|pair| pair[1].number == pair[0].number + 1),
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
    for block in blocks {
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
            rows.push(block_rewards(block, percentiles));
        }
    }
    history.base_fee_per_gas.push(next_base_fee);
    history.base_fee_per_blob_gas.push(next_blob_base_fee);
    history
}

/// EIP-1559's base fee for the child of `parent` (geth's `CalcBaseFee`):
/// unchanged at the gas target (`gas_limit / elasticity`), otherwise moved
/// by `base * |used - target| / target / denominator`, at least 1 up, never
/// below 0. A parent without a base fee (the block before London) gives
/// [`INITIAL_BASE_FEE`]; the caller decides whether the child is London at
/// all. Mainnet uses elasticity 2 and denominator 8.
///
/// A zero gas target or denominator (where geth would panic) leaves the
/// base fee unchanged.
pub fn next_base_fee(parent: &BlockFees, elasticity: u64, denominator: u64) -> u128 {
    let Some(base) = parent.base_fee else {
        return INITIAL_BASE_FEE;
    };
    let target = parent.gas_limit.checked_div(elasticity).unwrap_or(0);
    if parent.gas_used == target || target == 0 || denominator == 0 {
        return base;
    }
    let base_wide = U256::from(base);
    let target_wide = U256::from(target);
    let denominator_wide = U256::from(denominator);
    if parent.gas_used > target {
        // (u64 delta) * (u128 base) fits 256 bits.
        let delta =
            U256::from(parent.gas_used - target) * base_wide / target_wide / denominator_wide;
        let delta = delta.max(U256::from(1u64));
        base_wide.saturating_add(delta).saturating_to::<u128>()
    } else {
        let delta =
            U256::from(target - parent.gas_used) * base_wide / target_wide / denominator_wide;
        // delta <= base since (target - used) <= target and denominator >= 1.
        base_wide.saturating_sub(delta).saturating_to::<u128>()
    }
}

/// `factor * e^(numerator / denominator)` by EIP-4844's integer Taylor
/// series. `None` when the denominator is 0 or an intermediate would not
/// fit 256 bits (a fee beyond any real value).
fn fake_exponential(factor: U256, numerator: U256, denominator: U256) -> Option<U256> {
    if denominator.is_zero() {
        return None;
    }
    let mut output = U256::ZERO;
    let mut accum = factor.checked_mul(denominator)?;
    let mut i: u64 = 1;
    while !accum.is_zero() {
        output = output.checked_add(accum)?;
        accum = accum.checked_mul(numerator)? / denominator / U256::from(i);
        i += 1;
    }
    Some(output / denominator)
}

/// The blob base fee for a block's excess blob gas (geth's `CalcBlobFee`):
/// `fake_exponential(1, excess, update_fraction)`. This is
/// `eth_blobBaseFee` for the head block with the fraction in force at its
/// time. Saturates at `u128::MAX` far beyond any real fee; an update
/// fraction of 0 (no schedule, where geth would panic) gives 0.
pub fn blob_base_fee(excess_blob_gas: u64, update_fraction: u64) -> u128 {
    if update_fraction == 0 {
        return 0;
    }
    fake_exponential(
        U256::from(MIN_BLOB_BASE_FEE),
        U256::from(excess_blob_gas),
        U256::from(update_fraction),
    )
    .map_or(u128::MAX, |fee| fee.saturating_to::<u128>())
}

/// The excess blob gas of the child of `parent` (geth's
/// `CalcExcessBlobGas`), for the schedule `target_blobs` / `max_blobs` /
/// `update_fraction` and whether Osaka is active.
///
/// EIP-4844: `max(0, parentExcess + parentUsed - target * 131072)`. From
/// Osaka, EIP-7918: when that is not below the target and
/// `8192 * parentBaseFee` exceeds the blob price at the parent's excess
/// (`blob_base_fee * 131072`), the excess instead grows by
/// `parentUsed * (max - target) / max`. A parent without excess blob gas
/// counts as zero excess and zero use. Go's unsigned wrapping is kept; a
/// zero `max_blobs` (where geth would panic) skips the EIP-7918 branch.
pub fn next_excess_blob_gas(
    parent: &BlockFees,
    target_blobs: u64,
    max_blobs: u64,
    update_fraction: u64,
    osaka: bool,
) -> u64 {
    let (parent_excess, parent_used) = match parent.excess_blob_gas {
        Some(excess) => (excess, parent.blob_gas_used.unwrap_or(0)),
        None => (0, 0),
    };
    let excess = parent_excess.wrapping_add(parent_used);
    let target_gas = target_blobs.wrapping_mul(BLOB_GAS_PER_BLOB);
    if excess < target_gas {
        return 0;
    }
    if osaka && max_blobs != 0 {
        let reserve_price = U256::from(BLOB_BASE_COST) * U256::from(parent.base_fee.unwrap_or(0));
        let blob_price = fake_exponential(
            U256::from(MIN_BLOB_BASE_FEE),
            U256::from(parent_excess),
            U256::from(update_fraction),
        )
        .and_then(|fee| fee.checked_mul(U256::from(BLOB_GAS_PER_BLOB)));
        if blob_price.is_some_and(|price| reserve_price > price) {
            let scaled = parent_used.wrapping_mul(max_blobs.wrapping_sub(target_blobs)) / max_blobs;
            return parent_excess.wrapping_add(scaled);
        }
    }
    excess - target_gas
}

/// The last `baseFeePerBlobGas` entry of a fee history ending at `newest`,
/// as geth computes it: the excess blob gas of the next block from
/// `newest` with the schedule and Osaka flag in force at **`newest`'s own
/// time** (not the next block's), priced with that same schedule's update
/// fraction. 0 when `newest` has no excess blob gas (before Cancun).
pub fn history_next_blob_base_fee(
    newest: &BlockFees,
    target_blobs: u64,
    params: BlobParams,
    osaka: bool,
) -> u128 {
    if newest.excess_blob_gas.is_none() {
        return 0;
    }
    let excess = next_excess_blob_gas(
        newest,
        target_blobs,
        params.max_blobs,
        params.update_fraction,
        osaka,
    );
    blob_base_fee(excess, params.update_fraction)
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    const COINBASE: Address = Address::repeat_byte(0xcc);
    const ALICE: Address = Address::repeat_byte(0xa1);
    const BOB: Address = Address::repeat_byte(0xb0);

    fn block_with(number: u64, txs: &[(u128, Address)]) -> BlockFees {
        BlockFees {
            number,
            base_fee: Some(GWEI),
            gas_used: 21_000 * txs.len() as u64,
            gas_limit: 30_000_000,
            blob_gas_used: None,
            excess_blob_gas: None,
            timestamp: 1_000 + number,
            coinbase: COINBASE,
            txs: txs
                .iter()
                .map(|&(tip, sender)| TxFee {
                    tip,
                    gas_used: 21_000,
                    sender,
                })
                .collect(),
        }
    }

    fn london_parent(base_fee: u128, gas_used: u64, gas_limit: u64) -> BlockFees {
        BlockFees {
            gas_used,
            gas_limit,
            base_fee: Some(base_fee),
            ..block_with(1, &[])
        }
    }

    fn blob_parent(excess: u64, blobs: u64, base_fee: u128) -> BlockFees {
        BlockFees {
            excess_blob_gas: Some(excess),
            blob_gas_used: Some(blobs * BLOB_GAS_PER_BLOB),
            base_fee: Some(base_fee),
            ..block_with(1, &[])
        }
    }

    #[test]
    fn samples_lowest_three_skipping_coinbase_and_ignored() {
        let block = block_with(
            7,
            &[
                (1, ALICE),    // below the 2 wei ignore price
                (5, COINBASE), // the miner's own
                (7, ALICE),
                (3, BOB),
                (9, ALICE),
                (4, ALICE),
                (2, ALICE), // exactly the ignore price: kept
            ],
        );
        assert_eq!(block_tip_samples(&block, 2), vec![2, 3, 4]);
        assert_eq!(block_tip_samples(&block, 4), vec![4, 7, 9]);
        let only_miner = block_with(8, &[(50, COINBASE), (1, ALICE)]);
        assert!(block_tip_samples(&only_miner, 2).is_empty());
    }

    #[test]
    fn suggest_walks_back_and_never_samples_genesis() {
        let chain: HashMap<u64, BlockFees> = [
            block_with(3, &[(40, ALICE), (10, ALICE), (30, BOB), (20, BOB)]),
            block_with(2, &[(15, ALICE)]),
            block_with(1, &[]),
        ]
        .into_iter()
        .map(|block| (block.number, block))
        .collect();
        let mut asked = Vec::new();
        let tip = suggest_tip_cap(
            3,
            |n| {
                assert_ne!(n, 0, "block 0 is never sampled");
                asked.push(n);
                chain.get(&n)
            },
            &OracleConfig::default(),
        );
        // Values [10, 20, 30] + [15] + [default 1_000_000], sorted
        // [10, 15, 20, 30, 1_000_000]; index (5 - 1) * 60 / 100 = 2.
        assert_eq!(tip, Some(20));
        assert_eq!(asked, vec![3, 2, 1]);
    }

    #[test]
    fn suggest_fetches_extra_blocks_for_single_values() {
        let empty = block_with(0, &[]);
        let mut asked = Vec::new();
        let tip = suggest_tip_cap(
            50,
            |n| {
                asked.push(n);
                Some(&empty)
            },
            &OracleConfig::default(),
        );
        // Every block yields one value, so the sample grows to 2 * 20.
        assert_eq!(tip, Some(1_000_000));
        assert_eq!(asked, (11..=50).rev().collect::<Vec<u64>>());

        // blocks = 2: block 30 yields one value (0 + 1 + 1 < 4: fetch 28),
        // block 29 three, block 28 one (4 + 1 + 0 >= 4: stop).
        let chain: HashMap<u64, BlockFees> = [
            block_with(30, &[(100, ALICE)]),
            block_with(29, &[(5, ALICE), (6, ALICE), (7, ALICE)]),
            block_with(28, &[(8, BOB)]),
            block_with(27, &[(9, BOB)]),
        ]
        .into_iter()
        .map(|block| (block.number, block))
        .collect();
        let mut asked = Vec::new();
        let config = OracleConfig {
            blocks: 2,
            ..OracleConfig::default()
        };
        let tip = suggest_tip_cap(
            30,
            |n| {
                asked.push(n);
                chain.get(&n)
            },
            &config,
        );
        assert_eq!(asked, vec![30, 29, 28]);
        // [5, 6, 7, 8, 100]: index 4 * 60 / 100 = 2.
        assert_eq!(tip, Some(7));
    }

    #[test]
    fn suggest_percentile_index_cap_and_missing_block() {
        let block = block_with(1, &[(11, ALICE), (12, ALICE), (13, ALICE)]);
        let one = |n: u64| (n == 1).then_some(&block);
        let at = |percentile, max_price| {
            let config = OracleConfig {
                percentile,
                max_price,
                ..OracleConfig::default()
            };
            suggest_tip_cap(1, one, &config)
        };
        assert_eq!(at(0, 500 * GWEI), Some(11));
        assert_eq!(at(49, 500 * GWEI), Some(11)); // 2 * 49 / 100 = 0
        assert_eq!(at(50, 500 * GWEI), Some(12)); // 2 * 50 / 100 = 1
        assert_eq!(at(100, 500 * GWEI), Some(13));
        assert_eq!(at(100, 12), Some(12));
        // Head 0: nothing to sample, the default answers.
        assert_eq!(
            suggest_tip_cap(0, one, &OracleConfig::default()),
            Some(1_000_000)
        );
        // A needed block that is not held.
        assert_eq!(suggest_tip_cap(2, one, &OracleConfig::default()), None);
    }

    #[test]
    fn gas_price_adds_head_base_fee() {
        assert_eq!(gas_price(5, Some(10)), 15);
        assert_eq!(gas_price(5, None), 5);
    }

    #[test]
    fn reads_block_and_receipts_json() {
        let block = br#"{
            "number": "0x10", "baseFeePerGas": "0x3b9aca00", "gasUsed": "0xf618",
            "gasLimit": "0x1c9c380", "timestamp": "0x64", "hash": "0xignored",
            "miner": "0x00000000000000000000000000000000000000aa",
            "blobGasUsed": "0x20000", "excessBlobGas": "0x0",
            "transactions": [
                {"type": "0x0", "gasPrice": "0x3b9aca0a",
                 "from": "0x00000000000000000000000000000000000000a1"},
                {"type": "0x2", "gasPrice": "0x3b9aca05", "maxFeePerGas": "0x77359400",
                 "maxPriorityFeePerGas": "0x5",
                 "from": "0x00000000000000000000000000000000000000b0"},
                {"type": "0x2", "gasPrice": "0x3b9aca03", "maxFeePerGas": "0x3b9aca03",
                 "maxPriorityFeePerGas": "0x10",
                 "from": "0x00000000000000000000000000000000000000b0"}
            ]
        }"#;
        let receipts = br#"[{"gasUsed": "0x5208", "status": "0x1"},
            {"gasUsed": "0x5208"}, {"gasUsed": "0x5208"}]"#;
        let fees = BlockFees::from_json(block, receipts).expect("parses");
        assert_eq!(fees.number, 16);
        assert_eq!(fees.base_fee, Some(GWEI));
        assert_eq!(fees.gas_used, 63_000);
        assert_eq!(fees.gas_limit, 30_000_000);
        assert_eq!(fees.timestamp, 100);
        assert_eq!(fees.blob_gas_used, Some(BLOB_GAS_PER_BLOB));
        assert_eq!(fees.excess_blob_gas, Some(0));
        assert_eq!(fees.coinbase, Address::with_last_byte(0xaa));
        let tips: Vec<u128> = fees.txs.iter().map(|tx| tx.tip).collect();
        assert_eq!(tips, vec![10, 5, 3]);
        assert_eq!(fees.txs[1].sender, Address::with_last_byte(0xb0));
        assert!(fees.txs.iter().all(|tx| tx.gas_used == 21_000));

        let pre_london = br#"{"number": "0x1", "gasUsed": "0x5208", "gasLimit": "0x1388",
            "timestamp": "0x1", "miner": "0x00000000000000000000000000000000000000aa",
            "transactions": [{"type": "0x0", "gasPrice": "0x64",
                "from": "0x00000000000000000000000000000000000000a1"}]}"#;
        let fees = BlockFees::from_json(pre_london, br#"[{"gasUsed":"0x5208"}]"#).expect("parses");
        assert_eq!(fees.base_fee, None);
        assert_eq!(fees.txs[0].tip, 100);
        assert!(BlockFees::from_json(pre_london, b"[]").is_err());
    }

    #[test]
    fn fee_cap_below_base_fee_tips_the_tip_cap_like_geth() {
        let tip = effective_tip(U256::from(5u64), U256::from(3u64), Some(10));
        assert_eq!(tip, U256::from(3u64));
        let tip = effective_tip(U256::from(15u64), U256::from(30u64), Some(10));
        assert_eq!(tip, U256::from(5u64));
        assert_eq!(
            effective_tip(U256::from(15u64), U256::from(7u64), None),
            U256::from(7u64)
        );
    }

    #[test]
    fn rewards_follow_gas_weighted_thresholds() {
        let mut block = block_with(5, &[]);
        block.gas_used = 100_000;
        block.txs = [(10, 21_000), (5, 50_000), (20, 29_000)]
            .into_iter()
            .map(|(tip, gas_used)| TxFee {
                tip,
                gas_used,
                sender: ALICE,
            })
            .collect();
        // Sorted: (5, 50_000), (10, 21_000), (20, 29_000); running sums
        // 50_000, 71_000, 100_000.
        let row = block_rewards(&block, &[0.0, 25.0, 50.0, 60.0, 75.0, 100.0]);
        assert_eq!(row, vec![5, 5, 5, 10, 20, 20]);
        assert_eq!(
            block_rewards(&block_with(6, &[]), &[10.0, 90.0]),
            vec![0, 0]
        );
    }

    #[test]
    fn fee_history_assembles_rows() {
        let mut older = block_with(9, &[(3, ALICE), (1, BOB)]);
        older.base_fee = Some(100);
        older.gas_limit = 84_000;
        let mut newer = block_with(10, &[]);
        newer.base_fee = Some(110);
        newer.gas_limit = 42_000;
        newer.gas_used = 21_000;
        newer.excess_blob_gas = Some(0);
        newer.blob_gas_used = Some(3 * BLOB_GAS_PER_BLOB);
        let params = |_: u64| {
            Some(BlobParams {
                max_blobs: 6,
                update_fraction: 3_338_477,
            })
        };
        let history = fee_history(&[&older, &newer], &[50.0], 120, 1, params);
        assert_eq!(history.oldest_block, 9);
        assert_eq!(history.reward, Some(vec![vec![1], vec![0]]));
        assert_eq!(history.base_fee_per_gas, vec![100, 110, 120]);
        assert_eq!(history.gas_used_ratio, vec![0.5, 0.5]);
        assert_eq!(history.base_fee_per_blob_gas, vec![0, 1, 1]);
        assert_eq!(history.blob_gas_used_ratio, vec![0.0, 0.5]);

        let without = fee_history(&[&older], &[], 7, 0, |_| None);
        assert_eq!(without.reward, None);
        assert_eq!(without.base_fee_per_gas, vec![100, 7]);
        assert_eq!(without.base_fee_per_blob_gas, vec![0, 0]);
        assert_eq!(
            fee_history(&[], &[1.0], 1, 1, |_| None),
            FeeHistory::default()
        );
    }

    #[test]
    fn base_fee_moves_like_geth() {
        let fee = |used| next_base_fee(&london_parent(GWEI, used, 30_000_000), 2, 8);
        assert_eq!(fee(15_000_000), GWEI);
        assert_eq!(fee(30_000_000), 1_125_000_000);
        assert_eq!(fee(0), 875_000_000);
        assert_eq!(fee(20_000_000), 1_041_666_666);
        // The increase is at least 1 wei; a decrease may be 0.
        assert_eq!(
            next_base_fee(&london_parent(7, 15_000_001, 30_000_000), 2, 8),
            8
        );
        assert_eq!(
            next_base_fee(&london_parent(7, 14_999_999, 30_000_000), 2, 8),
            7
        );
        let mut pre_london = london_parent(0, 0, 30_000_000);
        pre_london.base_fee = None;
        assert_eq!(next_base_fee(&pre_london, 2, 8), INITIAL_BASE_FEE);
    }

    #[test]
    fn fake_exponential_matches_geth_vectors() {
        let cases: [(u64, u64, u64, u64); 15] = [
            (1, 0, 1, 1),
            (38_493, 0, 1_000, 38_493),
            (0, 1_234, 2_345, 0),
            (1, 2, 1, 6),
            (1, 4, 2, 6),
            (1, 3, 1, 16),
            (1, 6, 2, 18),
            (1, 4, 1, 49),
            (1, 8, 2, 50),
            (10, 8, 2, 542),
            (11, 8, 2, 596),
            (1, 5, 1, 136),
            (1, 5, 2, 11),
            (2, 5, 2, 23),
            (1, 50_000_000, 2_225_652, 5_709_098_764),
        ];
        for (factor, numerator, denominator, want) in cases {
            let have = fake_exponential(
                U256::from(factor),
                U256::from(numerator),
                U256::from(denominator),
            );
            assert_eq!(
                have,
                Some(U256::from(want)),
                "{factor} {numerator} {denominator}"
            );
        }
    }

    #[test]
    fn blob_base_fee_matches_geth_vectors() {
        const CANCUN: u64 = 3_338_477;
        assert_eq!(blob_base_fee(0, CANCUN), 1);
        assert_eq!(blob_base_fee(2_314_057, CANCUN), 1);
        assert_eq!(blob_base_fee(2_314_058, CANCUN), 2);
        assert_eq!(blob_base_fee(10 * 1024 * 1024, CANCUN), 23);
        assert_eq!(blob_base_fee(1, 0), 0);
    }

    #[test]
    fn excess_blob_gas_cancun() {
        const PER: u64 = BLOB_GAS_PER_BLOB;
        let next = |excess, blobs| {
            next_excess_blob_gas(&blob_parent(excess, blobs, GWEI), 3, 6, 3_338_477, false)
        };
        assert_eq!(next(0, 0), 0);
        assert_eq!(next(0, 1), 0);
        assert_eq!(next(0, 3), 0);
        assert_eq!(next(0, 4), PER);
        assert_eq!(next(1, 4), PER + 1);
        assert_eq!(next(1, 5), 2 * PER + 1);
        assert_eq!(next(3 * PER, 3), 3 * PER);
        assert_eq!(next(3 * PER, 2), 2 * PER);
        assert_eq!(next(3 * PER, 1), PER);
        assert_eq!(next(PER - 1, 2), 0);
        let mut no_blobs = blob_parent(0, 0, GWEI);
        no_blobs.excess_blob_gas = None;
        assert_eq!(next_excess_blob_gas(&no_blobs, 3, 6, 3_338_477, false), 0);
    }

    #[test]
    fn excess_blob_gas_osaka_reserve_price() {
        // geth's TestCalcBlobFeePostOsaka: BPO1 (9/14) and BPO3 (21/32).
        let parent = blob_parent(5_149_252, 10, 30);
        assert_eq!(
            next_excess_blob_gas(&parent, 9, 14, 8_832_827, true),
            5_617_366
        );
        let parent = blob_parent(19_251_039, 19, 50);
        assert_eq!(
            next_excess_blob_gas(&parent, 21, 32, 20_609_697, true),
            20_107_103
        );
        // geth's TestCalcExcessBlobGasEIP7918 (6/9).
        let target_gas = 6 * BLOB_GAS_PER_BLOB;
        let below = blob_parent(0, 6, GWEI);
        assert_eq!(
            next_excess_blob_gas(&below, 6, 9, 5_007_716, true),
            target_gas * 3 / 9
        );
        let above = blob_parent(0, 6, 1);
        assert_eq!(next_excess_blob_gas(&above, 6, 9, 5_007_716, true), 0);
        // Before Osaka the reserve price does not apply.
        assert_eq!(next_excess_blob_gas(&below, 6, 9, 5_007_716, false), 0);
    }

    #[test]
    fn history_next_blob_fee_uses_newest_schedule() {
        let params = BlobParams {
            max_blobs: 9,
            update_fraction: 5_007_716,
        };
        let newest = blob_parent(0, 6, GWEI);
        // Excess becomes 6 * 131072 * 3 / 9 = 262_144: fee still 1.
        assert_eq!(history_next_blob_base_fee(&newest, 6, params, true), 1);
        let mut pre_cancun = newest.clone();
        pre_cancun.excess_blob_gas = None;
        assert_eq!(history_next_blob_base_fee(&pre_cancun, 6, params, true), 0);
    }

    #[test]
    fn percentile_validation_messages() {
        assert_eq!(validate_percentiles(&[]), Ok(()));
        assert_eq!(validate_percentiles(&[0.0, 25.5, 100.0]), Ok(()));
        assert_eq!(
            validate_percentiles(&[1.0; 101]),
            Err("invalid reward percentile: over the query limit 100".to_owned())
        );
        assert_eq!(
            validate_percentiles(&[101.0]),
            Err("invalid reward percentile: 101.000000".to_owned())
        );
        assert_eq!(
            validate_percentiles(&[-1.0]),
            Err("invalid reward percentile: -1.000000".to_owned())
        );
        assert_eq!(
            validate_percentiles(&[10.0, 10.0]),
            Err("invalid reward percentile: #0:10.000000 >= #1:10.000000".to_owned())
        );
        assert_eq!(
            validate_percentiles(&[50.0, 25.5]),
            Err("invalid reward percentile: #0:50.000000 >= #1:25.500000".to_owned())
        );
        // The range check of an entry comes before its order check.
        assert_eq!(
            validate_percentiles(&[50.0, 200.0]),
            Err("invalid reward percentile: 200.000000".to_owned())
        );
        // Go's %f rounds an exact tie to even, as Rust does.
        assert_eq!(
            validate_percentiles(&[100.0078125]),
            Err("invalid reward percentile: 100.007812".to_owned())
        );
    }

    #[test]
    fn go_float_matches_encoding_json() {
        let cases: [(f64, &str); 17] = [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (0.5, "0.5"),
            (0.123456, "0.123456"),
            (0.1 + 0.2, "0.30000000000000004"),
            (2.0 / 3.0, "0.6666666666666666"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (-2.5e-8, "-2.5e-8"),
            (1e-10, "1e-10"),
            (1e-100, "1e-100"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.23456789e23, "1.23456789e+23"),
            (1e100, "1e+100"),
        ];
        for (value, want) in cases {
            assert_eq!(go_float(value), want, "{value:?}");
        }
        assert_eq!(go_float(f64::NAN), "null");
    }
}
