use std::collections::HashMap;

use alloy_primitives::{Address, U256};

use super::block::effective_tip;
use super::formulas::fake_exponential;
use super::*;

const COINBASE: Address = Address::repeat_byte(0xcc);
const ALICE: Address = Address::repeat_byte(0xa1);
const BOB: Address = Address::repeat_byte(0xb0);

fn block_with(number: u64, txs: &[(u128, Address)]) -> BlockFees {
    BlockFees {
        number,
        base_fee: Some(GWEI),
        gas_used: 21_000 * txs.len() as u64,
        gas_limit: 30_000_000,
        blob_gas_used: None,
        excess_blob_gas: None,
        timestamp: 1_000 + number,
        coinbase: COINBASE,
        txs: txs
            .iter()
            .map(|&(tip, sender)| TxFee {
                tip,
                gas_used: 21_000,
                sender,
            })
            .collect(),
    }
}

fn london_parent(base_fee: u128, gas_used: u64, gas_limit: u64) -> BlockFees {
    BlockFees {
        gas_used,
        gas_limit,
        base_fee: Some(base_fee),
        ..block_with(1, &[])
    }
}

fn blob_parent(excess: u64, blobs: u64, base_fee: u128) -> BlockFees {
    BlockFees {
        excess_blob_gas: Some(excess),
        blob_gas_used: Some(blobs * BLOB_GAS_PER_BLOB),
        base_fee: Some(base_fee),
        ..block_with(1, &[])
    }
}

#[test]
fn samples_lowest_three_skipping_coinbase_and_ignored() {
    let block = block_with(
        7,
        &[
            (1, ALICE),    // below the 2 wei ignore price
            (5, COINBASE), // the miner's own
            (7, ALICE),
            (3, BOB),
            (9, ALICE),
            (4, ALICE),
            (2, ALICE), // exactly the ignore price: kept
        ],
    );
    assert_eq!(block_tip_samples(&block, 2), vec![2, 3, 4]);
    assert_eq!(block_tip_samples(&block, 4), vec![4, 7, 9]);
    let only_miner = block_with(8, &[(50, COINBASE), (1, ALICE)]);
    assert!(block_tip_samples(&only_miner, 2).is_empty());
}

#[test]
fn suggest_walks_back_and_never_samples_genesis() {
    let chain: HashMap<u64, BlockFees> = [
        block_with(3, &[(40, ALICE), (10, ALICE), (30, BOB), (20, BOB)]),
        block_with(2, &[(15, ALICE)]),
        block_with(1, &[]),
    ]
    .into_iter()
    .map(|block| (block.number, block))
    .collect();
    let mut asked = Vec::new();
    let tip = suggest_tip_cap(
        3,
        |n| {
            assert_ne!(n, 0, "block 0 is never sampled");
            asked.push(n);
            chain.get(&n)
        },
        &OracleConfig::default(),
    );
    // Values [10, 20, 30] + [15] + [default 1_000_000], sorted
    // [10, 15, 20, 30, 1_000_000]; index (5 - 1) * 60 / 100 = 2.
    assert_eq!(tip, Some(20));
    assert_eq!(asked, vec![3, 2, 1]);
}

