//! The simulation's rooms on their own: the chain's plan, the request's
//! limits, the log tracer's frames and the precompiles' moves. The whole
//! is judged against geth through the binary (`tests/simulate.rs` and the
//! conformance cases).

use alloy_primitives::{Address, U256, address};

use super::plan::plan;
use super::precompiles::SimPrecompiles;
use super::request::{SimBlock, SimulateRequest};
use super::transfers::Transfers;
use super::{Refusal, SimError};
use crate::args::BlockOverrides;
use crate::block::{BlockFacts, HeaderForks};

fn base() -> BlockFacts {
    BlockFacts {
        number: 100,
        hash: Default::default(),
        timestamp: 1_000,
        beneficiary: Address::ZERO,
        gas_limit: 30_000_000,
        base_fee: Some(7),
        difficulty: U256::ZERO,
        mix_hash: Default::default(),
        excess_blob_gas: Some(0),
        gas_used: 0,
        blob_gas_used: Some(0),
        state_root: Default::default(),
        parent_hash: Default::default(),
        parent_beacon_block_root: None,
        shows: HeaderForks::default(),
    }
}

fn block(number: Option<u64>, time: Option<u64>) -> SimBlock {
    SimBlock {
        block_overrides: Some(BlockOverrides {
            number: number.map(U256::from),
            time: time.map(alloy_primitives::U64::from),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn refusal(result: Result<impl std::fmt::Debug, SimError>) -> (Refusal, String) {
    match result {
        Err(SimError::Refused(refusal, message)) => (refusal, message),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn gaps_are_empty_blocks_twelve_seconds_apart() {
    let blocks = [
        block(None, None),
        block(Some(104), None),
        block(None, Some(2_000)),
    ];
    let planned = plan(&base(), &blocks).unwrap();
    let laid: Vec<(u64, u64, usize)> = planned
        .iter()
        .map(|p| (p.number, p.time, p.calls.len()))
        .collect();
    assert_eq!(
        laid,
        [
            (101, 1_012, 0),
            (102, 1_024, 0),
            (103, 1_036, 0),
            (104, 1_048, 0),
            (105, 2_000, 0)
        ]
    );
    assert!(planned[1].overrides.is_none(), "a gap block has none");
}

#[test]
fn numbers_and_times_must_increase_and_stay_within_256_blocks() {
    let (kind, message) = refusal(plan(&base(), &[block(Some(100), None)]));
    assert_eq!(kind, Refusal::BlockNumberInvalid);
    assert_eq!(message, "block numbers must be in order: 100 <= 100");
    let (kind, message) = refusal(plan(&base(), &[block(None, Some(1_000))]));
    assert_eq!(kind, Refusal::BlockTimestampInvalid);
    assert_eq!(message, "block timestamps must be in order: 1000 <= 1000");
    assert_eq!(
        refusal(plan(&base(), &[block(Some(357), None)])).0,
        Refusal::ClientLimitExceeded
    );
    assert_eq!(plan(&base(), &[block(Some(356), None)]).unwrap().len(), 256);
    // Past 64 bits, geth wraps the time: not followed (the node's).
    let late = [block(None, Some(u64::MAX - 4)), block(None, None)];
    assert!(matches!(
        plan(&base(), &late),
        Err(SimError::Call(crate::CallError::Unsupported))
    ));
}

#[test]
fn the_requests_limits_are_geths() {
    let request = |blocks: Vec<SimBlock>| SimulateRequest {
        block_state_calls: blocks,
        ..Default::default()
    };
    let (kind, message) = refusal(request(vec![]).check_limits());
    assert_eq!(
        (kind, message.as_str()),
        (Refusal::InvalidParams, "empty input")
    );
    let (kind, _) = refusal(request(vec![SimBlock::default(); 257]).check_limits());
    assert_eq!(kind, Refusal::ClientLimitExceeded);
    let calls = |n| SimBlock {
        calls: vec![Default::default(); n],
        ..Default::default()
    };
    let (_, message) = refusal(request(vec![calls(5_001)]).check_limits());
    assert_eq!(message, "too many calls in block: 5001 > 5000");
    let (_, message) = refusal(request(vec![calls(5_000), calls(5_000), calls(1)]).check_limits());
    assert_eq!(message, "too many calls: 10001 > 10000");
    assert!(
        request(vec![calls(5_000), calls(5_000)])
            .check_limits()
            .is_ok()
    );
}

#[test]
fn a_moved_precompile_runs_at_its_destination_and_not_at_home() {
    let ecrecover = address!("0x0000000000000000000000000000000000000001");
    let sha256 = address!("0x0000000000000000000000000000000000000002");
    let there = address!("0x00000000000000000000000000000000000000c1");
    let mut precompiles = SimPrecompiles::new(revm::primitives::hardfork::SpecId::OSAKA);
    assert!(precompiles.contains(&ecrecover) && !precompiles.contains(&there));
    precompiles.move_to(ecrecover, there);
    precompiles.remove(&ecrecover);
    assert!(precompiles.contains(&there) && !precompiles.contains(&ecrecover));
    // Moved on again: it keeps being ecrecover wherever it is.
    precompiles.move_to(there, sha256);
    precompiles.remove(&there);
    assert!(precompiles.contains(&sha256) && !precompiles.contains(&there));
}

#[test]
fn a_failed_frame_drops_its_logs_but_keeps_their_numbers() {
    use revm::Inspector;
    let mut tracer = Transfers::new(true);
    let mut context = ();
    let log = |n: u8| {
        revm::primitives::Log::new_unchecked(Address::repeat_byte(n), vec![], Default::default())
    };
    tracer.start(0);
    // Frames by hand: the call, a child that fails, a child that returns.
    tracer.frames_for_test(|t| t.push_frame());
    Inspector::<()>::log(&mut tracer, &mut context, log(1));
    tracer.frames_for_test(|t| t.push_frame());
    Inspector::<()>::log(&mut tracer, &mut context, log(2));
    tracer.frames_for_test(|t| t.pop_frame(true));
    tracer.frames_for_test(|t| t.push_frame());
    Inspector::<()>::log(&mut tracer, &mut context, log(3));
    tracer.frames_for_test(|t| t.pop_frame(false));
    tracer.frames_for_test(|t| t.pop_frame(false));
    let logs = tracer.finish();
    let kept: Vec<(u8, u64)> = logs.iter().map(|l| (l.address.0[0], l.index)).collect();
    assert_eq!(kept, [(1, 0), (3, 2)]);
    // The next call's logs number on from there; a failed call keeps none.
    tracer.start(1);
    tracer.frames_for_test(|t| t.push_frame());
    Inspector::<()>::log(&mut tracer, &mut context, log(4));
    tracer.frames_for_test(|t| t.pop_frame(true));
    assert!(tracer.finish().is_empty());
    tracer.start(2);
    tracer.frames_for_test(|t| t.push_frame());
    Inspector::<()>::log(&mut tracer, &mut context, log(5));
    tracer.frames_for_test(|t| t.pop_frame(false));
    assert_eq!(tracer.finish()[0].index, 4);
}
