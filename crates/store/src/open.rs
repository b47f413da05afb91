//! Opening a store: taking its lock, reading or writing META, and
//! recovering the segments a crash may have left at any instant.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::config::StoreConfig;
use crate::damage::Damage;
use crate::directory::{self, index_file_name, list_segments, remove_segment};
use crate::error::{StoreError, io_error};
use crate::hashes;
use crate::io::CrashHook;
use crate::meta::open_meta;
use crate::reader::{Shared, State};
use crate::sealing::{Recover, reopen_for_writing, seal};
use crate::segment::Segment;
use crate::store::{Active, Store};
use crate::types::{Identity, Meta};

const LOCK_FILE: &str = "LOCK";

impl Store {
    /// Opens the store in `dir` for `identity`, creating it if the directory
    /// is empty or missing. Recovers from a crash at any instant: cuts a torn
    /// tail, rebuilds missing indexes, and drops segments that no longer
    /// join the newest run.
    pub fn open(dir: &Path, identity: Identity, config: StoreConfig) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(io_error(dir, "creating"))?;
        let lock_path = dir.join(LOCK_FILE);
        let lock = File::create(&lock_path).map_err(io_error(&lock_path, "creating"))?;
        if lock.try_lock().is_err() {
            return Err(StoreError::Locked(dir.to_path_buf()));
        }
        let journal = config.crash_hook.clone();
        let journal = journal.as_deref();
        let meta = open_meta(dir, identity, &config)?;
        let mut files = list_segments(dir)?;
        files.sort_unstable();

        let damage = Arc::new(Damage::default());
        let (mut segments, mut active) = recover_segments(dir, &meta, &files, &config, &damage)?;
        let active_count = active.as_ref().map_or(0, |a: &Active| a.count);
        let len_of = |segment: &Segment| segment.sealed_count().unwrap_or(active_count);
        if keep_joined_run(dir, &mut segments, active_count, journal)? {
            // The segment being written, the last, lay beyond the gap.
            active = None;
        }
        let min = segments.first().map(|s| s.first_height);
        let max = segments
            .last()
            .map(|s| s.first_height + len_of(s) as u64 - 1);
        let sealed_end = segments
            .iter()
            .filter_map(|s| Some(s.first_height + s.sealed_count()? as u64))
            .max()
            .unwrap_or(0);
        let hashes = hashes::HashWriter::open(dir, sealed_end, config.crash_hook.clone())?;
        let (table, covered_end) = hashes.view();
        let mut store = Store {
            dir: dir.to_path_buf(),
            meta,
            config,
            shared: Arc::new(Shared {
                state: ArcSwap::from_pointee(State::default()),
                damage,
            }),
            active,
            tip: None,
            scratch: Vec::new(),
            hashes,
            hashes_stalled: false,
            failed: None,
            _lock: lock,
        };
        store.publish(|state| {
            *state = State {
                segments,
                min,
                max,
                high_water: max,
                bytes: 0,
                hashes: table,
                covered_end,
            }
        });
        if let Some(max) = max {
            let top = store
                .reader()
                .block(max)
                .ok_or_else(|| StoreError::Corrupt(format!("block {max} unreadable at open")))?;
            store.tip = Some((max, top.hash()));
        }
        Ok(store)
    }
}

/// Opens the segment files `files` (first heights, oldest first): sealed
/// ones as they are, the last reopened for writing, and an earlier one
/// whose sealing a crash cut short rebuilt from its records and sealed.
/// Returns them with the segment being written, if any.
fn recover_segments(
    dir: &Path,
    meta: &Meta,
    files: &[u64],
    config: &StoreConfig,
    damage: &Arc<Damage>,
) -> Result<(Vec<Arc<Segment>>, Option<Active>), StoreError> {
    let journal = config.crash_hook.as_deref();
    let mut segments: Vec<Arc<Segment>> = Vec::new();
    let mut active = None;
    let blocks = meta.segment_blocks as usize;
    for (i, first_height) in files.iter().copied().enumerate() {
        let is_last = i + 1 == files.len();
        if !is_last
            && let Some(segment) = Segment::open_sealed(dir, first_height, blocks, damage.clone())?
        {
            segments.push(Arc::new(segment));
            continue;
        }
        // The last segment is reopened for writing; an earlier one whose
        // sealing a crash cut short is rebuilt from its records.
        directory::unlink(&dir.join(index_file_name(first_height)), journal)?;
        let Some((file, segment, scan)) = reopen_for_writing(
            dir,
            meta,
            first_height,
            config.crash_hook.clone(),
            damage,
            if is_last {
                Recover::CutAtDamage
            } else {
                Recover::PastDamage
            },
        )?
        else {
            // Nothing intact in it: a segment created just before a crash.
            remove_segment(dir, first_height, journal)?;
            continue;
        };
        if is_last {
            active = Some(Active {
                file,
                segment: segment.clone(),
                end: scan.end,
                count: scan.offsets.len(),
            });
            segments.push(segment);
        } else {
            segments.push(seal(
                dir,
                meta,
                &file,
                &segment,
                scan.end,
                scan.offsets.len(),
                journal,
            )?);
        }
    }
    Ok((segments, active))
}

/// Keeps the oldest run of `segments` that join up, removing the rest from
/// the directory; whether any was dropped (`active_count`: the live heights
/// of the last segment when it is being written).
fn keep_joined_run(
    dir: &Path,
    segments: &mut Vec<Arc<Segment>>,
    active_count: usize,
    journal: Option<&dyn CrashHook>,
) -> Result<bool, StoreError> {
    // Keep the oldest run of segments that join up: a gap never costs
    // the intact blocks below it (what lies beyond a gap can only be a
    // rollback's doomed fork, or blocks that no longer link), and the
    // newest of what is dropped goes first, so a crash here leaves a
    // run that still joins.
    let len_of = |segment: &Segment| segment.sealed_count().unwrap_or(active_count);
    let keep_until = (1..segments.len())
        .find(|&i| {
            segments[i - 1].first_height + len_of(&segments[i - 1]) as u64
                != segments[i].first_height
        })
        .unwrap_or(segments.len());
    let dropped: Vec<_> = segments.drain(keep_until..).collect();
    if !dropped.is_empty() {
        tracing::warn!(
            kept_through = segments
                .last()
                .map(|s| s.first_height + len_of(s) as u64 - 1),
            dropped_from = dropped[0].first_height,
            "the store's segments do not join up; keeping the run from its oldest block"
        );
    }
    for segment in dropped.iter().rev() {
        remove_segment(dir, segment.first_height, journal)?;
    }
    Ok(!dropped.is_empty())
}