#[test]
fn suggest_fetches_extra_blocks_for_single_values() {
    let empty = block_with(0, &[]);
    let mut asked = Vec::new();
    let tip = suggest_tip_cap(
        50,
        |n| {
            asked.push(n);
            Some(&empty)
        },
        &OracleConfig::default(),
    );
    // Every block yields one value, so the sample grows to 2 * 20.
    assert_eq!(tip, Some(1_000_000));
    assert_eq!(asked, (11..=50).rev().collect::<Vec<u64>>());

    // blocks = 2: block 30 yields one value (0 + 1 + 1 < 4: fetch 28),
    // block 29 three, block 28 one (4 + 1 + 0 >= 4: stop).
    let chain: HashMap<u64, BlockFees> = [
        block_with(30, &[(100, ALICE)]),
        block_with(29, &[(5, ALICE), (6, ALICE), (7, ALICE)]),
        block_with(28, &[(8, BOB)]),
        block_with(27, &[(9, BOB)]),
    ]
    .into_iter()
    .map(|block| (block.number, block))
    .collect();
    let mut asked = Vec::new();
    let config = OracleConfig {
        blocks: 2,
        ..OracleConfig::default()
    };
    let tip = suggest_tip_cap(
        30,
        |n| {
            asked.push(n);
            chain.get(&n)
        },
        &config,
    );
    assert_eq!(asked, vec![30, 29, 28]);
    // [5, 6, 7, 8, 100]: index 4 * 60 / 100 = 2.
    assert_eq!(tip, Some(7));
}

#[test]
fn suggest_percentile_index_cap_and_missing_block() {
    let block = block_with(1, &[(11, ALICE), (12, ALICE), (13, ALICE)]);
    let one = |n: u64| (n == 1).then_some(&block);
    let at = |percentile, max_price| {
        let config = OracleConfig {
            percentile,
            max_price,
            ..OracleConfig::default()
        };
        suggest_tip_cap(1, one, &config)
    };
    assert_eq!(at(0, 500 * GWEI), Some(11));
    assert_eq!(at(49, 500 * GWEI), Some(11)); // 2 * 49 / 100 = 0
    assert_eq!(at(50, 500 * GWEI), Some(12)); // 2 * 50 / 100 = 1
    assert_eq!(at(100, 500 * GWEI), Some(13));
    assert_eq!(at(100, 12), Some(12));
    // Head 0: nothing to sample, the default answers.
    assert_eq!(
        suggest_tip_cap(0, one, &OracleConfig::default()),
        Some(1_000_000)
    );
    // A needed block that is not held.
    assert_eq!(suggest_tip_cap(2, one, &OracleConfig::default()), None);
}

#[test]
fn gas_price_adds_head_base_fee() {
    assert_eq!(gas_price(5, Some(10)), 15);
    assert_eq!(gas_price(5, None), 5);
}

#[test]
fn reads_block_and_receipts_json() {
    let block = br#"{
        "number": "0x10", "baseFeePerGas": "0x3b9aca00", "gasUsed": "0xf618",
        "gasLimit": "0x1c9c380", "timestamp": "0x64", "hash": "0xignored",
        "miner": "0x00000000000000000000000000000000000000aa",
        "blobGasUsed": "0x20000", "excessBlobGas": "0x0",
        "transactions": [
            {"type": "0x0", "gasPrice": "0x3b9aca0a",
             "from": "0x00000000000000000000000000000000000000a1"},
            {"type": "0x2", "gasPrice": "0x3b9aca05", "maxFeePerGas": "0x77359400",
             "maxPriorityFeePerGas": "0x5",
             "from": "0x00000000000000000000000000000000000000b0"},
            {"type": "0x2", "gasPrice": "0x3b9aca03", "maxFeePerGas": "0x3b9aca03",
             "maxPriorityFeePerGas": "0x10",
             "from": "0x00000000000000000000000000000000000000b0"}
        ]
    }"#;
    let receipts = br#"[{"gasUsed": "0x5208", "status": "0x1"},
        {"gasUsed": "0x5208"}, {"gasUsed": "0x5208"}]"#;
    let fees = BlockFees::from_json(block, receipts).expect("parses");
    assert_eq!(fees.number, 16);
    assert_eq!(fees.base_fee, Some(GWEI));
    assert_eq!(fees.gas_used, 63_000);
    assert_eq!(fees.gas_limit, 30_000_000);
    assert_eq!(fees.timestamp, 100);
    assert_eq!(fees.blob_gas_used, Some(BLOB_GAS_PER_BLOB));
    assert_eq!(fees.excess_blob_gas, Some(0));
    assert_eq!(fees.coinbase, Address::with_last_byte(0xaa));
    let tips: Vec<u128> = fees.txs.iter().map(|tx| tx.tip).collect();
    assert_eq!(tips, vec![10, 5, 3]);
    assert_eq!(fees.txs[1].sender, Address::with_last_byte(0xb0));
    assert!(fees.txs.iter().all(|tx| tx.gas_used == 21_000));

    let pre_london = br#"{"number": "0x1", "gasUsed": "0x5208", "gasLimit": "0x1388",
        "timestamp": "0x1", "miner": "0x00000000000000000000000000000000000000aa",
        "transactions": [{"type": "0x0", "gasPrice": "0x64",
            "from": "0x00000000000000000000000000000000000000a1"}]}"#;
    let fees = BlockFees::from_json(pre_london, br#"[{"gasUsed":"0x5208"}]"#).expect("parses");
    assert_eq!(fees.base_fee, None);
    assert_eq!(fees.txs[0].tip, 100);
    assert!(BlockFees::from_json(pre_london, b"[]").is_err());
}

