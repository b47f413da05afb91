//! Fee history over many blocks: geth's JSON of blocks and receipts,
//! read through the caches.

use super::*;

/// A block's JSON as geth writes it, split for [`FakeChain`]: the full
/// block and the hashes-only block after their `number`, and the
/// receipts. `txs` transactions (every fifth a legacy one), tips from a
/// dozen values so some repeat, gas used varied.
fn geth_json(txs: usize, seed: u64) -> (String, String, String) {
    let filler = |byte: &str, n: usize| byte.repeat(n);
    let hash = |i: u64| format!("0x{:064x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ seed);
    let address = |i: u64| format!("0x{:040x}", i.wrapping_mul(0x1234_5678_9abc) ^ seed);
    let base_fee: u128 = 10 * GWEI;
    let mut full_txs = Vec::new();
    let mut hashes = Vec::new();
    let mut receipts = Vec::new();
    let mut cumulative = 0u64;
    for i in 0..txs as u64 {
        let gas_used = 21_000 + (i * 7_919 + seed) % 100_000;
        cumulative += gas_used;
        let tip = ((i * 37 + seed) % 13) as u128 * GWEI / 10;
        let pricing = if i % 5 == 4 {
            format!(r#""type":"0x0","gasPrice":"0x{:x}","#, base_fee + tip)
        } else {
            format!(
                r#""type":"0x2","gasPrice":"0x{:x}","maxFeePerGas":"0x{:x}","maxPriorityFeePerGas":"0x{tip:x}","accessList":[],"chainId":"0x1","yParity":"0x1","#,
                base_fee + tip,
                2 * base_fee + tip
            )
        };
        full_txs.push(format!(
            r#"{{"blockHash":"{}","blockNumber":"0x1","from":"{}","gas":"0x{:x}",{pricing}"hash":"{}","input":"0xa9059cbb{}","nonce":"0x{i:x}","to":"{}","transactionIndex":"0x{i:x}","value":"0x0","v":"0x1","r":"0x{}","s":"0x{}"}}"#,
            hash(0),
            address(i),
            gas_used * 2,
            hash(i + 1),
            filler("0", 128),
            address(i + 7),
            filler("ab", 32),
            filler("cd", 32),
        ));
        hashes.push(format!("\"{}\"", hash(i + 1)));
        receipts.push(format!(
            r#"{{"blockHash":"{}","blockNumber":"0x1","contractAddress":null,"cumulativeGasUsed":"0x{cumulative:x}","effectiveGasPrice":"0x{:x}","from":"{}","gasUsed":"0x{gas_used:x}","logs":[{{"address":"{}","topics":["{}","{}","{}"],"data":"0x{}","blockNumber":"0x1","transactionHash":"{}","transactionIndex":"0x{i:x}","blockHash":"{}","logIndex":"0x{i:x}","removed":false}}],"logsBloom":"0x{}","status":"0x1","to":"{}","transactionHash":"{}","transactionIndex":"0x{i:x}","type":"0x2"}}"#,
            hash(0),
            base_fee + tip,
            address(i),
            address(i + 7),
            hash(100),
            hash(101),
            hash(102),
            filler("0", 64),
            hash(i + 1),
            hash(0),
            filler("0", 512),
            address(i + 7),
            hash(i + 1),
        ));
    }
    let header = format!(
        r#""baseFeePerGas":"0x{base_fee:x}","blobGasUsed":"0x20000","difficulty":"0x0","excessBlobGas":"0x0","extraData":"0x","gasLimit":"0x{:x}","gasUsed":"0x{cumulative:x}","hash":"{}","logsBloom":"0x{}","miner":"{}","mixHash":"{}","nonce":"0x0000000000000000","parentHash":"{}","receiptsRoot":"{}","sha3Uncles":"{}","size":"0x1","stateRoot":"{}","timestamp":"0x{:x}","transactionsRoot":"{}","uncles":[],"withdrawals":[],"withdrawalsRoot":"{}","#,
        30_000_000u64.max(cumulative),
        hash(0),
        filler("f", 512),
        address(999),
        hash(2),
        hash(3),
        hash(4),
        hash(5),
        hash(6),
        1_700_000_000 + seed * 12,
        hash(7),
        hash(8),
    );
    (
        format!("{header}\"transactions\":[{}]}}", full_txs.join(",")),
        format!("{header}\"transactions\":[{}]}}", hashes.join(",")),
        format!("[{}]", receipts.join(",")),
    )
}

/// A store of `count` blocks for [`HistoryCache::blocks`], counting what
/// is read: a few distinct bodies repeated, each block's JSON put
/// together with its own number when read.
struct FakeChain {
    bodies: Vec<(String, String, String)>,
    count: u64,
    /// Reads of header JSON, full blocks and receipts.
    reads: std::cell::Cell<(usize, usize, usize)>,
    /// Added to every hash (a reorg changes every block).
    fork: u64,
}

struct FakeBlock<'a> {
    chain: &'a FakeChain,
    height: u64,
}

impl FakeChain {
    fn new(count: u64, txs: usize, variants: u64) -> Self {
        Self {
            bodies: (0..variants).map(|seed| geth_json(txs, seed)).collect(),
            count,
            reads: std::cell::Cell::new((0, 0, 0)),
            fork: 0,
        }
    }

    fn open(&self, height: u64) -> Result<Option<FakeBlock<'_>>, ()> {
        Ok((height < self.count).then_some(FakeBlock {
            chain: self,
            height,
        }))
    }

    fn body(&self, height: u64) -> &(String, String, String) {
        &self.bodies[(height % self.bodies.len() as u64) as usize]
    }

    /// Block `height` read in full, as the fee methods read it before.
    fn fees(&self, height: u64) -> BlockFees {
        let (full, _, receipts) = self.body(height);
        BlockFees::from_json(&numbered(height, full), receipts.as_bytes()).unwrap()
    }
}

