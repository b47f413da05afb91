//! `eth_createAccessList` as geth makes it (`internal/ethapi/api.go`
//! `AccessList`, `eth/tracers/logger/access_list_tracer.go`).
//!
//! An access list changes what the call costs (listed accounts and slots
//! start warm), and what it costs can change what it does: a call that
//! branches on `GAS`, or one that ran out of gas, can reach accounts and
//! slots it did not before. So geth does not trace once: it runs the call
//! with the list found so far, traces what that run touches on top of the
//! list, and stops when a run adds nothing. neve repeats that loop over
//! the same pinned state with the same tracer rules, so the list, the gas
//! and the error it answers are geth's.
//!
//! The tracer records what geth's records, no more and no less: not what
//! revm's journal warmed (which includes `CREATE` targets, the coinbase
//! and 7702 delegation targets, none of which geth lists), but what a few
//! opcodes name on the stack as they are about to execute.

use std::collections::HashSet;

use alloy_eips::eip2930::AccessList;
use alloy_eips::eip7702::SignedAuthorization;
use alloy_primitives::{Address, U256};
use revm::context_interface::transaction::AuthorizationTr;
use revm::precompile::{PrecompileSpecId, Precompiles};
use revm::primitives::hardfork::SpecId;

use crate::db::Needs;
use crate::error::CallError;
use crate::rules::Dialect;
use crate::run::{Ended, GAS_CAP, Pinned, Request, Run, run_inspected};
use crate::tracer::AccessListTracer;

/// Most runs one access list may take. geth loops until the list stops
/// growing, with no bound but the request's timeout; each run's tracer
/// starts from the previous list, so the list only grows and in practice
/// settles in two or three runs. A call still growing after this many is
/// not answered here ([`CallError::Unsupported`]: the node answers it, so
/// the answer stays geth's). Default is 16.
pub const MAX_ROUNDS: usize = 16;

/// The accounts an access list never names by address, as geth's
/// `AccessList` gathers them: the sender, the callee (for a creation, the
/// address it creates: `from.create(nonce)`, the nonce being the call's
/// when given, else the sender's in state), the precompiles active under
/// `spec`, and the authority of each authorization geth would apply
/// (chain id 0 or `chain_id`, nonce below `u64::MAX`, signature that
/// recovers with a low `s`).
pub fn excluded_addresses(
    from: Address,
    to: Address,
    spec: SpecId,
    chain_id: u64,
    authorizations: &[SignedAuthorization],
) -> HashSet<Address> {
    let mut excluded = HashSet::from([from, to]);
    excluded.extend(
        Precompiles::new(PrecompileSpecId::from_spec_id(spec))
            .addresses()
            .copied(),
    );
    for auth in authorizations {
        let auth_chain = <SignedAuthorization as AuthorizationTr>::chain_id(auth);
        if (!auth_chain.is_zero() && auth_chain != U256::from(chain_id))
            || <SignedAuthorization as AuthorizationTr>::nonce(auth) == u64::MAX
        {
            continue;
        }
        if let Some(authority) = <SignedAuthorization as AuthorizationTr>::authority(auth) {
            excluded.insert(authority);
        }
    }
    excluded
}

/// A request as geth's `AccessList` takes it before making the list.
#[derive(Clone, Debug)]
pub enum AccessListRequest {
    /// Ready: the request with its fees defaulted, and the accounts the
    /// list never names ([`excluded_addresses`]).
    Ready(Box<Request>, HashSet<Address>),
    /// Refused before anything runs, in geth's words (its -32000).
    Refused(String),
    /// A creation whose address needs the sender's nonce, not held: fetch
    /// it, then again.
    Needs(Needs),
}

