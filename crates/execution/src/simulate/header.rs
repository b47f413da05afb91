//! A simulated block's header before its execution, as geth's
//! `makeHeaders` and `processBlock` fill it: the fields the previous block
//! leaves (coinbase, gas limit), the block overrides, the base fee (0
//! without validation, London's rule from the parent with it), the blob
//! excess from the parent (EIP-7918's reserve price from Osaka on), the
//! beacon root; and the EVM's environment for it.

use alloy_consensus::Header;
use alloy_eips::eip1559::BaseFeeParams;
use alloy_primitives::{Address, B256, U256};
use revm::context::{BlockEnv, CfgEnv};
use revm::context_interface::block::BlobExcessGasAndPrice;
use revm::primitives::hardfork::SpecId;

use crate::args::BlockOverrides;
use crate::error::CallError;
use crate::rules::Fork;
use crate::run::MEMORY_LIMIT;

use super::error::SimError;
use super::plan::Planned;

/// Gas of one blob.
pub(crate) const BLOB_GAS: u64 = 1 << 17;
/// geth's `params.BlobBaseCost` (EIP-7918).
const BLOB_BASE_COST: u128 = 1 << 13;

/// What the next block reads of its parent.
#[derive(Clone, Debug)]
pub(crate) struct Parent {
    pub(crate) hash: B256,
    pub(crate) beneficiary: Address,
    pub(crate) gas_limit: u64,
    pub(crate) gas_used: u64,
    pub(crate) base_fee: Option<u64>,
    pub(crate) excess_blob_gas: Option<u64>,
    pub(crate) blob_gas_used: Option<u64>,
}

impl Parent {
    /// The block `header` describes, once hashed.
    pub(crate) fn of(header: &Header, hash: B256) -> Parent {
        Parent {
            hash,
            beneficiary: header.beneficiary,
            gas_limit: header.gas_limit,
            gas_used: header.gas_used,
            base_fee: header.base_fee_per_gas,
            excess_blob_gas: header.excess_blob_gas,
            blob_gas_used: header.blob_gas_used,
        }
    }
}

/// The header's fields known before the block's calls run.
pub(crate) fn header(
    parent: &Parent,
    planned: &Planned<'_>,
    overrides: &BlockOverrides,
    fork: &Fork,
    validate: bool,
) -> Result<Header, SimError> {
    let mut header = Header {
        parent_hash: parent.hash,
        beneficiary: overrides.fee_recipient.unwrap_or(parent.beneficiary),
        difficulty: overrides.difficulty.unwrap_or_default(),
        number: planned.number,
        gas_limit: overrides.gas_limit.map_or(parent.gas_limit, |g| g.to()),
        timestamp: planned.time,
        mix_hash: overrides.prev_randao.unwrap_or_default(),
        ..Default::default()
    };
    header.base_fee_per_gas = Some(match overrides.base_fee_per_gas {
        Some(fee) => u64::try_from(fee).map_err(|_| CallError::Unsupported)?,
        None if validate => next_base_fee(parent)?,
        None => 0,
    });
    if fork.spec.is_enabled_in(SpecId::CANCUN) {
        header.excess_blob_gas = Some(match parent.excess_blob_gas {
            Some(_) => excess_blob_gas(parent, fork)?,
            None => 0,
        });
        header.parent_beacon_block_root = Some(overrides.beacon_root.unwrap_or_default());
    }
    Ok(header)
}

/// The EVM's block and configuration for `header`: geth's simulation
/// checks (nonces and base fees only with validation; never EIP-3607, the
/// block's gas limit checked by the simulation itself).
pub(crate) fn environment(
    header: &Header,
    fork: &Fork,
    overrides: &BlockOverrides,
    validate: bool,
    chain_id: u64,
) -> (BlockEnv, CfgEnv) {
    let block = BlockEnv {
        number: U256::from(header.number),
        beneficiary: header.beneficiary,
        timestamp: U256::from(header.timestamp),
        gas_limit: header.gas_limit,
        basefee: header.base_fee_per_gas.unwrap_or_default(),
        difficulty: header.difficulty,
        prevrandao: Some(header.mix_hash),
        blob_excess_gas_and_price: header.excess_blob_gas.map(|excess| {
            let mut blob =
                BlobExcessGasAndPrice::new(excess, fork.blob_base_fee_update_fraction.unwrap_or(1));
            if let Some(fee) = overrides.blob_base_fee {
                blob.blob_gasprice = fee.saturating_to();
            }
            blob
        }),
        ..Default::default()
    };
    let mut cfg = CfgEnv::new_with_spec(fork.spec);
    cfg.chain_id = chain_id;
    cfg.disable_nonce_check = !validate;
    cfg.disable_eip3607 = true;
    cfg.disable_block_gas_limit = true;
    cfg.tx_gas_limit_cap = Some(u64::MAX);
    cfg.memory_limit = MEMORY_LIMIT;
    cfg.blob_base_fee_update_fraction = fork.blob_base_fee_update_fraction;
    (block, cfg)
}

/// geth's `CalcBaseFee` from the parent (London's rule), in big integers
/// as geth computes it: past 64 bits (an overridden parent's), the node's.
fn next_base_fee(parent: &Parent) -> Result<u64, SimError> {
    let params = BaseFeeParams::ethereum();
    let target = parent.gas_limit / params.elasticity_multiplier as u64;
    if target == 0 {
        // geth divides by it.
        return Err(CallError::Unsupported.into());
    }
    let base_fee = U256::from(parent.base_fee.unwrap_or_default());
    let change = |gas: u64| {
        base_fee * U256::from(gas) / U256::from(target) / U256::from(params.max_change_denominator)
    };
    let next = match parent.gas_used.cmp(&target) {
        std::cmp::Ordering::Equal => base_fee,
        std::cmp::Ordering::Greater => {
            base_fee + change(parent.gas_used - target).max(U256::from(1))
        }
        std::cmp::Ordering::Less => base_fee.saturating_sub(change(target - parent.gas_used)),
    };
    u64::try_from(next).map_err(|_| CallError::Unsupported.into())
}

/// geth's `CalcExcessBlobGas` from the parent, under the child's rules
/// (with EIP-7918's reserve price from Osaka on).
fn excess_blob_gas(parent: &Parent, fork: &Fork) -> Result<u64, SimError> {
    let parent_excess = parent.excess_blob_gas.unwrap_or_default();
    let parent_used = parent.blob_gas_used.unwrap_or_default();
    let excess = parent_excess + parent_used;
    let target = fork.blob_target * BLOB_GAS;
    if excess < target {
        return Ok(0);
    }
    if fork.spec.is_enabled_in(SpecId::OSAKA) {
        let fraction = fork
            .blob_base_fee_update_fraction
            .ok_or(CallError::Unsupported)?;
        let reserve = BLOB_BASE_COST * u128::from(parent.base_fee.unwrap_or_default());
        let blob_price =
            revm::context_interface::block::blob::calc_blob_gasprice(parent_excess, fraction)
                * u128::from(BLOB_GAS);
        if reserve > blob_price && fork.blob_max > 0 {
            return Ok(
                parent_excess + parent_used * (fork.blob_max - fork.blob_target) / fork.blob_max
            );
        }
    }
    Ok(excess - target)
}
