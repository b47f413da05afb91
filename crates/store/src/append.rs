//! Appending blocks: encoding each, checking it continues the store,
//! writing it to the segment being written, sealing a full segment.

use std::sync::Arc;

use crate::config::Durability;
use crate::directory::{self, segment_file_name};
use crate::error::{StoreError, io_error, sync_error};
use crate::format;
use crate::hashes;
use crate::sealing::seal;
use crate::segment::Segment;
use crate::store::{Active, Store};
use crate::types::NewBlock;

impl Store {
    /// Appends `blocks`, which must continue the store (height `max + 1`,
    /// parent hash = hash of `max`; any height when empty). When it returns
    /// `Ok`, the blocks are readable and durable per [`Durability`]. On `Err`
    /// the blocks before the failing one are stored and visible.
    pub fn append(&mut self, blocks: &[NewBlock<'_>]) -> Result<(), StoreError> {
        self.writable()?;
        let result = self.append_unchecked(blocks);
        self.stop_on_sync_failure(result)
    }

    fn append_unchecked(&mut self, blocks: &[NewBlock<'_>]) -> Result<(), StoreError> {
        if !self.hashes_stalled
            && self
                .shared
                .state
                .load()
                .uncovered()
                .any(|s| s.sealed_count().is_some())
        {
            self.cover_sealed();
        }
        let mut written_through = None;
        let result = blocks.iter().try_for_each(|block| {
            self.write_block(block)?;
            written_through = Some(block.height);
            Ok(())
        });
        if written_through.is_some() {
            if self.config.durability == Durability::Fsync
                && let Some(active) = &self.active
                && let Err(error) = active.file.sync_data()
            {
                return Err(self.fail(sync_error(&active.segment.path, "syncing")(error)));
            }
            self.publish(|state| {
                state.max = written_through;
                state.min = state.min.or(state.segments.first().map(|s| s.first_height));
                state.high_water = state.high_water.max(written_through);
            });
            self.prune()?;
        }
        result
    }

    fn write_block(&mut self, block: &NewBlock<'_>) -> Result<(), StoreError> {
        if let Some((max, hash)) = self.tip {
            let continues = block.height == max + 1 && block.parent_hash == hash;
            if !continues {
                return Err(StoreError::NotContiguous {
                    height: block.height,
                    reason: if block.height != max + 1 {
                        format!("the store ends at {max}")
                    } else {
                        "its parent hash is not the hash of the stored block below it".into()
                    },
                });
            }
        }
        if block.txs.len() > hashes::MAX_TXS_PER_BLOCK as usize {
            return Err(StoreError::Malformed {
                height: block.height,
                reason: format!(
                    "{} transactions; a block holds at most {}",
                    block.txs.len(),
                    hashes::MAX_TXS_PER_BLOCK
                ),
            });
        }
        self.scratch.clear();
        format::encode_block(block, &mut self.scratch).map_err(|e| StoreError::Malformed {
            height: block.height,
            reason: format!("{e:?}"),
        })?;
        let len = self.scratch.len() as u64;
        if format::SEGMENT_HEADER_LEN as u64 + len > self.meta.segment_bytes {
            return Err(StoreError::Malformed {
                height: block.height,
                reason: format!(
                    "{len} bytes do not fit a segment of {} bytes",
                    self.meta.segment_bytes
                ),
            });
        }
        let full = self.active.as_ref().is_none_or(|a| {
            a.count >= self.meta.segment_blocks as usize || a.end + len > self.meta.segment_bytes
        });
        if full {
            self.start_segment(block.height)?;
        }
        let active = self.active.as_mut().expect("a segment is open");
        active
            .file
            .write_all_at(&self.scratch, active.end)
            .map_err(io_error(&active.segment.path, "writing"))?;
        active.segment.push(active.count, active.end)?;
        active.end += len;
        active.count += 1;
        self.tip = Some((block.height, block.hash));
        Ok(())
    }

    /// Seals the segment being written (if any) and starts a new one.
    fn start_segment(&mut self, first_height: u64) -> Result<(), StoreError> {
        if let Some(active) = &self.active {
            // The segment stays the one being written until it is sealed:
            // a failure here leaves the writer as it was (or, for a failed
            // fsync, stopped), never with a listed segment nobody writes.
            let sealed = seal(
                &self.dir,
                &self.meta,
                &active.file,
                &active.segment,
                active.end,
                active.count,
                self.config.crash_hook.as_deref(),
            )?;
            self.active = None;
            self.publish(|state| {
                *state
                    .segments
                    .last_mut()
                    .expect("the active segment is listed") = sealed;
            });
            self.cover_sealed();
        }
        let path = self.dir.join(segment_file_name(first_height));
        let file = directory::open_for_writing(
            &path,
            first_height,
            self.meta.segment_bytes,
            self.config.crash_hook.clone(),
        )?;
        directory::sync_dir(&self.dir, self.config.crash_hook.as_deref())?;
        let segment = Arc::new(Segment::active(
            path,
            file.file(),
            first_height,
            self.meta.segment_blocks as usize,
            &[],
            &[],
            self.shared.damage.clone(),
        )?);
        self.active = Some(Active {
            file,
            segment: segment.clone(),
            end: format::SEGMENT_HEADER_LEN as u64,
            count: 0,
        });
        self.publish(|state| state.segments.push(segment));
        Ok(())
    }
}
