//! The store-wide hash table: lookups, rebuilding, pruning, rollbacks.

use super::*;

/// How many segment indexes a lookup by hash reads besides the table.
fn uncovered_segments(store: &Store) -> usize {
    store.shared.state.load().uncovered().count()
}

fn assert_hashes_found(reader: &Reader, fork: u64, heights: std::ops::RangeInclusive<u64>) {
    for height in heights {
        let expected = SyntheticBlock::new(fork, height, TXS, 200);
        assert_eq!(
            reader.block_by_hash(&expected.hash).map(|b| b.height()),
            Some(height)
        );
        for (i, tx) in expected.txs.iter().enumerate() {
            let (found, index) = reader.transaction(&tx.hash).expect("tx by hash");
            assert_eq!((found.height(), index), (height, i as u32));
        }
    }
}

#[test]
fn lookups_by_hash_read_the_table_and_only_the_segment_being_written() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 0..=201);
    assert_eq!(store.stats().segments, 51);
    assert_eq!(
        uncovered_segments(&store),
        1,
        "only the segment being written"
    );
    assert_hashes_found(&store.reader(), 0, 0..=201);
    assert!(store.reader().block_by_hash(&block_hash(0, 202)).is_none());
    assert!(store.reader().transaction(&[0xee; 32]).is_none());
}

#[test]
fn a_missing_or_damaged_table_is_replaced_and_rebuilt_without_losing_a_hash() {
    for damage in ["delete", "flip", "truncate"] {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
        append_range(&mut store, 0, 0..=41);
        drop(store);
        let path = dir.path().join(hashes::HASHES_FILE);
        match damage {
            "delete" => std::fs::remove_file(&path).unwrap(),
            "flip" => {
                let mut bytes = std::fs::read(&path).unwrap();
                bytes[20] ^= 1;
                std::fs::write(&path, bytes).unwrap();
            }
            _ => {
                let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                file.set_len(4096 + 16).unwrap();
            }
        }
        let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
        assert_eq!(
            uncovered_segments(&store),
            11,
            "{damage}: every segment read alone"
        );
        assert_hashes_found(&store.reader(), 0, 0..=41);
        append_range(&mut store, 0, 42..=42);
        assert_eq!(
            uncovered_segments(&store),
            1,
            "{damage}: rebuilt by the append"
        );
        assert_hashes_found(&store.reader(), 0, 0..=42);
    }
}

#[test]
fn the_table_grows_and_sheds_pruned_entries_as_the_tail_turns_over() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        retain_blocks: Some(6_000),
        ..config(64)
    };
    let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
    let table = || std::fs::metadata(dir.path().join(hashes::HASHES_FILE)).unwrap();
    append_range(&mut store, 0, 0..=499);
    let first = table();
    // 4 entries a block. The table is rebuilt larger each time used slots
    // pass 70 %; past 6,000 blocks pruning leaves stale entries, and near
    // 11,500 blocks the last rebuild keeps the 24,000 live entries in
    // 131,072 slots.
    for start in (500..15_000).step_by(500) {
        append_range(&mut store, 0, start..=start + 499);
    }
    use std::os::unix::fs::MetadataExt;
    assert_ne!(table().ino(), first.ino(), "rebuilt");
    assert_eq!(table().len(), 4096 + 16 * 131_072, "grown");
    let (min, max) = range(store.stats());
    let (min, max) = (min.unwrap(), max.unwrap());
    assert_eq!(uncovered_segments(&store), 1);
    assert_hashes_found(&store.reader(), 0, min..=max);
    for pruned in [0, min - 1] {
        assert!(
            store
                .reader()
                .block_by_hash(&block_hash(0, pruned))
                .is_none()
        );
        let tx = &SyntheticBlock::new(0, pruned, TXS, 200).txs[0];
        assert!(store.reader().transaction(&tx.hash).is_none());
    }
    drop(store);
    let store = Store::open(dir.path(), CHAIN, config).unwrap();
    assert_eq!(uncovered_segments(&store), 1, "reopened covered");
    assert_hashes_found(&store.reader(), 0, min..=max);
}

#[test]
fn a_rollback_into_covered_segments_uncovers_them_first() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 0..=30);
    store.rollback(9).unwrap();
    assert_eq!(uncovered_segments(&store), 1, "8..=9 is written again");
    append_fork(&mut store, 1, 10..=30, block_hash(0, 9));
    assert_hashes_found(&store.reader(), 0, 0..=9);
    assert_hashes_found(&store.reader(), 1, 10..=30);
    for height in 10..=30 {
        assert!(
            store
                .reader()
                .block_by_hash(&block_hash(0, height))
                .is_none()
        );
    }
    drop(store);
    let store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    assert_hashes_found(&store.reader(), 1, 10..=30);
}
