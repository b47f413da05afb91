//! `eth_estimateGas` as geth's estimator does it (`eth/gasestimator`): the
//! highest bound from the block gas limit, the call's gas, the sender's
//! funds and the gas cap; the 21,000 shortcut for a plain transfer; one
//! run at the bound, an optimistic try, then a binary search to within
//! [`ERROR_RATIO`]. Every probe is a [`run`] at the same pinned state, so
//! a probe that needs state not held ends the estimate the same way.

use alloy_primitives::U256;
use revm::primitives::hardfork::SpecId;

use crate::error::CallError;
use crate::run::{Ended, GAS_CAP, Outcome, Pinned, Request, Run, run, sender_balance};

/// The search stops once its bounds are this close (geth's ratio).
pub const ERROR_RATIO: f64 = 0.015;

/// EIP-7825's cap on one transaction's gas, from Osaka on: the estimate's
/// highest bound there.
const OSAKA_TX_GAS_CAP: u64 = 1 << 24;

/// Intrinsic gas of a plain transfer.
const TRANSFER_GAS: u64 = 21_000;

/// How an estimate ended.
#[derive(Clone, Debug)]
pub enum Estimate {
    /// The gas that suffices.
    Gas(u64),
    /// The call fails at the highest bound: its outcome (a revert or a
    /// halt other than out of gas).
    Failed(Outcome),
    /// Out of gas even at the highest bound.
    Exceeds(u64),
    /// A probe needed state not held (or a block outside the tail).
    Incomplete(Run),
}

/// Estimates `request`'s gas at `pinned`; every probe's gas is charged to
/// [`Pinned::spent`] (a search runs the call a dozen times or more, its
/// answer names one run's gas).
/// Long: it follows geth's `DoEstimateGas` step by step, so the two read
/// side by side.
pub fn estimate(pinned: &Pinned<'_>, request: &Request) -> Result<Estimate, CallError> {
    let args = &request.args;
    let balance = match sender_balance(pinned, request)? {
        Ok(balance) => balance,
        Err(run) => return Ok(Estimate::Incomplete(run)),
    };
    let mut hi = pinned.block.gas_limit;
    if let Some(gas) = args.gas.map(|g| g.to::<u64>())
        && gas >= TRANSFER_GAS
    {
        hi = gas;
    }
    let fork = pinned.fork_for(request)?;
    if fork.spec.is_enabled_in(SpecId::OSAKA) && hi > OSAKA_TX_GAS_CAP {
        hi = OSAKA_TX_GAS_CAP;
    }
    let fee_cap = args.max_fee_per_gas.or(args.gas_price).unwrap_or_default();
    if !fee_cap.is_zero() {
        let value = args.value.unwrap_or_default();
        if value >= balance {
            return Err(CallError::PreCheck(
                "insufficient funds for transfer".into(),
            ));
        }
        let mut available = balance - value;
        // The blobs' fee comes out of the allowance first, as geth takes
        // it (in 256 bits that wrap, as geth's do here).
        let blobs = args.blob_versioned_hashes.as_ref().map_or(0, Vec::len) as u64;
        if blobs > 0 && fork.spec.is_enabled_in(SpecId::CANCUN) {
            let blob_fee = U256::from(blobs * crate::args::BLOB_GAS_PER_BLOB)
                .wrapping_mul(args.max_fee_per_blob_gas.unwrap_or_default());
            if blob_fee >= available {
                return Err(CallError::PreCheck(
                    "insufficient funds for gas * price + value".into(),
                ));
            }
            available -= blob_fee;
        }
        let allowance = available / fee_cap;
        if allowance < U256::from(hi) {
            hi = allowance.to();
        }
    }
    hi = hi.min(GAS_CAP);
    let probe = |gas: u64| -> Result<Probe, CallError> {
        match run(pinned, request, Some(gas)) {
            Ok(Run::Done(outcome)) => Ok(Probe::Ran(outcome)),
            Ok(other) => Ok(Probe::Incomplete(other)),
            // Too little gas for the intrinsic cost fails the probe.
            Err(CallError::PreCheck(message))
                if message.starts_with("err: intrinsic gas too low") =>
            {
                Ok(Probe::TooLittle)
            }
            Err(CallError::PreCheck(message)) => Err(CallError::PreCheck(
                message
                    .trim_start_matches("err: ")
                    .rsplit_once(" (supplied gas")
                    .map_or(message.clone(), |(inner, _)| {
                        format!("failed with {gas} gas: {inner}")
                    }),
            )),
            Err(other) => Err(other),
        }
    };
    // A plain transfer is tried at 21,000 first; whatever stops that try
    // (an error included) falls through to the search, as in geth.
    if args.input().is_empty()
        && args.to.is_some()
        && is_plain_transfer(pinned, request)?
        && let Ok(Probe::Ran(outcome)) = probe(TRANSFER_GAS)
        && outcome.ended == Ended::Success
    {
        return Ok(Estimate::Gas(TRANSFER_GAS));
    }
    let first = match probe(hi)? {
        Probe::Incomplete(run) => return Ok(Estimate::Incomplete(run)),
        Probe::TooLittle => return Ok(Estimate::Exceeds(hi)),
        Probe::Ran(outcome) => outcome,
    };
    match &first.ended {
        Ended::Success => {}
        Ended::Halt(message) if message.starts_with("out of gas") => {
            return Ok(Estimate::Exceeds(hi));
        }
        _ => return Ok(Estimate::Failed(first)),
    }
    let mut lo = first.gas_used.saturating_sub(1);
    let optimistic = (first.peak_gas + 2300) * 64 / 63;
    if optimistic < hi {
        match probe(optimistic)? {
            Probe::Incomplete(run) => return Ok(Estimate::Incomplete(run)),
            Probe::Ran(outcome) if outcome.ended == Ended::Success => hi = optimistic,
            _ => lo = optimistic,
        }
    }
    while lo + 1 < hi {
        if ((hi - lo) as f64) / (hi as f64) < ERROR_RATIO {
            break;
        }
        let mut mid = lo + (hi - lo) / 2;
        if mid > lo.saturating_mul(2) {
            mid = lo * 2;
        }
        match probe(mid)? {
            Probe::Incomplete(run) => return Ok(Estimate::Incomplete(run)),
            Probe::Ran(outcome) if outcome.ended == Ended::Success => hi = mid,
            _ => lo = mid,
        }
    }
    Ok(Estimate::Gas(hi))
}

enum Probe {
    Ran(Outcome),
    TooLittle,
    Incomplete(Run),
}

/// Whether the callee has no code (geth's `GetCodeSize(to) == 0`), read
/// through a run's database so a miss is fetched like any other read.
fn is_plain_transfer(pinned: &Pinned<'_>, request: &Request) -> Result<bool, CallError> {
    let Some(to) = request.args.to else {
        return Ok(false);
    };
    if let Some(account) = request.state.as_ref().and_then(|o| o.get(&to))
        && let Some(code) = &account.code
    {
        return Ok(code.is_empty());
    }
    Ok(
        match pinned
            .state
            .account(&pinned.block.state_root.0, &to.0.0, false)
        {
            neve_state::Read::Found(read) => read
                .account
                .is_none_or(|a| a.code_hash == neve_state::EMPTY_CODE_HASH),
            // Not held: no shortcut; the search's runs fetch it.
            neve_state::Read::Missing => false,
        },
    )
}