#[test]
fn fee_cap_below_base_fee_tips_the_tip_cap_like_geth() {
    let tip = effective_tip(U256::from(5u64), U256::from(3u64), Some(10));
    assert_eq!(tip, U256::from(3u64));
    let tip = effective_tip(U256::from(15u64), U256::from(30u64), Some(10));
    assert_eq!(tip, U256::from(5u64));
    assert_eq!(
        effective_tip(U256::from(15u64), U256::from(7u64), None),
        U256::from(7u64)
    );
}

#[test]
fn rewards_follow_gas_weighted_thresholds() {
    let mut block = block_with(5, &[]);
    block.gas_used = 100_000;
    block.txs = [(10, 21_000), (5, 50_000), (20, 29_000)]
        .into_iter()
        .map(|(tip, gas_used)| TxFee {
            tip,
            gas_used,
            sender: ALICE,
        })
        .collect();
    // Sorted: (5, 50_000), (10, 21_000), (20, 29_000); running sums
    // 50_000, 71_000, 100_000.
    let row = block_rewards(&block, &[0.0, 25.0, 50.0, 60.0, 75.0, 100.0]);
    assert_eq!(row, vec![5, 5, 5, 10, 20, 20]);
    assert_eq!(
        block_rewards(&block_with(6, &[]), &[10.0, 90.0]),
        vec![0, 0]
    );
}

#[test]
fn fee_history_assembles_rows() {
    let mut older = block_with(9, &[(3, ALICE), (1, BOB)]);
    older.base_fee = Some(100);
    older.gas_limit = 84_000;
    let mut newer = block_with(10, &[]);
    newer.base_fee = Some(110);
    newer.gas_limit = 42_000;
    newer.gas_used = 21_000;
    newer.excess_blob_gas = Some(0);
    newer.blob_gas_used = Some(3 * BLOB_GAS_PER_BLOB);
    let params = |_: u64| {
        Some(BlobParams {
            max_blobs: 6,
            update_fraction: 3_338_477,
        })
    };
    let history = fee_history(&[&older, &newer], &[50.0], 120, 1, params);
    assert_eq!(history.oldest_block, 9);
    assert_eq!(history.reward, Some(vec![vec![1], vec![0]]));
    assert_eq!(history.base_fee_per_gas, vec![100, 110, 120]);
    assert_eq!(history.gas_used_ratio, vec![0.5, 0.5]);
    assert_eq!(history.base_fee_per_blob_gas, vec![0, 1, 1]);
    assert_eq!(history.blob_gas_used_ratio, vec![0.0, 0.5]);

    let without = fee_history(&[&older], &[], 7, 0, |_| None);
    assert_eq!(without.reward, None);
    assert_eq!(without.base_fee_per_gas, vec![100, 7]);
    assert_eq!(without.base_fee_per_blob_gas, vec![0, 0]);
    assert_eq!(
        fee_history(&[], &[1.0], 1, 1, |_| None),
        FeeHistory::default()
    );
}