/// `request` readied as geth's `AccessList` readies it at `pinned`: fee
/// defaults filled as its `setFeeDefaults` fills them (`suggested_tip`,
/// asked only when the request names no tip, is the price oracle's tip at
/// the head; twice the pinned block's base fee on top), its refusals in
/// its words, and the callee named (a creation's address from the sender's
/// nonce). [`CallError::Unsupported`] where geth's answer is not one neve
/// makes: coreth's chain (its fee defaults are coreth's oracle's, its
/// tracer geth 1.13's), blob fee defaults (from the head's blob fee),
/// before London (the oracle's price), a fee cap past 256 bits, or no
/// suggested tip.
pub fn access_list_request(
    pinned: &Pinned<'_>,
    request: &Request,
    suggested_tip: impl FnOnce() -> Option<U256>,
) -> Result<AccessListRequest, CallError> {
    if pinned.fork.dialect == Dialect::Coreth {
        return Err(CallError::Unsupported);
    }
    let mut request = request.clone();
    let args = &mut request.args;
    if args.blob_versioned_hashes.is_some() || args.max_fee_per_blob_gas.is_some() {
        return Err(CallError::Unsupported);
    }
    let refused = |message: String| Ok(AccessListRequest::Refused(message));
    if args.gas_price.is_some()
        && (args.max_fee_per_gas.is_some() || args.max_priority_fee_per_gas.is_some())
    {
        return refused(
            "both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified".into(),
        );
    }
    if args.gas_price.is_some() && args.authorization_list.is_some() {
        return refused("both gasPrice and authorizationList specified".into());
    }
    if let Err(message) = default_fees(pinned, args, suggested_tip)? {
        return refused(message);
    }
    let from = args.sender();
    let gas_limit = args.gas.map_or(GAS_CAP, |g| g.to::<u64>().min(GAS_CAP));
    let auths = args.authorization_list.clone().unwrap_or_default();
    if auths.len() as u64 > gas_limit / 25_000 {
        return refused("insufficient gas to process all authorizations".into());
    }
    let to = match args.to {
        Some(to) => to,
        None => {
            let nonce = match args.nonce {
                Some(nonce) => nonce.to::<u64>(),
                None => match pinned
                    .state
                    .account(&pinned.block.state_root.0, &from.0.0, false)
                {
                    neve_state::Read::Found(read) => read.account.map_or(0, |a| a.nonce),
                    neve_state::Read::Missing => {
                        return Ok(AccessListRequest::Needs(Needs {
                            accounts: [(from, Default::default())].into_iter().collect(),
                        }));
                    }
                },
            };
            from.create(nonce)
        }
    };
    let excluded = excluded_addresses(from, to, pinned.fork.spec, pinned.chain_id, &auths);
    Ok(AccessListRequest::Ready(Box::new(request), excluded))
}

/// geth's `setFeeDefaults` for `args` at `pinned`: the inner result is its
/// refusal, in its words.
fn default_fees(
    pinned: &Pinned<'_>,
    args: &mut crate::args::CallArgs,
    suggested_tip: impl FnOnce() -> Option<U256>,
) -> Result<Result<(), String>, CallError> {
    let both_1559 = args.max_fee_per_gas.is_some() && args.max_priority_fee_per_gas.is_some();
    let london = pinned.block.base_fee.is_some();
    let tip_above_cap = |fee_cap: U256, tip: U256| {
        format!("maxFeePerGas ({fee_cap:#x}) < maxPriorityFeePerGas ({tip:#x})")
    };
    if both_1559 {
        let (fee_cap, tip) = (
            args.max_fee_per_gas.unwrap_or_default(),
            args.max_priority_fee_per_gas.unwrap_or_default(),
        );
        if fee_cap.is_zero() {
            return Ok(Err("maxFeePerGas must be non-zero".into()));
        }
        if fee_cap < tip {
            return Ok(Err(tip_above_cap(fee_cap, tip)));
        }
        return Ok(Ok(()));
    }
    if let Some(price) = args.gas_price {
        if london && price.is_zero() {
            return Ok(Err("gasPrice must be non-zero after london fork".into()));
        }
        return Ok(Ok(()));
    }
    let Some(base_fee) = pinned.block.base_fee else {
        // Before London geth prices the call at the oracle's price.
        return Err(CallError::Unsupported);
    };
    let tip = match args.max_priority_fee_per_gas {
        Some(tip) => tip,
        None => suggested_tip().ok_or(CallError::Unsupported)?,
    };
    let fee_cap = match args.max_fee_per_gas {
        Some(fee_cap) => fee_cap,
        // geth adds in big integers: past 256 bits its pre-check refuses
        // the fee cap in words naming the transaction's hash, which neve
        // does not make.
        None => U256::from(base_fee)
            .checked_mul(U256::from(2))
            .and_then(|twice| tip.checked_add(twice))
            .ok_or(CallError::Unsupported)?,
    };
    if fee_cap < tip {
        return Ok(Err(tip_above_cap(fee_cap, tip)));
    }
    args.max_priority_fee_per_gas = Some(tip);
    args.max_fee_per_gas = Some(fee_cap);
    Ok(Ok(()))
}

