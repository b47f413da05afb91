//! Retention: whole segments dropped, oldest first, beyond the limits.

use crate::directory::remove_segment;
use crate::error::StoreError;
use crate::store::Store;

impl Store {
    /// Drops the oldest segments beyond the retention limits.
    pub(crate) fn prune(&mut self) -> Result<(), StoreError> {
        loop {
            let state = self.shared.state.load_full();
            let (Some(max), true) = (state.max, state.segments.len() > 1) else {
                return Ok(());
            };
            let next_first = state.segments[1].first_height;
            let over_blocks = self
                .config
                .retain_blocks
                .is_some_and(|keep| max + 1 - next_first >= keep);
            let over_bytes = self
                .config
                .retain_bytes
                .is_some_and(|limit| state.bytes > limit);
            if !(over_blocks || over_bytes) {
                return Ok(());
            }
            let oldest = state.segments[0].first_height;
            self.publish(|state| {
                state.segments.remove(0);
                state.min = Some(next_first);
            });
            remove_segment(&self.dir, oldest, self.config.crash_hook.as_deref())?;
        }
    }
}
