//! Ingest's CPU and disk work (preparing blocks, verifying hashes and
//! roots, recovering signers, store writes) runs on its own threads, one per
//! background core, at a lower scheduling priority than serving
//! ([`neve_store::background`]): a backfill at full speed then uses whatever
//! CPU serving leaves, instead of taking half of it.

use std::sync::OnceLock;

use neve_store::background::Pool;

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        Pool::new(
            "neve-ingest-cpu",
            neve_store::background::background_threads(),
        )
    })
}

/// Runs `work` on an ingest thread and waits for it without blocking the
/// async worker. A panic in `work` is carried on to the caller.
pub(crate) async fn run<R: Send + 'static>(work: impl FnOnce() -> R + Send + 'static) -> R {
    pool().run(work).await
}
