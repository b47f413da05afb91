//! Sending batches and watching them land: the counters the run shares,
//! one batch sent and booked, and the watcher counting inclusions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use neve_upstream::{RpcClient, RpcError, parse_quantity, quantity};

use crate::chain::{HEAD_POLL, block_number};
use crate::report::Progress;

/// Longest pause after the node pushes back (txpool full, 429, 5xx).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Counters shared between the sending loop, batch tasks and the watcher.
#[derive(Default)]
pub(crate) struct Shared {
    pub(crate) sent: AtomicU64,
    pub(crate) accepted: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) included: AtomicU64,
    pub(crate) blocks: AtomicU64,
    pub(crate) head: AtomicU64,
    /// Nanoseconds since sending started at which the latest block that
    /// included transactions was seen.
    pub(crate) last_inclusion_nanos: AtomicU64,
    /// Nanoseconds since start before which no batch may be sent (backoff).
    pub(crate) backoff_until_nanos: AtomicU64,
}

impl Shared {
    pub(crate) fn in_flight(&self) -> u64 {
        self.accepted
            .load(Ordering::Relaxed)
            .saturating_sub(self.included.load(Ordering::Relaxed))
    }

    pub(crate) fn progress(&self, elapsed: Duration) -> Progress {
        Progress {
            elapsed,
            sent: self.sent.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            included: self.included.load(Ordering::Relaxed),
            blocks: self.blocks.load(Ordering::Relaxed),
            head: self.head.load(Ordering::Relaxed),
        }
    }
}

/// Sends one batch and books its outcome.
pub(crate) async fn send_batch(
    client: &RpcClient,
    raw: Vec<String>,
    owners: &[usize],
    shared: &Shared,
    needs_resync: &[AtomicBool],
    start: Instant,
) {
    let calls: Vec<(&str, [String; 1])> = raw
        .into_iter()
        .map(|tx| ("eth_sendRawTransaction", [tx]))
        .collect();
    let backoff = |pause: Duration| {
        let until = (start.elapsed() + pause).as_nanos() as u64;
        shared
            .backoff_until_nanos
            .fetch_max(until, Ordering::Relaxed);
    };
    match client.batch(&calls).await {
        Ok(items) => {
            let mut pool_pressure = false;
            for (item, owner) in items.iter().zip(owners) {
                match item {
                    Ok(_) => {
                        shared.accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    // The pool already holds it: as good as accepted.
                    Err(RpcError::Rpc { message, .. }) if message.contains("already known") => {
                        shared.accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        shared.rejected.fetch_add(1, Ordering::Relaxed);
                        // A refused nonce leaves a gap; re-read it before
                        // this sender signs again.
                        needs_resync[*owner].store(true, Ordering::Relaxed);
                        pool_pressure |= is_pool_pressure(error);
                    }
                }
            }
            if pool_pressure {
                backoff(Duration::from_millis(200));
            }
        }
        Err(error) => {
            shared
                .rejected
                .fetch_add(owners.len() as u64, Ordering::Relaxed);
            for owner in owners {
                needs_resync[*owner].store(true, Ordering::Relaxed);
            }
            let pause = match &error {
                RpcError::Http {
                    retry_after: Some(seconds),
                    ..
                } => Duration::from_secs(*seconds),
                _ => Duration::from_millis(500),
            };
            backoff(pause.min(MAX_BACKOFF));
        }
    }
}

/// Whether a refusal says the node is overloaded rather than the transaction wrong.
pub(crate) fn is_pool_pressure(error: &RpcError) -> bool {
    match error {
        RpcError::Rpc { message, .. } => {
            let message = message.to_ascii_lowercase();
            [
                "txpool is full",
                "underpriced",
                "too many",
                "rate limit",
                "busy",
            ]
            .iter()
            .any(|needle| message.contains(needle))
        }
        other => other.is_transient(),
    }
}

/// Counts transactions in blocks produced after `first_block`.
pub(crate) async fn watch_inclusions(
    client: RpcClient,
    first_block: u64,
    start: Instant,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) {
    let mut seen = first_block;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if let Ok(head) = block_number(&client).await {
            shared.head.store(head, Ordering::Relaxed);
            while seen < head {
                let upto = head.min(seen + 500);
                let calls: Vec<(&str, [String; 1])> = (seen + 1..=upto)
                    .map(|n| ("eth_getBlockTransactionCountByNumber", [quantity(n)]))
                    .collect();
                let Ok(items) = client.batch(&calls).await else {
                    break;
                };
                let mut included = 0;
                for item in &items {
                    let count = item
                        .as_ref()
                        .ok()
                        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
                        .and_then(|q| parse_quantity(&q))
                        .unwrap_or(0);
                    included += count;
                }
                shared.included.fetch_add(included, Ordering::Relaxed);
                shared.blocks.fetch_add(upto - seen, Ordering::Relaxed);
                if included > 0 {
                    shared
                        .last_inclusion_nanos
                        .store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
                seen = upto;
            }
        }
        if stopping {
            return;
        }
        tokio::time::sleep(HEAD_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_pressure_is_told_apart_from_bad_transactions() {
        let rpc = |m: &str| RpcError::Rpc {
            code: -32000,
            message: m.into(),
        };
        assert!(is_pool_pressure(&rpc("txpool is full")));
        assert!(is_pool_pressure(&rpc("transaction underpriced")));
        assert!(!is_pool_pressure(&rpc("nonce too low")));
    }
}
