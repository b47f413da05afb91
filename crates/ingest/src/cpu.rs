//! Ingest's CPU work (preparing blocks, verifying hashes and roots,
//! recovering signers) runs on its own threads, one per core, at a lower
//! scheduling priority than serving: a backfill at full speed then uses
//! whatever CPU serving leaves, instead of taking half of it. Off the async
//! workers, like any blocking work, and below the threads that answer.

use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

/// Nice value of ingest's CPU threads: the kernel gives a thread at nice 10
/// about a tenth of the CPU a nice-0 thread gets when both want it, and
/// all of it when serving is idle. Default is 10.
pub const INGEST_NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

fn pool() -> &'static Mutex<Sender<Job>> {
    static POOL: OnceLock<Mutex<Sender<Job>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (jobs, queue) = channel::<Job>();
        let queue = Arc::new(Mutex::new(queue));
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        for i in 0..threads {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name(format!("neve-ingest-cpu-{i}"))
                .spawn(move || worker(&queue))
                .expect("spawning an ingest thread");
        }
        Mutex::new(jobs)
    })
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

/// Lowers the calling thread's priority (on Linux, nice is per thread, and
/// threads it starts inherit it). Raising nice needs no privilege.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority with who = 0 changes only the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, INGEST_NICE);
    }
}

/// Runs `work` on an ingest thread and waits for it without blocking the
/// async worker. A panic in `work` is carried on to the caller.
pub(crate) async fn run<R: Send + 'static>(work: impl FnOnce() -> R + Send + 'static) -> R {
    let (done, result) = tokio::sync::oneshot::channel();
    let job: Job = Box::new(move || {
        let _ = done.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)));
    });
    pool()
        .lock()
        .expect("the ingest pool's queue is never poisoned")
        .send(job)
        .expect("ingest threads live as long as the process");
    match result.await.expect("an ingest thread answers every job") {
        Ok(value) => value,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn work_runs_at_a_lower_priority_and_panics_reach_the_caller() {
        #[cfg(target_os = "linux")]
        {
            let nice = super::run(|| unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }).await;
            assert_eq!(nice, super::INGEST_NICE);
        }
        let caught = tokio::spawn(super::run(|| panic!("verification blew up"))).await;
        assert!(caught.unwrap_err().is_panic());
    }
}