fn numbered(height: u64, tail: &str) -> Vec<u8> {
    format!("{{\"number\":\"0x{height:x}\",{tail}").into_bytes()
}

impl StoredBlock for FakeBlock<'_> {
    type Json = Vec<u8>;

    fn hash(&self) -> [u8; 32] {
        let mut hash = [0; 32];
        hash[..8].copy_from_slice(&self.height.to_be_bytes());
        hash[8..16].copy_from_slice(&self.chain.fork.to_be_bytes());
        hash
    }

    fn header_json(&self) -> Option<Vec<u8>> {
        let (h, f, r) = self.chain.reads.get();
        self.chain.reads.set((h + 1, f, r));
        Some(numbered(self.height, &self.chain.body(self.height).1))
    }

    fn full_json(&self) -> Option<Vec<u8>> {
        let (h, f, r) = self.chain.reads.get();
        self.chain.reads.set((h, f + 1, r));
        Some(numbered(self.height, &self.chain.body(self.height).0))
    }

    fn receipts_json(&self) -> Option<Vec<u8>> {
        let (h, f, r) = self.chain.reads.get();
        self.chain.reads.set((h, f, r + 1));
        Some(self.chain.body(self.height).2.clone().into_bytes())
    }
}

fn blob_schedule(_: u64) -> Option<BlobParams> {
    Some(BlobParams {
        max_blobs: 9,
        update_fraction: 5_007_716,
    })
}

/// Fee history over `heights` of `chain` read through `cache`, and what
/// it read.
fn cached_history(
    cache: &HistoryCache,
    chain: &FakeChain,
    heights: std::ops::RangeInclusive<u64>,
    percentiles: &[f64],
) -> (FeeHistory, HistoryReads) {
    let mut reads = HistoryReads::default();
    let blocks = cache
        .blocks(
            heights,
            !percentiles.is_empty(),
            |h| chain.open(h),
            &mut reads,
        )
        .unwrap()
        .expect("every block stored");
    let history = fee_history_of(&blocks, percentiles, 1, 1, blob_schedule);
    (history, reads)
}

/// The same answer from blocks read in full, as before the cache.
fn full_history(
    chain: &FakeChain,
    heights: std::ops::RangeInclusive<u64>,
    percentiles: &[f64],
) -> FeeHistory {
    let blocks: Vec<BlockFees> = heights.map(|h| chain.fees(h)).collect();
    let refs: Vec<&BlockFees> = blocks.iter().collect();
    fee_history(&refs, percentiles, 1, 1, blob_schedule)
}

const PERCENTILES: [f64; 7] = [0.0, 10.0, 25.0, 50.0, 75.0, 90.0, 100.0];

