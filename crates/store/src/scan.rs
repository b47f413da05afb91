//! Scanning a segment file's records from the start: what opening does to
//! the segment being written, and to a sealed one whose index was lost.

use std::ops::Range;

use crate::format::{self, KIND_ROLLBACK};
use crate::integrity;
use crate::segment::Segment;
use crate::types::Hash;

/// What a scan of a segment file found.
pub(crate) struct Scan {
    /// Offsets of the live records, first height first.
    pub(crate) offsets: Vec<u64>,
    pub(crate) first_height: Option<u64>,
    /// Where valid records end; anything after is a torn or stale tail.
    pub(crate) end: u64,
    /// Heights kept although their record is damaged (only when scanning
    /// with recovery), lowest first.
    pub(crate) damaged: Vec<u64>,
}

/// Where, after a damaged record at `at` that should have held `next`, an
/// intact block record of a height in `next + 1..until` starts, and that
/// height: the first such record found at any byte (a damaged header leaves
/// its length unknown), looking only where the record magic is. Costs a
/// pass over the rest of the file, once, at open, and only for a segment
/// found damaged.
fn resume_after(data: &[u8], at: usize, next: u64, until: u64) -> Option<(usize, u64)> {
    let magic = format::RECORD_MAGIC.to_le_bytes();
    let from = (at + 1).min(data.len());
    memchr::memmem::find_iter(&data[from..], &magic).find_map(|found| {
        let p = from + found;
        let header = format::read_header(&data[p..])?;
        (format::is_block(header.kind)
            && (next + 1..until).contains(&header.height)
            && integrity::verify_record(&data[p..], &header))
        .then_some((p, header.height))
    })
}

impl Segment {
    /// Scans the records of a segment file from the start. Stops at the
    /// first record that is not intact or does not continue the chain
    /// (height + 1, parent hash); a rollback tombstone drops what it covers.
    #[cfg(test)]
    pub(crate) fn scan(data: &[u8]) -> Scan {
        Segment::scan_recovering(data, None)
    }

    /// [`Segment::scan`], except that with `recover: Some(heights)` (the
    /// heights the file should hold from its start), a damaged record does
    /// not end the scan: the scan looks past it for
    /// the next intact record that continues the heights, and keeps the
    /// damaged heights (listed in [`Scan::damaged`], at the damaged
    /// record's offset, where reads find the damage and answer a miss) so
    /// that one bad record costs itself, not every block after it. For
    /// segments whose records were all acknowledged long ago (a sealed one
    /// that lost its index); the segment being written is never scanned so,
    /// since a damaged record at its end is a torn write to cut.
    pub(crate) fn scan_recovering(data: &[u8], recover: Option<Range<u64>>) -> Scan {
        let mut scan = Scan {
            offsets: Vec::new(),
            first_height: None,
            end: format::SEGMENT_HEADER_LEN as u64,
            damaged: Vec::new(),
        };
        // Per kept height its hash, `None` for a damaged one (whose
        // successor's parent hash cannot be checked against it).
        let mut hashes: Vec<Option<Hash>> = Vec::new();
        let mut at = format::SEGMENT_HEADER_LEN;
        loop {
            let next_height = scan
                .first_height
                .or(recover.as_ref().map(|r| r.start))
                .map(|first| first + scan.offsets.len() as u64);
            let continues = |at: usize, hashes: &[Option<Hash>]| {
                let header = format::read_header(&data[at.min(data.len())..])?;
                if !integrity::verify_record(&data[at..], &header) {
                    return None;
                }
                if format::is_block(header.kind) {
                    let body = &data[at + header.body_offset()..];
                    let linked = hashes.last().is_none_or(|last| {
                        last.is_none_or(|h| h == format::hash_at(body, format::body::PARENT_HASH))
                    });
                    if next_height.is_some_and(|next| next != header.height) || !linked {
                        return None;
                    }
                }
                Some(header)
            };
            let header = match continues(at, &hashes) {
                Some(header) => header,
                None => {
                    // A damaged record at `next`: find where the heights go on.
                    let (Some(next), Some(until)) = (next_height, recover.as_ref().map(|r| r.end))
                    else {
                        break;
                    };
                    let Some((resumed, height)) = resume_after(data, at, next, until) else {
                        break;
                    };
                    scan.first_height.get_or_insert(next);
                    for damaged in next..height {
                        scan.offsets.push(at as u64);
                        scan.damaged.push(damaged);
                        hashes.push(None);
                    }
                    at = resumed;
                    continue;
                }
            };
            match header.kind {
                kind if format::is_block(kind) => {
                    let body = &data[at + header.body_offset()..];
                    scan.first_height.get_or_insert(header.height);
                    scan.offsets.push(at as u64);
                    hashes.push(Some(format::hash_at(body, format::body::HASH)));
                }
                KIND_ROLLBACK => {
                    let Some(first) = scan.first_height else {
                        break;
                    };
                    let keep = header.height.saturating_add(1).saturating_sub(first) as usize;
                    if header.height < first || keep > scan.offsets.len() {
                        break;
                    }
                    scan.offsets.truncate(keep);
                    hashes.truncate(keep);
                    scan.damaged.retain(|h| *h <= header.height);
                }
                _ => break,
            }
            at += header.total_len();
            scan.end = at as u64;
        }
        scan
    }
}
