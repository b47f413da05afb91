//! The follower: probe, backfill, follow, reorgs.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::{StreamExt, stream};
use neve_store::{Identity, Reader, Store, StoreConfig, StoreError};
use neve_upstream::{RpcClient, RpcError, parse_quantity, quantity};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::prepare::{PrepareError, PreparedBlock, RawParts, fixed_hex, prepare};
use crate::verify::{VerifyError, verify};

/// Deepest reorg followed by rolling back; deeper ones are refused loudly,
/// since they mean a confused upstream more often than a real chain event.
/// Default is 64.
pub const DEFAULT_MAX_REORG_DEPTH: u64 = 64;

/// Blocks fetched at once during backfill. Each is one HTTP batch; 16 keeps
/// a loopback geth busy without starving its other clients. Default is 16.
pub const DEFAULT_FETCH_CONCURRENCY: usize = 16;

/// Blocks per store append (one fsync). Default is 64.
pub const DEFAULT_APPEND_BATCH: usize = 64;

/// A mirror this far behind another neve bootstraps from its `/blocks`
/// stream instead of fetching block by block. Default is 128.
pub const BOOTSTRAP_MIN_BLOCKS: u64 = 128;

/// Attempts at fetching one block before a sync step gives up on it: a
/// transient failure (429, 5xx, timeout, garbage, a block that does not
/// verify) is retried at once with a short backoff, so one bad answer does
/// not cost a whole step. Default is 5.
pub const FETCH_ATTEMPTS: u32 = 5;

/// Lines of the `/blocks` stream verified and appended together (split
/// over the cores): whichever of these comes first. Batches start at the
/// first size, so appending starts early, and double up to the last, so a
/// chain of small blocks is not one fsync per handful of blocks.
const BOOTSTRAP_BATCH_LINES: usize = 2048;
const BOOTSTRAP_BATCH_BYTES: std::ops::RangeInclusive<usize> = (256 << 10)..=(4 << 20);

/// Where a new store starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Floor {
    /// At this height (`0` mirrors from genesis).
    Height(u64),
    /// At the upstream's head when first synced.
    Tip,
    /// The retention window back from the head (all of it without a
    /// retention limit). The default.
    Retention,
}

/// How the follower behaves.
#[derive(Clone, Debug)]
pub struct IngestConfig {
    /// Where an empty store starts.
    pub floor: Floor,
    /// The store's block retention, used by [`Floor::Retention`].
    pub retain_blocks: Option<u64>,
    /// See [`DEFAULT_MAX_REORG_DEPTH`].
    pub max_reorg_depth: u64,
    /// See [`DEFAULT_FETCH_CONCURRENCY`].
    pub fetch_concurrency: usize,
    /// See [`DEFAULT_APPEND_BATCH`].
    pub append_batch: usize,
    /// The upstream is another neve: identity, head and tags come from its
    /// `/health`, and a long way behind is closed from its `/blocks` stream.
    pub mirror: bool,
}

impl Default for IngestConfig {
    fn default() -> Self {
        IngestConfig {
            floor: Floor::Retention,
            retain_blocks: None,
            max_reorg_depth: DEFAULT_MAX_REORG_DEPTH,
            fetch_concurrency: DEFAULT_FETCH_CONCURRENCY,
            append_batch: DEFAULT_APPEND_BATCH,
            mirror: false,
        }
    }
}

/// What the upstream offers beyond the basics, found by probing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `eth_getBlockReceipts` (else receipts are fetched per transaction).
    pub block_receipts: bool,
    /// `debug_getRawHeader`, `debug_getRawBlock`, `debug_getRawReceipts`.
    pub raw: bool,
}

/// Live counters for health and metrics; all reads are O(1).
#[derive(Debug, Default)]
pub struct IngestStatus {
    /// The upstream's head at the last sync.
    pub upstream_head: AtomicU64,
    /// The upstream's `safe` height + 1 (0: unknown).
    safe_plus_one: AtomicU64,
    /// The upstream's `finalized` height + 1 (0: unknown).
    finalized_plus_one: AtomicU64,
    /// Whether the last exchange with the upstream succeeded.
    pub connected: AtomicBool,
    /// Unix milliseconds of the last exchange that succeeded.
    pub last_contact_unix_ms: AtomicU64,
    /// Unix milliseconds of the last block appended.
    pub last_block_unix_ms: AtomicU64,
    /// Blocks that failed preparation or verification (never stored).
    pub refused_blocks: AtomicU64,
    /// Reorgs followed by a rollback.
    pub reorgs: AtomicU64,
    /// Blocks appended since start.
    pub appended_blocks: AtomicU64,
    /// Set once a sync step has read the upstream's head.
    head_known: AtomicBool,
    /// Notified after every append and rollback.
    pub changed: Arc<tokio::sync::Notify>,
    last_error: Mutex<Option<String>>,
}

