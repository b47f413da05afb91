//! Appending, reading, reopening, refusing, rollbacks and retention.

use super::*;

#[test]
fn appended_blocks_read_back_by_number_hash_and_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    assert_eq!(range(store.stats()), (None, None));
    append_range(&mut store, 0, 100..=110);
    let reader = store.reader();
    assert_eq!(range(reader.stats()), (Some(100), Some(110)));
    for height in 100..=110 {
        assert_block(&reader, 0, height);
    }
    assert!(reader.block(99).is_none() && reader.block(111).is_none());
    assert!(reader.block_by_hash(&block_hash(0, 111)).is_none());
    assert!(reader.transaction(&[0xee; 32]).is_none());
    assert_eq!(
        reader.stats().segments,
        3,
        "segments of 4 blocks: 100-103, 104-107, 108-110"
    );
}

/// Issue 23: how much of the store is in memory, sampled with `mincore`.
#[test]
fn residency_counts_the_pages_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(8)).unwrap();
    assert_eq!(
        store.reader().residency(64).fraction(),
        None,
        "nothing stored"
    );
    for start in (0..64).step_by(8) {
        append_range(&mut store, 0, start..=start + 7);
    }
    let reader = store.reader();
    let fresh = reader.residency(64);
    assert!(fresh.sampled_pages >= 8, "{fresh:?}");
    assert!(
        fresh.sampled_pages <= 64 + 8,
        "about the pages asked for: {fresh:?}"
    );
    assert_eq!(fresh.bytes, reader.stats().bytes);
    assert_eq!(fresh.fraction(), Some(1.0), "just written: {fresh:?}");
    assert_eq!(fresh.resident_bytes(), fresh.bytes);

    if testing::page_out(&reader) {
        let cold = reader.residency(64);
        assert!(cold.fraction().unwrap() < 0.5, "paged out: {cold:?}");
        // Reads that must not wait for the disk say so instead.
        let memory = reader.in_memory();
        assert_eq!(memory.block(5).map(|b| b.is_some()), Err(Cold));
        assert_eq!(
            memory.block_by_hash(&block_hash(0, 6)).map(|b| b.is_some()),
            Err(Cold)
        );
        assert!(
            memory
                .transaction(&reader.block(7).unwrap().tx_hash(0).unwrap())
                .is_ok(),
            "read just now"
        );
        // Read into memory of its own: the same bytes.
        let copied = reader.from_disk().block(6).unwrap();
        assert_eq!(
            &copied.full().unwrap()[..],
            &SyntheticBlock::new(0, 6, TXS, 200).full[..]
        );
        let by_hash = reader.from_disk().block_by_hash(&block_hash(0, 6));
        assert_eq!(by_hash.map(|b| b.height()), Some(6));
        assert!(reader.from_disk().block(1000).is_none());
        // The last record of a sealed segment ends where its file does,
        // inside an O_DIRECT block.
        let last = reader.from_disk().block(7).unwrap();
        assert_eq!(
            &last.full().unwrap()[..],
            &SyntheticBlock::new(0, 7, TXS, 200).full[..]
        );
        assert_block(&reader, 0, 5);
        assert_eq!(
            memory.block(5).map(|b| b.map(|b| b.height())),
            Ok(Some(5)),
            "in memory again"
        );
        assert_eq!(
            memory.block(1000).map(|b| b.is_some()),
            Ok(false),
            "a miss touches nothing"
        );
        assert!(
            reader.residency(64).resident_pages > cold.resident_pages,
            "a read brings its pages back"
        );
    }
}

#[test]
fn reopening_keeps_everything_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
        append_range(&mut store, 0, 0..=9);
    }
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    assert_eq!(range(store.stats()), (Some(0), Some(9)));
    append_range(&mut store, 0, 10..=13);
    let reader = store.reader();
    for height in 0..=13 {
        assert_block(&reader, 0, height);
    }
    let bytes = reader.stats().bytes;
    drop(store);
    let store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    assert_eq!(store.stats().bytes, bytes, "size survives reopen");
}

#[test]
fn blocks_that_do_not_continue_the_store_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 5..=6);
    let gap = SyntheticBlock::new(0, 8, TXS, 200);
    assert!(matches!(
        store.append(&[gap.as_new()]),
        Err(StoreError::NotContiguous { height: 8, .. })
    ));
    let other_fork = SyntheticBlock::new(1, 7, TXS, 200);
    let error = store.append(&[other_fork.as_new()]).unwrap_err();
    assert!(error.to_string().contains("parent hash"), "{error}");
    let mut bad = SyntheticBlock::new(0, 7, TXS, 200);
    bad.txs[0].full = Span::new(0, u32::MAX);
    assert!(matches!(
        store.append(&[bad.as_new()]),
        Err(StoreError::Malformed { .. })
    ));
    assert_eq!(
        range(store.stats()),
        (Some(5), Some(6)),
        "refusals change nothing"
    );
    append_range(&mut store, 0, 7..=7);
}

