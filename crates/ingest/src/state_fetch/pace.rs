//! Prefetch's pace: how often it looks for a new tip and how many
//! upstream calls a second it spends.

use std::time::{Duration, Instant};

/// How often prefetch looks for a new tip. Default is 50 ms.
pub(super) const TIP_POLL: Duration = Duration::from_millis(50);

/// Prefetch's upstream calls per second (`--state-prefetch-rate`), spent
/// evenly.
pub(super) struct Budget {
    interval: Duration,
    next_call: Instant,
}

impl Budget {
    pub(super) fn per_second(rate: u32) -> Budget {
        Budget {
            interval: Duration::from_secs(1) / rate,
            next_call: Instant::now(),
        }
    }

    /// Waits until `calls` more calls fit.
    pub(super) async fn spend(&mut self, calls: u32) {
        let now = Instant::now();
        if self.next_call > now {
            tokio::time::sleep(self.next_call - now).await;
        }
        self.next_call = self.next_call.max(now) + self.interval * calls;
    }
}