impl IngestStatus {
    /// The upstream's head as of the last sync; `None` until one has read
    /// it (after a restart, the stored tip must not pass for the head).
    pub fn head(&self) -> Option<u64> {
        self.head_known
            .load(Ordering::Relaxed)
            .then(|| self.upstream_head.load(Ordering::Relaxed))
    }

    /// The upstream's `safe` height, if it has one.
    pub fn safe(&self) -> Option<u64> {
        self.safe_plus_one.load(Ordering::Relaxed).checked_sub(1)
    }

    /// The upstream's `finalized` height, if it has one.
    pub fn finalized(&self) -> Option<u64> {
        self.finalized_plus_one
            .load(Ordering::Relaxed)
            .checked_sub(1)
    }

    /// The last error the follower hit, if the last sync failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn contact(&self, ok: bool) {
        self.connected.store(ok, Ordering::Relaxed);
        if ok {
            self.last_contact_unix_ms
                .store(unix_ms(), Ordering::Relaxed);
        }
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Why a sync step failed.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// A call to the upstream failed.
    #[error("{step}: {source}")]
    Rpc {
        /// What was being done.
        step: &'static str,
        /// The error.
        source: RpcError,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The upstream sent a block that is not consistent or does not verify;
    /// it was not stored and will be fetched again.
    #[error("block {height} refused: {reason}")]
    Refused {
        /// Its height.
        height: u64,
        /// Why.
        reason: String,
    },
    /// The upstream does not have a block it announced (behind, or pruned).
    #[error("the upstream has no block {0}")]
    Missing(u64),
    /// The stored chain and the upstream's share no block within the depth.
    #[error("no common ancestor within {depth} blocks below {from}: refusing to roll back further")]
    ReorgTooDeep {
        /// The configured depth.
        depth: u64,
        /// Where the search started.
        from: u64,
    },
}

fn rpc(step: &'static str) -> impl FnOnce(RpcError) -> IngestError {
    move |source| IngestError::Rpc { step, source }
}

impl IngestError {
    /// How long the upstream asked us to stay away (a 429's `Retry-After`).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            IngestError::Rpc {
                source:
                    RpcError::Http {
                        retry_after: Some(seconds),
                        ..
                    },
                ..
            } => Some(Duration::from_secs(*seconds)),
            _ => None,
        }
    }

    /// Whether the same step may succeed later without anyone acting.
    pub fn is_transient(&self) -> bool {
        match self {
            IngestError::Rpc { .. } | IngestError::Refused { .. } | IngestError::Missing(_) => true,
            IngestError::Store(_) | IngestError::ReorgTooDeep { .. } => false,
        }
    }
}

/// What one sync step did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncOutcome {
    /// The upstream's head.
    pub head: u64,
    /// Blocks appended.
    pub appended: u64,
    /// The height rolled back to, if a reorg was followed.
    pub rolled_back_to: Option<u64>,
    /// Whether the store now reaches the head.
    pub caught_up: bool,
}

/// Follows one upstream into one store.
pub struct Follower {
    client: RpcClient,
    store: Store,
    caps: Capabilities,
    config: IngestConfig,
    status: Arc<IngestStatus>,
}

#[derive(Deserialize)]
struct HashAndNumber {
    hash: alloy_primitives::B256,
    number: String,
}

impl Follower {
    /// Probes the upstream (chain id, genesis hash, capabilities) and opens
    /// the store for that chain; a store of another chain is refused.
    pub async fn connect(
        client: RpcClient,
        store_dir: &Path,
        store_config: StoreConfig,
        config: IngestConfig,
    ) -> Result<Follower, IngestError> {
        if config.mirror {
            let health = neve_health(&client).await?;
            let identity = Identity {
                chain_id: health.chain_id,
                genesis_hash: health.genesis_hash,
            };
            let store = Store::open(store_dir, identity, store_config)?;
            // Another neve serves receipts per block and raw data (as null
            // when its own upstream had none).
            let caps = Capabilities {
                block_receipts: true,
                raw: true,
            };
            tracing::info!(
                chain_id = identity.chain_id,
                url = client.url(),
                "mirroring another neve"
            );
            let status = Arc::new(IngestStatus::default());
            status.contact(true);
            return Ok(Follower {
                client,
                store,
                caps,
                config,
                status,
            });
        }
        let chain_id: String = client
            .call("eth_chainId", ())
            .await
            .map_err(rpc("eth_chainId"))?;
        let chain_id = parse_quantity(&chain_id).ok_or_else(|| IngestError::Refused {
            height: 0,
            reason: format!("eth_chainId returned {chain_id:?}"),
        })?;
        let genesis: Option<HashAndNumber> = client
            .call("eth_getBlockByNumber", ("0x0", false))
            .await
            .map_err(rpc("fetching the genesis block"))?;
        let genesis = genesis.ok_or(IngestError::Missing(0))?;
        let identity = Identity {
            chain_id,
            genesis_hash: genesis.hash.0,
        };
        let store = Store::open(store_dir, identity, store_config)?;
        let caps = probe(&client).await;
        tracing::info!(chain_id, ?caps, url = client.url(), "upstream probed");
        let status = Arc::new(IngestStatus::default());
        status.contact(true);
        Ok(Follower {
            client,
            store,
            caps,
            config,
            status,
        })
    }

