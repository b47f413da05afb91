//! The background priority and CPUs: what a background thread runs at.

use std::sync::OnceLock;

use crate::cpus::CpuSet;

/// Nice value of background threads: the kernel gives a thread at nice 10
/// about a tenth of the CPU a nice-0 thread gets when both want it, and
/// all of it when serving is idle. Default is 10.
pub const BACKGROUND_NICE: i32 = 10;

static BACKGROUND_CPUS: OnceLock<CpuSet> = OnceLock::new();

/// Keeps every background thread started from now on to `cpus` (see
/// [`lower_priority`]). Set once, before the first such thread starts;
/// a second call is refused.
pub fn set_background_cpus(cpus: CpuSet) -> Result<(), CpuSet> {
    BACKGROUND_CPUS.set(cpus)
}

/// How many threads a pool of CPU work should have: one per background
/// CPU when a set was given, else one per CPU this process may use.
pub fn background_threads() -> usize {
    BACKGROUND_CPUS.get().map_or_else(
        || std::thread::available_parallelism().map_or(2, |n| n.get()),
        CpuSet::len,
    )
}

/// Lowers the calling thread's priority to [`BACKGROUND_NICE`] and puts it
/// in the batch scheduling class (on Linux both are per thread, and threads
/// it starts inherit them). A batch thread never preempts a thread that is
/// running when it wakes, so a verification or scan that becomes runnable
/// waits for an answering worker to block instead of cutting into its
/// request. Neither change needs a privilege; lowering nice again does.
/// With [`set_background_cpus`], also keeps the thread to those CPUs.
pub fn lower_priority() {
    if let Some(cpus) = BACKGROUND_CPUS.get()
        && let Err(error) = cpus.pin_current_thread()
    {
        tracing::warn!(%error, %cpus, "background thread left on every CPU");
    }
    #[cfg(target_os = "linux")]
    // SAFETY: with pid/who 0 both calls change only the calling thread;
    // `param` outlives the call.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE);
    }
}
