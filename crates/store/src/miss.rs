//! Why a read answered nothing although the block may be stored: its pages
//! were not in memory and it might not wait, or its bytes were damaged.

/// A read that would have touched a page not in memory, and so was not
/// done: do it where waiting for the disk is allowed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cold;

/// Why a part of a block was not read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// Its pages are not in memory and the read may not wait for the disk:
    /// read it again where it may ([`crate::reader::Reader::from_disk`]).
    Cold,
    /// Its bytes fail their checksum or do not fit their record: counted
    /// in [`crate::reader::Stats::corrupt_reads`], logged, and answered as a miss.
    Damaged,
}

impl From<Cold> for Unread {
    fn from(_: Cold) -> Self {
        Unread::Cold
    }
}
