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
//!
//! Serve and ingest both run work here; neither needs the store for it.

mod cpus;
mod pool;
mod priority;

pub use cpus::CpuSet;
pub use pool::Pool;
pub use priority::{BACKGROUND_NICE, background_threads, lower_priority, set_background_cpus};
