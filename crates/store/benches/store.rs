//! Store benchmarks: reads per second from page cache for ~6 KB and ~45 KB
//! blocks (by number, by hash, transaction by hash, receipt by hash), write
//! throughput, and open time and RSS of a large store.
//!
//!     cargo bench -p neve-store
//!     NEVE_BENCH_OPEN_BLOCKS=100000 cargo bench -p neve-store -- open
//!     cargo bench -p neve-store -- lookup     # by hash on 16 Ki and 1 Mi blocks
//!
//! Reads never parse JSON: each iteration slices the stored bytes a server
//! would write to its socket.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use neve_store::testing::SyntheticBlock;
use neve_store::{Durability, Identity, Store, StoreConfig};

const CHAIN: Identity = Identity {
    chain_id: 1,
    genesis_hash: [1; 32],
};
/// Blocks in the read benchmarks' stores: several sealed segments plus the
/// one being written, so lookups cross segment indexes.
const READ_BLOCKS: u64 = 4_000;

/// (name, transactions, bytes per transaction): ~6 KB and ~45 KB full blocks.
const SIZES: [(&str, u32, usize); 2] = [("6KB", 8, 750), ("45KB", 45, 1000)];

fn config() -> StoreConfig {
    StoreConfig {
        durability: Durability::OsBuffered,
        ..StoreConfig::default()
    }
}

fn fill(store: &mut Store, from: u64, count: u64, txs: u32, tx_bytes: usize) {
    for chunk_start in (from..from + count).step_by(256) {
        let end = (chunk_start + 256).min(from + count);
        let blocks: Vec<_> = (chunk_start..end)
            .map(|h| SyntheticBlock::new(0, h, txs, tx_bytes))
            .collect();
        store
            .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
            .unwrap();
    }
}

/// A deterministic stream of heights to read, spread over the whole store.
fn heights() -> impl Iterator<Item = u64> {
    let mut state = 0x1234_5678u64;
    std::iter::repeat_with(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % READ_BLOCKS
    })
}

fn reads(c: &mut Criterion) {
    for (name, txs, tx_bytes) in SIZES {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), CHAIN, config()).unwrap();
        fill(&mut store, 0, READ_BLOCKS, txs, tx_bytes);
        let reader = store.reader();
        let probes: Vec<SyntheticBlock> = heights()
            .take(512)
            .map(|h| SyntheticBlock::new(0, h, txs, tx_bytes))
            .collect();
        let mut group = c.benchmark_group(format!("read/{name}"));
        group.throughput(Throughput::Elements(1));
        let mut i = 0usize;
        let mut next = || {
            i = (i + 1) % probes.len();
            &probes[i]
        };
        group.bench_function("block_by_number_hashes_only", |b| {
            b.iter(|| {
                black_box(
                    reader
                        .block(next().height)
                        .unwrap()
                        .hashes_only()
                        .unwrap()
                        .len(),
                )
            })
        });
        group.bench_function("block_by_number_full", |b| {
            b.iter(|| black_box(reader.block(next().height).unwrap().full().unwrap().len()))
        });
        group.bench_function("block_by_hash", |b| {
            b.iter(|| {
                black_box(
                    reader
                        .block_by_hash(&next().hash)
                        .unwrap()
                        .hashes_only()
                        .unwrap()
                        .len(),
                )
            })
        });
        group.bench_function("tx_by_hash", |b| {
            b.iter(|| {
                let probe = next();
                let (block, index) = reader
                    .transaction(&probe.txs[probe.txs.len() / 2].hash)
                    .unwrap();
                black_box(block.transaction(index).unwrap().unwrap().len())
            })
        });
        group.bench_function("receipt_by_hash", |b| {
            b.iter(|| {
                let probe = next();
                let (block, index) = reader.transaction(&probe.txs[0].hash).unwrap();
                black_box(block.receipt(index).unwrap().unwrap().len())
            })
        });
        group.finish();
    }
}

