//! The follower: backfill, follow, reorgs. Fetching a block is in
//! [`crate::fetch`], the mirror's bootstrap in [`crate::bootstrap`], and
//! restarting a follower that died in [`crate::supervise`].

use std::ops::RangeInclusive;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use neve_store::{Identity, Reader, Store, StoreConfig, StoreError};
use neve_upstream::{Quantity, RpcClient, RpcError, parse_quantity, quantity};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::bootstrap::{Append, BOOTSTRAP_MIN_BLOCKS, bootstrap, neve_health};
use crate::error::{IngestError, rpc};
use crate::fetch::{fetch_verified, probe};
use crate::prepare::PreparedBlock;
use crate::status::{Capabilities, IngestStatus, unix_ms};

/// Deepest reorg followed by rolling back; deeper ones are refused loudly,
/// since they mean a confused upstream more often than a real chain event.
/// Default is 64.
pub const DEFAULT_MAX_REORG_DEPTH: u64 = 64;

/// Damaged blocks fetched again per sync step (once caught up): repair
/// never delays the tip by more than a few blocks' fetches. Default is 4.
pub const REPAIRS_PER_STEP: usize = 4;

/// Blocks fetched at once during backfill. Each is one HTTP batch; 16 keeps
/// a loopback geth busy without starving its other clients. Default is 16.
pub const DEFAULT_FETCH_CONCURRENCY: usize = 16;

/// How often the follower asks the upstream for its head (one
/// `eth_blockNumber` sent past the pause, [`RpcClient::probe`]) while a
/// refusal's pause holds every other request: once a block interval
/// (learnt from the blocks stored), within these bounds. A provider that
/// refused with a day's `Retry-After` (clamped to 5 minutes) and then
/// recovers is seen within one block interval on a chain of 1 s blocks and
/// within 5 s on any, and its answer ends the pause, so neve follows again
/// about two block intervals after the recovery rather than minutes. One
/// cheap call a second at most is a tenth of what following at the tip
/// asks (a head every `--poll-ms`, 100 ms); backfill, proofs and state
/// fetches honour the pause until a probe ends it. Default is 1 s to 5 s.
pub const PAUSED_PROBE_EVERY: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(5);

/// The period of the probes sent while paused for a chain of blocks
/// `interval` apart (unknown: the shortest); see [`PAUSED_PROBE_EVERY`].
pub fn probe_period(interval: Option<Duration>) -> Duration {
    interval
        .unwrap_or_default()
        .clamp(*PAUSED_PROBE_EVERY.start(), *PAUSED_PROBE_EVERY.end())
}

/// Most blocks per store append (one fsync). Default is 64.
pub const DEFAULT_APPEND_BATCH: usize = 64;

/// Bytes of prepared blocks ingest may hold at once: fetched and being
/// verified, and waiting to be appended. Fetches in flight are limited by
/// it (at the size of recent blocks) as well as by their count, so a chain
/// of 5 MB blocks does not cost sixteen times that per fetch in flight.
/// A block in flight costs several times its bytes (the answer, the
/// decoded values verification checks, the prepared record), so the
/// process's peak is a few times this. Backfilling 129 blocks of ~1,400
/// transactions from geth (2026-11-26, two rounds alternated): 24 MiB
/// peaked at 145–153 MiB of anonymous memory at 7.5–8.7 blocks/s; 12 MiB
/// at 80–81 MiB and 7.9–8.0 blocks/s; 8 MiB at 75–80 MiB and 6.8–7.9
/// blocks/s. 12 keeps a backfill of big blocks under the 64 MiB serving
/// budget plus a state cache's, at a backfill rate within the noise of
/// twice the buffer. Default is 12 MiB.
pub const DEFAULT_INGEST_BUFFER_BYTES: usize = 12 << 20;

