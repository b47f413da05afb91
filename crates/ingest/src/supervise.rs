//! Starts a follower and keeps it running. At start, an upstream that is
//! not up yet is waited for, and a store already on disk is served while
//! the upstream is out of reach ([`start`]). A follower that dies (a panic
//! in a sync step, a verification or a store write) is restarted with
//! backoff on the same store, and counted; while none runs,
//! [`IngestStatus::follower_down`] is set, so serving stops claiming
//! `latest` and readiness goes down instead of answering from a head that
//! silently stopped moving.

use std::future::Future;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use neve_store::StoreConfig;
use neve_upstream::RpcClient;

use crate::error::IngestError;
use crate::follow::{Follower, IngestConfig};
use crate::status::IngestStatus;

/// Why [`start`] gave no follower, by what it was doing.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Connecting to the upstream and opening the store for its chain
    /// failed for good (a store of another chain, a broken data directory).
    #[error(transparent)]
    Connecting(IngestError),
    /// The upstream was out of reach and the store already in the data
    /// directory could not be opened to be served meanwhile.
    #[error(transparent)]
    Opening(IngestError),
}

/// Opens the store and connects to the upstream, waiting for an upstream
/// that is not up yet or busy; a store of another chain or a broken data
/// directory is an error.
pub async fn start(
    client: RpcClient,
    data_dir: PathBuf,
    store_config: StoreConfig,
    ingest_config: IngestConfig,
) -> Result<Follower, StartError> {
    let mut backoff = Duration::from_millis(200);
    loop {
        match Follower::connect(
            client.clone(),
            &data_dir,
            store_config.clone(),
            ingest_config.clone(),
        )
        .await
        {
            Ok(follower) => return Ok(follower),
            Err(error) if error.is_transient() => {
                // A store already here is served while the upstream is
                // out of reach (or refuses the key); the supervisor keeps
                // trying it.
                let why = format!("{error}");
                if let Some(follower) = Follower::offline(
                    client.clone(),
                    &data_dir,
                    store_config.clone(),
                    ingest_config.clone(),
                    why,
                )
                .await
                .map_err(StartError::Opening)?
                {
                    tracing::warn!(%error, "upstream not reachable; serving the stored tail while retrying");
                    return Ok(follower);
                }
                let pause = backoff.max(error.retry_after().unwrap_or_default())
                    + neve_upstream::jitter(backoff / 4);
                tracing::warn!(%error, retry_in_ms = pause.as_millis() as u64, "upstream not ready");
                tokio::time::sleep(pause).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
            Err(error) => return Err(StartError::Connecting(error)),
        }
    }
}

/// Wait before restarting a follower that died: doubles from the first to
/// the last while restarts keep failing, so a crash loop costs little, and
/// starts over once a follower has run for [`RESTART_RESET_AFTER`].
/// Default is 1 s to 60 s.
pub const RESTART_BACKOFF: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(60);

/// A follower that ran this long before dying is restarted after the
/// shortest backoff again. Default is 5 minutes.
pub const RESTART_RESET_AFTER: Duration = Duration::from_secs(300);

/// Runs `first` until `shutdown` turns true, restarting it on the same
/// store (re-checking the upstream's chain and probing it again) whenever
/// it dies. Returns at shutdown, or when the store cannot be written again
/// (its writer panicked mid-write): then neve keeps serving what is stored,
/// with readiness down and the reason in `/health`'s last error.
pub async fn supervise(
    first: Follower,
    wake: Arc<tokio::sync::Notify>,
    poll: Duration,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let client = first.client().clone();
    let store = first.shared_store();
    let config = first.config().clone();
    let status = first.status();
    let mut first = Some(first);
    let stop = shutdown.clone();
    let start = {
        let status = status.clone();
        move || {
            let first = first.take();
            let (client, store, config, status) = (
                client.clone(),
                store.clone(),
                config.clone(),
                status.clone(),
            );
            let (wake, mut shutdown) = (wake.clone(), stop.clone());
            async move {
                let follower = match first {
                    Some(follower) if follower.is_online() => follower,
                    // Opened offline, or a successor: reach the upstream
                    // first. While a refusal's pause holds (a quota's
                    // day-long Retry-After), it is probed until it serves,
                    // rather than resumed, refused at once, and restarted
                    // after a wait that doubles to a minute.
                    _ => {
                        crate::follow::wait_out_pause(&client, &status, &mut shutdown).await;
                        Follower::resume(client, store, config, status).await?
                    }
                };
                follower.run(wake, poll, shutdown).await;
                Ok(())
            }
        }
    };
    keep_running(start, &status, shutdown, RESTART_BACKOFF).await;
}

/// The supervision loop, apart from what is supervised: runs `start()`'s
/// future as a task; a panic or a transient error restarts it after a
/// backoff, a lasting error ends supervision with the follower down.
pub(crate) async fn keep_running<F, Fut>(
    mut start: F,
    status: &IngestStatus,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    backoff: RangeInclusive<Duration>,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), IngestError>> + Send + 'static,
{
    let mut wait = *backoff.start();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let started = Instant::now();
        let why = match tokio::spawn(start()).await {
            // A follower returns only once shutdown was asked for.
            Ok(Ok(())) => return,
            Ok(Err(error)) if !error.is_transient() => {
                tracing::error!(%error, "the follower cannot be restarted; serving what is stored");
                status.follower_down.store(true, Ordering::Relaxed);
                status.set_last_error(Some(error.to_string()));
                return;
            }
            Ok(Err(error)) => error.to_string(),
            Err(join) if join.is_panic() => panic_message(join.into_panic()),
            Err(_) => "cancelled".to_string(),
        };
        status.follower_down.store(true, Ordering::Relaxed);
        status.set_last_error(Some(format!("follower died: {why}")));
        if started.elapsed() >= RESTART_RESET_AFTER {
            wait = *backoff.start();
        }
        tracing::error!(reason = %why, restart_in_ms = wait.as_millis() as u64, "the follower died; restarting it");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
        wait = (wait * 2).min(*backoff.end());
        status.follower_restarts.fetch_add(1, Ordering::Relaxed);
    }
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => payload
            .downcast_ref::<&str>()
            .map_or_else(|| "a panic".to_string(), |s| s.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    #[tokio::test]
    async fn a_follower_that_panics_is_restarted_counted_and_reported_down_meanwhile() {
        let status = Arc::new(IngestStatus::default());
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let starts = Arc::new(AtomicU32::new(0));
        let start = {
            let (status, starts) = (status.clone(), starts.clone());
            move || {
                let (status, starts) = (status.clone(), starts.clone());
                async move {
                    match starts.fetch_add(1, Ordering::SeqCst) {
                        0 => panic!("verification task blew up"),
                        1 => Err(IngestError::Missing(7)), // resume failed, transiently
                        _ => {
                            // Down until this incarnation runs.
                            assert!(status.follower_down.load(Ordering::SeqCst));
                            assert!(status.last_error().unwrap().contains("follower died"));
                            status.follower_down.store(false, Ordering::SeqCst);
                            Ok(())
                        }
                    }
                }
            }
        };
        let backoff = Duration::from_millis(1)..=Duration::from_millis(4);
        keep_running(start, &status, shutdown, backoff).await;
        assert_eq!(starts.load(Ordering::SeqCst), 3);
        assert_eq!(status.follower_restarts.load(Ordering::SeqCst), 2);
        assert!(!status.follower_down.load(Ordering::SeqCst));
        drop(stop);
    }

    #[tokio::test]
    async fn a_store_that_cannot_be_written_again_ends_supervision_with_the_follower_down() {
        let status = IngestStatus::default();
        let (_stop, shutdown) = tokio::sync::watch::channel(false);
        let backoff = Duration::from_millis(1)..=Duration::from_millis(1);
        keep_running(
            || async { Err(IngestError::WriterPoisoned) },
            &status,
            shutdown,
            backoff,
        )
        .await;
        assert!(status.follower_down.load(Ordering::SeqCst));
        assert_eq!(status.follower_restarts.load(Ordering::SeqCst), 0);
        assert!(status.last_error().unwrap().contains("restart neve"));
    }

    #[tokio::test]
    async fn shutdown_ends_supervision_during_a_backoff() {
        let status = IngestStatus::default();
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let backoff = Duration::from_secs(3600)..=Duration::from_secs(3600);
        let stopper = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            stop.send(true).unwrap();
        });
        keep_running(|| async { panic!("always") }, &status, shutdown, backoff).await;
        stopper.await.unwrap();
        assert!(status.follower_down.load(Ordering::SeqCst));
    }
}
