//! The fee formulas the answers lean on: EIP-1559's next base fee,
//! EIP-4844's blob base fee and excess blob gas (with EIP-7918's reserve
//! price from Osaka on).

use alloy_primitives::U256;

use super::*;

/// A blob schedule entry as fee history needs it, for one block's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobParams {
    /// Most blobs a block may hold.
    pub max_blobs: u64,
    /// The blob base fee update fraction.
    pub update_fraction: u64,
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
pub(super) fn fake_exponential(factor: U256, numerator: U256, denominator: U256) -> Option<U256> {
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