#[test]
fn head_reads_the_fee_fields_from_the_hashes_only_json() {
    let chain = FakeChain::new(1, 20, 1);
    let (_, hashes_only, _) = chain.body(0);
    let head = BlockHead::from_json(&numbered(0, hashes_only)).unwrap();
    let fees = chain.fees(0);
    assert_eq!(head, BlockHead::of(&fees));
    assert_eq!(
        head.as_block_fees(),
        BlockFees {
            txs: Vec::new(),
            ..fees
        }
    );
    assert_eq!(head.blob_gas_used, Some(BLOB_GAS_PER_BLOB));
    // Pre-London, pre-Cancun: the fields are absent.
    let old = br#"{"number":"0x1","gasUsed":"0x0","gasLimit":"0x1388","timestamp":"0x1",
        "miner":"0x00000000000000000000000000000000000000aa","transactions":["0x01"]}"#;
    let head = BlockHead::from_json(old).unwrap();
    assert_eq!((head.base_fee, head.excess_blob_gas), (None, None));
    assert!(BlockHead::from_json(b"{\"number\":\"0x1\"}").is_err());
}

#[test]
fn kept_rewards_answer_as_the_block_read_in_full() {
    // Blocks of repeated and distinct tips, gas of 0 included, and a
    // header gasUsed above and below the receipts' sum.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = |modulo: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % modulo
    };
    for round in 0..300 {
        let txs = next(40) as usize;
        let mut block = block_with(round, &[]);
        block.txs = (0..txs)
            .map(|_| TxFee {
                tip: next(6) as u128 * 1_000 + if round % 2 == 0 { 0 } else { next(3) as u128 },
                gas_used: if next(10) == 0 {
                    0
                } else {
                    21_000 + next(200_000)
                },
                sender: ALICE,
            })
            .collect();
        let sum: u64 = block.txs.iter().map(|tx| tx.gas_used).sum();
        block.gas_used = match round % 3 {
            0 => sum,
            1 => sum + next(50_000),
            _ => sum.saturating_sub(next(50_000)),
        };
        let kept = BlockRewards::of(&block);
        let sets: [&[f64]; 5] = [
            &PERCENTILES,
            &[0.5, 33.3, 66.6, 99.9],
            &[100.0],
            &[],
            &[0.0],
        ];
        for percentiles in sets {
            assert_eq!(
                kept.at(block.gas_used, percentiles),
                block_rewards(&block, percentiles),
                "block {round} {percentiles:?}"
            );
        }
    }
}

#[test]
fn no_percentile_request_reads_no_receipts() {
    let chain = FakeChain::new(2_000, 5, 4);
    let cache = HistoryCache::default();
    let range = 976..=1_999;
    let (history, reads) = cached_history(&cache, &chain, range.clone(), &[]);
    assert_eq!(history, full_history(&chain, range.clone(), &[]));
    assert_eq!(history.reward, None);
    assert_eq!(chain.reads.get(), (1_024, 0, 0), "headers only, once each");
    assert_eq!((reads.cached, reads.headers, reads.bodies), (0, 1_024, 0));
    assert!(reads.bytes > 0);
    // Asked again: nothing read but the records' hashes.
    let (again, reads) = cached_history(&cache, &chain, range, &[]);
    assert_eq!(again, history);
    assert_eq!(chain.reads.get(), (1_024, 0, 0));
    assert_eq!(
        reads,
        HistoryReads {
            cached: 1_024,
            ..HistoryReads::default()
        }
    );
}

#[test]
fn repeated_full_range_percentile_request_parses_each_block_once() {
    let chain = FakeChain::new(1_024, 30, 8);
    let cache = HistoryCache::default();
    let range = 0..=1_023;
    let want = full_history(&chain, range.clone(), &PERCENTILES);
    assert!(
        want.reward
            .as_ref()
            .unwrap()
            .iter()
            .any(|row| row[0] != row[6])
    );
    for round in 0..3 {
        let (history, reads) = cached_history(&cache, &chain, range.clone(), &PERCENTILES);
        assert_eq!(history, want, "round {round}");
        let parsed = if round == 0 { 1_024 } else { 0 };
        assert_eq!((reads.bodies, reads.cached), (parsed, 1_024 - parsed));
        assert_eq!(reads.headers, 0);
        assert_eq!(chain.reads.get(), (0, 1_024, 1_024), "round {round}");
    }
    // Other percentiles over the same blocks: still nothing parsed.
    let (history, reads) = cached_history(&cache, &chain, range.clone(), &[42.0]);
    assert_eq!(history, full_history(&chain, range.clone(), &[42.0]));
    assert_eq!(reads.blocks_read(), 0);
    // Heads came with the bodies: no percentiles reads no header either.
    let (history, reads) = cached_history(&cache, &chain, range.clone(), &[]);
    assert_eq!(history, full_history(&chain, range, &[]));
    assert_eq!(
        (reads.blocks_read(), chain.reads.get()),
        (0, (0, 1_024, 1_024))
    );
    assert_eq!(cache.len(), (1_024, 1_024));
}

