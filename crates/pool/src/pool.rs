//! A fixed set of threads taking jobs in order, at a lower priority or as
//! the threads that answer requests.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use crate::priority::lower_priority;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads taking jobs in order: at
/// [`BACKGROUND_NICE`](crate::priority::BACKGROUND_NICE) on
/// the background CPUs ([`Pool::new`]), or as the threads that answer
/// requests ([`Pool::serving`]).
pub struct Pool {
    jobs: Mutex<Sender<Job>>,
}

impl Pool {
    /// Starts `threads` background threads named `{name}-{i}`.
    pub fn new(name: &str, threads: usize) -> Pool {
        Pool::start(name, threads, true)
    }

    /// Starts `threads` threads named `{name}-{i}` at the priority and on
    /// the CPUs of the thread that starts them: work a request waits for
    /// (a read from the disk) that must not block an async worker, and must
    /// not wait behind ingest either.
    pub fn serving(name: &str, threads: usize) -> Pool {
        Pool::start(name, threads, false)
    }

    fn start(name: &str, threads: usize, background: bool) -> Pool {
        let (jobs, queue) = channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        for i in 0..threads.max(1) {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || worker(&queue, background))
                .expect("spawning a pool thread");
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

fn worker(queue: &Mutex<Receiver<Job>>, background: bool) {
    if background {
        lower_priority();
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_os = "linux")]
    use crate::priority::BACKGROUND_NICE;

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
