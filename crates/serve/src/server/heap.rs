//! Heap given back after cold reads: answers read from the disk live in
//! memory of their own (up to [`MAX_COLD_ANSWER_BYTES`] at once), and glibc
//! keeps what they freed for reuse, so a burst of cold reads would leave
//! its peak in the process for good. Once a burst is over (cold reads
//! happened, none is held now), the free heap goes back to the OS, on the
//! I/O threads.
//!
//! [`MAX_COLD_ANSWER_BYTES`]: super::offload::MAX_COLD_ANSWER_BYTES

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Server;

/// How often the end of a burst is looked for: a second, so the heap is
/// back within about a second of the last cold answer written out, and an
/// idle or hot neve pays one load of two counters a second.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// Gives the free heap back after every burst of cold reads, until the
/// runtime stops.
pub(crate) async fn watch(server: Arc<Server>) {
    let mut every = tokio::time::interval(EVERY);
    let mut trimmed_at = 0;
    loop {
        every.tick().await;
        let metrics = &server.metrics;
        let reads = metrics.cold_reads.load(Ordering::Relaxed);
        let held = metrics.cold_answer_bytes.load(Ordering::Relaxed);
        if reads == trimmed_at || held > 0 {
            continue;
        }
        trimmed_at = reads;
        server.io.run(give_back).await;
    }
}

fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free memory to the OS; thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}
