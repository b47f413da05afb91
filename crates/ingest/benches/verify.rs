//! Verification cost per block: the whole check, and the part of it that
//! recovers each transaction's signer to check its `from`, on the
//! conformance chain's last block (four transactions of several types).
//!
//!     cargo bench -p neve-ingest

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use neve_ingest::decode::{RawParts, decode};
use neve_ingest::verify::{check_senders, verify};

use neve_devnet::conformance::fixture_result as fixture;

fn verification(c: &mut Criterion) {
    let full = fixture("eth_getBlockByNumber/get-latest.io");
    let receipts = fixture("eth_getBlockReceipts/get-block-receipts-latest.io");
    let block = decode(&full, &receipts, RawParts::default()).expect("prepares");
    let txs = block.transactions().len() as u64;
    let mut group = c.benchmark_group("verify");
    group.throughput(Throughput::Elements(txs));
    group.bench_function("whole block", |b| {
        b.iter(|| verify(black_box(&block)).unwrap())
    });
    group.bench_function("senders only", |b| {
        b.iter(|| check_senders(black_box(&block)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, verification);
criterion_main!(benches);
