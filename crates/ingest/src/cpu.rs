//! Ingest's CPU and disk work (preparing blocks, verifying hashes and
//! roots, recovering signers, store writes) runs on its own threads, one per
//! background core, at a lower scheduling priority than serving
//! ([`neve_pool`]): a backfill at full speed then uses whatever
//! CPU serving leaves, instead of taking half of it.
//!
//! The tip is the exception. While the follower is within [`TIP_BLOCKS`] of
//! the upstream's head, a new block's work runs on [`TIP_THREADS`] threads
//! at serving's priority (started by [`start_tip_threads`] from a thread
//! that has it): under a saturating read load a nice-10 batch thread gets a
//! tenth of a core, and `latest` would wait tens of milliseconds behind the
//! answers it is meant to make possible.
//!
//! Ingest's async side has a runtime of its own at the same lower priority
//! ([`runtime`]).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use neve_pool::Pool;

/// Blocks still to fetch at or under which the follower is at the tip and
/// its work is urgent: the new head, and one more for a head that moved
/// while the last was stored. Default is 2.
pub const TIP_BLOCKS: u64 = 2;

/// Threads for the tip's work: a block being verified while the one before
/// it is appended. Default is 2.
pub const TIP_THREADS: usize = 2;

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool::new("neve-ingest-cpu", neve_pool::background_threads()))
}

static TIP_POOL: OnceLock<Pool> = OnceLock::new();

/// Set while the follower is at the tip ([`TIP_BLOCKS`]).
static AT_TIP: AtomicBool = AtomicBool::new(false);

/// Starts the tip's threads at the calling thread's priority and on its
/// CPUs: call it from a thread that has serving's (the binary's main
/// thread), before ingest's runtime lowers its own. Without it, the tip's
/// work runs on the background threads like a backfill's.
pub fn start_tip_threads() {
    TIP_POOL.get_or_init(|| Pool::serving("neve-tip", TIP_THREADS));
}

/// Ingest's async side (the follower and its supervisor, the `newHeads`
/// subscription, state prefetch): a runtime of its own, one worker thread,
/// whose threads run at the background priority, so they take the CPU
/// serving leaves. Build it after [`start_tip_threads`].
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("neve-ingest")
        .on_thread_start(neve_pool::lower_priority)
        .enable_all()
        .build()
}

/// Says whether the follower is at the tip, with `to_fetch` blocks between
/// its store and the upstream's head.
pub(crate) fn set_at_tip(to_fetch: u64) {
    AT_TIP.store(to_fetch <= TIP_BLOCKS, Ordering::Relaxed);
}

/// Runs `work` on an ingest thread (a tip thread while at the tip) and
/// waits for it without blocking the async worker. A panic in `work` is
/// carried on to the caller.
pub(crate) async fn run<R: Send + 'static>(work: impl FnOnce() -> R + Send + 'static) -> R {
    match TIP_POOL.get() {
        Some(tip) if AT_TIP.load(Ordering::Relaxed) => tip.run(work).await,
        _ => pool().run(work).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tip's work runs at the priority of the thread that started the
    /// tip's threads; a backfill's at the background one.
    #[tokio::test]
    async fn the_tip_runs_at_serving_priority_and_a_backfill_below_it() {
        // SAFETY: reads the calling thread's priority.
        let nice_here = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        start_tip_threads();
        // SAFETY: reads the calling thread's priority and class.
        let priority = || unsafe {
            (
                libc::getpriority(libc::PRIO_PROCESS, 0),
                libc::sched_getscheduler(0),
            )
        };
        set_at_tip(1);
        assert_eq!(run(priority).await, (nice_here, libc::SCHED_OTHER));
        set_at_tip(TIP_BLOCKS + 1);
        assert_eq!(
            run(priority).await,
            (neve_pool::BACKGROUND_NICE, libc::SCHED_BATCH)
        );
    }
}
