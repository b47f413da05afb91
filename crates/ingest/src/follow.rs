//! The follower: backfill, follow, reorgs. Fetching a block is in
//! [`crate::fetch`], the mirror's bootstrap in [`crate::bootstrap`], and
//! restarting a follower that died in [`crate::supervise`].

mod config;
mod follower;
mod run;
mod step;
#[cfg(test)]
mod tests;

pub use config::{
    DEFAULT_APPEND_BATCH, DEFAULT_FETCH_CONCURRENCY, DEFAULT_INGEST_BUFFER_BYTES,
    DEFAULT_MAX_REORG_DEPTH, IngestConfig, PAUSED_PROBE_EVERY, REPAIRS_PER_STEP, SharedStore,
    StartHeight, SyncOutcome, probe_period,
};
pub use follower::Follower;
pub(crate) use run::wait_out_pause;
