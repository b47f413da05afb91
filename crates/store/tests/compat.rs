//! Stores written by earlier releases keep opening: `fixtures/vN` was
//! written by format version N. When a version is replaced, write the
//! outgoing version's fixture with the outgoing build, once:
//! `NEVE_WRITE_FIXTURE=N cargo test -p neve-store --test compat`.

use std::path::{Path, PathBuf};

use neve_store::testing::SyntheticBlock;
use neve_store::{Durability, Identity, Store, StoreConfig};

const CHAIN: Identity = Identity {
    chain_id: 31337,
    genesis_hash: [0x31; 32],
};
const HEIGHTS: std::ops::RangeInclusive<u64> = 10..=15;

fn fixture(version: u32) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/v{version}"))
}

/// Small segments so the fixture holds a sealed segment with its index and
/// a segment being written, in a few kilobytes.
fn config() -> StoreConfig {
    StoreConfig {
        segment_blocks: 4,
        segment_bytes: 64 * 1024,
        durability: Durability::Fsync,
        ..StoreConfig::default()
    }
}

#[test]
fn write_fixture_on_request() {
    let Some(version) = std::env::var("NEVE_WRITE_FIXTURE")
        .ok()
        .and_then(|v| v.parse().ok())
    else {
        return;
    };
    let dir = fixture(version);
    let _ = std::fs::remove_dir_all(&dir);
    let mut store = Store::open(&dir, CHAIN, config()).unwrap();
    let blocks: Vec<_> = HEIGHTS.map(|h| SyntheticBlock::new(0, h, 2, 150)).collect();
    store
        .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
        .unwrap();
    drop(store);
    std::fs::remove_file(dir.join("LOCK")).unwrap();
}

#[test]
fn a_version_1_store_opens_and_reads_back() {
    opens_and_reads_back(1);
}

#[test]
fn a_version_2_store_opens_and_reads_back() {
    opens_and_reads_back(2);
}

fn opens_and_reads_back(version: u32) {
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(version)).expect("fixture present") {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    let mut store = Store::open(copy.path(), CHAIN, config()).unwrap();
    let reader = store.reader();
    let stats = reader.stats();
    assert_eq!(
        (stats.min_height, stats.max_contiguous_height),
        (Some(*HEIGHTS.start()), Some(*HEIGHTS.end()))
    );
    for height in HEIGHTS {
        let expected = SyntheticBlock::new(0, height, 2, 150);
        let block = reader.block(height).unwrap();
        assert_eq!(&block.full()[..], &expected.full[..]);
        assert_eq!(&block.receipts()[..], &expected.receipts[..]);
        let logs: Vec<_> = block.logs().map(|log| log.bytes).collect();
        let want: Vec<_> = expected
            .logs
            .iter()
            .map(|log| &expected.receipts[log.span.offset as usize..][..log.span.len as usize])
            .collect();
        assert_eq!(logs, want);
        assert_eq!(
            reader
                .transaction(&expected.txs[1].hash)
                .map(|(b, i)| (b.height(), i)),
            Some((height, 1))
        );
        assert!(
            block.emitter_runs().is_none(),
            "no run table before version 3"
        );
    }

    // This build's records follow the old ones in the same store.
    let next = *HEIGHTS.end() + 1..=*HEIGHTS.end() + 3;
    let blocks: Vec<_> = next
        .clone()
        .map(|h| SyntheticBlock::new(0, h, 2, 150))
        .collect();
    store
        .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
        .unwrap();
    let reader = store.reader();
    for height in *HEIGHTS.start()..=*next.end() {
        let block = reader.block(height).unwrap();
        let logs: Vec<_> = block.logs().map(|log| log.bytes).collect();
        assert_eq!(logs.len(), 2, "height {height}");
        assert_eq!(block.emitter_runs().is_some(), next.contains(&height));
    }
}