#[test]
fn base_fee_moves_like_geth() {
    let fee = |used| next_base_fee(&london_parent(GWEI, used, 30_000_000), 2, 8);
    assert_eq!(fee(15_000_000), GWEI);
    assert_eq!(fee(30_000_000), 1_125_000_000);
    assert_eq!(fee(0), 875_000_000);
    assert_eq!(fee(20_000_000), 1_041_666_666);
    // The increase is at least 1 wei; a decrease may be 0.
    assert_eq!(
        next_base_fee(&london_parent(7, 15_000_001, 30_000_000), 2, 8),
        8
    );
    assert_eq!(
        next_base_fee(&london_parent(7, 14_999_999, 30_000_000), 2, 8),
        7
    );
    let mut pre_london = london_parent(0, 0, 30_000_000);
    pre_london.base_fee = None;
    assert_eq!(next_base_fee(&pre_london, 2, 8), INITIAL_BASE_FEE);
}

#[test]
fn fake_exponential_matches_geth_vectors() {
    let cases: [(u64, u64, u64, u64); 15] = [
        (1, 0, 1, 1),
        (38_493, 0, 1_000, 38_493),
        (0, 1_234, 2_345, 0),
        (1, 2, 1, 6),
        (1, 4, 2, 6),
        (1, 3, 1, 16),
        (1, 6, 2, 18),
        (1, 4, 1, 49),
        (1, 8, 2, 50),
        (10, 8, 2, 542),
        (11, 8, 2, 596),
        (1, 5, 1, 136),
        (1, 5, 2, 11),
        (2, 5, 2, 23),
        (1, 50_000_000, 2_225_652, 5_709_098_764),
    ];
    for (factor, numerator, denominator, want) in cases {
        let have = fake_exponential(
            U256::from(factor),
            U256::from(numerator),
            U256::from(denominator),
        );
        assert_eq!(
            have,
            Some(U256::from(want)),
            "{factor} {numerator} {denominator}"
        );
    }
}

#[test]
fn blob_base_fee_matches_geth_vectors() {
    const CANCUN: u64 = 3_338_477;
    assert_eq!(blob_base_fee(0, CANCUN), 1);
    assert_eq!(blob_base_fee(2_314_057, CANCUN), 1);
    assert_eq!(blob_base_fee(2_314_058, CANCUN), 2);
    assert_eq!(blob_base_fee(10 * 1024 * 1024, CANCUN), 23);
    assert_eq!(blob_base_fee(1, 0), 0);
}

#[test]
fn excess_blob_gas_cancun() {
    const PER: u64 = BLOB_GAS_PER_BLOB;
    let next = |excess, blobs| {
        next_excess_blob_gas(&blob_parent(excess, blobs, GWEI), 3, 6, 3_338_477, false)
    };
    assert_eq!(next(0, 0), 0);
    assert_eq!(next(0, 1), 0);
    assert_eq!(next(0, 3), 0);
    assert_eq!(next(0, 4), PER);
    assert_eq!(next(1, 4), PER + 1);
    assert_eq!(next(1, 5), 2 * PER + 1);
    assert_eq!(next(3 * PER, 3), 3 * PER);
    assert_eq!(next(3 * PER, 2), 2 * PER);
    assert_eq!(next(3 * PER, 1), PER);
    assert_eq!(next(PER - 1, 2), 0);
    let mut no_blobs = blob_parent(0, 0, GWEI);
    no_blobs.excess_blob_gas = None;
    assert_eq!(next_excess_blob_gas(&no_blobs, 3, 6, 3_338_477, false), 0);
}

