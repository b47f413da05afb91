//! The fees a call pays, as geth derives them for a call (`CallDefaults`,
//! `ToMessage`), and geth's London pre-checks on them, which neve makes
//! itself because revm's base-fee check is off for calls.

use alloy_primitives::U256;

use crate::args::CallArgs;
use crate::error::CallError;

/// The fees a call pays, as geth derives them for a call.
pub(crate) struct Fees {
    /// The price cap revm charges against (legacy: the price).
    pub(crate) fee_cap: u128,
    /// The same, whole: what geth's balance check multiplies (revm's is
    /// at most 128 bits).
    pub(crate) wide_fee_cap: U256,
    /// Whether geth's balance check (gas × fee cap + value + blob fees)
    /// passes 256 bits: its `buyGas` refuses that, after every other
    /// pre-check, where revm (its fee cap at most 128 bits) would run.
    pub(crate) past_256_bits: bool,
    /// EIP-1559's tip, when 1559 fields were given.
    pub(crate) tip: Option<u128>,
    /// The price paid (`GASPRICE`); 0 makes `BASEFEE` read 0, as in geth.
    pub(crate) price: u128,
}

impl Fees {
    /// geth's `CallDefaults` and `ToMessage` for a call, then its London
    /// pre-checks (skipped when no fee is given), which neve makes itself
    /// because revm's base-fee check is off for calls.
    pub(crate) fn of(args: &CallArgs, base_fee: Option<u64>, gas: u64) -> Result<Fees, CallError> {
        let wide = |v: U256| -> u128 { v.saturating_to() };
        if args.gas_price.is_some()
            && (args.max_fee_per_gas.is_some() || args.max_priority_fee_per_gas.is_some())
        {
            return Err(crate::args::ArgsError::BothFeeKinds.into());
        }
        let Some(base_fee) = base_fee else {
            // Before London only the legacy price counts.
            let price = args.gas_price.unwrap_or_default();
            return Ok(Fees {
                fee_cap: wide(price),
                wide_fee_cap: price,
                past_256_bits: args.balance_needed(gas, price).is_none(),
                tip: None,
                price: wide(price),
            });
        };
        let (fee_cap, tip, legacy) = match args.gas_price {
            Some(price) => (price, price, true),
            None => (
                args.max_fee_per_gas.unwrap_or_default(),
                args.max_priority_fee_per_gas.unwrap_or_default(),
                false,
            ),
        };
        let base = U256::from(base_fee);
        let price = if fee_cap.is_zero() && tip.is_zero() {
            U256::ZERO
        } else {
            (tip.saturating_add(base)).min(fee_cap)
        };
        if !fee_cap.is_zero() || !tip.is_zero() {
            let sender = args.sender();
            let failed = |message: String| {
                CallError::PreCheck(format!("err: {message} (supplied gas {gas})"))
            };
            if tip > fee_cap {
                return Err(failed(format!(
                    "max priority fee per gas higher than max fee per gas: address {sender}, maxPriorityFeePerGas: {tip}, maxFeePerGas: {fee_cap}"
                )));
            }
            if fee_cap < base {
                return Err(failed(format!(
                    "max fee per gas less than block base fee: address {sender}, maxFeePerGas: {fee_cap}, baseFee: {base_fee}"
                )));
            }
        }
        Ok(Fees {
            fee_cap: wide(fee_cap),
            wide_fee_cap: fee_cap,
            past_256_bits: args.balance_needed(gas, fee_cap).is_none(),
            tip: (!legacy).then(|| wide(tip)),
            price: wide(price),
        })
    }

    pub(crate) fn tx_type(&self, args: &CallArgs) -> u8 {
        if args.authorization_list.is_some() {
            4
        } else if args.blob_versioned_hashes.is_some() {
            3
        } else if self.tip.is_some() {
            2
        } else if args.access_list.is_some() {
            1
        } else {
            0
        }
    }
}
