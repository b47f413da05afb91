//! Heap given back after bursts: answers read from the disk live in
//! memory of their own (up to [`MAX_COLD_ANSWER_BYTES`] at once), and a
//! call's answer (up to its return data in hex: megabytes, for a call
//! that returns a large buffer) is built in the heap; glibc keeps what
//! they freed for reuse, so a burst would leave its peak in the process
//! for good. Once a burst is over (cold reads or calls happened, none
//! happened in the last second, and none is held or queued now), the free
//! heap goes back to the OS, on the I/O threads.
//!
//! [`MAX_COLD_ANSWER_BYTES`]: super::offload::MAX_COLD_ANSWER_BYTES

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::Server;

/// How often the end of a burst is looked for: a second, so the heap is
/// back within about two seconds of the last answer of a burst, and an
/// idle or hot neve pays a few loads of counters a second.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// Gives the free heap back after every burst of cold reads or calls,
/// until the runtime stops.
pub(crate) async fn watch(server: Arc<Server>) {
    let mut every = tokio::time::interval(EVERY);
    // Work done by the last look, and by the last trim.
    let (mut seen, mut trimmed_at) = ((0, 0), (0, 0));
    loop {
        every.tick().await;
        let metrics = &server.metrics;
        let work = (
            metrics.cold_reads.load(Ordering::Relaxed),
            metrics.calls_executed(),
        );
        let busy = metrics.cold_answer_bytes.load(Ordering::Relaxed) > 0
            || metrics.calls_queued.load(Ordering::Relaxed) > 0;
        let quiet = work == seen;
        seen = work;
        // A cold read's answer is counted until written, so its burst is
        // over at once; a call's answer is not counted, so its burst is
        // over a look after the last call.
        let cold_over = work.0 != trimmed_at.0;
        let calls_over = work.1 != trimmed_at.1 && quiet;
        if busy || !(cold_over || calls_over) {
            continue;
        }
        if cold_over {
            trimmed_at.0 = work.0;
        }
        if calls_over {
            trimmed_at.1 = work.1;
        }
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
