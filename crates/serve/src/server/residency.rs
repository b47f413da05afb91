//! How much of the store is in memory, sampled every [`EVERY`] on the I/O
//! threads (a `mincore` a page) into the gauges `/metrics` and `/health`
//! read, so an operator can size memory to the hot part of the tail.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Server;

/// How often the store is sampled.
pub(crate) const EVERY: Duration = Duration::from_secs(10);

/// Pages a sample looks at (about a millisecond of system calls).
pub(crate) const SAMPLE_PAGES: usize = 1024;

/// Samples the store now and every [`EVERY`] until the runtime stops.
pub(crate) async fn watch(server: Arc<Server>) {
    let mut every = tokio::time::interval(EVERY);
    loop {
        every.tick().await;
        let reader = server.ctx.reader.clone();
        let residency = server.io.run(move || reader.residency(SAMPLE_PAGES)).await;
        let metrics = &server.metrics;
        metrics
            .store_resident_bytes
            .store(residency.resident_bytes(), Ordering::Relaxed);
        let ppm = residency.fraction().map_or(0, |f| (f * 1e6) as u64);
        metrics.store_resident_ppm.store(ppm, Ordering::Relaxed);
    }
}
