//! Why a simulation has no blocks: geth's refusals by the code it
//! answers with, or a miss; and the codes of a call's own failure inside
//! an answer.

use crate::error::CallError;

/// Why geth refuses a simulation as a whole, by the code it answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// -32602.
    InvalidParams,
    /// -38010.
    NonceTooLow,
    /// -38011.
    NonceTooHigh,
    /// -38012.
    BaseFeeTooLow,
    /// -38013.
    IntrinsicGas,
    /// -38014.
    InsufficientFunds,
    /// -38015.
    BlockGasLimitReached,
    /// -38020.
    BlockNumberInvalid,
    /// -38021.
    BlockTimestampInvalid,
    /// -38024.
    SenderIsNotEoa,
    /// -38025.
    MaxInitCodeSizeExceeded,
    /// -38026.
    ClientLimitExceeded,
    /// -32603: a transaction error geth has no code of its own for.
    Internal,
    /// -32000: geth's plain errors (an override that does not apply).
    Failed,
}

/// A simulation refused before or instead of its blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SimError {
    /// geth's refusal, its code and its words.
    Refused(Refusal, String),
    /// Not answered here (421), or an internal failure.
    Call(CallError),
}

impl From<CallError> for SimError {
    fn from(error: CallError) -> Self {
        SimError::Call(error)
    }
}

pub(crate) fn refused(refusal: Refusal, message: impl Into<String>) -> SimError {
    SimError::Refused(refusal, message.into())
}

/// The codes a call's own error carries inside the answer (the caller's
/// one enum of codes says them).
#[derive(Clone, Copy, Debug)]
pub struct CallCodes {
    /// A revert (geth: 3).
    pub reverted: i64,
    /// Any other failure of the EVM (geth: -32015).
    pub vm_error: i64,
}