#[test]
fn rollback_removes_above_and_a_new_fork_takes_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 0..=13);
    let reader = store.reader();
    let orphan_tx = SyntheticBlock::new(0, 12, TXS, 200).txs[0].hash;

    // Within the segment being written.
    store.rollback(12).unwrap();
    assert_eq!(range(reader.stats()), (Some(0), Some(12)));
    assert!(reader.block(13).is_none());
    assert!(reader.block_by_hash(&block_hash(0, 13)).is_none());

    // Into a sealed segment: 8..=11 reopens, 12 goes.
    store.rollback(9).unwrap();
    assert_eq!(range(reader.stats()), (Some(0), Some(9)));
    assert!(
        reader.transaction(&orphan_tx).is_none(),
        "rolled-back transactions vanish"
    );
    assert_eq!(reader.stats().high_water, Some(13));

    // A fork replaces the removed heights.
    append_fork(&mut store, 1, 10..=15, block_hash(0, 9));
    assert_eq!(reader.block(12).unwrap().hash(), block_hash(1, 12));
    assert!(reader.block_by_hash(&block_hash(0, 12)).is_none());

    drop(store);
    let store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    let reader = store.reader();
    assert_eq!(
        range(reader.stats()),
        (Some(0), Some(15)),
        "tombstones survive reopen"
    );
    for height in 0..=9 {
        assert_block(&reader, 0, height);
    }
    for height in 11..=15 {
        assert_block(&reader, 1, height);
    }
}

#[test]
fn rollback_below_the_tail_empties_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 10..=20);
    store.rollback(5).unwrap();
    assert_eq!(range(store.stats()), (None, None));
    assert_eq!(store.stats().bytes, 0);
    append_range(&mut store, 2, 30..=31);
    drop(store);
    let store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    assert_eq!(range(store.stats()), (Some(30), Some(31)));
}

#[test]
fn retention_by_blocks_drops_whole_old_segments() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        retain_blocks: Some(10),
        ..config(4)
    };
    let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
    append_range(&mut store, 0, 0..=40);
    let stats = store.stats();
    let kept = stats.max_contiguous_height.unwrap() - stats.min_height.unwrap() + 1;
    assert!((10..10 + 4).contains(&kept), "kept {kept} blocks");
    assert_eq!(
        stats.min_height.unwrap() % 4,
        0,
        "the floor moves by whole segments"
    );
    let files = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(
        files,
        3 + stats.segments * 2 - 1,
        "META, LOCK, HASHES, .seg each, .idx for the sealed"
    );
    drop(store);
    let store = Store::open(dir.path(), CHAIN, config).unwrap();
    assert_eq!(store.stats().min_height, stats.min_height);
}

#[test]
fn retention_by_bytes_keeps_the_store_under_the_limit_plus_one_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 0..=3);
    let segment_bytes = store.stats().bytes;
    drop(store);
    let limit = segment_bytes * 3;
    let config = StoreConfig {
        retain_bytes: Some(limit),
        ..config(4)
    };
    let mut store = Store::open(dir.path(), CHAIN, config).unwrap();
    append_range(&mut store, 0, 4..=60);
    let stats = store.stats();
    assert!(stats.bytes <= limit, "{} > {limit}", stats.bytes);
    assert!(
        stats.bytes + segment_bytes * 2 > limit,
        "does not over-prune: {}",
        stats.bytes
    );
    assert_eq!(stats.max_contiguous_height, Some(60));
}

#[test]
fn another_chain_or_format_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), CHAIN, config(4)).unwrap());
    let other = Identity {
        chain_id: 1,
        ..CHAIN
    };
    let error = Store::open(dir.path(), other, config(4)).err().unwrap();
    assert!(matches!(
        error,
        StoreError::WrongChain {
            stored: 1337,
            wanted: 1,
            ..
        }
    ));
    assert!(error.to_string().contains("another data directory"));

    let meta_path = dir.path().join("META");
    let mut meta = std::fs::read(&meta_path).unwrap();
    meta[8..12].copy_from_slice(&99u32.to_le_bytes());
    let crc = crc32c::crc32c(&meta[..68]);
    meta[68..72].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&meta_path, meta).unwrap();
    let error = Store::open(dir.path(), CHAIN, config(4)).err().unwrap();
    assert!(matches!(
        error,
        StoreError::FormatVersion {
            found: 99,
            expected: FORMAT_VERSION,
            ..
        }
    ));
}

#[test]
fn a_second_writer_is_locked_out() {
    let dir = tempfile::tempdir().unwrap();
    let _store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    assert!(matches!(
        Store::open(dir.path(), CHAIN, config(4)),
        Err(StoreError::Locked(_))
    ));
}