    /// What the probe found.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// A reader of the store this follower writes.
    pub fn reader(&self) -> Reader {
        self.store.reader()
    }

    /// The live counters.
    pub fn status(&self) -> Arc<IngestStatus> {
        self.status.clone()
    }

    /// The store's identity (chain id, genesis).
    pub fn identity(&self) -> Identity {
        self.store.identity()
    }

    /// Brings the store up to the upstream's head: backfills from the floor
    /// or the stored tip, checking each block's parent hash; on a mismatch at
    /// the tip, rolls back to the common ancestor (the next call re-ingests).
    pub async fn sync_once(&mut self) -> Result<SyncOutcome, IngestError> {
        let result = self.sync_step().await;
        let mut last_error = self
            .status
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *last_error = result.as_ref().err().map(ToString::to_string);
        drop(last_error);
        if let Err(IngestError::Rpc { source, .. }) = &result {
            self.status.contact(!source.is_transient());
        }
        result
    }

    async fn sync_step(&mut self) -> Result<SyncOutcome, IngestError> {
        let head = if self.config.mirror {
            let health = neve_health(&self.client).await?;
            self.status
                .safe_plus_one
                .store(health.safe.map_or(0, |h| h + 1), Ordering::Relaxed);
            self.status
                .finalized_plus_one
                .store(health.finalized.map_or(0, |h| h + 1), Ordering::Relaxed);
            health.max.ok_or(IngestError::Missing(0))?
        } else {
            let head: String = self
                .client
                .call("eth_blockNumber", ())
                .await
                .map_err(rpc("eth_blockNumber"))?;
            parse_quantity(&head).ok_or(IngestError::Missing(u64::MAX))?
        };
        self.status.contact(true);
        self.status.upstream_head.store(head, Ordering::Relaxed);
        self.status.head_known.store(true, Ordering::Relaxed);
        let diverged = self.refresh_tags(head).await;
        if diverged {
            let keep = self.roll_back_to_common_ancestor().await?;
            return Ok(SyncOutcome {
                head,
                rolled_back_to: Some(keep),
                ..SyncOutcome::default()
            });
        }

        let stats = self.store.stats();
        let mut next = match stats.max_contiguous_height {
            Some(max) => max + 1,
            None => match self.config.floor {
                Floor::Height(h) => h,
                Floor::Tip => head,
                Floor::Retention => self
                    .config
                    .retain_blocks
                    .map_or(0, |keep| head.saturating_sub(keep.saturating_sub(1))),
            },
        };
        let mut outcome = SyncOutcome {
            head,
            ..SyncOutcome::default()
        };
        if self.config.mirror && head >= next && head - next + 1 >= BOOTSTRAP_MIN_BLOCKS {
            outcome.appended = self.bootstrap(next, head).await?;
            outcome.caught_up = self.store.stats().max_contiguous_height >= Some(head);
            return Ok(outcome);
        }
        // An upstream behind neve (restarted, or catching up) is waited
        // for, not followed backwards.
        while next <= head {
            let end = head.min(next + self.config.append_batch as u64 - 1);
            let client = self.client.clone();
            let caps = self.caps;
            let status = self.status.clone();
            let fetched: Vec<Result<PreparedBlock, IngestError>> = stream::iter(next..=end)
                .map(|height| fetch_verified(client.clone(), caps, height, status.clone()))
                .buffered(self.config.fetch_concurrency.max(1))
                .collect()
                .await;
            let mut tip = self.tip_hash();
            let mut batch = Vec::with_capacity(fetched.len());
            let mut stop: Option<IngestError> = None;
            let mut reorg = false;
            for result in fetched {
                match result {
                    Ok(block) => {
                        if tip.is_some_and(|hash| hash != block.parent_hash) {
                            // The first block after the stored tip not linking
                            // means the upstream reorged under us; later in the
                            // batch it means a reorg during the fetch: store
                            // the consistent prefix and look again.
                            reorg = batch.is_empty();
                            break;
                        }
                        tip = Some(block.hash);
                        batch.push(block);
                    }
                    Err(error) => {
                        // Already counted and logged by fetch_verified.
                        stop = Some(error);
                        break;
                    }
                }
            }
            if !batch.is_empty() {
                outcome.appended += self.store_blocks(&batch)?;
                next += batch.len() as u64;
            }
            if reorg {
                outcome.rolled_back_to = Some(self.roll_back_to_common_ancestor().await?);
                return Ok(outcome);
            }
            if let Some(error) = stop {
                return Err(error);
            }
            if next <= end {
                // A reorg happened mid-batch: look again from the new tip.
                return Ok(outcome);
            }
        }
        // A floor above the head waits for the chain: nothing to do yet.
        outcome.caught_up = next > head || self.store.stats().max_contiguous_height >= Some(head);
        Ok(outcome)
    }

