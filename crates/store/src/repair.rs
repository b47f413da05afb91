//! Damaged records fetched again and written back in place: one bad record
//! costs that record until its block is fetched again, never the tail
//! around it (see [`crate::damage`] for how damage is found and
//! remembered).

use std::fs::OpenOptions;
use std::sync::Arc;

use crate::error::{StoreError, io_error, sync_error};
use crate::format;
use crate::integrity;
use crate::io;
use crate::sealing::reseal;
use crate::store::Store;
use crate::types::NewBlock;

/// What [`Store::repair`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repair {
    /// The record was damaged and now holds the block again.
    Repaired,
    /// The stored record is intact (or the height is not stored): nothing
    /// written.
    NotDamaged,
    /// Left damaged, with why: the block given is not the one stored there
    /// (its hash does not join the stored neighbours), or its record would
    /// not fill exactly the damaged one's place (an upstream that now
    /// renders the block differently), or would change bytes readers may
    /// already hold. The height stays a counted miss.
    Refused(&'static str),
}

impl Store {
    /// Stored heights remembered as damaged (found by reads, or at open by
    /// a scan that rebuilt a lost index), lowest first, at most
    /// [`crate::damage::MAX_DAMAGED_HEIGHTS`]: the blocks to fetch again for
    /// [`Store::repair`].
    pub fn damaged_heights(&self) -> Vec<u64> {
        let state = self.shared.state.load();
        let stored = |h: &u64| state.min.is_some_and(|min| min <= *h) && state.max >= Some(*h);
        let (kept, gone): (Vec<u64>, Vec<u64>) =
            self.shared.damage.heights().into_iter().partition(stored);
        for height in gone {
            self.shared.damage.forget(height);
        }
        kept
    }

    /// Writes `block` over the damaged record at its height, in place.
    ///
    /// Only the block that was stored there is taken: its hash must be the
    /// parent hash of the stored block above it (or the tip's hash), and
    /// its parent hash the hash of the stored block below it where that one
    /// is readable. Its record must be exactly as long as the damaged one,
    /// and equal to it wherever the damaged one still reads, so readers
    /// never see bytes change under them. Durable (synced) when it returns
    /// `Repaired`; a failed sync stops the writer, as for any write.
    pub fn repair(&mut self, block: &NewBlock<'_>) -> Result<Repair, StoreError> {
        self.writable()?;
        let result = self.repair_unchecked(block);
        self.stop_on_sync_failure(result)
    }