/// Blocks waiting to be appended are appended once they weigh this much,
/// even short of [`DEFAULT_APPEND_BATCH`]. Default is 8 MiB.
const APPEND_BATCH_BYTES: usize = 8 << 20;

/// A block being fetched and verified is held in about this many copies at
/// its peak: the answer, the prepared record, and what verification decodes
/// (transactions, receipts with their logs).
const IN_FLIGHT_COPIES: usize = 4;

/// The size a block is assumed to have before any was fetched: large, so
/// the first fetches are few (two at the default buffer) until real sizes
/// are known; the estimate falls to the real size within a few blocks.
const FIRST_BLOCK_BYTES_GUESS: usize = DEFAULT_INGEST_BUFFER_BYTES / IN_FLIGHT_COPIES / 2;

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
    /// See [`DEFAULT_INGEST_BUFFER_BYTES`].
    pub buffer_bytes: usize,
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
            buffer_bytes: DEFAULT_INGEST_BUFFER_BYTES,
            mirror: false,
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

/// The store's writer, shared by the follower and whoever restarts it:
/// readers hold views of this store, so a restarted follower must go on
/// writing the same one, never reopen it.
pub type SharedStore = Arc<Mutex<Store>>;

/// Follows one upstream into one store.
pub struct Follower {
    client: RpcClient,
    store: SharedStore,
    reader: Reader,
    identity: Identity,
    caps: Capabilities,
    /// When the upstream was last probed, and whether a failed step asks
    /// for probing again.
    probed_at: std::time::Instant,
    reprobe: bool,
    /// The size of recent prepared blocks (a moving average), to bound
    /// fetches in flight by bytes.
    block_bytes: usize,
    config: IngestConfig,
    status: Arc<IngestStatus>,
    /// Whether the upstream was reached and probed; a follower opened
    /// [`Follower::offline`] is not, and resumes before it follows.
    online: bool,
}