    fn tip_hash(&self) -> Option<[u8; 32]> {
        let reader = self.store.reader();
        let max = reader.stats().max_contiguous_height?;
        reader.block(max).map(|b| b.hash())
    }

    /// Streams `from..=to` from another neve's `/blocks` export, verifies
    /// every block (split over the cores) and appends them in order.
    async fn bootstrap(&mut self, from: u64, to: u64) -> Result<u64, IngestError> {
        let (status, stream) = self
            .client
            .get_stream(&format!("/blocks?from={from}&to={to}"))
            .await
            .map_err(rpc("streaming /blocks"))?;
        if !status.is_success() {
            return Err(IngestError::Refused {
                height: from,
                reason: format!("/blocks answered {status}"),
            });
        }
        let started = std::time::Instant::now();
        // Reading (and verifying, which the reader starts per batch) runs
        // in its own task, so the stream keeps flowing while this one
        // appends; the channel's bound keeps a few batches in memory at most.
        let (batches, mut verified) = tokio::sync::mpsc::channel(2);
        let reader = tokio::spawn(read_batches(stream, from, batches));
        let mut appended = 0;
        // Where the time went, for the closing log line: waiting for the
        // next verified batch, and writing to the store.
        let (mut verifying_wait, mut storing) = (Duration::ZERO, Duration::ZERO);
        let outcome: Result<(), IngestError> = async {
            loop {
                let waited = std::time::Instant::now();
                let Some(batch) = verified.recv().await else {
                    return Ok(());
                };
                let blocks = batch.await.expect("verification does not panic")?;
                verifying_wait += waited.elapsed();
                let writing = std::time::Instant::now();
                appended += self.append_verified(blocks)?;
                storing += writing.elapsed();
            }
        }
        .await;
        if outcome.is_err() {
            // Stop reading, and drop the verifications still queued rather
            // than let them compete with the retry for the cores.
            reader.abort();
            verified.close();
            while let Ok(batch) = verified.try_recv() {
                batch.abort();
            }
        }
        outcome?;
        let (bytes_read, reading) = reader.await.expect("the reader does not panic")?;
        let seconds = started.elapsed().as_secs_f64().max(1e-6);
        tracing::info!(
            blocks = appended,
            seconds = format!("{seconds:.3}"),
            blocks_per_second = format!("{:.0}", appended as f64 / seconds),
            mb_per_second = format!("{:.1}", bytes_read as f64 / seconds / 1e6),
            reading_seconds = format!("{:.3}", reading.as_secs_f64()),
            verify_wait_seconds = format!("{:.3}", verifying_wait.as_secs_f64()),
            storing_seconds = format!("{:.3}", storing.as_secs_f64()),
            "bootstrapped from /blocks"
        );
        Ok(appended)
    }

    /// Appends verified bootstrap blocks after checking they link to the tip.
    fn append_verified(&mut self, blocks: Vec<PreparedBlock>) -> Result<u64, IngestError> {
        let mut tip = self.tip_hash();
        for block in &blocks {
            if tip.is_some_and(|hash| hash != block.parent_hash) {
                return Err(IngestError::Refused {
                    height: block.height,
                    reason: "does not link to the stored tip".into(),
                });
            }
            tip = Some(block.hash);
        }
        self.store_blocks(&blocks)
    }

    /// Appends blocks already checked to continue the tip, and books it:
    /// counters, contact with the upstream, a wake-up for subscribers.
    fn store_blocks(&mut self, blocks: &[PreparedBlock]) -> Result<u64, IngestError> {
        let views: Vec<_> = blocks.iter().map(|b| b.as_new()).collect();
        self.store.append(&views)?;
        let count = blocks.len() as u64;
        self.status
            .appended_blocks
            .fetch_add(count, Ordering::Relaxed);
        self.status
            .last_block_unix_ms
            .store(unix_ms(), Ordering::Relaxed);
        // Fetching them was an exchange with the upstream too.
        self.status.contact(true);
        self.status.changed.notify_one();
        Ok(count)
    }

