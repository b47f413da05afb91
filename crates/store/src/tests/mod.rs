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
use crate::miss::{Cold, Unread};
use crate::reader::{Reader, Stats};
use crate::segment::{self, Segment};
use crate::store::Store;
use crate::testing;
use crate::types::{Hash, Identity, Span};
use testing::{CrashJournal, SyntheticBlock, block_hash};

mod basics;
mod chunks;
mod crash;
mod damage;
mod fuzz;
mod model;
mod table;

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

fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    files
}
