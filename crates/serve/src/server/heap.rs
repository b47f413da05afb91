//! Heap given back after bursts: answers read from the disk live in
//! memory of their own (up to [`MAX_COLD_ANSWER_BYTES`] at once), and a
//! call's answer (up to its return data in hex: megabytes, for a call
//! that returns a large buffer) or a fee history's blocks parsed are
//! built in the heap; glibc keeps what
//! they freed for reuse, so a burst would leave its peak in the process
//! for good. Once a burst is over (cold reads or calls happened, none
//! happened in the last second, and none is held or queued now; work on
//! the call threads is read by the gas it spent), the free
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

/// Looks of quiet after a burst of calls at which the heap is given back
/// again: a batch's answer may still be on its way to a slow client at the
/// first trim, and is freed only once written.
const CALLS_TRIMMED_AGAIN_AFTER: u32 = 5;

/// Gives the free heap back after every burst of cold reads or calls,
/// until the runtime stops.
pub(crate) async fn watch(server: Arc<Server>) {
    let mut every = tokio::time::interval(EVERY);
    // Work done by the last look, cold reads at the last trim, and looks
    // since the calls' work last changed (0: it just did).
    let (mut seen, mut cold_trimmed, mut calls_quiet) = ((0, 0), 0, u32::MAX);
    loop {
        every.tick().await;
        let metrics = &server.metrics;
        let work = (
            metrics.cold_reads.load(Ordering::Relaxed),
            metrics.call_gas_total(),
        );
        let busy = metrics.cold_answer_bytes.load(Ordering::Relaxed) > 0
            || metrics.calls_queued.load(Ordering::Relaxed) > 0;
        calls_quiet = if work.1 == seen.1 {
            calls_quiet.saturating_add(1)
        } else {
            0
        };
        seen = work;
        // A cold read's answer is counted until written, so its burst is
        // over at once; a call's answer is not counted, so its burst is
        // over a look after the last call, and looked at once more later.
        let cold_over = work.0 != cold_trimmed;
        let calls_over = calls_quiet == 1 || calls_quiet == CALLS_TRIMMED_AGAIN_AFTER;
        if busy || !(cold_over || calls_over) {
            continue;
        }
        cold_trimmed = work.0;
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