    /// Updates `safe` and `finalized`, and tells whether the upstream's
    /// block at `min(head, stored tip)` differs from ours: a reorg onto a
    /// chain no longer than ours shows there, not as a parent mismatch.
    async fn refresh_tags(&self, head: u64) -> bool {
        let reader = self.store.reader();
        let check = reader
            .stats()
            .max_contiguous_height
            .map(|max| max.min(head));
        let mut calls = vec![
            ("eth_getBlockByNumber", (String::from("safe"), false)),
            ("eth_getBlockByNumber", (String::from("finalized"), false)),
        ];
        if let Some(height) = check {
            calls.push(("eth_getBlockByNumber", (quantity(height), false)));
        }
        let Ok(items) = self.client.batch(&calls).await else {
            return false;
        };
        let decode = |item: &Result<Box<RawValue>, RpcError>| {
            item.as_ref().ok().and_then(|raw| {
                serde_json::from_str::<Option<HashAndNumber>>(raw.get())
                    .ok()
                    .flatten()
            })
        };
        for (item, slot) in items
            .iter()
            .zip([&self.status.safe_plus_one, &self.status.finalized_plus_one])
        {
            let height = decode(item).and_then(|b| parse_quantity(&b.number));
            slot.store(height.map_or(0, |h| h + 1), Ordering::Relaxed);
        }
        match (check, items.get(2).and_then(decode)) {
            (Some(height), Some(upstream)) => reader
                .block(height)
                .is_some_and(|ours| ours.hash() != upstream.hash.0),
            _ => false,
        }
    }

    /// Walks down from the stored tip to the highest height whose hash the
    /// upstream agrees with, and rolls the store back to it.
    async fn roll_back_to_common_ancestor(&mut self) -> Result<u64, IngestError> {
        let reader = self.store.reader();
        let stats = reader.stats();
        let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) else {
            return Ok(0);
        };
        let lowest = max.saturating_sub(self.config.max_reorg_depth).max(min);
        let heights: Vec<u64> = (lowest..=max).collect();
        let calls: Vec<(&str, (String, bool))> = heights
            .iter()
            .map(|h| ("eth_getBlockByNumber", (quantity(*h), false)))
            .collect();
        let items = self
            .client
            .batch(&calls)
            .await
            .map_err(rpc("finding the common ancestor"))?;
        // Only definite answers count: an error, or a missing block the
        // upstream should have (at or below its head), aborts the walk rather
        // than reading as "disagrees", which could roll back everything.
        let upstream_head = self.status.upstream_head.load(Ordering::Relaxed);
        let mut upstream_hashes = Vec::with_capacity(heights.len());
        for (height, item) in heights.iter().zip(&items) {
            let raw = item.as_ref().map_err(|e| IngestError::Rpc {
                step: "finding the common ancestor",
                source: RpcError::Malformed {
                    reason: e.to_string(),
                    snippet: String::new(),
                },
            })?;
            let block: Option<HashAndNumber> =
                serde_json::from_str(raw.get()).map_err(|e| IngestError::Refused {
                    height: *height,
                    reason: format!("block while walking back: {e}"),
                })?;
            match block {
                Some(block) => upstream_hashes.push(Some(block.hash.0)),
                None if *height > upstream_head => upstream_hashes.push(None),
                None => return Err(IngestError::Missing(*height)),
            }
        }
        let ancestor = heights
            .iter()
            .zip(&upstream_hashes)
            .rev()
            .find_map(|(height, upstream)| {
                let upstream = (*upstream)?;
                (reader.block(*height)?.hash() == upstream).then_some(*height)
            });
        let keep = match ancestor {
            Some(height) => height,
            // The whole stored tail is off the upstream's chain.
            None if lowest == min => min.saturating_sub(1),
            None => {
                return Err(IngestError::ReorgTooDeep {
                    depth: self.config.max_reorg_depth,
                    from: max,
                });
            }
        };
        tracing::warn!(
            from = max,
            to = keep,
            "reorg: rolling back to the common ancestor"
        );
        self.store.rollback(keep)?;
        self.status.reorgs.fetch_add(1, Ordering::Relaxed);
        self.status.changed.notify_one();
        Ok(keep)
    }

    /// Runs [`Follower::sync_once`] until `shutdown` turns true: right away
    /// while behind, on `wake` (new heads) or every `poll` when caught up,
    /// backing off exponentially (to 5 s) after errors.
    pub async fn run(
        mut self,
        wake: Arc<tokio::sync::Notify>,
        poll: Duration,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut backoff = Duration::from_millis(100);
        loop {
            if *shutdown.borrow() {
                return;
            }
            let before = self.status.appended_blocks.load(Ordering::Relaxed);
            let result = self.sync_once().await;
            if self.status.appended_blocks.load(Ordering::Relaxed) > before {
                // Progress, even if the step then failed: no growing backoff.
                backoff = Duration::from_millis(100);
            }
            let pause = match result {
                Ok(outcome) if !outcome.caught_up => Duration::ZERO,
                Ok(_) => {
                    backoff = Duration::from_millis(100);
                    poll
                }
                Err(error) => {
                    // A 429 says how long to stay away; honour at least that.
                    let asked = error.retry_after().unwrap_or_default();
                    let pause = backoff.max(asked);
                    tracing::warn!(%error, retry_in = ?pause, "sync step failed");
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    pause
                }
            };
            if pause.is_zero() {
                continue;
            }
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.changed() => {}
            }
        }
    }
}

