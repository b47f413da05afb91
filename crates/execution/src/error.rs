//! Why a call has no result, in geth's words: arguments refused before
//! anything runs, a transaction the chain's rules refuse (geth's
//! pre-checks), overrides that do not apply. Serving maps each to its
//! JSON-RPC code in one place; a revert or a halt is an [`Outcome`]
//! (`run.rs`), not an error here.
//!
//! [`Outcome`]: crate::run::Outcome

use alloy_primitives::U256;

use crate::args::{ArgsError, CallArgs};
use revm::context::result::InvalidTransaction as Invalid;

/// A call refused before or instead of a result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// Arguments geth refuses.
    #[error("{0}")]
    Args(#[from] ArgsError),
    /// A pre-check failed (geth's message, with the gas supplied).
    #[error("{0}")]
    PreCheck(String),
    /// Overrides that cannot apply.
    #[error("{0}")]
    Override(String),
    /// Something neve does not execute (the node answers it: 421).
    #[error("not executed by this mirror")]
    Unsupported,
    /// The EVM failed in a way no transaction should make it.
    #[error("internal error: {0}")]
    Internal(String),
}

impl CallError {
    /// geth's message for a transaction its pre-checks refuse
    /// (`core/state_transition.go`), as `eth_call` wraps it.
    pub(crate) fn invalid(
        invalid: &Invalid,
        args: &CallArgs,
        fee_cap: U256,
        gas: u64,
    ) -> CallError {
        let sender = args.sender();
        let message = match invalid {
            Invalid::LackOfFundForMaxFee { balance, .. } => {
                match args.balance_needed(gas, fee_cap) {
                    Some(want) => format!(
                        "insufficient funds for gas * price + value: address {sender} have {balance} want {want}"
                    ),
                    None => insufficient_past_256_bits(args),
                }
            }
            // revm's payment is 128 bits wide: past that, geth's answer is
            // its 256-bit check's, or (within 256 bits) a run revm will
            // not make: the node's.
            Invalid::OverflowPaymentInTransaction => match args.balance_needed(gas, fee_cap) {
                None => insufficient_past_256_bits(args),
                Some(_) => return CallError::Unsupported,
            },
            Invalid::CallGasCostMoreThanGasLimit {
                initial_gas,
                gas_limit,
            } => format!("intrinsic gas too low: have {gas_limit}, want {initial_gas}"),
            Invalid::GasFloorMoreThanGasLimit {
                gas_floor,
                gas_limit,
            } => format!(
                "insufficient gas for floor data gas cost: have {gas_limit}, want {gas_floor}"
            ),
            Invalid::CreateInitCodeSizeLimit => {
                let len = args.input().len();
                format!("max initcode size exceeded: code size {len} limit 49152")
            }
            Invalid::BlobGasPriceGreaterThanMax {
                block_blob_gas_price,
                tx_max_fee_per_blob_gas,
            } => format!(
                "max fee per blob gas less than block blob gas fee: address {sender} blobGasFeeCap: {tx_max_fee_per_blob_gas}, blobBaseFee: {block_blob_gas_price}"
            ),
            Invalid::EmptyBlobs => "blob transaction missing blob hashes".to_string(),
            Invalid::BlobVersionNotSupported => {
                let first_bad = args
                    .blob_versioned_hashes
                    .iter()
                    .flatten()
                    .position(|hash| hash[0] != 0x01)
                    .unwrap_or_default();
                format!("blob {first_bad} has invalid hash version")
            }
            // geth counts blobs against its own cap (Osaka's, per
            // transaction) where revm counts against the fork's: not
            // always the same refusal.
            Invalid::TooManyBlobs { .. } => return CallError::Unsupported,
            Invalid::BlobCreateTransaction => "blob transaction of type create".to_string(),
            Invalid::EmptyAuthorizationList => {
                format!("EIP-7702 transaction with empty auth list (sender {sender})")
            }
            Invalid::NonceOverflowInTransaction => {
                format!("nonce has max value: address {sender}")
            }
            other => other.to_string(),
        };
        CallError::PreCheck(format!("err: {message} (supplied gas {gas})"))
    }
}

/// geth's refusal of a call whose balance check does not fit 256 bits.
pub(crate) fn insufficient_past_256_bits(args: &CallArgs) -> String {
    format!(
        "insufficient funds for gas * price + value: address {} required balance exceeds 256 bits",
        args.sender()
    )
}
