//! The simulated chain's blocks as geth's `sanitizeChain` lays them out:
//! each block's number and time filled where not given (the previous
//! plus one, and plus 12 seconds), checked to increase (-38020, -38021),
//! gaps filled with empty blocks, at most [`MAX_BLOCKS`] past the pinned
//! block (-38026).

use alloy_eips::eip4895::Withdrawal;
use alloy_primitives::U256;

use crate::args::{BlockOverrides, CallArgs, StateOverride};
use crate::block::BlockFacts;

use super::error::{Refusal, SimError, refused};
use super::request::{MAX_BLOCKS, SimBlock};

/// Seconds between blocks whose time is not given: geth's
/// `timestampIncrement`.
const TIME_STEP: u64 = 12;

/// One block to simulate, its number and time settled.
#[derive(Debug)]
pub(crate) struct Planned<'a> {
    pub(crate) number: u64,
    pub(crate) time: u64,
    /// Its overrides as asked (number and time are the fields above).
    pub(crate) overrides: Option<&'a BlockOverrides>,
    pub(crate) state: Option<&'a StateOverride>,
    pub(crate) calls: &'a [CallArgs],
    pub(crate) withdrawals: Vec<Withdrawal>,
}

/// A block's time when not given; past 64 bits geth wraps it, which
/// neve does not follow (the node's).
fn next_time(previous: u64) -> Result<u64, SimError> {
    previous
        .checked_add(TIME_STEP)
        .ok_or_else(|| crate::error::CallError::Unsupported.into())
}

pub(crate) fn plan<'a>(
    base: &BlockFacts,
    blocks: &'a [SimBlock],
) -> Result<Vec<Planned<'a>>, SimError> {
    let mut planned = Vec::with_capacity(blocks.len());
    let (mut previous_number, mut previous_time) = (base.number, base.timestamp);
    for block in blocks {
        let overrides = block.block_overrides.as_ref();
        let number = overrides
            .and_then(|o| o.number)
            .unwrap_or(U256::from(previous_number) + U256::from(1));
        if number <= U256::from(previous_number) {
            return Err(refused(
                Refusal::BlockNumberInvalid,
                format!(
                    "block numbers must be in order: {} <= {previous_number}",
                    number.as_limbs()[0]
                ),
            ));
        }
        if number - U256::from(base.number) > U256::from(MAX_BLOCKS) {
            return Err(refused(Refusal::ClientLimitExceeded, "too many blocks"));
        }
        let number = number.to::<u64>();
        for gap in previous_number + 1..number {
            previous_time = next_time(previous_time)?;
            planned.push(Planned {
                number: gap,
                time: previous_time,
                overrides: None,
                state: None,
                calls: &[],
                withdrawals: Vec::new(),
            });
        }
        previous_number = number;
        let time = match overrides.and_then(|o| o.time) {
            None => next_time(previous_time)?,
            Some(time) => {
                let time = time.to::<u64>();
                if time <= previous_time {
                    return Err(refused(
                        Refusal::BlockTimestampInvalid,
                        format!("block timestamps must be in order: {time} <= {previous_time}"),
                    ));
                }
                time
            }
        };
        previous_time = time;
        let withdrawals = match overrides.and_then(|o| o.withdrawals.as_ref()) {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(given) => serde_json::from_value(given.clone()).map_err(|e| {
                refused(
                    Refusal::InvalidParams,
                    format!("invalid argument 0: withdrawals: {e}"),
                )
            })?,
        };
        planned.push(Planned {
            number,
            time,
            overrides,
            state: block.state_overrides.as_ref(),
            calls: &block.calls,
            withdrawals,
        });
    }
    Ok(planned)
}
