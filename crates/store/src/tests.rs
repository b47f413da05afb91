//! Behaviour tests of the store against synthetic blocks.

use std::collections::BTreeMap;

use proptest::prelude::*;

use std::path::{Path, PathBuf};

use crate::block::Block;
use crate::config::{Durability, StoreConfig};
use crate::directory::{self, index_file_name};
use crate::error::StoreError;
use crate::format::{self, FORMAT_VERSION};
use crate::hashes;
use crate::miss::Cold;
use crate::miss::Unread;
use crate::reader::{Reader, Stats};
use crate::segment::{self, Segment};
use crate::store::Store;
use crate::testing;
use crate::types::{Hash, Identity, Span};
use testing::{CrashJournal, SyntheticBlock, block_hash};

const CHAIN: Identity = Identity {
    chain_id: 1337,
    genesis_hash: [7; 32],
};
const TXS: u32 = 3;

fn config(segment_blocks: u32) -> StoreConfig {
    StoreConfig {
        segment_blocks,
        durability: Durability::OsBuffered,
        ..StoreConfig::default()
    }
}

fn append_range(store: &mut Store, fork: u64, heights: std::ops::RangeInclusive<u64>) {
    let blocks: Vec<_> = heights
        .map(|h| SyntheticBlock::new(fork, h, TXS, 200))
        .collect();
    let views: Vec<_> = blocks.iter().map(|b| b.as_new()).collect();
    store.append(&views).expect("append");
}

/// Appends `heights` of `fork`, the first of them a child of `parent`.
fn append_fork(store: &mut Store, fork: u64, heights: std::ops::RangeInclusive<u64>, parent: Hash) {
    let first = *heights.start();
    let blocks: Vec<_> = heights
        .map(|h| {
            let mut b = SyntheticBlock::new(fork, h, TXS, 200);
            if h == first {
                b.parent_hash = parent;
            }
            b
        })
        .collect();
    store
        .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
        .expect("append");
}

/// Everything a reader can ask of `height` equals what was written.
fn assert_block(reader: &Reader, fork: u64, height: u64) {
    let expected = SyntheticBlock::new(fork, height, TXS, 200);
    let block = reader
        .block(height)
        .unwrap_or_else(|| panic!("height {height} missing"));
    assert_eq!(block.hash(), expected.hash);
    assert_eq!(block.parent_hash(), expected.parent_hash);
    assert_eq!(&block.full().unwrap()[..], &expected.full[..]);
    assert_eq!(&block.hashes_only().unwrap()[..], &expected.hashes_only[..]);
    assert_eq!(&block.receipts().unwrap()[..], &expected.receipts[..]);
    assert_eq!(&block.raw_block().unwrap()[..], &expected.raw_block[..]);
    assert_eq!(&block.raw_header().unwrap()[..], b"\"0xf9beef\"");
    assert_eq!(&block.raw_receipts().unwrap()[..], b"[]");
    assert_eq!(block.logs_bloom(), &[height as u8; 256][..]);
    for (i, tx) in expected.txs.iter().enumerate() {
        let i = i as u32;
        let span =
            |bytes: &[u8], s: Span| bytes[s.offset as usize..(s.offset + s.len) as usize].to_vec();
        assert_eq!(
            block.transaction(i).unwrap().unwrap().to_vec(),
            span(&expected.full, tx.full)
        );
        assert_eq!(
            block.receipt(i).unwrap().unwrap().to_vec(),
            span(&expected.receipts, tx.receipt)
        );
        assert_eq!(
            block.raw_transaction(i).unwrap().unwrap().to_vec(),
            span(&expected.raw_block, tx.raw)
        );
        let (found, index) = reader.transaction(&tx.hash).expect("tx by hash");
        assert_eq!((found.height(), index), (height, i));
    }
    assert!(block.transaction(TXS).unwrap().is_none());
    let logs = block.logs().unwrap();
    assert_eq!(logs.len(), expected.logs.len());
    for (log, entry) in logs.iter().zip(&expected.logs) {
        assert_eq!(log.tx_index, entry.tx_index);
        assert_eq!(log.address, entry.address);
        assert_eq!(log.topics(), &entry.topics[..]);
        let s = entry.span;
        assert_eq!(
            &log.bytes[..],
            &expected.receipts[s.offset as usize..(s.offset + s.len) as usize]
        );
    }
    if let Some(last) = logs.len().checked_sub(1) {
        let joined: Vec<u8> = logs
            .iter()
            .flat_map(|l| [&b","[..], &l.bytes[..]].concat())
            .collect();
        let (start, _) = block.log_table().unwrap().piece(0);
        let (_, end) = block.log_table().unwrap().piece(last as u32);
        assert_eq!(&block.log_slice(start, end).unwrap()[..], &joined[..]);
    }
    assert_eq!(
        reader.block_by_hash(&expected.hash).map(|b| b.height()),
        Some(height)
    );
}

