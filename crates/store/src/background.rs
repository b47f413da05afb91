//! Threads for work that must never compete with serving for the CPU:
//! ingest's preparation, verification and store writes, and long log scans.
//! A [`Pool`] runs jobs on its own named threads at a lower scheduling
//! priority ([`BACKGROUND_NICE`]), so that work uses whatever CPU the
//! threads answering requests leave, instead of an equal share of it. Off
//! the async workers too, like any blocking work.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

/// Nice value of background threads: the kernel gives a thread at nice 10
/// about a tenth of the CPU a nice-0 thread gets when both want it, and
/// all of it when serving is idle. Default is 10.
pub const BACKGROUND_NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads at [`BACKGROUND_NICE`] taking jobs in order.
pub struct Pool {
    jobs: Mutex<Sender<Job>>,
}

impl Pool {
    /// Starts `threads` threads named `{name}-{i}`.
    pub fn new(name: &str, threads: usize) -> Pool {
        let (jobs, queue) = channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..threads.max(1) {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || worker(&queue))
                .expect("spawning a background thread");
        }
        Pool {
            jobs: Mutex::new(jobs),
        }
    }

    /// Runs `work` on one of the pool's threads and waits for it without
    /// blocking the async worker. A panic in `work` is carried on to the
    /// caller.
    pub async fn run<R: Send + 'static>(&self, work: impl FnOnce() -> R + Send + 'static) -> R {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = done.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)));
        });
        self.jobs
            .lock()
            .expect("a pool's queue is never poisoned")
            .send(job)
            .expect("a pool's threads live as long as the pool");
        match result.await.expect("a pool thread answers every job") {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

fn worker(queue: &Mutex<Receiver<Job>>) {
    lower_priority();
    loop {
        let job = match queue.lock() {
            Ok(queue) => queue.recv(),
            Err(_) => return,
        };
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

/// Lowers the calling thread's priority to [`BACKGROUND_NICE`] and puts it
/// in the batch scheduling class (on Linux both are per thread, and threads
/// it starts inherit them). A batch thread never preempts a thread that is
/// running when it wakes, so a verification or scan that becomes runnable
/// waits for an answering worker to block instead of cutting into its
/// request. Neither change needs a privilege; lowering nice again does.
pub fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: with pid/who 0 both calls change only the calling thread;
    // `param` outlives the call.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_BATCH, &param);
        libc::setpriority(libc::PRIO_PROCESS, 0, BACKGROUND_NICE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_at_a_lower_priority_and_panics_reach_the_caller() {
        let pool = Arc::new(Pool::new("test-pool", 2));
        #[cfg(target_os = "linux")]
        {
            // SAFETY: reads the calling thread's priority.
            let nice = pool
                .run(|| unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) })
                .await;
            assert_eq!(nice, BACKGROUND_NICE);
            // SAFETY: reads the calling thread's scheduling class.
            let class = pool.run(|| unsafe { libc::sched_getscheduler(0) }).await;
            assert_eq!(class, libc::SCHED_BATCH);
        }
        let panicking = pool.clone();
        let caught = tokio::spawn(async move { panicking.run(|| panic!("blew up")).await }).await;
        assert!(caught.unwrap_err().is_panic());
        assert_eq!(pool.run(|| 7).await, 7, "the pool survives a panic");
    }
}
