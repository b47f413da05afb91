//! Rollbacks: tombstone records, so bytes a reader may hold are never
//! overwritten.

use std::sync::Arc;

use crate::config::Durability;
use crate::directory::{self, index_file_name, remove_segment};
use crate::error::{StoreError, io_error, sync_error};
use crate::format;
use crate::reader::State;
use crate::sealing::{Recover, reopen_for_writing};
use crate::segment::{self, Segment};
use crate::store::{Active, Store};

impl Store {
    /// Removes every block above `keep_up_to` (all blocks when it is below
    /// the lowest). Durable per [`Durability`] when it returns.
    pub fn rollback(&mut self, keep_up_to: u64) -> Result<(), StoreError> {
        self.writable()?;
        let result = self.rollback_unchecked(keep_up_to);
        self.stop_on_sync_failure(result)
    }

    fn rollback_unchecked(&mut self, keep_up_to: u64) -> Result<(), StoreError> {
        let state = self.shared.state.load_full();
        let (Some(min), Some(max)) = (state.min, state.max) else {
            return Ok(());
        };
        if keep_up_to >= max {
            return Ok(());
        }
        // The table stops covering what the rollback changes before it does.
        let changed_from = state
            .segment_for(keep_up_to)
            .map_or(0, |segment| segment.first_height);
        self.hashes
            .uncover_from(changed_from, self.config.durability)?;
        self.publish_hashes();
        if keep_up_to < min {
            return self.remove_every_segment(&state.segments);
        }
        // The kept block's hash becomes the tip new blocks must link to; a
        // rollback to a block that cannot be read is refused before anything
        // is written, rather than leaving the tip unknown.
        let kept_hash = self
            .reader()
            .block(keep_up_to)
            .ok_or_else(|| {
                StoreError::Corrupt(format!(
                    "block {keep_up_to} is unreadable; cannot roll back to it"
                ))
            })?
            .hash();
        let keep_segment = state
            .segment_for(keep_up_to)
            .expect("within min..=max")
            .clone();
        // Segments wholly above the kept height go first.
        let doomed: Vec<u64> = state
            .segments
            .iter()
            .filter(|s| s.first_height > keep_up_to)
            .map(|s| s.first_height)
            .collect();
        if !doomed.is_empty() {
            self.active = None;
            self.publish(|state| state.segments.retain(|s| s.first_height <= keep_up_to));
            // Newest first: a crash between two unlinks leaves the kept
            // blocks and a shorter doomed run that still joins them, never
            // a gap (which open would cut at, keeping the kept blocks).
            for first in doomed.into_iter().rev() {
                remove_segment(&self.dir, first, self.config.crash_hook.as_deref())?;
            }
        }
        // Reopen the segment holding the kept height for writing if sealed.
        if self
            .active
            .as_ref()
            .is_none_or(|a| a.segment.first_height != keep_segment.first_height)
        {
            self.reopen_sealed_for_writing(keep_segment.first_height)?;
        }
        let active = self.active.as_mut().expect("reopened above");
        let keep = (keep_up_to + 1 - active.segment.first_height) as usize;
        for height in keep_up_to + 1..active.segment.first_height + active.count as u64 {
            if let Ok(Some(block)) = active.segment.block(height, segment::Pages::MayWait) {
                active.segment.unindex(&block);
            }
        }
        self.scratch.clear();
        format::encode_rollback(keep_up_to, &mut self.scratch);
        active
            .file
            .write_all_at(&self.scratch, active.end)
            .map_err(io_error(&active.segment.path, "writing a rollback"))?;
        if self.config.durability == Durability::Fsync
            && let Err(error) = active.file.sync_data()
        {
            let error = sync_error(&active.segment.path, "syncing")(error);
            return Err(self.fail(error));
        }
        active.end += self.scratch.len() as u64;
        active.count = keep;
        self.tip = Some((keep_up_to, kept_hash));
        self.publish(|state| state.max = Some(keep_up_to));
        Ok(())
    }

    /// Makes the sealed segment starting at `first` (the last listed) the
    /// one being written again, so a rollback can write its tombstone there.
    fn reopen_sealed_for_writing(&mut self, first: u64) -> Result<(), StoreError> {
        let journal = self.config.crash_hook.clone();
        // An index a failed seal never wrote is already gone.
        directory::unlink(&self.dir.join(index_file_name(first)), journal.as_deref())?;
        directory::sync_dir(&self.dir, journal.as_deref())?;
        let (file, segment, scan) = reopen_for_writing(
            &self.dir,
            &self.meta,
            first,
            self.config.crash_hook.clone(),
            &self.shared.damage,
            // It was sealed: every record in it was acknowledged.
            Recover::PastDamage,
        )?
        .ok_or_else(|| StoreError::Corrupt(format!("segment {first} lost its records")))?;
        self.active = Some(Active {
            file,
            segment: segment.clone(),
            end: scan.end,
            count: scan.offsets.len(),
        });
        self.publish(|state| *state.segments.last_mut().expect("kept segment listed") = segment);
        Ok(())
    }

    /// Removes every block: a rollback below the lowest stored height.
    fn remove_every_segment(&mut self, segments: &[Arc<Segment>]) -> Result<(), StoreError> {
        self.active = None;
        self.tip = None;
        self.publish(|state| {
            *state = State {
                high_water: state.high_water,
                hashes: state.hashes.clone(),
                covered_end: state.covered_end,
                ..State::default()
            };
        });
        for segment in segments.iter().rev() {
            remove_segment(
                &self.dir,
                segment.first_height,
                self.config.crash_hook.as_deref(),
            )?;
        }
        Ok(())
    }
}