fn range(stats: Stats) -> (Option<u64>, Option<u64>) {
    (stats.min_height, stats.max_contiguous_height)
}

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

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    files
}

#[test]
fn a_flipped_byte_in_a_sealed_segment_is_a_counted_miss_never_served() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
        append_range(&mut store, 0, 0..=9);
    }
    // Flip a byte in the middle of the first sealed segment (inside block 1 or 2).
    let first = &segment_files(dir.path())[0];
    let mut bytes = std::fs::read(first).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(first, bytes).unwrap();

    let store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    let reader = store.reader();
    let served: Vec<u64> = (0..=3).filter(|h| reader.block(*h).is_some()).collect();
    assert_eq!(
        served.len(),
        3,
        "exactly the damaged block is withheld: {served:?}"
    );
    assert_eq!(reader.stats().corrupt_reads, 1);
    for height in 4..=9 {
        assert_block(&reader, 0, height);
    }
}

#[test]
fn a_damaged_or_torn_tail_is_cut_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = Store::open(dir.path(), CHAIN, config(8)).unwrap();
        append_range(&mut store, 0, 0..=5);
    }
    let active = segment_files(dir.path()).pop().unwrap();
    // Tear the last record: cut the file in the middle of block 5.
    let block5 = SyntheticBlock::new(0, 5, TXS, 200);
    let len = std::fs::metadata(&active).unwrap().len();
    let used = {
        let bytes = std::fs::read(&active).unwrap();
        let tail = bytes.iter().rposition(|b| *b != 0).unwrap() as u64 + 1;
        tail.min(len)
    };
    std::fs::OpenOptions::new()
        .write(true)
        .open(&active)
        .unwrap()
        .set_len(used - block5.full.len() as u64)
        .unwrap();
    {
        let mut store = Store::open(dir.path(), CHAIN, config(8)).unwrap();
        assert_eq!(range(store.stats()), (Some(0), Some(4)));
        assert_block(&store.reader(), 0, 4);
        append_range(&mut store, 0, 5..=6);
    }
    // Flip a byte inside block 3 of the segment being written: 3 and after go.
    let mut bytes = std::fs::read(&active).unwrap();
    let needle = b"\"i\":1,";
    let positions: Vec<usize> = bytes
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect();
    bytes[positions[3]] ^= 1;
    std::fs::write(&active, bytes).unwrap();
    let store = Store::open(dir.path(), CHAIN, config(8)).unwrap();
    assert_eq!(range(store.stats()), (Some(0), Some(2)));
    for height in 0..=2 {
        assert_block(&store.reader(), 0, height);
    }
}

#[test]
fn leftovers_of_interrupted_writes_are_recovered() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
        append_range(&mut store, 0, 0..=9);
    }
    // A crash between sealing's data sync and its index rename leaves a
    // sealed segment without index, a temporary file, and an orphan index.
    std::fs::remove_file(dir.path().join(index_file_name(4))).unwrap();
    std::fs::write(dir.path().join("00000000000000000004.idx.tmp"), b"partial").unwrap();
    std::fs::write(dir.path().join(index_file_name(400)), b"orphan").unwrap();
    let store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    for height in 0..=9 {
        assert_block(&store.reader(), 0, height);
    }
    assert!(
        dir.path().join(index_file_name(4)).exists(),
        "index rebuilt"
    );
    assert!(!dir.path().join(index_file_name(400)).exists());
    assert!(!dir.path().join("00000000000000000004.idx.tmp").exists());
}

