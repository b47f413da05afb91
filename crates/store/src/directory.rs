//! The segment files of a store's directory: listing and removing them.

use std::path::Path;

use crate::error::{StoreError, io_error};
use crate::io::CrashHook;
use crate::segment::{self, index_file_name, segment_file_name};

pub(crate) fn remove_segment(
    dir: &Path,
    first_height: u64,
    journal: Option<&dyn CrashHook>,
) -> Result<(), StoreError> {
    // Data first: an index without its segment is ignored and removed at
    // open, while a segment without its index is simply rebuilt.
    for name in [
        segment_file_name(first_height),
        index_file_name(first_height),
    ] {
        segment::unlink(&dir.join(name), journal)?;
    }
    segment::sync_dir(dir, journal)
}

/// First heights of the segment files in `dir`; removes leftovers of
/// interrupted writes (temporary files, indexes without a segment).
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>, StoreError> {
    let mut segments = Vec::new();
    let mut indexes = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error(dir, "listing"))? {
        let path = entry.map_err(io_error(dir, "listing"))?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.ends_with(".tmp") {
            let _ = std::fs::remove_file(&path);
        } else if let Some(first) = name.strip_suffix(".seg").and_then(|n| n.parse().ok()) {
            segments.push(first);
        } else if let Some(first) = name
            .strip_suffix(".idx")
            .and_then(|n| n.parse::<u64>().ok())
        {
            indexes.push(first);
        }
    }
    for first in indexes {
        if !segments.contains(&first) {
            let _ = std::fs::remove_file(dir.join(index_file_name(first)));
        }
    }
    Ok(segments)
}