#[test]
fn the_cache_confirms_by_hash_and_keeps_within_its_bounds() {
    let mut chain = FakeChain::new(100, 3, 2);
    // Two heads, rewards of two blocks of 3 distinct tips at most.
    let cache = HistoryCache::with_bounds(2, 10, 2 * (REWARDS_ENTRY_BYTES + 3 * 24));
    let (_, reads) = cached_history(&cache, &chain, 10..=12, &[50.0]);
    assert_eq!(reads.bodies, 3);
    assert_eq!(cache.len(), (2, 2), "the least recently used left");
    let (_, reads) = cached_history(&cache, &chain, 11..=12, &[50.0]);
    assert_eq!(reads.cached, 2);
    // Block 12 used last: kept while 13 comes in, 11 leaves.
    let (_, reads) = cached_history(&cache, &chain, 12..=13, &[50.0]);
    assert_eq!((reads.cached, reads.bodies), (1, 1));
    let (_, reads) = cached_history(&cache, &chain, 11..=11, &[50.0]);
    assert_eq!(reads.bodies, 1);
    // A block of the same height with another hash is read again.
    chain.fork = 1;
    let (_, reads) = cached_history(&cache, &chain, 11..=11, &[50.0]);
    assert_eq!(reads.bodies, 1);
    // Not stored: a miss.
    let mut reads = HistoryReads::default();
    let blocks = cache.blocks(99..=100, false, |h| chain.open(h), &mut reads);
    assert_eq!(blocks, Ok(None));
    // A block whose JSON is for another height: a miss, not kept.
    struct Liar;
    impl StoredBlock for Liar {
        type Json = &'static [u8];
        fn hash(&self) -> [u8; 32] {
            [7; 32]
        }
        fn header_json(&self) -> Option<&'static [u8]> {
            Some(br#"{"number":"0x5","gasUsed":"0x0","gasLimit":"0x1","timestamp":"0x1","miner":"0x00000000000000000000000000000000000000aa"}"#)
        }
        fn full_json(&self) -> Option<&'static [u8]> {
            None
        }
        fn receipts_json(&self) -> Option<&'static [u8]> {
            None
        }
    }
    let cache = HistoryCache::default();
    let mut reads = HistoryReads::default();
    assert_eq!(
        cache.blocks(6..=6, false, |_| Ok::<_, ()>(Some(Liar)), &mut reads),
        Ok(None)
    );
    assert_eq!(
        cache.blocks(5..=5, true, |_| Ok::<_, ()>(Some(Liar)), &mut reads),
        Ok(None)
    );
    assert!(cache.is_empty());
    assert_eq!((reads.headers, reads.bodies), (1, 1));
}

/// CPU per `eth_feeHistory` of 1,024 blocks, parsing only (the store's
/// reads are not in it: see the serve crate's timing): before (every block
/// read in full with its receipts each time, the 256-entry direct-mapped
/// cache evicting itself over the range) and after (cold, then warm).
/// Printed, not asserted; run with `--ignored --nocapture`.
#[test]
#[ignore = "timing, printed: run with --ignored --nocapture"]
fn fee_history_cpu_per_request() {
    use std::time::Instant;
    let txs = 150;
    let chain = FakeChain::new(1_024, txs, 16);
    let range = 0..=1_023u64;
    fn time(what: &str, runs: u32, mut run: impl FnMut()) {
        run();
        let started = Instant::now();
        for _ in 0..runs {
            run();
        }
        let each = started.elapsed() / runs;
        println!("{what:<48} {:>10.2} ms", each.as_secs_f64() * 1e3);
    }
    let (full, hashes_only, receipts) = chain.body(0);
    println!(
        "1,024 blocks of {txs} transactions: full {} KB, hashes-only {} KB, receipts {} KB each",
        full.len() / 1024,
        hashes_only.len() / 1024,
        receipts.len() / 1024
    );
    let sets: [&[f64]; 2] = [&[], &PERCENTILES];
    for percentiles in sets {
        let with = if percentiles.is_empty() {
            "no percentiles"
        } else {
            "7 percentiles"
        };
        time(&format!("before, {with}"), 3, || {
            full_history(&chain, range.clone(), percentiles);
        });
        time(&format!("after, cold cache, {with}"), 3, || {
            cached_history(&HistoryCache::default(), &chain, range.clone(), percentiles);
        });
        let cache = HistoryCache::default();
        time(&format!("after, warm cache, {with}"), 20, || {
            cached_history(&cache, &chain, range.clone(), percentiles);
        });
    }
}
