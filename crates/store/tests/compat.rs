//! Stores written by earlier releases: `fixtures/vN` was written by format
//! version N. Versions 1 and 2 are refused (version 4 changed how records
//! are checked); version 4 keeps opening. When a version is replaced, write the
//! outgoing version's fixture with the outgoing build, once:
//! `NEVE_WRITE_FIXTURE=N cargo test -p neve-store --test compat`.

use std::path::{Path, PathBuf};

use neve_store::testing::SyntheticBlock;
use neve_store::{Durability, FORMAT_VERSION, Identity, Store, StoreConfig, StoreError};

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

/// A store of format 1 or 2 (one CRC a record) is refused with an error
/// naming both versions and what to do, and left exactly as it was.
#[test]
fn stores_before_version_4_are_refused_and_left_untouched() {
    for version in [1, 2] {
        let copy = copy_of(version);
        let before = contents(copy.path());
        match Store::open(copy.path(), CHAIN, config()) {
            Err(StoreError::FormatVersion {
                found, expected, ..
            }) => assert_eq!((found, expected), (version, FORMAT_VERSION)),
            Err(other) => panic!("version {version}: {other}"),
            Ok(_) => panic!("version {version} opened"),
        }
        let message = Store::open(copy.path(), CHAIN, config())
            .err()
            .unwrap()
            .to_string();
        assert!(message.contains("re-ingest"), "{message}");
        let mut after = contents(copy.path());
        after.retain(|(name, _)| name != "LOCK");
        let mut before = before;
        before.retain(|(name, _)| name != "LOCK");
        assert_eq!(before, after, "version {version}");
    }
}

#[test]
fn a_version_4_store_opens_and_reads_back() {
    let copy = copy_of(4);
    let mut store = Store::open(copy.path(), CHAIN, config()).unwrap();
    let reader = store.reader();
    let stats = reader.stats();
    assert_eq!(
        (stats.min_height, stats.max_contiguous_height),
        (Some(*HEIGHTS.start()), Some(*HEIGHTS.end()))
    );
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
        let expected = SyntheticBlock::new(0, height, 2, 150);
        let block = reader.block(height).unwrap();
        assert_eq!(&block.full().unwrap()[..], &expected.full[..]);
        assert_eq!(&block.receipts().unwrap()[..], &expected.receipts[..]);
        let logs: Vec<_> = block
            .logs()
            .unwrap()
            .into_iter()
            .map(|log| log.bytes)
            .collect();
        let want: Vec<_> = expected
            .logs
            .iter()
            .map(|log| &expected.receipts[log.span.offset as usize..][..log.span.len as usize])
            .collect();
        assert_eq!(logs, want, "height {height}");
        assert_eq!(
            reader
                .transaction(&expected.txs[1].hash)
                .map(|(b, i)| (b.height(), i)),
            Some((height, 1))
        );
    }
}

fn copy_of(version: u32) -> tempfile::TempDir {
    let copy = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(fixture(version)).expect("fixture present") {
        let path = entry.unwrap().path();
        std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
    }
    copy
}

fn contents(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&path).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}
