//! Parts of big blocks: each read checks its own chunks only.

use super::*;

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

/// A replay's inputs read whole once are the parts read one at a time.
#[test]
fn transaction_parts_read_whole_are_the_parts() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    let blocks = [
        SyntheticBlock::new(0, 0, 300, 200),
        SyntheticBlock::new(0, 1, 0, 0),
    ];
    store
        .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
        .unwrap();
    let reader = store.reader();
    let block = reader.from_disk().block(0).unwrap();
    let parts = block.transaction_parts(120).unwrap();
    assert_eq!(parts.len(), 120);
    for index in [0u32, 1, 77, 119] {
        let part = parts.get(index as usize);
        assert_eq!(part.hash, block.tx_hash(index).unwrap());
        assert_eq!(part.json, block.transaction(index).unwrap().unwrap());
        assert_eq!(part.receipt, block.receipt(index).unwrap().unwrap());
        assert_eq!(part.raw, block.raw_transaction(index).unwrap().unwrap());
    }
    assert_eq!(
        block.transaction_parts(u32::MAX).unwrap().len(),
        300,
        "all at most"
    );
    let empty = reader.from_disk().block(1).unwrap();
    assert!(empty.transaction_parts(5).unwrap().is_empty());
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