/// Finds what the upstream offers by trying each optional method once.
async fn probe(client: &RpcClient) -> Capabilities {
    let calls = [
        ("eth_getBlockReceipts", json!(["0x0"])),
        ("debug_getRawHeader", json!(["0x0"])),
        ("debug_getRawBlock", json!(["0x0"])),
        ("debug_getRawReceipts", json!(["0x0"])),
    ];
    match client.batch(&calls).await {
        Ok(items) => Capabilities {
            block_receipts: items[0].is_ok(),
            raw: items[1..].iter().all(Result::is_ok),
        },
        Err(_) => Capabilities::default(),
    }
}

/// Fetches block `height` with its receipts (and raw RLP when offered) in
/// one batch, prepares and verifies it off the async workers.
async fn fetch_once(
    client: RpcClient,
    caps: Capabilities,
    height: u64,
) -> Result<PreparedBlock, IngestError> {
    let number = quantity(height);
    let mut calls: Vec<(&str, Value)> = vec![("eth_getBlockByNumber", json!([number, true]))];
    if caps.block_receipts {
        calls.push(("eth_getBlockReceipts", json!([number])));
    }
    if caps.raw {
        for method in [
            "debug_getRawHeader",
            "debug_getRawBlock",
            "debug_getRawReceipts",
        ] {
            calls.push((method, json!([number])));
        }
    }
    let mut items = client
        .batch(&calls)
        .await
        .map_err(rpc("fetching a block"))?
        .into_iter();
    let block = items
        .next()
        .expect("one item per call")
        .map_err(rpc("eth_getBlockByNumber"))?;
    if block.get() == "null" {
        return Err(IngestError::Missing(height));
    }
    let receipts = if caps.block_receipts {
        items
            .next()
            .expect("one item per call")
            .map_err(rpc("eth_getBlockReceipts"))?
            .get()
            .to_owned()
    } else {
        receipts_one_by_one(&client, &block).await?
    };
    let raw = if caps.raw {
        let mut next = || -> Result<Vec<u8>, IngestError> {
            let item = items
                .next()
                .expect("one item per call")
                .map_err(rpc("debug_getRaw*"))?;
            // Another neve answers null where its upstream gave no raw data.
            Ok(if item.get() == "null" {
                Vec::new()
            } else {
                item.get().as_bytes().to_vec()
            })
        };
        RawParts {
            header: next()?,
            block: next()?,
            receipts: next()?,
        }
    } else {
        RawParts::default()
    };
    let full = block.get().to_owned();
    tokio::task::spawn_blocking(move || prepare_verified(height, &full, &receipts, raw))
        .await
        .expect("preparation does not panic")
}

/// Prepares block `height` and verifies it; any failure is a refusal.
fn prepare_verified(
    height: u64,
    full: &str,
    receipts: &str,
    raw: RawParts,
) -> Result<PreparedBlock, IngestError> {
    let refused = |reason: String| IngestError::Refused { height, reason };
    let prepared =
        prepare(full, receipts, raw).map_err(|e: PrepareError| refused(e.to_string()))?;
    if prepared.height != height {
        return Err(refused(format!(
            "asked for {height}, got {}",
            prepared.height
        )));
    }
    verify(&prepared).map_err(|e: VerifyError| refused(e.to_string()))?;
    Ok(prepared)
}

/// What a mirror reads from another neve's `/health`.
struct NeveHealth {
    chain_id: u64,
    genesis_hash: [u8; 32],
    max: Option<u64>,
    safe: Option<u64>,
    finalized: Option<u64>,
}

