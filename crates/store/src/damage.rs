//! What the store knows of damaged records: a count of reads answered as
//! misses because a record failed its checks, and the heights they were at,
//! so the writer's owner can fetch those blocks again and
//! [`crate::store::Store::repair`] them in place. Shared by every segment's blocks.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Damaged heights remembered for repair. Past it, more damage is still
/// counted and answered as a miss but not remembered: a store with more
/// than this many bad records has a disk problem that re-fetching blocks
/// one by one would not cure, and the set must stay small (a height is 8
/// bytes; this bounds it to a few tens of KiB).
pub const MAX_DAMAGED_HEIGHTS: usize = 4_096;

#[derive(Default)]
pub(crate) struct Damage {
    reads: AtomicU64,
    heights: Mutex<BTreeSet<u64>>,
}

impl Damage {
    /// A read at `height` found damage.
    pub(crate) fn found(&self, height: u64) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.remember(height);
    }

    /// `height` is damaged (found at open, before any read).
    pub(crate) fn remember(&self, height: u64) {
        let mut heights = self.heights.lock().unwrap_or_else(|p| p.into_inner());
        if heights.len() < MAX_DAMAGED_HEIGHTS {
            heights.insert(height);
        }
    }

    /// `height` no longer needs repair (repaired, or no longer stored).
    pub(crate) fn forget(&self, height: u64) {
        let mut heights = self.heights.lock().unwrap_or_else(|p| p.into_inner());
        heights.remove(&height);
    }

    /// Reads answered as misses because of damage, since open.
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Remembered damaged heights, lowest first.
    pub(crate) fn heights(&self) -> Vec<u64> {
        let heights = self.heights.lock().unwrap_or_else(|p| p.into_inner());
        heights.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damage_is_counted_always_and_remembered_up_to_its_bound() {
        let damage = Damage::default();
        for height in 0..(MAX_DAMAGED_HEIGHTS as u64 + 10) {
            damage.found(height);
        }
        damage.found(3);
        assert_eq!(damage.reads(), MAX_DAMAGED_HEIGHTS as u64 + 11);
        assert_eq!(damage.heights().len(), MAX_DAMAGED_HEIGHTS);
        damage.forget(3);
        assert!(!damage.heights().contains(&3));
    }
}