#[derive(Deserialize)]
pub(crate) struct HashAndNumber {
    pub(crate) hash: alloy_primitives::B256,
    pub(crate) number: String,
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
        let identity = upstream_identity(&client, config.mirror).await?;
        let dir = store_dir.to_path_buf();
        // Opening replays and checks the newest segment: file I/O, off the
        // async workers.
        let store = tokio::task::spawn_blocking(move || Store::open(&dir, identity, store_config))
            .await
            .expect("opening the store does not panic")?;
        let status = Arc::new(IngestStatus::default());
        Follower::resume(client, Arc::new(Mutex::new(store)), config, status).await
    }

    /// Opens the store already in `store_dir` for the chain its META names,
    /// without reaching the upstream: for serving the stored tail while the
    /// upstream refuses or cannot be reached (a wrong key, a wrong
    /// certificate, an outage). The follower is down, with `why` as its
    /// last error, until it resumes; `None` when there is no store yet.
    pub async fn offline(
        client: RpcClient,
        store_dir: &Path,
        store_config: StoreConfig,
        config: IngestConfig,
        why: String,
    ) -> Result<Option<Follower>, IngestError> {
        let Some(identity) = neve_store::stored_identity(store_dir) else {
            return Ok(None);
        };
        let dir = store_dir.to_path_buf();
        let store = tokio::task::spawn_blocking(move || Store::open(&dir, identity, store_config))
            .await
            .expect("opening the store does not panic")?;
        let status = Arc::new(IngestStatus::default());
        status.follower_down.store(true, Ordering::Relaxed);
        status.set_last_error(Some(why));
        status.contact(false);
        Ok(Some(Follower {
            client,
            reader: store.reader(),
            store: Arc::new(Mutex::new(store)),
            identity,
            caps: Capabilities::default(),
            probed_at: std::time::Instant::now(),
            reprobe: true,
            block_bytes: FIRST_BLOCK_BYTES_GUESS,
            config,
            status,
            online: false,
        }))
    }

    /// Whether the upstream was reached (see [`Follower::offline`]).
    pub fn is_online(&self) -> bool {
        self.online
    }

    /// A follower for a store already open (after the previous one died):
    /// checks the upstream still serves the store's chain and probes it
    /// again. A store whose writer panicked mid-write is not written again.
    pub async fn resume(
        client: RpcClient,
        store: SharedStore,
        config: IngestConfig,
        status: Arc<IngestStatus>,
    ) -> Result<Follower, IngestError> {
        let (reader, stored) = {
            let guard = store.lock().map_err(|_| IngestError::WriterPoisoned)?;
            (guard.reader(), guard.identity())
        };
        let identity = upstream_identity(&client, config.mirror).await?;
        if identity != stored {
            return Err(IngestError::Refused {
                height: 0,
                reason: format!(
                    "the upstream serves chain {} with another genesis than the store's chain {}",
                    identity.chain_id, stored.chain_id
                ),
            });
        }
        let caps = if config.mirror {
            // Another neve serves receipts per block and raw data (as null
            // when its own upstream had none).
            Capabilities {
                block_receipts: true,
                raw: true,
            }
        } else {
            probe(&client).await?
        };
        status.publish_capabilities(caps);
        status.publish_state_window(crate::fetch::probe_state_window(&client).await);
        tracing::info!(
            chain_id = stored.chain_id,
            ?caps,
            url = client.url(),
            mirror = config.mirror,
            "upstream probed"
        );
        status.contact(true);
        Ok(Follower {
            client,
            store,
            reader,
            identity: stored,
            caps,
            probed_at: std::time::Instant::now(),
            reprobe: false,
            block_bytes: FIRST_BLOCK_BYTES_GUESS,
            config,
            status,
            online: true,
        })
    }

    /// The store this follower writes, to hand to a successor.
    pub fn shared_store(&self) -> SharedStore {
        self.store.clone()
    }

    /// The upstream this follower reads.
    pub fn client(&self) -> &RpcClient {
        &self.client
    }

    /// How this follower was configured.
    pub fn config(&self) -> &IngestConfig {
        &self.config
    }

    /// What the probe found.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// A reader of the store this follower writes.
    pub fn reader(&self) -> Reader {
        self.reader.clone()
    }

    /// The live counters.
    pub fn status(&self) -> Arc<IngestStatus> {
        self.status.clone()
    }

    /// The store's identity (chain id, genesis).
    pub fn identity(&self) -> Identity {
        self.identity
    }

    /// Brings the store up to the upstream's head: backfills from the floor
    /// or the stored tip, checking each block's parent hash; on a mismatch at
    /// the tip, rolls back to the common ancestor (the next call re-ingests).
    pub async fn sync_once(&mut self) -> Result<SyncOutcome, IngestError> {
        self.reprobe_if_due().await;
        let result = self.sync_step().await;
        if result.as_ref().is_ok_and(|outcome| outcome.caught_up) {
            self.repair_damaged().await;
        }
        // A failed step may be a method the upstream stopped offering.
        self.reprobe |= result.is_err();
        self.status
            .set_last_error(result.as_ref().err().map(ToString::to_string));
        match &result {
            Err(error @ (IngestError::Store(_) | IngestError::WriterPoisoned)) => {
                self.status.set_store_error(Some(error.to_string()));
            }
            Ok(_) => self.status.set_store_error(None),
            Err(_) => {}
        }
        // Only an exchange that succeeded is contact: an answer that will
        // not change (a JSON-RPC error, a body that is not JSON-RPC, a
        // result of another shape) is no more a sign of an upstream that
        // serves than a timeout is; a provider over quota answers -32005
        // with 200, a proxy its HTML page (issue 42).
        if let Err(IngestError::Rpc { .. }) = &result {
            self.status.contact(false);
        }
        result
    }

    async fn sync_step(&mut self) -> Result<SyncOutcome, IngestError> {
        let head = if self.config.mirror {
            let health = neve_health(&self.client).await?;
            if !health.following {
                // Its tip is not the chain's: no contact with the chain,
                // so `latest` here turns 421 as it has there.
                self.status.contact(false);
                return Err(IngestError::Refused {
                    height: 0,
                    reason: "the neve mirrored does not follow its upstream now".into(),
                });
            }
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
        self.status.heard_head(head);
        let diverged = self.refresh_tags(head).await;
        if diverged {
            let keep = self.roll_back_to_common_ancestor().await?;
            return Ok(SyncOutcome {
                head,
                rolled_back_to: Some(keep),
                ..SyncOutcome::default()
            });
        }

        let stats = self.reader.stats();
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
            let client = self.client.clone();
            outcome.appended = bootstrap(&client, next, head, self).await?;
            outcome.caught_up = self.reader.stats().max_contiguous_height >= Some(head);
            return Ok(outcome);
        }
        crate::cpu::set_at_tip((head + 1).saturating_sub(next));
        // An upstream behind neve (restarted, or catching up) is waited
        // for, not followed backwards.
        if next > head {
            outcome.caught_up = true;
            return Ok(outcome);
        }
        // Blocks are fetched `fetch_concurrency` at a time, but no more than
        // the ingest buffer holds by the size of recent blocks, and appended
        // in order as they arrive, in batches of `append_batch` blocks or
        // APPEND_BATCH_BYTES, whichever comes first: what ingest holds is
        // bounded by bytes, whatever the blocks weigh.
        let (client, caps, status) = (self.client.clone(), self.caps, self.status.clone());
        let mut in_flight = FuturesOrdered::new();
        let mut to_fetch = next;
        let mut batch: Vec<PreparedBlock> = Vec::new();
        let mut batch_bytes = 0;
        let mut tip = self.tip_hash();
        let mut stop: Option<IngestError> = None;
        let mut reorg = false;
        loop {
            while to_fetch <= head
                && in_flight.len() < self.config.fetch_concurrency.max(1)
                && (in_flight.is_empty()
                    || batch_bytes + (in_flight.len() + 1) * self.block_bytes * IN_FLIGHT_COPIES
                        <= self.config.buffer_bytes)
            {
                in_flight.push_back(fetch_verified(
                    client.clone(),
                    caps,
                    to_fetch,
                    status.clone(),
                ));
                to_fetch += 1;
            }
            let Some(result) = in_flight.next().await else {
                break;
            };
            let block = match result {
                Ok(block) => block,
                Err(error) => {
                    // Already counted and logged by fetch_verified.
                    stop = Some(error);
                    break;
                }
            };
            if tip.is_some_and(|hash| hash != block.parent_hash) {
                // Not linking to what this step has so far means the
                // upstream reorged: under us (roll back), or during the
                // fetch (store the consistent prefix and look again).
                reorg = batch.is_empty();
                break;
            }
            tip = Some(block.hash);
            let bytes = block.bytes();
            self.block_bytes = (self.block_bytes * 3 + bytes) / 4;
            batch_bytes += bytes;
            batch.push(block);
            if batch.len() >= self.config.append_batch.max(1) || batch_bytes >= APPEND_BATCH_BYTES {
                next += batch.len() as u64;
                outcome.appended += self.store_blocks(std::mem::take(&mut batch)).await?;
                batch_bytes = 0;
            }
        }
        // Whatever is still being fetched is dropped with the step.
        drop(in_flight);
        if !batch.is_empty() {
            next += batch.len() as u64;
            outcome.appended += self.store_blocks(batch).await?;
        }
        if reorg {
            outcome.rolled_back_to = Some(self.roll_back_to_common_ancestor().await?);
            return Ok(outcome);
        }
        if let Some(error) = stop {
            return Err(error);
        }
        // A floor above the head waits for the chain: nothing to do yet.
        outcome.caught_up = next > head || self.reader.stats().max_contiguous_height >= Some(head);
        Ok(outcome)
    }

    fn tip_hash(&self) -> Option<[u8; 32]> {
        let reader = self.reader.clone();
        let max = reader.stats().max_contiguous_height?;
        reader.block(max).map(|b| b.hash())
    }

    /// Asks the upstream again what it offers, after a failed step or every
    /// [`REPROBE_INTERVAL`](crate::fetch::REPROBE_INTERVAL); a probe that
    /// fails keeps what the last one found.
    async fn reprobe_if_due(&mut self) {
        let due = self.reprobe || self.probed_at.elapsed() >= crate::fetch::REPROBE_INTERVAL;
        if !due {
            return;
        }
        self.status
            .publish_state_window(crate::fetch::probe_state_window(&self.client).await);
        if self.config.mirror {
            self.reprobe = false;
            self.probed_at = std::time::Instant::now();
            return;
        }
        if let Ok(caps) = probe(&self.client).await {
            if caps != self.caps {
                tracing::warn!(was = ?self.caps, now = ?caps, "the upstream offers other methods now");
            }
            self.caps = caps;
            self.status.publish_capabilities(caps);
            self.reprobe = false;
            self.probed_at = std::time::Instant::now();
        }
    }

    /// Runs `write` on the store on ingest's threads: appends, rollbacks,
    /// sealing and pruning copy, hash and fsync, and none of that may stall
    /// a worker that serves requests or compete with it for the CPU. A
    /// panic in `write` is carried on to this task (and from there to the
    /// supervisor).
    async fn write_store<R: Send + 'static>(
        &self,
        write: impl FnOnce(&mut Store) -> Result<R, StoreError> + Send + 'static,
    ) -> Result<R, IngestError> {
        let store = self.store.clone();
        crate::cpu::run(move || {
            let mut store = store.lock().map_err(|_| IngestError::WriterPoisoned)?;
            write(&mut store).map_err(IngestError::from)
        })
        .await
    }

    /// Fetches again, verified as any block, up to [`REPAIRS_PER_STEP`] of
    /// the blocks the store found damaged, and has the store write each
    /// back over its damaged record (the store checks it is the block
    /// stored there). Only when caught up: the tip comes first. A block
    /// that cannot be fetched or is refused stays a counted miss, and is
    /// tried again at a later step.
    async fn repair_damaged(&mut self) {
        let store = self.store.clone();
        let damaged = crate::cpu::run(move || {
            store
                .lock()
                .map(|store| store.damaged_heights())
                .unwrap_or_default()
        })
        .await;
        for height in damaged.into_iter().take(REPAIRS_PER_STEP) {
            let fetched =
                fetch_verified(self.client.clone(), self.caps, height, self.status.clone()).await;
            let block = match fetched {
                Ok(block) => block,
                Err(error) => {
                    tracing::warn!(height, %error, "a damaged block could not be fetched again");
                    continue;
                }
            };
            match self
                .write_store(move |store| store.repair(&block.as_new()))
                .await
            {
                Ok(neve_store::Repair::Refused(why)) => {
                    tracing::warn!(
                        height,
                        why,
                        "a damaged block was fetched again but not written back"
                    );
                }
                Ok(_) => {}
                Err(error) => tracing::warn!(height, %error, "repairing a damaged block failed"),
            }
        }
    }

    /// Appends blocks already checked to continue the tip, and books it:
    /// counters, contact with the upstream, a wake-up for subscribers.
    async fn store_blocks(&mut self, blocks: Vec<PreparedBlock>) -> Result<u64, IngestError> {
        let count = blocks.len() as u64;
        let times: Vec<(u64, u64)> = blocks
            .iter()
            .filter_map(|b| Some((b.height, b.time?)))
            .collect();
        self.write_store(move |store| {
            let views: Vec<_> = blocks.iter().map(|b| b.as_new()).collect();
            store.append(&views)
        })
        .await?;
        self.status
            .appended_blocks
            .fetch_add(count, Ordering::Relaxed);
        self.status
            .last_block_unix_ms
            .store(unix_ms(), Ordering::Relaxed);
        self.status.note_block_times(times);
        // Fetching them was an exchange with the upstream too.
        self.status.contact(true);
        self.status.changed.notify_one();
        Ok(count)
    }

    /// Updates `safe` and `finalized`, and tells whether the upstream's
    /// block at `min(head, stored tip)` differs from ours: a reorg onto a
    /// chain no longer than ours shows there, not as a parent mismatch.
    async fn refresh_tags(&self, head: u64) -> bool {
        let reader = self.reader.clone();
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
        let reader = self.reader.clone();
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
        self.write_store(move |store| store.rollback(keep)).await?;
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
        self.status.follower_down.store(false, Ordering::Relaxed);
        let mut backoff = Duration::from_millis(100);
        let mut appended_since_trim = 0u64;
        let mut backlog_since_trim = false;
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
            let appended = self
                .status
                .appended_blocks
                .load(Ordering::Relaxed)
                .saturating_sub(before);
            appended_since_trim += appended;
            let pause = match result {
                Ok(outcome) if !outcome.caught_up => {
                    backlog_since_trim = true;
                    Duration::ZERO
                }
                Ok(_) => {
                    backoff = Duration::from_millis(100);
                    // A backfill (or a burst of more than one block) has
                    // just been drained: its buffers are free now, and the
                    // tip needs a fraction of them.
                    if backlog_since_trim
                        || appended > 1
                        || appended_since_trim >= TRIM_AFTER_BLOCKS
                    {
                        appended_since_trim = 0;
                        backlog_since_trim = false;
                        give_memory_back().await;
                    }
                    poll
                }
                Err(error) if self.client.pacing().is_paused() => {
                    // A refusal's pause holds every request (up to the
                    // 5 minute clamp of a daily quota's Retry-After): the
                    // head is asked past it every block or so, and the
                    // first answer ends it.
                    let pacing = self.client.pacing();
                    tracing::warn!(
                        %error,
                        pause_left_ms = pacing.paused_for().unwrap_or_default().as_millis() as u64,
                        probe_every_ms = probe_period(self.status.block_interval()).as_millis() as u64,
                        "sync step failed; waiting out the upstream's pause, its head asked past it"
                    );
                    if wait_out_pause(&self.client, &self.status, &mut shutdown).await {
                        backoff = Duration::from_millis(100);
                    }
                    continue;
                }
                Err(error) => {
                    // A 429 says how long to stay away; honour at least that.
                    // Jitter keeps mirrors restarted together from asking
                    // again in step.
                    let asked = error.retry_after().unwrap_or_default();
                    let pause = backoff.max(asked) + neve_upstream::jitter(backoff / 4);
                    tracing::warn!(%error, retry_in_ms = pause.as_millis() as u64, "sync step failed");
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

impl Append for Follower {
    /// Appends verified bootstrap blocks after checking they link to the tip.
    async fn append(&mut self, blocks: Vec<PreparedBlock>) -> Result<u64, IngestError> {
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
        self.store_blocks(blocks).await
    }
}

/// Waits while a refusal's pause holds every request to the upstream,
/// asking it for its head every [`probe_period`] past the pause; returns
/// once a probe is answered with a head (which ends the pause for every
/// request, and is contact: the head is published, so the stored tip of
/// before the pause is not taken for it), the pause runs out, or
/// `shutdown` changes.
/// `true` when a probe was answered.
pub(crate) async fn wait_out_pause(
    client: &RpcClient,
    status: &IngestStatus,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> bool {
    let pacing = client.pacing();
    loop {
        let Some(left) = pacing.paused_for() else {
            return false;
        };
        let every = probe_period(status.block_interval());
        // A pause shorter than a probe's period is waited out; jitter keeps
        // mirrors paused together from probing in step.
        let wait = if left <= every {
            left
        } else {
            every + neve_upstream::jitter(every / 4)
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return false,
        }
        if !pacing.is_paused() {
            return false;
        }
        match client.probe::<Quantity>("eth_blockNumber", ()).await {
            Ok(Quantity(head)) => {
                status.heard_head(head);
                tracing::info!(
                    head,
                    "the paused upstream answered a probe; following again"
                );
                return true;
            }
            Err(error) => tracing::debug!(%error, "the paused upstream did not answer a probe"),
        }
    }
}

/// Caught up after a backfill or a burst of blocks, or after appending at
/// least this many blocks at the tip, the follower hands the allocator's
/// free memory back to the OS: a backfill's buffers are freed but stay
/// resident otherwise (glibc keeps them in its arenas). Default is 64.
const TRIM_AFTER_BLOCKS: u64 = 64;

/// Returns free heap memory to the OS (glibc's `malloc_trim`), on the
/// blocking pool since it walks the heap.
async fn give_memory_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    let _ = tokio::task::spawn_blocking(|| {
        // SAFETY: malloc_trim only releases free memory; it is thread-safe.
        unsafe { libc::malloc_trim(0) };
    })
    .await;
}

/// Which chain the upstream serves: its chain id and genesis hash, from
/// `eth_chainId` and block 0, or from another neve's `/health`.
async fn upstream_identity(client: &RpcClient, mirror: bool) -> Result<Identity, IngestError> {
    if mirror {
        let health = neve_health(client).await?;
        return Ok(Identity {
            chain_id: health.chain_id,
            genesis_hash: health.genesis_hash,
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
    Ok(Identity {
        chain_id,
        genesis_hash: genesis.hash.0,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use neve_store::{Durability, Identity};

    use super::*;
    use crate::testing::{ok, response, upstream};

    /// A follower of `url` over a new store in `dir`, opened as after a
    /// start that could not reach the upstream: never heard from yet. Its
    /// floor is block 1, so a head of 0 leaves nothing to fetch.
    async fn follower_of(url: &str, dir: &Path) -> Follower {
        let identity = Identity {
            chain_id: 1337,
            genesis_hash: [7; 32],
        };
        let store = StoreConfig {
            durability: Durability::OsBuffered,
            ..StoreConfig::default()
        };
        drop(Store::open(dir, identity, store.clone()).unwrap());
        let config = IngestConfig {
            floor: Floor::Height(1),
            ..IngestConfig::default()
        };
        let client = RpcClient::new(url).unwrap();
        Follower::offline(client, dir, store, config, "not reached yet".into())
            .await
            .unwrap()
            .expect("a store is there")
    }

    /// Issue 42 (4): a provider over quota answers `eth_blockNumber` with
    /// 200 and a JSON-RPC error, a proxy with its page; neither, nor a
    /// body cut short nor a result of another shape, is contact, so the
    /// silence bound runs on and `latest` turns 421. A head is.
    #[tokio::test]
    async fn answers_with_200_that_are_not_a_head_are_not_contact() {
        let not_a_head = [
            r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32005,"message":"daily request limit reached"}}"#,
            "<html><body><h1>Over quota</h1></body></html>",
            r#"{"jsonrpc":"2.0","id":0,"result":"0x1"#,
            r#"{"jsonrpc":"2.0","id":0,"result":null}"#,
            r#"{"jsonrpc":"2.0","id":0,"result":{"number":"0x1"}}"#,
            r#"{"jsonrpc":"2.0","id":0,"result":"latest"}"#,
        ];
        for body in not_a_head {
            let (url, requests) = upstream(move |_| ok(body)).await;
            let dir = tempfile::tempdir().unwrap();
            let mut follower = follower_of(&url, dir.path()).await;
            let status = follower.status();
            assert!(follower.sync_once().await.is_err(), "{body}");
            assert!(requests.load(Ordering::SeqCst) > 0);
            assert_eq!(
                status.last_contact_unix_ms.load(Ordering::Relaxed),
                0,
                "{body} counted as contact"
            );
            assert!(!status.connected.load(Ordering::Relaxed), "{body}");
        }
        let (url, _) = upstream(|body| {
            if body.contains("eth_blockNumber") {
                ok(r#"{"jsonrpc":"2.0","id":0,"result":"0x0"}"#)
            } else {
                ok(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"no"}}"#)
            }
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let mut follower = follower_of(&url, dir.path()).await;
        follower.sync_once().await.unwrap();
        assert!(
            follower
                .status()
                .last_contact_unix_ms
                .load(Ordering::Relaxed)
                > 0
        );
    }

    /// Issue 42 (5): a 429 with `Retry-After: 86400` pauses every request
    /// for the 5 minute clamp; the follower asks for the head past the
    /// pause every [`PAUSED_PROBE_EVERY`], so a provider that recovers is
    /// followed again within a couple of seconds, not minutes. Until then
    /// only those probes reach it.
    #[tokio::test]
    async fn a_paused_upstream_is_probed_and_followed_again_soon_after_it_recovers() {
        let recovered = Arc::new(AtomicBool::new(false));
        let served = recovered.clone();
        let (url, requests) = upstream(move |body| {
            if !served.load(Ordering::SeqCst) {
                response(
                    "429 Too Many Requests",
                    &["retry-after: 86400"],
                    r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32005,"message":"daily request limit reached"}}"#,
                )
            } else if body.contains("eth_blockNumber") {
                ok(r#"{"jsonrpc":"2.0","id":0,"result":"0x0"}"#)
            } else {
                ok(r#"{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"no"}}"#)
            }
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let follower = follower_of(&url, dir.path()).await;
        let (status, pacing) = (follower.status(), follower.client().pacing().clone());
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(follower.run(
            Arc::new(tokio::sync::Notify::new()),
            Duration::from_millis(100),
            shutdown,
        ));
        until("paused", Duration::from_secs(5), || pacing.is_paused()).await;
        assert!(pacing.paused_for().unwrap() > Duration::from_secs(290));
        tokio::time::sleep(Duration::from_millis(2500)).await;
        // The refusal, then a probe every 1 to 1.25 s: at most three more.
        let sent = requests.load(Ordering::SeqCst);
        assert!((2..=4).contains(&sent), "{sent} requests while paused");
        assert_eq!(status.last_contact_unix_ms.load(Ordering::Relaxed), 0);
        recovered.store(true, Ordering::SeqCst);
        let since = unix_ms();
        let took = until("followed again", Duration::from_secs(3), || {
            !pacing.is_paused() && status.last_contact_unix_ms.load(Ordering::Relaxed) >= since
        })
        .await;
        assert!(took <= *PAUSED_PROBE_EVERY.start() * 2, "{took:?}");
        // And steps follow again: the head is asked at the poll's pace.
        let after = requests.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(requests.load(Ordering::SeqCst) >= after + 3);
        stop.send(true).unwrap();
        running.await.unwrap();
    }

    /// Waits until `done`, failing past `within`; how long it took.
    async fn until(what: &str, within: Duration, done: impl Fn() -> bool) -> Duration {
        let started = std::time::Instant::now();
        while !done() {
            assert!(started.elapsed() < within, "not {what} within {within:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        started.elapsed()
    }

    #[test]
    fn the_probe_period_is_a_block_interval_within_its_bounds() {
        assert_eq!(probe_period(None), Duration::from_secs(1));
        assert_eq!(
            probe_period(Some(Duration::from_millis(250))),
            Duration::from_secs(1)
        );
        assert_eq!(
            probe_period(Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert_eq!(
            probe_period(Some(Duration::from_secs(12))),
            Duration::from_secs(5)
        );
    }
}