#[test]
fn readers_keep_their_bytes_across_pruning_and_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let config = StoreConfig {
        retain_blocks: Some(4),
        ..config(4)
    };
    let mut store = Store::open(dir.path(), CHAIN, config).unwrap();
    append_range(&mut store, 0, 0..=5);
    let held = store.reader().block(1).unwrap().full().unwrap();
    let tail = store.reader().block(5).unwrap().full().unwrap();
    append_range(&mut store, 0, 6..=20);
    store.rollback(17).unwrap();
    assert!(store.reader().block(1).is_none(), "pruned");
    assert_eq!(&held[..], &SyntheticBlock::new(0, 1, TXS, 200).full[..]);
    assert_eq!(&tail[..], &SyntheticBlock::new(0, 5, TXS, 200).full[..]);
}

/// Regression (hardening, shrinking mapped files): unsealing a segment for
/// a rollback never makes its file shorter, even when bytes follow its
/// last intact record, so a reader still mapping it cannot touch a page
/// past the end (SIGBUS); the bytes beyond read as zeros instead.
#[test]
fn a_rollback_into_a_sealed_segment_never_shrinks_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 0..=9);
    let first = dir.path().join(directory::segment_file_name(0));
    // Garbage after the sealed segment's last record: what a crash during
    // a write that was then sealed over could leave, or a crafted file.
    {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&first)
            .unwrap();
        file.write_all(&[0xee; 4096]).unwrap();
    }
    let before = std::fs::metadata(&first).unwrap().len();
    let held = store.reader().block(2).unwrap();
    store.rollback(2).unwrap();
    assert!(std::fs::metadata(&first).unwrap().len() >= before);
    assert_eq!(
        &held.full().unwrap()[..],
        &SyntheticBlock::new(0, 2, TXS, 200).full[..]
    );
    // The garbage reads as zeros now (the rollback's tombstone is written
    // where it began).
    let data = std::fs::read(&first).unwrap();
    assert!(!data.windows(16).any(|w| w.iter().all(|b| *b == 0xee)));
    append_range(&mut store, 0, 3..=6);
    assert_block(&store.reader(), 0, 6);
}

/// One step of the model test.
#[derive(Clone, Debug)]
enum Op {
    Append(u64),
    Rollback(u64),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u64..9).prop_map(Op::Append),
        2 => (0u64..12).prop_map(Op::Rollback),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Against a map of height → fork: appends, rollbacks (by depth), retention and
    /// reopens leave exactly the model's newest heights, each with its content.
    #[test]
    fn store_matches_a_simple_model(ops in proptest::collection::vec(op(), 1..30), retain in 6u64..20) {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig { retain_blocks: Some(retain), ..config(4) };
        let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut fork = 0u64;
        for op in ops {
            match op {
                Op::Append(n) => {
                    let next = model.keys().next_back().map_or(1000, |h| h + 1);
                    let parent = model.iter().next_back().map(|(h, f)| block_hash(*f, *h));
                    let blocks: Vec<_> = (next..next + n).map(|h| {
                        let mut b = SyntheticBlock::new(fork, h, TXS, 200);
                        if h == next && let Some(p) = parent { b.parent_hash = p; }
                        b
                    }).collect();
                    store.append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>()).unwrap();
                    for h in next..next + n { model.insert(h, fork); }
                }
                Op::Rollback(depth) => {
                    if let Some(max) = model.keys().next_back().copied() {
                        let keep = max.saturating_sub(depth);
                        store.rollback(keep).unwrap();
                        model.retain(|h, _| *h <= keep);
                        fork += 1;
                    }
                }
                Op::Reopen => {
                    drop(store);
                    store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
                }
            }
            // Retention: the store may keep more than `retain` (whole
            // segments), never fewer; the model follows what it kept.
            let stats = store.stats();
            if let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) {
                prop_assert!(max - min + 1 >= retain.min(model.len() as u64));
                prop_assert!(max - min < retain + 4, "kept {} for retain {retain}", max - min + 1);
                model.retain(|h, _| *h >= min);
            }
            prop_assert_eq!(stats.min_height, model.keys().next().copied());
            prop_assert_eq!(stats.max_contiguous_height, model.keys().next_back().copied());
            let reader = store.reader();
            for (height, fork) in &model {
                let block = reader.block(*height).expect("modelled height stored");
                prop_assert_eq!(block.hash(), block_hash(*fork, *height));
                prop_assert_eq!(&block.full().unwrap()[..], &SyntheticBlock::new(*fork, *height, TXS, 200).full[..]);
                prop_assert_eq!(reader.block_by_hash(&block_hash(*fork, *height)).map(|b| b.height()), Some(*height));
            }
        }
    }
}

