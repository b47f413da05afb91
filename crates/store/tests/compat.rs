//! Stores written by earlier releases keep opening: `fixtures/v1` was
//! written by format version 1 (regenerate only when adding a new version's
//! fixture: `NEVE_WRITE_FIXTURE=1 cargo test -p neve-store --test compat`).

use std::path::{Path, PathBuf};

use neve_store::testing::SyntheticBlock;
use neve_store::{Durability, Identity, Store, StoreConfig};

const CHAIN: Identity = Identity {
    chain_id: 31337,
    genesis_hash: [0x31; 32],
};
const HEIGHTS: std::ops::RangeInclusive<u64> = 10..=15;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1")
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
    if std::env::var_os("NEVE_WRITE_FIXTURE").is_none() {
        return;
    }
    let dir = fixture();
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
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture()).expect("fixture present") {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    let store = Store::open(copy.path(), CHAIN, config()).unwrap();
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
        assert_eq!(
            reader
                .transaction(&expected.txs[1].hash)
                .map(|(b, i)| (b.height(), i)),
            Some((height, 1))
        );
    }
}
