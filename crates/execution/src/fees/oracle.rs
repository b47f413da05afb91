//! geth's price oracle (`eth/gasprice`): the tips sampled from the
//! newest blocks and the percentile `eth_maxPriorityFeePerGas` and
//! `eth_gasPrice` answer.

use std::borrow::Borrow;
use std::collections::VecDeque;

use super::*;

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
