//! A simulated call made a transaction as geth's `CallDefaults` and
//! `ToTransaction` make it (a dynamic-fee one unless a gas price is given,
//! unsigned), and geth's words and codes for the transactions its
//! pre-checks refuse.

use alloy_primitives::{Address, Bytes, U256};

use crate::args::CallArgs;
use crate::error::CallError;

use super::error::{Refusal, SimError, refused};

/// One call's transaction, as geth's `ToTransaction` makes it.
#[derive(Clone, Debug)]
pub(crate) struct SimTx {
    pub(crate) tx_type: u8,
    pub(crate) from: Address,
    pub(crate) chain_id: u64,
    pub(crate) nonce: u64,
    pub(crate) gas: u64,
    /// Legacy's gas price, or the fee cap.
    pub(crate) fee_cap: u128,
    pub(crate) tip: u128,
    pub(crate) to: Option<Address>,
    pub(crate) value: U256,
    pub(crate) input: Bytes,
    pub(crate) args: CallArgs,
}

/// The call's transaction as geth's `CallDefaults` and `ToTransaction`
/// make it (a dynamic-fee one unless a gas price is given).
pub(crate) fn transaction(
    args: &CallArgs,
    from: Address,
    nonce: u64,
    gas: u64,
    chain_id: u64,
) -> Result<SimTx, SimError> {
    if args.gas_price.is_some()
        && (args.max_fee_per_gas.is_some() || args.max_priority_fee_per_gas.is_some())
    {
        return Err(refused(
            Refusal::Failed,
            "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified",
        ));
    }
    if let Some(asked) = args.chain_id {
        let asked = asked.to::<u64>();
        if asked != chain_id {
            return Err(refused(
                Refusal::Failed,
                format!("chainId does not match node's (have={asked}, want={chain_id})"),
            ));
        }
    }
    let wide = |fee: Option<U256>| -> Result<u128, SimError> {
        u128::try_from(fee.unwrap_or_default()).map_err(|_| CallError::Unsupported.into())
    };
    let tx_type = if args.gas_price.is_some() {
        0
    } else if args.authorization_list.is_some() {
        4
    } else if args.blob_versioned_hashes.is_some() {
        3
    } else {
        2
    };
    if matches!(tx_type, 3 | 4) && args.to.is_none() {
        // geth cannot make such a transaction.
        return Err(CallError::Unsupported.into());
    }
    let (fee_cap, tip) = if tx_type == 0 {
        let price = wide(args.gas_price)?;
        (price, price)
    } else {
        (
            wide(args.max_fee_per_gas)?,
            wide(args.max_priority_fee_per_gas)?,
        )
    };
    Ok(SimTx {
        tx_type,
        from,
        chain_id,
        nonce,
        gas,
        fee_cap,
        tip,
        to: args.to,
        value: args.value.unwrap_or_default(),
        input: args.input(),
        args: args.clone(),
    })
}

/// A transaction geth's pre-checks refuse, in its words and codes.
pub(crate) fn invalid_transaction(
    invalid: &revm::context::result::InvalidTransaction,
    args: &CallArgs,
    tx: &SimTx,
    base_fee: u64,
    gas: u64,
) -> SimError {
    use revm::context::result::InvalidTransaction as Invalid;
    let sender = tx.from;
    let (refusal, message) = match invalid {
        Invalid::NonceTooLow { tx, state } => (
            Refusal::NonceTooLow,
            format!("nonce too low: address {sender}, tx: {tx} state: {state}"),
        ),
        Invalid::NonceTooHigh { tx, state } => (
            Refusal::NonceTooHigh,
            format!("nonce too high: address {sender}, tx: {tx} state: {state}"),
        ),
        Invalid::NonceOverflowInTransaction => (
            Refusal::Internal,
            format!("nonce has max value: address {sender}, nonce: {}", tx.nonce),
        ),
        Invalid::GasPriceLessThanBasefee => (
            Refusal::BaseFeeTooLow,
            format!(
                "max fee per gas less than block base fee: address {sender}, maxFeePerGas: {}, baseFee: {base_fee}",
                tx.fee_cap
            ),
        ),
        Invalid::PriorityFeeGreaterThanMaxFee => (
            Refusal::InvalidParams,
            format!(
                "max priority fee per gas higher than max fee per gas: address {sender}, maxPriorityFeePerGas: {}, maxFeePerGas: {}",
                tx.tip, tx.fee_cap
            ),
        ),
        other => {
            let refusal = match other {
                Invalid::LackOfFundForMaxFee { .. } | Invalid::OverflowPaymentInTransaction => {
                    Refusal::InsufficientFunds
                }
                Invalid::CallGasCostMoreThanGasLimit { .. } => Refusal::IntrinsicGas,
                Invalid::CreateInitCodeSizeLimit => Refusal::MaxInitCodeSizeExceeded,
                Invalid::RejectCallerWithCode => Refusal::SenderIsNotEoa,
                _ => Refusal::Internal,
            };
            return match CallError::invalid(other, args, U256::from(tx.fee_cap), gas) {
                CallError::PreCheck(message) => refused(refusal, message),
                other => other.into(),
            };
        }
    };
    refused(refusal, format!("err: {message} (supplied gas {gas})"))
}