    fn repair_unchecked(&mut self, block: &NewBlock<'_>) -> Result<Repair, StoreError> {
        let height = block.height;
        let state = self.shared.state.load_full();
        let Some(segment) = state.segment_for(height).cloned() else {
            self.shared.damage.forget(height);
            return Ok(Repair::NotDamaged);
        };
        let i = (height - segment.first_height) as usize;
        let active_end = self
            .active
            .as_ref()
            .filter(|a| Arc::ptr_eq(&a.segment, &segment))
            .map(|a| a.end);
        let end = active_end.or(segment.sealed_len()).unwrap_or(0);
        let Some(span) = segment.record_span(i, end) else {
            return Ok(Repair::Refused("its record's place is not indexed"));
        };
        let old = segment.mapped(span.clone());
        if format::read_header(old)
            .is_some_and(|h| h.total_len() == old.len() && integrity::verify_record(old, &h))
        {
            self.shared.damage.forget(height);
            return Ok(Repair::NotDamaged);
        }
        let reader = self.reader();
        let above = reader.block(height + 1).map(|b| b.parent_hash());
        let joins_above = match above {
            Some(parent) => parent == block.hash,
            None => self.tip == Some((height, block.hash)),
        };
        let below = height.checked_sub(1).and_then(|h| reader.block(h));
        let joins_below = below.is_none_or(|b| b.hash() == block.parent_hash);
        if !joins_above || !joins_below {
            return Ok(Repair::Refused(
                "its hashes do not join the stored neighbours",
            ));
        }
        self.scratch.clear();
        format::encode_block(block, &mut self.scratch).map_err(|e| StoreError::Malformed {
            height,
            reason: format!("{e:?}"),
        })?;
        if !integrity::replaces_only_damage(old, &self.scratch) {
            return Ok(Repair::Refused(
                "its record differs from the stored one where that one is intact",
            ));
        }
        let journal = self.config.crash_hook.clone();
        let at = span.start as u64;
        let writing = |file: &io::StoreFile| -> Result<(), StoreError> {
            file.write_all_at(&self.scratch, at)
                .map_err(io_error(&segment.path, "writing a repaired record"))?;
            file.sync_data()
                .map_err(sync_error(&segment.path, "syncing a repaired record in"))
        };
        match self.active.as_ref().filter(|_| active_end.is_some()) {
            Some(active) => writing(&active.file)?,
            None => {
                let file = OpenOptions::new()
                    .write(true)
                    .open(&segment.path)
                    .map_err(io_error(&segment.path, "opening for a repair"))?;
                writing(&io::StoreFile::new(
                    file,
                    segment.path.clone(),
                    journal.clone(),
                ))?;
            }
        }
        segment.rewritten(height);
        if let Some(count) = segment.sealed_count() {
            // Its index lacks the block's hashes: write it again, and have
            // the store-wide table take the segment's entries once more.
            let reopened = reseal(
                &self.dir,
                &self.meta,
                &segment,
                count,
                end,
                journal.as_deref(),
            )?;
            self.publish(|state| {
                if let Some(slot) = state.segments.iter_mut().find(|s| Arc::ptr_eq(s, &segment)) {
                    *slot = reopened;
                }
            });
            self.hashes
                .uncover_from(segment.first_height, self.config.durability)?;
            self.cover_sealed();
        }
        self.shared.damage.forget(height);
        tracing::info!(height, "a damaged record was fetched again and repaired");
        Ok(Repair::Repaired)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{Durability, StoreConfig};
    use crate::directory::segment_file_name;
    use crate::testing::SyntheticBlock;
    use crate::types::Identity;

    const CHAIN: Identity = Identity {
        chain_id: 1337,
        genesis_hash: [7; 32],
    };

    fn open(dir: &Path) -> Store {
        let config = StoreConfig {
            segment_blocks: 4,
            durability: Durability::OsBuffered,
            ..StoreConfig::default()
        };
        Store::open(dir, CHAIN, config).unwrap()
    }

    fn block(height: u64) -> SyntheticBlock {
        SyntheticBlock::new(0, height, 3, 200)
    }

    /// Heights 0..=13 in segments of 4; returns where block 5's record lies
    /// in its file (the second record of the segment starting at 4).
    fn fill(dir: &Path) -> std::ops::Range<usize> {
        let mut store = open(dir);
        let blocks: Vec<_> = (0..=13).map(block).collect();
        store
            .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
            .unwrap();
        let state = store.shared.state.load();
        let segment = state.segment_for(5).unwrap();
        segment
            .record_span(1, segment.sealed_len().unwrap())
            .unwrap()
    }

    fn body_offset(dir: &Path, span: &std::ops::Range<usize>) -> usize {
        let bytes = std::fs::read(dir.join(segment_file_name(4))).unwrap();
        format::read_header(&bytes[span.start..])
            .unwrap()
            .body_offset()
    }

    fn damage(dir: &Path, at: usize) {
        let path = dir.join(segment_file_name(4));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
        // Its index lost too: open must rebuild it from the records.
        std::fs::remove_file(dir.join(crate::directory::index_file_name(4))).unwrap();
    }

    fn served(store: &Store) -> Vec<u64> {
        let reader = store.reader();
        (0..=13).filter(|h| reader.block(*h).is_some()).collect()
    }

    /// issue 32.11: a damaged record in a middle segment whose index is also
    /// bad costs that record, not the tail after it, and is repaired in
    /// place when its block is fetched again.
    #[test]
    fn a_damaged_record_under_a_lost_index_costs_itself_until_fetched_again() {
        for what in ["fixed fields", "last chunk", "header"] {
            let dir = tempfile::tempdir().unwrap();
            let span = fill(dir.path());
            let offset = match what {
                "fixed fields" => body_offset(dir.path(), &span) + 10,
                "last chunk" => span.len() - 10,
                _ => 4,
            };
            damage(dir.path(), span.start + offset);

            let mut store = open(dir.path());
            let all_but_5: Vec<u64> = (0..=13).filter(|h| *h != 5).collect();
            assert_eq!(served(&store), all_but_5, "{what}: the tail is kept");
            assert_eq!(store.damaged_heights(), vec![5], "{what}");
            let reader = store.reader();
            assert!(reader.block_by_hash(&block(6).hash).is_some(), "{what}");
            assert!(reader.block_by_hash(&block(5).hash).is_none(), "{what}");

            // Another block at 5 (not the stored one) is refused.
            let mut other = block(5);
            other.hash = [9; 32];
            assert!(matches!(
                store.repair(&other.as_new()).unwrap(),
                Repair::Refused(_)
            ));
            assert_eq!(store.repair(&block(5).as_new()).unwrap(), Repair::Repaired);
            assert_eq!(served(&store), (0..=13).collect::<Vec<_>>(), "{what}");
            let reader = store.reader();
            assert_eq!(reader.block(5).unwrap().full().unwrap(), block(5).full);
            assert!(reader.block_by_hash(&block(5).hash).is_some(), "{what}");
            assert_eq!(reader.transaction(&block(5).txs[1].hash).unwrap().1, 1);
            assert!(store.damaged_heights().is_empty(), "{what}");
            assert_eq!(
                store.repair(&block(5).as_new()).unwrap(),
                Repair::NotDamaged
            );
            drop(store);

            let store = open(dir.path());
            assert_eq!(served(&store), (0..=13).collect::<Vec<_>>(), "{what}");
            assert!(store.damaged_heights().is_empty(), "{what}");
        }
    }

    /// A record found damaged by a read (its index intact) is remembered
    /// and repaired the same way.
    #[test]
    fn damage_found_by_a_read_is_remembered_for_repair() {
        let dir = tempfile::tempdir().unwrap();
        let span = fill(dir.path());
        let path = dir.path().join(segment_file_name(4));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[span.start + body_offset(dir.path(), &span) + 10] ^= 0x40;
        std::fs::write(&path, bytes).unwrap();

        let mut store = open(dir.path());
        assert!(store.damaged_heights().is_empty());
        assert!(
            store
                .reader()
                .block(5)
                .and_then(|b| b.full().ok())
                .is_none()
        );
        assert_eq!(store.damaged_heights(), vec![5]);
        assert_eq!(store.repair(&block(5).as_new()).unwrap(), Repair::Repaired);
        assert_eq!(
            store.reader().block(5).unwrap().full().unwrap(),
            block(5).full
        );
    }
}