#[test]
fn excess_blob_gas_osaka_reserve_price() {
    // geth's TestCalcBlobFeePostOsaka: BPO1 (9/14) and BPO3 (21/32).
    let parent = blob_parent(5_149_252, 10, 30);
    assert_eq!(
        next_excess_blob_gas(&parent, 9, 14, 8_832_827, true),
        5_617_366
    );
    let parent = blob_parent(19_251_039, 19, 50);
    assert_eq!(
        next_excess_blob_gas(&parent, 21, 32, 20_609_697, true),
        20_107_103
    );
    // geth's TestCalcExcessBlobGasEIP7918 (6/9).
    let target_gas = 6 * BLOB_GAS_PER_BLOB;
    let below = blob_parent(0, 6, GWEI);
    assert_eq!(
        next_excess_blob_gas(&below, 6, 9, 5_007_716, true),
        target_gas * 3 / 9
    );
    let above = blob_parent(0, 6, 1);
    assert_eq!(next_excess_blob_gas(&above, 6, 9, 5_007_716, true), 0);
    // Before Osaka the reserve price does not apply.
    assert_eq!(next_excess_blob_gas(&below, 6, 9, 5_007_716, false), 0);
}

#[test]
fn history_next_blob_fee_uses_newest_schedule() {
    let params = BlobParams {
        max_blobs: 9,
        update_fraction: 5_007_716,
    };
    let newest = blob_parent(0, 6, GWEI);
    // Excess becomes 6 * 131072 * 3 / 9 = 262_144: fee still 1.
    assert_eq!(history_next_blob_base_fee(&newest, 6, params, true), 1);
    let mut pre_cancun = newest.clone();
    pre_cancun.excess_blob_gas = None;
    assert_eq!(history_next_blob_base_fee(&pre_cancun, 6, params, true), 0);
}

#[test]
fn percentile_validation_messages() {
    assert_eq!(validate_percentiles(&[]), Ok(()));
    assert_eq!(validate_percentiles(&[0.0, 25.5, 100.0]), Ok(()));
    assert_eq!(
        validate_percentiles(&[1.0; 101]),
        Err("invalid reward percentile: over the query limit 100".to_owned())
    );
    assert_eq!(
        validate_percentiles(&[101.0]),
        Err("invalid reward percentile: 101.000000".to_owned())
    );
    assert_eq!(
        validate_percentiles(&[-1.0]),
        Err("invalid reward percentile: -1.000000".to_owned())
    );
    assert_eq!(
        validate_percentiles(&[10.0, 10.0]),
        Err("invalid reward percentile: #0:10.000000 >= #1:10.000000".to_owned())
    );
    assert_eq!(
        validate_percentiles(&[50.0, 25.5]),
        Err("invalid reward percentile: #0:50.000000 >= #1:25.500000".to_owned())
    );
    // The range check of an entry comes before its order check.
    assert_eq!(
        validate_percentiles(&[50.0, 200.0]),
        Err("invalid reward percentile: 200.000000".to_owned())
    );
    // Go's %f rounds an exact tie to even, as Rust does.
    assert_eq!(
        validate_percentiles(&[100.0078125]),
        Err("invalid reward percentile: 100.007812".to_owned())
    );
}

#[test]
fn go_float_matches_encoding_json() {
    let cases: [(f64, &str); 17] = [
        (0.0, "0"),
        (-0.0, "-0"),
        (1.0, "1"),
        (0.5, "0.5"),
        (0.123456, "0.123456"),
        (0.1 + 0.2, "0.30000000000000004"),
        (2.0 / 3.0, "0.6666666666666666"),
        (1e-6, "0.000001"),
        (1e-7, "1e-7"),
        (1.5e-7, "1.5e-7"),
        (-2.5e-8, "-2.5e-8"),
        (1e-10, "1e-10"),
        (1e-100, "1e-100"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.23456789e23, "1.23456789e+23"),
        (1e100, "1e+100"),
    ];
    for (value, want) in cases {
        assert_eq!(go_float(value), want, "{value:?}");
    }
    assert_eq!(go_float(f64::NAN), "null");
}

mod history;