async fn neve_health(client: &RpcClient) -> Result<NeveHealth, IngestError> {
    #[derive(Deserialize)]
    struct Blocks {
        max_contiguous_height: Option<u64>,
        safe: Option<u64>,
        finalized: Option<u64>,
    }
    #[derive(Deserialize)]
    struct Health {
        chain_id: u64,
        genesis_hash: String,
        blocks: Blocks,
    }
    let (status, body) = client
        .get("/health")
        .await
        .map_err(rpc("reading /health"))?;
    let health: Health = serde_json::from_slice(&body).map_err(|e| IngestError::Refused {
        height: 0,
        reason: format!("/health answered {status} with no neve health document: {e}"),
    })?;
    let genesis_hash =
        fixed_hex::<32>(&health.genesis_hash).ok_or_else(|| IngestError::Refused {
            height: 0,
            reason: "/health genesis_hash malformed".into(),
        })?;
    Ok(NeveHealth {
        chain_id: health.chain_id,
        genesis_hash,
        max: health.blocks.max_contiguous_height,
        safe: health.blocks.safe,
        finalized: health.blocks.finalized,
    })
}

/// A batch of `/blocks` lines being verified.
type Verifying = tokio::task::JoinHandle<Result<Vec<PreparedBlock>, IngestError>>;

/// Reads the `/blocks` stream, cuts it into lines, starts verifying each
/// batch and hands it on in order. Returns the bytes read and the time
/// spent waiting for the source.
async fn read_batches(
    mut stream: neve_upstream::BodyStream,
    from: u64,
    batches: tokio::sync::mpsc::Sender<Verifying>,
) -> Result<(u64, Duration), IngestError> {
    let mut bytes_read = 0u64;
    let mut reading = Duration::ZERO;
    let mut cutter = LineCutter::default();
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut batch_bytes = 0;
    let mut batch_budget = *BOOTSTRAP_BATCH_BYTES.start();
    let mut lines_sent = 0;
    let mut ended = false;
    while !ended {
        let waited = std::time::Instant::now();
        let chunk = stream.next_chunk().await.map_err(rpc("reading /blocks"))?;
        reading += waited.elapsed();
        match chunk {
            Some(chunk) => {
                bytes_read += chunk.len() as u64;
                batch_bytes += cutter.cut(&chunk, &mut lines);
            }
            None => ended = true,
        }
        let full = lines.len() >= BOOTSTRAP_BATCH_LINES || batch_bytes >= batch_budget;
        if full || (ended && !lines.is_empty()) {
            batch_bytes = 0;
            batch_budget = (batch_budget * 2).min(*BOOTSTRAP_BATCH_BYTES.end());
            lines_sent += lines.len() as u64;
            let batch = tokio::spawn(verify_lines(std::mem::take(&mut lines)));
            if batches.send(batch).await.is_err() {
                break; // the appender stopped on an error of its own
            }
        }
    }
    if ended && cutter.has_partial_line() {
        return Err(IngestError::Refused {
            height: from + lines_sent,
            reason: "/blocks ended in the middle of a line".into(),
        });
    }
    Ok((bytes_read, reading))
}

/// Cuts a byte stream into newline-terminated lines.
#[derive(Default)]
struct LineCutter {
    pending: Vec<u8>,
    /// Bytes of `pending` known to hold no newline: each byte is scanned
    /// once, however many chunks a ~200 KB line arrives in.
    scanned: usize,
}

impl LineCutter {
    /// Appends `chunk`, moves every whole line (newline included) to
    /// `lines`, and returns their total length. Each line is copied out at
    /// its exact size and the buffer drops them in one move: a chunk of
    /// many short lines costs one pass, not a copy of the rest per line.
    fn cut(&mut self, chunk: &[u8], lines: &mut Vec<Vec<u8>>) -> usize {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        for offset in memchr::memchr_iter(b'\n', &self.pending[self.scanned..]) {
            let end = self.scanned + offset;
            lines.push(self.pending[start..=end].to_vec());
            start = end + 1;
        }
        self.pending.drain(..start);
        self.scanned = self.pending.len();
        start
    }