/// How making an access list ended.
#[derive(Clone, Debug)]
pub enum AccessListOutcome {
    /// The list settled: geth's `{accessList, gasUsed, error}`.
    Done {
        /// The list, sorted as geth answers it.
        list: AccessList,
        /// Gas the last run used with `list` as its access list.
        gas_used: u64,
        /// How the last run failed, in geth's words (`res.Err`): a revert
        /// is plain `execution reverted`, its reason not decoded; `None`
        /// when it succeeded.
        error: Option<String>,
    },
    /// A run needed state not held (or a block outside the tail): fetch
    /// and make the list again from the start.
    Incomplete(Run),
}

/// Makes `request`'s access list at `pinned` as geth's `AccessList` does:
/// start from the request's list (entries of `excluded` accounts dropped),
/// then run the call with the current list as its access list under a
/// tracer seeded with that list, until a run's tracer holds exactly the
/// list it started from. `excluded` is [`excluded_addresses`]'s set.
///
/// A run refused before executing (geth's consensus errors) is this
/// function's error; the caller words it as geth does (`failed to apply
/// transaction: <hash> err: <message>`).
pub fn create_access_list(
    pinned: &Pinned<'_>,
    request: &Request,
    excluded: HashSet<Address>,
) -> Result<AccessListOutcome, CallError> {
    let initial = request.args.access_list.clone().unwrap_or_default();
    let mut previous = AccessListTracer::new(&initial, excluded);
    let mut round = request.clone();
    for _ in 0..MAX_ROUNDS {
        let list = previous.access_list();
        // Always a list, if empty: the run is an EIP-2930 (or later)
        // transaction, as geth's is.
        round.args.access_list = Some(list.clone());
        let mut tracer = AccessListTracer::new(&list, previous.excluded.clone());
        let outcome = match run_inspected(pinned, &round, None, &mut tracer)? {
            Run::Done(outcome) => outcome,
            other => return Ok(AccessListOutcome::Incomplete(other)),
        };
        if tracer.equal(&previous) {
            return Ok(AccessListOutcome::Done {
                list,
                gas_used: outcome.gas_used,
                error: failure(&outcome.ended),
            });
        }
        previous = tracer;
    }
    Err(CallError::Unsupported)
}

/// geth's `res.Err.Error()` for how a run ended.
fn failure(ended: &Ended) -> Option<String> {
    match ended {
        Ended::Success => None,
        Ended::Revert => Some("execution reverted".to_string()),
        Ended::Halt(message) => Some(message.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusions_hold_sender_callee_and_the_forks_precompiles() {
        let (from, to) = (Address::repeat_byte(0xf), Address::repeat_byte(0x7));
        let berlin = excluded_addresses(from, to, SpecId::BERLIN, 1, &[]);
        assert!(berlin.contains(&from) && berlin.contains(&to));
        assert!(berlin.contains(&Address::with_last_byte(1)));
        assert!(berlin.contains(&Address::with_last_byte(9)));
        assert!(!berlin.contains(&Address::with_last_byte(0x0a)));
        let cancun = excluded_addresses(from, to, SpecId::CANCUN, 1, &[]);
        assert!(cancun.contains(&Address::with_last_byte(0x0a)));
    }
}
