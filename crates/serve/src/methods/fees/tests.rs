use std::time::Instant;

use neve_execution::HeightCache;
use neve_execution::fees::{BlockFees, HistoryCache};
use neve_store::{Durability, Identity, NewBlock, Store, StoreConfig};

use super::*;
use crate::rpc::charge::charged;
use crate::server::tests::{answer, runtime, server};

#[test]
fn fee_history_requires_its_third_argument_as_geth_does() {
    let (server, _dir) = server();
    let runtime = runtime();
    let ask = |params: &str| {
        answer(
            &server,
            &runtime,
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"eth_feeHistory","params":{params}}}"#),
        )
    };
    for (params, argument) in [(r#"[1,"latest"]"#, 2), ("[1]", 1), ("[]", 0)] {
        let (status, body) = ask(params);
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains(r#""code":-32602"#)
                && body.contains(&format!("missing value for required argument {argument}")),
            "{params}: {body}"
        );
    }
    let (_, body) = ask(r#"[1,"latest",[],1]"#);
    assert!(
        body.contains("too many arguments, want at most 3"),
        "{body}"
    );
    // A null third is geth's nil `[]float64`: no percentiles.
    let (status, body) = ask(r#"["0x0","latest",null]"#);
    assert_eq!(status, 200);
    assert!(
        body.contains(r#""result":{"oldestBlock":"0x0","gasUsedRatio":null}"#),
        "{body}"
    );
    // Past the parameters (the synthetic blocks carry no fee fields:
    // a miss, not an error).
    assert_eq!(ask(r#"[1,"latest",null]"#).0, 421);
    let (status, body) = ask(r#"[1,"latest",[50,10]]"#);
    assert_eq!(status, 200);
    assert!(body.contains("invalid reward percentile"), "{body}");
}

#[test]
fn a_charge_grows_with_the_blocks_read() {
    let cached = HistoryReads {
        cached: 1024,
        ..HistoryReads::default()
    };
    let headers = HistoryReads {
        headers: 1024,
        bytes: 1024 * 20 * 1024,
        ..HistoryReads::default()
    };
    let bodies = HistoryReads {
        bodies: 1024,
        bytes: 1024 * 300 * 1024,
        ..HistoryReads::default()
    };
    assert!(gas_of(&cached) < gas_of(&headers) && gas_of(&headers) < gas_of(&bodies));
    let ((), gas) = charged(|| {
        charge(gas_of(&cached));
        charge(gas_of(&cached));
    });
    assert_eq!(gas, 2 * gas_of(&cached));
}

/// A block's JSON as geth writes it (full, hashes-only) and its
/// receipts: `txs` transactions, a dozen distinct tips, every fifth
/// legacy.
fn geth_block(height: u64, txs: u64) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let hash = |i: u64| format!("0x{:064x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ height);
    let address = |i: u64| format!("0x{:040x}", i.wrapping_mul(0x1234_5678_9abc));
    let base_fee = 7_000_000_000u64 + height * 1_000;
    let (mut full, mut hashes, mut receipts) = (Vec::new(), Vec::new(), Vec::new());
    let mut used = 0;
    for i in 0..txs {
        let gas = 21_000 + (i * 7_919 + height) % 100_000;
        used += gas;
        let tip = (i * 37 + height) % 13 * 100_000_000;
        let pricing = if i % 5 == 4 {
            format!(r#""type":"0x0","gasPrice":"0x{:x}""#, base_fee + tip)
        } else {
            format!(
                r#""type":"0x2","gasPrice":"0x{:x}","maxFeePerGas":"0x{:x}","maxPriorityFeePerGas":"0x{tip:x}","accessList":[],"chainId":"0x1","yParity":"0x1""#,
                base_fee + tip,
                2 * base_fee + tip
            )
        };
        full.push(format!(
            r#"{{"blockHash":"{}","blockNumber":"0x{height:x}","from":"{}","gas":"0x{:x}",{pricing},"hash":"{}","input":"0xa9059cbb{}","nonce":"0x{i:x}","to":"{}","transactionIndex":"0x{i:x}","value":"0x0","v":"0x1","r":"{}","s":"{}"}}"#,
            hash(0),
            address(i),
            gas * 2,
            hash(i + 1),
            "0".repeat(128),
            address(i + 7),
            hash(i + 2),
            hash(i + 3),
        ));
        hashes.push(format!("\"{}\"", hash(i + 1)));
        receipts.push(format!(
            r#"{{"blockHash":"{}","blockNumber":"0x{height:x}","contractAddress":null,"cumulativeGasUsed":"0x{used:x}","effectiveGasPrice":"0x{:x}","from":"{}","gasUsed":"0x{gas:x}","logs":[{{"address":"{}","topics":["{}","{}","{}"],"data":"0x{}","blockNumber":"0x{height:x}","transactionHash":"{}","transactionIndex":"0x{i:x}","blockHash":"{}","logIndex":"0x{i:x}","removed":false}}],"logsBloom":"0x{}","status":"0x1","to":"{}","transactionHash":"{}","transactionIndex":"0x{i:x}","type":"0x2"}}"#,
            hash(0),
            base_fee + tip,
            address(i),
            address(i + 7),
            hash(100),
            hash(101),
            hash(102),
            "0".repeat(64),
            hash(i + 1),
            hash(0),
            "0".repeat(512),
            address(i + 7),
            hash(i + 1),
        ));
    }
    let header = format!(
        r#"{{"baseFeePerGas":"0x{base_fee:x}","blobGasUsed":"0x{:x}","difficulty":"0x0","excessBlobGas":"0x{:x}","extraData":"0x","gasLimit":"0x1c9c380","gasUsed":"0x{used:x}","hash":"{}","logsBloom":"0x{}","miner":"{}","mixHash":"{}","nonce":"0x0000000000000000","number":"0x{height:x}","parentHash":"{}","receiptsRoot":"{}","sha3Uncles":"{}","size":"0x1","stateRoot":"{}","timestamp":"0x{:x}","transactionsRoot":"{}","uncles":[],"withdrawals":[],"withdrawalsRoot":"{}","#,
        (height % 7) << 17,
        (height % 5) * 400_000,
        hash(0),
        "f".repeat(512),
        address(999),
        hash(2),
        hash(3),
        hash(4),
        hash(5),
        hash(6),
        1_700_000_000 + height * 12,
        hash(7),
        hash(8),
    );
    let block = |txs: &[String]| format!("{header}\"transactions\":[{}]}}", txs.join(","));
    (
        block(&full).into_bytes(),
        block(&hashes).into_bytes(),
        format!("[{}]", receipts.join(",")).into_bytes(),
    )
}

/// A store of blocks `0..count` of `txs` transactions each.
fn stored(count: u64, txs: u64) -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity {
        chain_id: 1,
        genesis_hash: [0; 32],
    };
    let config = StoreConfig {
        durability: Durability::OsBuffered,
        ..StoreConfig::default()
    };
    let mut store = Store::open(dir.path(), identity, config).unwrap();
    let hash = |height: u64| neve_store::testing::block_hash(0, height);
    for first in (0..count).step_by(32) {
        let blocks: Vec<_> = (first..count.min(first + 32))
            .map(|height| (height, geth_block(height, txs)))
            .collect();
        let new: Vec<NewBlock<'_>> = blocks
            .iter()
            .map(|(height, (full, hashes_only, receipts))| NewBlock {
                height: *height,
                hash: hash(*height),
                parent_hash: hash(height.wrapping_sub(1)),
                logs_bloom: [0; 256],
                full,
                hashes_only,
                receipts,
                raw_header: b"",
                raw_block: b"",
                raw_receipts: b"",
                txs: Vec::new(),
                logs: Vec::new(),
            })
            .collect();
        store.append(&new).unwrap();
    }
    (store, dir)
}

fn blob(_: u64) -> Option<(BlobParams, u64, bool)> {
    Some((
        BlobParams {
            max_blobs: 9,
            update_fraction: 5_007_716,
        },
        6,
        true,
    ))
}

/// Fee history of `heights` through `cache` over `store`'s blocks.
fn cached_json(
    cache: &HistoryCache,
    store: &Store,
    heights: std::ops::RangeInclusive<u64>,
    percentiles: &[f64],
) -> (String, HistoryReads) {
    let reader = store.reader();
    let mut reads = HistoryReads::default();
    let blocks = cache
        .blocks(
            heights,
            !percentiles.is_empty(),
            |height| Ok::<_, ()>(reader.from_disk().block(height).map(Stored)),
            &mut reads,
        )
        .unwrap()
        .expect("stored");
    let json = history_json(&blocks, percentiles, blob).expect("blob rules known");
    (json, reads)
}

/// The answer as it was made before heads and rewards were kept
/// apart: every block read in full with its receipts, through the
/// 256-entry cache by height the oracle uses.
fn full_json(
    cache: &HeightCache<BlockFees>,
    store: &Store,
    heights: std::ops::RangeInclusive<u64>,
    percentiles: &[f64],
) -> String {
    let reader = store.reader();
    let blocks: Vec<_> = heights
        .map(|height| {
            let block = reader.from_disk().block(height).unwrap();
            cache
                .get_or_read(height, &block.hash(), || {
                    BlockFees::from_json(&block.full().ok()?, &block.receipts().ok()?).ok()
                })
                .unwrap()
        })
        .collect();
    let last = blocks.last().unwrap();
    let (params, target, osaka) = blob(0).unwrap();
    let refs: Vec<&BlockFees> = blocks.iter().map(|b| b.as_ref()).collect();
    let history = fees::fee_history(
        &refs,
        percentiles,
        fees::next_base_fee(last, 2, 8),
        fees::history_next_blob_base_fee(last, target, params, osaka),
        |_| Some(params),
    );
    encode(&history)
}

const PERCENTILES: [f64; 7] = [0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 100.0];

#[test]
fn stored_fee_history_reads_headers_alone_and_answers_as_before() {
    let (store, _dir) = stored(48, 20);
    let reader = store.reader();
    let header_bytes: u64 = (8..=47)
        .map(|h| {
            reader
                .from_disk()
                .block(h)
                .unwrap()
                .hashes_only()
                .unwrap()
                .len() as u64
        })
        .sum();
    let cache = HistoryCache::default();
    let before = HeightCache::default();
    let sets: [&[f64]; 3] = [&[], &PERCENTILES, &[33.0]];
    for percentiles in sets {
        let want = full_json(&before, &store, 8..=47, percentiles);
        let (json, reads) = cached_json(&cache, &store, 8..=47, percentiles);
        assert_eq!(json, want);
        if percentiles.is_empty() {
            // The hashes-only JSON alone: no transaction, no receipt.
            assert_eq!((reads.headers, reads.bodies), (40, 0));
            assert_eq!(reads.bytes, header_bytes);
        }
        let (again, reads) = cached_json(&cache, &store, 8..=47, percentiles);
        assert_eq!(again, want);
        assert_eq!(reads.blocks_read(), 0);
    }
    let (json, _) = cached_json(&cache, &store, 47..=47, &[50.0]);
    assert!(
        json.starts_with(r#"{"oldestBlock":"0x2f","reward":[["0x"#),
        "{json}"
    );
    assert!(json.contains("\"baseFeePerBlobGas\":["), "{json}");
}

/// CPU per `eth_feeHistory` of 1,024 stored blocks (store reads and
/// parsing; the answer's JSON included; the store's pages in memory),
/// before (blocks and receipts read and parsed every time) and after
/// (cold, then warm), and what the charge would be. Printed, not
/// asserted; run with `--ignored --nocapture`.
#[test]
#[ignore = "timing, printed: run with --ignored --nocapture"]
fn fee_history_cpu_per_request() {
    fn time(what: &str, runs: u32, mut run: impl FnMut() -> Option<HistoryReads>) {
        run();
        let started = Instant::now();
        let mut reads = None;
        for _ in 0..runs {
            reads = run();
        }
        let each = started.elapsed() / runs;
        let charge = reads.map_or(String::new(), |reads| {
            format!(
                "  charged {} gas ({:.0} units): {reads:?}",
                gas_of(&reads),
                gas_of(&reads) as f64 / crate::clients::GAS_PER_UNIT as f64
            )
        });
        println!("{what:<40} {:>9.2} ms{charge}", each.as_secs_f64() * 1e3);
    }
    let txs = 150;
    let (store, _dir) = stored(1_024, txs);
    let block = store.reader().from_disk().block(0).unwrap();
    println!(
        "1,024 stored blocks of {txs} transactions: full {} KB, hashes-only {} KB, receipts {} KB each",
        block.full().unwrap().len() / 1024,
        block.hashes_only().unwrap().len() / 1024,
        block.receipts().unwrap().len() / 1024,
    );
    let range = 0..=1_023;
    let sets: [&[f64]; 2] = [&[], &PERCENTILES];
    for percentiles in sets {
        let with = if percentiles.is_empty() {
            "no percentiles"
        } else {
            "7 percentiles"
        };
        let before = HeightCache::default();
        time(&format!("before, {with}"), 3, || {
            full_json(&before, &store, range.clone(), percentiles);
            None
        });
        time(&format!("after, cold, {with}"), 3, || {
            Some(cached_json(&HistoryCache::default(), &store, range.clone(), percentiles).1)
        });
        let cache = HistoryCache::default();
        time(&format!("after, warm, {with}"), 20, || {
            Some(cached_json(&cache, &store, range.clone(), percentiles).1)
        });
    }
}