    /// Whether bytes without their newline are left.
    fn has_partial_line(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Prepares and verifies `/blocks` lines on the blocking pool, two halves
/// at once, and returns them in order.
async fn verify_lines(lines: Vec<Vec<u8>>) -> Result<Vec<PreparedBlock>, IngestError> {
    fn one(line: &[u8]) -> Result<PreparedBlock, IngestError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Line<'a> {
            #[serde(borrow)]
            number: &'a str,
            #[serde(borrow)]
            block: &'a RawValue,
            #[serde(borrow)]
            receipts: &'a RawValue,
            #[serde(borrow, default)]
            raw_header: Option<&'a RawValue>,
            #[serde(borrow, default)]
            raw_block: Option<&'a RawValue>,
            #[serde(borrow, default)]
            raw_receipts: Option<&'a RawValue>,
        }
        let refused = |reason: String| IngestError::Refused { height: 0, reason };
        let line: Line<'_> =
            serde_json::from_slice(line).map_err(|e| refused(format!("/blocks line: {e}")))?;
        let height =
            parse_quantity(line.number).ok_or_else(|| refused("/blocks line number".into()))?;
        let bytes =
            |raw: Option<&RawValue>| raw.map_or(Vec::new(), |r| r.get().as_bytes().to_vec());
        let raw = RawParts {
            header: bytes(line.raw_header),
            block: bytes(line.raw_block),
            receipts: bytes(line.raw_receipts),
        };
        prepare_verified(height, line.block.get(), line.receipts.get(), raw)
    }
    let middle = lines.len() / 2;
    let mut first = lines;
    let second = first.split_off(middle);
    let run = |half: Vec<Vec<u8>>| {
        tokio::task::spawn_blocking(move || {
            half.iter().map(|l| one(l)).collect::<Result<Vec<_>, _>>()
        })
    };
    let (a, b) = tokio::join!(run(first), run(second));
    let mut blocks = a.expect("verification does not panic")?;
    blocks.extend(b.expect("verification does not panic")?);
    Ok(blocks)
}

/// [`fetch_once`] with retries for transient failures; every refused block
/// is counted and logged, also when a later attempt succeeds.
async fn fetch_verified(
    client: RpcClient,
    caps: Capabilities,
    height: u64,
    status: Arc<IngestStatus>,
) -> Result<PreparedBlock, IngestError> {
    let mut delay = Duration::from_millis(50);
    let mut attempt = 1;
    loop {
        let error = match fetch_once(client.clone(), caps, height).await {
            Ok(block) => return Ok(block),
            Err(error) => error,
        };
        if let IngestError::Refused { height, reason } = &error {
            status.refused_blocks.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(height, %reason, "refused a block from the upstream");
        }
        // A missing block waits for the next step: the upstream is behind.
        if !error.is_transient()
            || matches!(error, IngestError::Missing(_))
            || attempt >= FETCH_ATTEMPTS
        {
            return Err(error);
        }
        let asked = error.retry_after().unwrap_or_default();
        tokio::time::sleep(delay.max(asked).min(Duration::from_secs(5))).await;
        delay *= 2;
        attempt += 1;
    }
}

/// For upstreams without `eth_getBlockReceipts`: one batch of
/// `eth_getTransactionReceipt`, joined into the array that method returns.
async fn receipts_one_by_one(client: &RpcClient, block: &RawValue) -> Result<String, IngestError> {
    #[derive(Deserialize)]
    struct Txs<'a> {
        #[serde(borrow)]
        transactions: Vec<TxHash<'a>>,
    }
    #[derive(Deserialize)]
    struct TxHash<'a> {
        #[serde(borrow)]
        hash: &'a str,
    }
    let txs: Txs<'_> = serde_json::from_str(block.get()).map_err(|e| IngestError::Refused {
        height: 0,
        reason: format!("block JSON: {e}"),
    })?;
    if txs
        .transactions
        .iter()
        .any(|t| fixed_hex::<32>(t.hash).is_none())
    {
        return Err(IngestError::Refused {
            height: 0,
            reason: "transaction hash malformed".into(),
        });
    }
    let calls: Vec<(&str, [&str; 1])> = txs
        .transactions
        .iter()
        .map(|t| ("eth_getTransactionReceipt", [t.hash]))
        .collect();
    let items = client
        .batch(&calls)
        .await
        .map_err(rpc("eth_getTransactionReceipt"))?;
    let mut out = String::from("[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item.map_err(rpc("eth_getTransactionReceipt"))?.get());
    }
    out.push(']');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_whole_across_and_within_chunks() {
        let mut cutter = LineCutter::default();
        let mut lines = Vec::new();
        assert_eq!(cutter.cut(b"ab", &mut lines), 0);
        assert_eq!(cutter.cut(b"c\nd\ne", &mut lines), 6);
        assert_eq!(lines, [b"abc\n".to_vec(), b"d\n".to_vec()]);
        assert!(cutter.has_partial_line());
        // Many short lines in one chunk, then the held-over one completed.
        let many: Vec<u8> = b"x\n".repeat(1000);
        assert_eq!(
            cutter.cut(&[b"f\n".as_slice(), &many].concat(), &mut lines),
            2003
        );
        assert_eq!(lines.len(), 1003);
        assert_eq!(lines[2], b"ef\n");
        assert!(lines[3..].iter().all(|l| l == b"x\n"));
        assert!(!cutter.has_partial_line());
    }
}