fn writes(c: &mut Criterion) {
    let mut group = c.benchmark_group("write");
    for (name, txs, tx_bytes) in SIZES {
        let blocks: Vec<_> = (0..256)
            .map(|h| SyntheticBlock::new(0, h, txs, tx_bytes))
            .collect();
        let bytes: usize = blocks
            .iter()
            .map(|b| b.full.len() + b.hashes_only.len() + b.receipts.len())
            .sum();
        for durability in [Durability::OsBuffered, Durability::Fsync] {
            group.throughput(Throughput::Bytes(bytes as u64));
            group.sample_size(10);
            group.bench_function(
                BenchmarkId::new(format!("{name}/256_blocks"), format!("{durability:?}")),
                |b| {
                    b.iter_custom(|iterations| {
                        let mut total = Duration::ZERO;
                        for _ in 0..iterations {
                            let dir = tempfile::tempdir().unwrap();
                            let mut store = Store::open(
                                dir.path(),
                                CHAIN,
                                StoreConfig {
                                    durability,
                                    ..StoreConfig::default()
                                },
                            )
                            .unwrap();
                            let views: Vec<_> = blocks.iter().map(|b| b.as_new()).collect();
                            let start = Instant::now();
                            // One append per block: the live-ingest pattern.
                            for view in &views {
                                store.append(std::slice::from_ref(view)).unwrap();
                            }
                            total += start.elapsed();
                        }
                        total
                    })
                },
            );
        }
    }
    group.finish();
}

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn open(c: &mut Criterion) {
    let blocks: u64 = std::env::var("NEVE_BENCH_OPEN_BLOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = Store::open(dir.path(), CHAIN, config()).unwrap();
        let (_, txs, tx_bytes) = SIZES[0];
        fill(&mut store, 0, blocks, txs, tx_bytes);
    }
    let before = rss_bytes();
    let start = Instant::now();
    let store = Store::open(dir.path(), CHAIN, config()).unwrap();
    let first_open = start.elapsed();
    let stats = store.stats();
    let reader = store.reader();
    let served = reader.block(blocks / 2).is_some() && reader.block(blocks - 1).is_some();
    eprintln!(
        "open: {blocks} blocks, {} segments, {:.1} MiB on disk: first open {:.1} ms, serving: {served}, \
         RSS grew {:.1} MiB",
        stats.segments,
        stats.bytes as f64 / (1 << 20) as f64,
        first_open.as_secs_f64() * 1e3,
        rss_bytes().saturating_sub(before) as f64 / (1 << 20) as f64,
    );
    drop(store);
    let mut group = c.benchmark_group("open");
    group.sample_size(10);
    group.bench_function(format!("{blocks}_blocks"), |b| {
        b.iter(|| {
            black_box(
                Store::open(dir.path(), CHAIN, config())
                    .unwrap()
                    .stats()
                    .max_contiguous_height,
            )
        })
    });
    group.finish();
}

/// Lookups by hash cost the same on a store of 16 Ki blocks (16 segments)
/// and 1 Mi blocks (1,024 segments): one hash table, not an index per
/// segment. Blocks are small (2 transactions) so the large store builds in
/// under a minute; `NEVE_BENCH_LOOKUP_BLOCKS` changes the large size.
fn lookups(c: &mut Criterion) {
    let large: u64 = std::env::var("NEVE_BENCH_LOOKUP_BLOCKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1 << 20);
    let mut group = c.benchmark_group("lookup");
    group.throughput(Throughput::Elements(1));
    for blocks in [1u64 << 14, large] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), CHAIN, config()).unwrap();
        let start = Instant::now();
        fill(&mut store, 0, blocks, 2, 100);
        eprintln!(
            "lookup: {blocks} blocks, {} segments, built in {:.1} s",
            store.stats().segments,
            start.elapsed().as_secs_f64()
        );
        let reader = store.reader();
        let mut state = 0x9E37_79B9u64;
        let probes: Vec<SyntheticBlock> = std::iter::repeat_with(|| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            SyntheticBlock::new(0, state % blocks, 2, 100)
        })
        .take(1024)
        .collect();
        let mut i = 0usize;
        let mut next = || {
            i = (i + 1) % probes.len();
            &probes[i]
        };
        group.bench_function(BenchmarkId::new("block_by_hash", blocks), |b| {
            b.iter(|| black_box(reader.block_by_hash(&next().hash).unwrap().height()))
        });
        group.bench_function(BenchmarkId::new("tx_by_hash", blocks), |b| {
            b.iter(|| black_box(reader.transaction(&next().txs[1].hash).unwrap().1))
        });
        let mut miss = 0u64;
        group.bench_function(BenchmarkId::new("miss", blocks), |b| {
            b.iter(|| {
                miss += 1;
                let hash = neve_store::testing::pseudo_hash(99, miss, 0);
                black_box(
                    reader.block_by_hash(&hash).is_none() && reader.transaction(&hash).is_none(),
                )
            })
        });
    }
    group.finish();
}

criterion_group!(benches, reads, writes, open, lookups);
criterion_main!(benches);
