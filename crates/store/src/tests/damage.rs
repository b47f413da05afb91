//! Damaged records and torn tails: counted misses, cut at open, recovered leftovers.

use super::*;

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
