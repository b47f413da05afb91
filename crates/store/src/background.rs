//! Threads for work that must never compete with serving for the CPU:
//! ingest's preparation, verification and store writes, and long log scans.
//! A [`Pool`] runs jobs on its own named threads at a lower scheduling
//! priority ([`BACKGROUND_NICE`]), so that work uses whatever CPU the
//! threads answering requests leave, instead of an equal share of it. Off
//! the async workers too, like any blocking work.
//!
//! A lower priority is not enough on a small machine: a thread that
//! computes on the CPU an answering worker wakes on still delays it (the
//! wake-up waits for a preemption, the caches are cold), whatever its
//! class. [`set_background_cpus`] therefore also keeps background threads
//! to a set of CPUs of their own, when the operator gives one.

use std::fmt;
use std::str::FromStr;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

/// Nice value of background threads: the kernel gives a thread at nice 10
/// about a tenth of the CPU a nice-0 thread gets when both want it, and
/// all of it when serving is idle. Default is 10.
pub const BACKGROUND_NICE: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads taking jobs in order: at [`BACKGROUND_NICE`] on
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

/// A set of CPUs, written as Linux lists them (`0-3,6`): where a group of
/// threads may run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSet(Vec<usize>);

/// Highest CPU number a set may name (the kernel's default `cpu_set_t`).
const MAX_CPU: usize = 1023;

impl CpuSet {
    /// How many CPUs it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none (never true of a parsed set).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The CPUs the calling thread may run on now.
    pub fn of_current_thread() -> std::io::Result<CpuSet> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: reads the calling thread's mask into a zeroed set;
            // CPU_ISSET reads inside it for numbers up to MAX_CPU.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(CpuSet(
                    (0..=MAX_CPU)
                        .filter(|&cpu| libc::CPU_ISSET(cpu, &set))
                        .collect(),
                ))
            }
        }
        #[cfg(not(target_os = "linux"))]
        Ok(CpuSet(Vec::new()))
    }

    /// Keeps the calling thread to these CPUs (threads it starts inherit
    /// that), or to those of them that are online and open to this process;
    /// fails when none is. Returns the CPUs it got.
    pub fn pin_current_thread(&self) -> std::io::Result<CpuSet> {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: a zeroed cpu_set_t is an empty set; CPU_SET writes
            // inside it for numbers below its size, which parsing ensures
            // (MAX_CPU); pid 0 is the calling thread.
            unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                for &cpu in &self.0 {
                    libc::CPU_SET(cpu, &mut set);
                }
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        CpuSet::of_current_thread()
    }
}

impl FromStr for CpuSet {
    type Err = String;

    fn from_str(list: &str) -> Result<CpuSet, String> {
        let number = |text: &str| -> Result<usize, String> {
            let cpu: usize = text
                .trim()
                .parse()
                .map_err(|_| format!("{text:?} is not a CPU number"))?;
            if cpu > MAX_CPU {
                return Err(format!("CPU {cpu} is above {MAX_CPU}"));
            }
            Ok(cpu)
        };
        let mut cpus = Vec::new();
        for part in list.split(',') {
            let (first, last) = match part.split_once('-') {
                Some((first, last)) => (number(first)?, number(last)?),
                None => (number(part)?, number(part)?),
            };
            if first > last {
                return Err(format!("{part:?}: a range runs upwards"));
            }
            cpus.extend(first..=last);
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuSet(cpus))
    }
}

impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut at = 0;
        while at < self.0.len() {
            let first = self.0[at];
            let mut last = first;
            while at + 1 < self.0.len() && self.0[at + 1] == last + 1 {
                at += 1;
                last = self.0[at];
            }
            let comma = if first == self.0[0] { "" } else { "," };
            if first == last {
                write!(f, "{comma}{first}")?;
            } else {
                write!(f, "{comma}{first}-{last}")?;
            }
            at += 1;
        }
        Ok(())
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_linux_writes_them() {
        let set: CpuSet = "0-3,6, 8-9,2".parse().unwrap();
        assert_eq!(set, CpuSet(vec![0, 1, 2, 3, 6, 8, 9]));
        assert_eq!(set.to_string(), "0-3,6,8-9");
        assert_eq!("5".parse::<CpuSet>().unwrap().to_string(), "5");
        for bad in ["", "a", "3-1", "0-", "1,,2", "4096", "-1"] {
            assert!(bad.parse::<CpuSet>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_thread_pinned_to_a_set_runs_only_there() {
        let allowed = CpuSet::of_current_thread().unwrap();
        let first = allowed.0[0];
        // With a CPU no machine here has beside it: only the real one is kept.
        let set: CpuSet = format!("{first},{MAX_CPU}").parse().unwrap();
        let (got, now) = std::thread::spawn(move || {
            let got = set.pin_current_thread().unwrap();
            (got, CpuSet::of_current_thread().unwrap())
        })
        .join()
        .unwrap();
        assert_eq!(got, CpuSet(vec![first]));
        assert_eq!(now, got);
        let nowhere: CpuSet = MAX_CPU.to_string().parse().unwrap();
        let refused = std::thread::spawn(move || nowhere.pin_current_thread())
            .join()
            .unwrap();
        assert!(refused.is_err());
    }

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