/// One step of the crash test.
#[derive(Clone, Debug)]
enum CrashOp {
    Append(u64),
    Rollback(u64),
}

fn crash_op() -> impl Strategy<Value = CrashOp> {
    prop_oneof![
        5 => (1u64..7).prop_map(CrashOp::Append),
        1 => (0u64..6).prop_map(CrashOp::Rollback),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Power goes at any write or sync (the journal fails it and every one
    /// after, then undoes every write no sync made durable): the reopened
    /// store holds every acknowledged block, unchanged; above them at most
    /// a prefix of what the interrupted append was writing; after an
    /// interrupted rollback, at least what it kept and at most what it was
    /// removing. Never a gap, never another block, never a failed open.
    #[test]
    fn power_loss_at_any_point_keeps_exactly_the_acknowledged_blocks(
        ops in proptest::collection::vec(crash_op(), 1..16),
        crash_at in 0u64..160,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        let config = StoreConfig {
            durability: Durability::Fsync,
            segment_bytes: 256 << 10,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
        journal.crash_after(crash_at);
        // Acknowledged: height → fork.
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        // What the interrupted call may have left beyond the model.
        let mut interrupted_append: BTreeMap<u64, u64> = BTreeMap::new();
        let mut interrupted_rollback: Option<u64> = None;
        let mut fork = 0u64;
        for op in ops {
            match op {
                CrashOp::Append(n) => {
                    let next = model.keys().next_back().map_or(1000, |h| h + 1);
                    let parent = model.iter().next_back().map(|(h, f)| block_hash(*f, *h));
                    let blocks: Vec<_> = (next..next + n).map(|h| {
                        let mut b = SyntheticBlock::new(fork, h, TXS, 200);
                        if h == next && let Some(p) = parent { b.parent_hash = p; }
                        b
                    }).collect();
                    let views: Vec<_> = blocks.iter().map(|b| b.as_new()).collect();
                    if store.append(&views).is_err() {
                        interrupted_append = (next..next + n).map(|h| (h, fork)).collect();
                        break;
                    }
                    for h in next..next + n { model.insert(h, fork); }
                }
                CrashOp::Rollback(depth) => {
                    let Some(max) = model.keys().next_back().copied() else { continue };
                    let keep = max.saturating_sub(depth).max(1000);
                    if store.rollback(keep).is_err() {
                        interrupted_rollback = Some(keep);
                        break;
                    }
                    model.retain(|h, _| *h <= keep);
                    fork += 1;
                }
            }
        }
        journal.power_loss().unwrap();
        drop(store);
        let reopened = Store::open(dir.path(), CHAIN, StoreConfig { crash_hook: None, ..config }).unwrap();
        let stats = reopened.stats();
        let reader = reopened.reader();
        let acknowledged_max = model.keys().next_back().copied();
        let lowest_kept = match interrupted_rollback {
            Some(keep) => Some(keep),
            None => acknowledged_max,
        };
        prop_assert!(stats.max_contiguous_height >= lowest_kept,
            "lost acknowledged blocks: store ends at {:?}, acknowledged through {lowest_kept:?}", stats.max_contiguous_height);
        if let Some(max) = stats.max_contiguous_height {
            prop_assert_eq!(stats.min_height, Some(1000));
            for height in 1000..=max {
                let fork = model.get(&height).or(interrupted_append.get(&height));
                prop_assert!(fork.is_some(), "height {height} was never written (store ends at {max})");
                let fork = *fork.unwrap();
                let block = reader.block(height).expect("no gap");
                prop_assert_eq!(block.hash(), block_hash(fork, height));
                prop_assert_eq!(&block.full().unwrap()[..], &SyntheticBlock::new(fork, height, TXS, 200).full[..]);
            }
            prop_assert!(reader.block(max + 1).is_none());
        }
    }
}

/// The crash test's journal does what it claims: without fsync nothing
/// survives a power loss; with it, what was appended does.
#[test]
fn the_crash_journal_undoes_exactly_what_was_never_synced() {
    for durability in [Durability::OsBuffered, Durability::Fsync] {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        let config = StoreConfig {
            durability,
            segment_bytes: 256 << 10,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
        append_range(&mut store, 0, 0..=2);
        assert!(journal.ops() > 3);
        journal.power_loss().unwrap();
        drop(store);
        let reopened = Store::open(dir.path(), CHAIN, config).unwrap();
        let expected = match durability {
            Durability::OsBuffered => None,
            Durability::Fsync => Some(2),
        };
        assert_eq!(
            reopened.stats().max_contiguous_height,
            expected,
            "{durability:?}"
        );
    }
}

/// Fuzz target: store records as read from disk. Any bytes as a segment
/// file are scanned (header, CRC, spans, chain continuity, tombstones), and
/// every record the scan accepts is read through every accessor; any bytes
/// as an index file are checked. Nothing panics: a record that passes is
/// safe to slice, whatever was written.
#[test]
fn fuzz_store_records_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 0..=5);
    store.rollback(4).unwrap();
    let sealed = std::fs::read(dir.path().join(directory::segment_file_name(0))).unwrap();
    let active = std::fs::read(dir.path().join(directory::segment_file_name(4))).unwrap();
    let index = std::fs::read(dir.path().join(directory::index_file_name(0))).unwrap();
    let trimmed = |bytes: &[u8]| bytes[..Segment::scan(bytes).end as usize].to_vec();
    let seeds = vec![trimmed(&sealed), trimmed(&active), index];
    let dictionary: [&[u8]; 4] = [b"NVRC", &[0xff; 4], &[0; 8], b"NEVEIDX\0"];
    let report = neve_devnet::fuzz::run("store records", &seeds, &dictionary, 64 << 10, |input| {
        let scan = Segment::scan(input);
        for offset in &scan.offsets {
            let bytes = &input[*offset as usize..];
            let Some(header) = format::read_header(bytes) else {
                continue;
            };
            let start = *offset as usize;
            let block =
                Block::from_record(header.height, &input[start..start + header.total_len()]);
            let _ = (block.hash(), block.parent_hash(), block.logs_bloom().len());
            let _ = (block.full(), block.hashes_only(), block.receipts());
            let _ = (block.raw_header(), block.raw_block(), block.raw_receipts());
            for i in 0..block.tx_count().min(4096) {
                let _ = (
                    block.tx_hash(i),
                    block.transaction(i),
                    block.receipt(i),
                    block.raw_transaction(i),
                );
            }
            for log in block.logs().unwrap_or_default().iter().take(4096) {
                let _ = log.topics().len();
            }
            let logs = block.log_count().min(4096);
            if let Ok(table) = block.log_table()
                && logs > 0
            {
                let _ = (0..logs).map(|i| table.key(i).topics.len()).sum::<usize>();
                let (start, end) = (table.piece(0).0, table.piece(logs - 1).1);
                let _ = block.log_slice(start, end);
            }
        }
        let _ = segment::check_index_header(input, 0, input.len() as u64);
    });
    eprintln!("store records: {report}");
}

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

/// A deep rollback killed at any write, sync, unlink or rename (power
/// lost: unsynced writes undone, unlinks and renames the directory was not
/// synced after brought back) never costs a block at or below the height it
/// keeps: the reopened store holds them all, unchanged, and above them at
/// most the old fork's blocks, still joined.
#[test]
fn a_crash_anywhere_in_a_deep_rollback_keeps_every_block_below_it() {
    const KEEP: u64 = 11;
    for crash_at in 0.. {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        let config = StoreConfig {
            durability: Durability::Fsync,
            segment_bytes: 256 << 10,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
        append_range(&mut store, 0, 0..=39);
        journal.crash_after(crash_at);
        let finished = store.rollback(KEEP).is_ok();
        journal.power_loss().unwrap();
        drop(store);
        let reopened = Store::open(
            dir.path(),
            CHAIN,
            StoreConfig {
                crash_hook: None,
                ..config
            },
        )
        .unwrap();
        let stats = reopened.stats();
        let reader = reopened.reader();
        assert_eq!(stats.min_height, Some(0), "crash at op {crash_at}");
        let max = stats.max_contiguous_height.expect("blocks kept");
        assert!(max >= KEEP, "crash at op {crash_at}: store ends at {max}");
        for height in 0..=max {
            assert_block(&reader, 0, height);
        }
        if finished {
            assert_eq!(max, KEEP);
            break;
        }
    }
}

/// One write, sync, unlink or rename failing anywhere in a run of appends,
/// segment seals and a rollback (a full disk, an I/O error): the call fails,
/// a retry or, after a failed fsync stopped the writer, a restart goes on,
/// and in the end every block is there and found by height and by hash,
/// before and after reopening.
#[test]
fn a_single_failure_anywhere_loses_no_block_and_no_lookup() {
    fn run(dir: &std::path::Path, journal: &std::sync::Arc<CrashJournal>) {
        let config = StoreConfig {
            durability: Durability::Fsync,
            segment_bytes: 256 << 10,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        // Opening fails on the failed operation too: it is tried again.
        let open = || {
            (0..3)
                .find_map(|_| Store::open(dir, CHAIN, config.clone()).ok())
                .expect("opens on a second try")
        };
        let mut store = Some(open());
        // Each step until it holds: a failed one is tried again, on a
        // reopened store when a failed fsync stopped the writer.
        let step = |slot: &mut Option<Store>,
                    apply: &dyn Fn(&mut Store) -> Result<(), StoreError>| {
            for _ in 0..3 {
                let store = slot.as_mut().expect("open");
                let error = match apply(store) {
                    Ok(()) => return,
                    Err(error) => error,
                };
                // Whichever fsync failed, the writer stops.
                assert!(
                    !error.is_sync_failure() || store.failed.is_some(),
                    "{error} left the writer running"
                );
                if store.failed.is_some() {
                    *slot = None;
                    *slot = Some(open());
                }
            }
            panic!("a step failed three times");
        };
        for height in 0..=13u64 {
            step(&mut store, &|s: &mut Store| {
                if s.stats().max_contiguous_height >= Some(height) {
                    return Ok(());
                }
                let block = SyntheticBlock::new(0, height, TXS, 200);
                s.append(&[block.as_new()])
            });
        }
        step(&mut store, &|s: &mut Store| s.rollback(6));
        for height in 7..=13u64 {
            step(&mut store, &|s: &mut Store| {
                if s.stats().max_contiguous_height >= Some(height) {
                    return Ok(());
                }
                let mut block = SyntheticBlock::new(1, height, TXS, 200);
                if height == 7 {
                    block.parent_hash = block_hash(0, 6);
                }
                s.append(&[block.as_new()])
            });
        }
        let store = store.expect("open");
        let check = |store: &Store| {
            let reader = store.reader();
            for height in 0..=13 {
                let fork = u64::from(height > 6);
                if height == 7 {
                    // Fork 1's first block: a child of fork 0's block 6.
                    let block = reader.block(7).expect("height 7");
                    assert_eq!(block.parent_hash(), block_hash(0, 6));
                    let expected = SyntheticBlock::new(1, 7, TXS, 200);
                    assert_eq!(&block.full().unwrap()[..], &expected.full[..]);
                } else {
                    assert_block(&reader, fork, height);
                }
                let hash = block_hash(fork, height);
                let found = reader.block_by_hash(&hash).expect("found by hash");
                assert_eq!(found.hash(), hash);
            }
        };
        check(&store);
        drop(store);
        check(
            &Store::open(
                dir,
                CHAIN,
                StoreConfig {
                    crash_hook: None,
                    ..config
                },
            )
            .unwrap(),
        );
    }
    // How many operations a run makes without failures.
    let dir = tempfile::tempdir().unwrap();
    let journal = CrashJournal::new();
    run(dir.path(), &journal);
    let total = journal.ops();
    for fail_at in 0..total {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        journal.fail_once(fail_at);
        run(dir.path(), &journal);
    }
}

/// The files of a store directory as one fuzz input: per file, its name's
/// place in `names`, its length (4 bytes, little-endian) and its bytes.
fn directory_input(dir: &std::path::Path, names: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if let Ok(bytes) = std::fs::read(dir.join(name)) {
            out.push(i as u8);
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
    }
    out
}

/// Fuzz target: `Store::open` over a whole directory (META, the `HASHES`
/// table, segments and indexes, any of them missing, cut, repeated or
/// changed): it opens or refuses, and what it opens reads back by height
/// and by hash without a panic.
#[test]
fn fuzz_store_directories_on_open() {
    let names: Vec<String> = [0u64, 4, 8]
        .iter()
        .flat_map(|h| {
            [
                directory::segment_file_name(*h),
                directory::index_file_name(*h),
            ]
        })
        .chain([
            "META".to_owned(),
            hashes::HASHES_FILE.to_owned(),
            "HASHES.tmp".to_owned(),
        ])
        .collect();
    let seed_dir = tempfile::tempdir().unwrap();
    let small = StoreConfig {
        segment_bytes: 256 << 10,
        ..config(4)
    };
    {
        let mut store = Store::open(seed_dir.path(), CHAIN, small.clone()).unwrap();
        append_range(&mut store, 0, 0..=9);
        store.rollback(8).unwrap();
    }
    let seed = directory_input(seed_dir.path(), &names);
    let scratch_root = ["/dev/shm", "/tmp"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_dir())
        .unwrap();
    let dictionary: [&[u8]; 5] = [b"NVRC", &[0xff; 4], &[0; 8], b"NEVEIDX\0", &[0, 0, 1, 0]];
    // Opening a directory is file system work: a short default run.
    let report = neve_devnet::fuzz::run_defaulting_to(
        2_000,
        "store directories",
        &[seed],
        &dictionary,
        256 << 10,
        |input| {
            let dir = tempfile::tempdir_in(scratch_root).unwrap();
            let mut rest = input;
            while rest.len() >= 5 {
                let name = &names[rest[0] as usize % names.len()];
                let len = (u32::from_le_bytes(rest[1..5].try_into().unwrap()) as usize)
                    .min(rest.len() - 5);
                std::fs::write(dir.path().join(name), &rest[5..5 + len]).unwrap();
                rest = &rest[5 + len..];
            }
            let Ok(store) = Store::open(dir.path(), CHAIN, small.clone()) else {
                return;
            };
            let reader = store.reader();
            let stats = reader.stats();
            if let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) {
                for height in min..=max.min(min + 64) {
                    if let Some(block) = reader.block(height) {
                        let found = reader.block_by_hash(&block.hash());
                        let _ = (
                            found.map(|b| b.height()),
                            block.full().unwrap().len(),
                            block.tx_count(),
                        );
                    }
                }
            }
        },
    );
    eprintln!("store directories: {report}");
}

/// Issue 31: a big block read a part at a time. Just written, every part
/// is in memory and read on the worker (no `Cold`); paged out, a receipt
/// is `Cold` on the worker, and read from the file it brings in (with
/// `O_DIRECT`, nothing; through the page cache, only its own chunks) far
/// less than its record: the block's full section stays out of memory.
#[test]
fn a_part_of_a_big_block_costs_its_own_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    // ~1,400 transactions of ~1 KB: a record of megabytes.
    let blocks: Vec<_> = (0..3)
        .map(|h| SyntheticBlock::new(0, h, 1400, 1000))
        .collect();
    store
        .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
        .unwrap();
    let reader = store.reader();
    let memory = reader.in_memory();
    for (height, expected) in blocks.iter().enumerate() {
        let block = memory.block(height as u64).unwrap().unwrap();
        assert_eq!(&block.full().unwrap()[..], &expected.full[..]);
        assert_eq!(&block.hashes_only().unwrap()[..], &expected.hashes_only[..]);
        assert_eq!(&block.receipts().unwrap()[..], &expected.receipts[..]);
        for i in [0, 700, 1399] {
            let tx = &expected.txs[i as usize];
            assert_eq!(block.tx_hash(i).unwrap(), tx.hash);
            let (found, index) = memory.transaction(&tx.hash).unwrap().unwrap();
            assert_eq!(
                found.receipt(index).unwrap().unwrap(),
                &expected.receipts[tx.receipt.offset as usize..][..tx.receipt.len as usize]
            );
        }
        assert!(block.logs_in_memory(), "just written");
    }
    if !testing::page_out(&reader) {
        eprintln!("MADV_PAGEOUT unavailable: the cold half is not checked");
        return;
    }
    let tx = &blocks[1].txs[900];
    let receipt = &blocks[1].receipts[tx.receipt.offset as usize..][..tx.receipt.len as usize];
    assert_eq!(memory.transaction(&tx.hash).map(|t| t.is_some()), Err(Cold));
    let before = reader.residency(1 << 20).resident_bytes();
    let (block, index) = reader.from_disk().transaction(&tx.hash).unwrap();
    assert_eq!(&block.receipt(index).unwrap().unwrap()[..], receipt);
    let read = reader.residency(1 << 20).resident_bytes() - before;
    // The fixed fields' chunk, the entry's, the receipt's (and readahead
    // around them): far from the record's megabytes.
    assert!(read < 512 << 10, "a receipt brought {read} bytes in");
    // The rest of the record stays out of memory: the block's head, read
    // through the mapping now, answers its full section `Cold`.
    if let Ok(Some(block)) = memory.block(1) {
        assert_eq!(block.full(), Err(Unread::Cold), "the rest stays out");
    }
}

/// A damaged chunk costs the parts in it, counted, never the others: a
/// flipped byte in one receipt is a miss for that receipt while the
/// block's other parts still read.
#[test]
fn a_damaged_chunk_is_a_counted_miss_for_the_parts_in_it_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    let block = SyntheticBlock::new(0, 0, 400, 1000);
    store.append(&[block.as_new()]).unwrap();
    let reader = store.reader();
    let stored = reader.block(0).unwrap();
    let last = block.txs.last().unwrap();
    let receipt = stored.receipt(399).unwrap().unwrap();
    // Find the receipt's bytes in the segment file and flip one.
    use std::os::unix::fs::FileExt;
    let path = dir.path().join(directory::segment_file_name(0));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut used = vec![0u8; reader.stats().bytes as usize];
    file.read_exact_at(&mut used, 0).unwrap();
    let at = used
        .windows(receipt.len())
        .position(|w| w == &receipt[..])
        .unwrap()
        + receipt.len() / 2;
    file.write_all_at(&[used[at] ^ 1], at as u64).unwrap();
    let block0 = reader.from_disk().block(0).unwrap();
    assert_eq!(block0.receipt(399), Err(Unread::Damaged));
    assert_eq!(reader.stats().corrupt_reads, 1);
    let first = &block.txs[0];
    assert_eq!(
        &block0.receipt(0).unwrap().unwrap()[..],
        &block.receipts[first.receipt.offset as usize..][..first.receipt.len as usize]
    );
    assert_eq!(block0.tx_hash(399).unwrap(), last.hash);
}

/// Issue 32 (6): the sync that cuts the tail of a sealed segment a
/// rollback reopens is an fsync like any other: its failure stops the
/// writer (before, it was labelled otherwise and the writer went on).
#[test]
fn a_failed_sync_while_a_rollback_reopens_a_sealed_segment_stops_the_writer() {
    let mut seen_cut = false;
    for op in 0..24 {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        let config = StoreConfig {
            durability: Durability::Fsync,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        let mut store = Store::open(dir.path(), CHAIN, config).unwrap();
        append_range(&mut store, 0, 0..=13);
        journal.fail_once(op);
        let Err(error) = store.rollback(6) else {
            continue;
        };
        if error.to_string().contains("cut tail") {
            seen_cut = true;
        }
        assert_eq!(
            error.is_sync_failure(),
            store.failed.is_some(),
            "op {op}: {error}"
        );
        if matches!(error, StoreError::SyncFailed { .. }) {
            assert!(
                matches!(store.append(&[]), Err(StoreError::WriterFailed(_)))
                    || store.failed.is_some()
            );
        }
    }
    assert!(seen_cut, "no failure reached the reopened segment's sync");
}

#[test]
fn a_removed_blocks_handle_reads_its_logs_after_a_fork_regrows_over_it() {
    // Subscribers are sent a reorg's removed logs from the handles taken
    // before it, possibly after the fork has been written over the same
    // heights: those records must still read whole.
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 0..=13);
    let reader = store.reader();
    let orphans: Vec<Block> = (9..=13).map(|h| reader.block(h).unwrap()).collect();
    let logs: Vec<Vec<Vec<u8>>> = orphans
        .iter()
        .map(|b| b.logs().unwrap().iter().map(|l| l.bytes.to_vec()).collect())
        .collect();
    assert!(logs.iter().all(|l| !l.is_empty()));
    // Into a sealed segment (8..=11 reopens, 12..=13 go), then regrown.
    store.rollback(8).unwrap();
    append_fork(&mut store, 1, 9..=20, block_hash(0, 8));
    for (block, logs) in orphans.iter().zip(&logs) {
        let now: Vec<Vec<u8>> = block
            .logs()
            .expect("an orphan's logs read")
            .iter()
            .map(|l| l.bytes.to_vec())
            .collect();
        assert_eq!(&now, logs, "block {}", block.height());
    }
}
