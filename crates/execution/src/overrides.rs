//! The block a call runs in, from the pinned block's verified header, and
//! the overrides a request puts over it and over state, as geth applies
//! them for calls.

use alloy_primitives::{B256, U256};
use revm::Database;
use revm::context::BlockEnv;
use revm::context_interface::block::BlobExcessGasAndPrice;
use revm::database::CacheDB;
use revm::primitives::hardfork::SpecId;
use revm::state::AccountInfo;

use crate::args::{BlockOverrides, CallArgs, StateOverride};
use crate::block::BlockFacts;
use crate::db::VerifiedDb;
use crate::error::CallError;
use crate::rules::{Dialect, Fork};

pub(crate) fn block_env(facts: &BlockFacts, fork: &Fork, args: &CallArgs) -> BlockEnv {
    let merged = fork.spec.is_enabled_in(SpecId::MERGE);
    // coreth's PREVRANDAO is the header's difficulty (1; 0 at genesis).
    let random = match fork.dialect {
        Dialect::Ethereum => facts.mix_hash,
        Dialect::Coreth => B256::from(facts.difficulty.to_be_bytes()),
    };
    // geth reads BASEFEE as 0 when the price paid is 0 (set by the
    // caller, after the overrides), and BLOBBASEFEE as 0 only when the
    // blob fee cap is zero: given as zero, or left out of a call carrying
    // blob hashes (geth's `CallDefaults` makes it zero then).
    let zero_blob_fee = match args.max_fee_per_blob_gas {
        Some(fee) => fee.is_zero(),
        None => args.blob_versioned_hashes.is_some(),
    };
    BlockEnv {
        number: U256::from(facts.number),
        beneficiary: facts.beneficiary,
        timestamp: U256::from(facts.timestamp),
        gas_limit: facts.gas_limit,
        basefee: facts.base_fee.unwrap_or(0),
        difficulty: facts.difficulty,
        prevrandao: merged.then_some(random),
        blob_excess_gas_and_price: facts.excess_blob_gas.map(|excess| {
            match (fork.blob_base_fee_update_fraction, zero_blob_fee) {
                (Some(fraction), false) => BlobExcessGasAndPrice::new(excess, fraction),
                _ => BlobExcessGasAndPrice {
                    excess_blob_gas: excess,
                    blob_gasprice: 0,
                },
            }
        }),
        ..Default::default()
    }
}

pub(crate) fn apply_block_overrides(
    block: &mut BlockEnv,
    overrides: &BlockOverrides,
) -> Result<(), CallError> {
    if overrides.beacon_root.is_some() {
        return Err(CallError::Override(
            "block override \"beaconRoot\" is not supported for this RPC method".into(),
        ));
    }
    if overrides.withdrawals.is_some() {
        return Err(CallError::Override(
            "block override \"withdrawals\" is not supported for this RPC method".into(),
        ));
    }
    if let Some(number) = overrides.number {
        block.number = number;
    }
    if let Some(difficulty) = overrides.difficulty {
        block.difficulty = difficulty;
    }
    if let Some(time) = overrides.time {
        block.timestamp = U256::from(time.to::<u64>());
    }
    if let Some(gas_limit) = overrides.gas_limit {
        block.gas_limit = gas_limit.to();
    }
    if let Some(coinbase) = overrides.fee_recipient {
        block.beneficiary = coinbase;
    }
    if let Some(random) = overrides.prev_randao {
        block.prevrandao = Some(random);
    }
    if let Some(base_fee) = overrides.base_fee_per_gas {
        block.basefee = base_fee.saturating_to();
    }
    if let Some(blob_base_fee) = overrides.blob_base_fee {
        let excess = block
            .blob_excess_gas_and_price
            .map_or(0, |b| b.excess_blob_gas);
        block.blob_excess_gas_and_price = Some(BlobExcessGasAndPrice {
            excess_blob_gas: excess,
            blob_gasprice: blob_base_fee.saturating_to(),
        });
    }
    Ok(())
}

pub(crate) fn apply_state_overrides(
    cache: &mut CacheDB<&VerifiedDb<'_>>,
    overrides: &StateOverride,
    dialect: Dialect,
) -> Result<(), CallError> {
    for (address, account) in overrides {
        if account.state.is_some() && account.state_diff.is_some() {
            return Err(CallError::Override(format!(
                "account {address} has both 'state' and 'stateDiff'"
            )));
        }
        if account.move_precompile_to_address.is_some() {
            // Moving a precompile changes which addresses run native code;
            // neve does not: the node answers it.
            return Err(CallError::Unsupported);
        }
        let mut info: AccountInfo = match cache.basic(*address) {
            Ok(info) => info.unwrap_or_default(),
            Err(never) => match never {},
        };
        if let Some(nonce) = account.nonce {
            info.nonce = nonce.to();
        }
        if let Some(balance) = account.balance {
            info.balance = balance;
        }
        if let Some(code) = &account.code {
            info.code_hash = alloy_primitives::keccak256(code);
            info.code = Some(crate::db::bytecode(code.clone()));
        }
        cache.insert_account_info(*address, info);
        if let Some(state) = &account.state {
            let slots = state
                .iter()
                .map(|(slot, value)| (U256::from_be_bytes(slot.0), U256::from_be_bytes(value.0)));
            cache
                .replace_account_storage(*address, slots.collect())
                .unwrap_or_else(|never| match never {});
        }
        if let Some(diff) = &account.state_diff {
            for (slot, value) in diff {
                // coreth keys `stateDiff` by its storage rule, and `state`
                // as given (so a key the rule changes is never read).
                let mut slot = U256::from_be_bytes(slot.0);
                if dialect == Dialect::Coreth {
                    slot = crate::coreth::cell(slot);
                }
                cache
                    .insert_account_storage(*address, slot, U256::from_be_bytes(value.0))
                    .unwrap_or_else(|never| match never {});
            }
        }
    }
    Ok(())
}
