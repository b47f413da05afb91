//! A segment between writing and sealed: reopened for writing (at open,
//! or by a rollback into it) and sealed (its index written, its file
//! trimmed).

use std::path::Path;
use std::sync::Arc;

use crate::damage::Damage;
use crate::directory::{self, segment_file_name};
use crate::error::{StoreError, io_error, sync_error};
use crate::io::{self, CrashHook};
use crate::scan::Scan;
use crate::segment::Segment;
use crate::types::Meta;

/// What a scan that rebuilds a segment's index does at a damaged record.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recover {
    /// Keep the damaged height (a counted miss until repaired) and the
    /// records after it: for a segment whose records were all acknowledged
    /// (one that was sealed), where a damaged record is a bad disk block,
    /// not a torn write.
    PastDamage,
    /// End the segment there: for the segment being written, whose damaged
    /// last record is a write a crash tore (never acknowledged).
    CutAtDamage,
}

/// Opens a segment file for writing and indexes its intact records; `None`
/// when it holds none. Cuts the tail after the last intact record to zeros,
/// so no stale record can ever be read as a continuation.
pub(crate) fn reopen_for_writing(
    dir: &Path,
    meta: &Meta,
    first_height: u64,
    journal: Option<Arc<dyn CrashHook>>,
    damage: &Arc<Damage>,
    recover: Recover,
) -> Result<Option<(io::StoreFile, Arc<Segment>, Scan)>, StoreError> {
    let path = dir.join(segment_file_name(first_height));
    let file = directory::open_for_writing(&path, first_height, meta.segment_bytes, journal)?;
    let blocks = meta.segment_blocks as usize;
    let heights = match recover {
        Recover::PastDamage => Some(first_height..first_height + blocks as u64),
        Recover::CutAtDamage => None,
    };
    let scan = Segment::scan_recovering(
        &Segment::active(
            path.clone(),
            file.file(),
            first_height,
            blocks,
            &[],
            &[],
            damage.clone(),
        )?
        .bytes(),
        heights,
    );
    if scan.first_height != Some(first_height) {
        return Ok(None);
    }
    for &height in &scan.damaged {
        tracing::error!(
            height,
            path = %path.display(),
            "a damaged record was kept as a miss (the blocks after it are intact); it is repaired when the block is fetched again"
        );
        damage.remember(height);
    }
    // Readers may map this file (a rollback unsealing it): zero the tail,
    // never shorten the file under them.
    directory::zero_tail(&file, scan.end, meta.segment_bytes)?;
    file.sync_data()
        .map_err(sync_error(&path, "syncing the cut tail of"))?;
    let segment = Segment::active(
        path,
        file.file(),
        first_height,
        blocks,
        &scan.offsets,
        &scan.damaged,
        damage.clone(),
    )?;
    Ok(Some((file, Arc::new(segment), scan)))
}

/// Writes the index of a full segment, trims its file and returns the sealed
/// segment readers should see.
pub(crate) fn seal(
    dir: &Path,
    meta: &Meta,
    file: &io::StoreFile,
    segment: &Segment,
    end: u64,
    count: usize,
    journal: Option<&dyn CrashHook>,
) -> Result<Arc<Segment>, StoreError> {
    // Trimming a file readers have mapped is safe here, unlike in a
    // rollback: every index entry points below `end`, so no reader can
    // touch the pages cut off.
    file.set_len(end)
        .map_err(io_error(&segment.path, "trimming"))?;
    file.sync_all()
        .map_err(sync_error(&segment.path, "syncing"))?;
    reseal(dir, meta, segment, count, end, journal)
}

/// Writes `segment`'s index (its first `count` records, its data ending at
/// `end`) and opens it again as sealed, keeping what its reads verified:
/// the segment readers should see. For a segment being sealed, and for a
/// sealed one whose record a repair rewrote (its index lacked the block's
/// hashes).
pub(crate) fn reseal(
    dir: &Path,
    meta: &Meta,
    segment: &Segment,
    count: usize,
    end: u64,
    journal: Option<&dyn CrashHook>,
) -> Result<Arc<Segment>, StoreError> {
    segment.write_index(dir, count, end, journal)?;
    let sealed = Segment::open_sealed(
        dir,
        segment.first_height,
        meta.segment_blocks as usize,
        segment.damage(),
    )?
    .ok_or_else(|| {
        StoreError::Corrupt(format!(
            "index of {} unreadable right after writing",
            segment.path.display()
        ))
    })?;
    sealed.inherit_verified(segment);
    Ok(Arc::new(sealed))
}
