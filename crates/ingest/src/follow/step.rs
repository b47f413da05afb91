//! One sync step: the upstream's head, backfill in order with bounded
//! bytes in flight, repairs, tags, and rollback to the common ancestor on
//! a reorg.

use std::sync::atomic::Ordering;

use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use neve_store::{Store, StoreError};
use neve_upstream::{RpcError, parse_quantity, quantity};
use serde_json::value::RawValue;

use crate::bootstrap::{Append, BOOTSTRAP_MIN_BLOCKS, bootstrap, neve_health};
use crate::error::{IngestError, rpc};
use crate::fetch::{fetch_verified, probe};
use crate::prepare::PreparedBlock;
use crate::status::unix_ms;

use super::config::{
    APPEND_BATCH_BYTES, IN_FLIGHT_COPIES, REPAIRS_PER_STEP, StartHeight, SyncOutcome,
};
use super::follower::{Follower, HashAndNumber};

impl Follower {
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

    // Long: one loop keeps fetches in flight, appends in order and tells a
    // reorg from a fetch that raced one, sharing its bounds and counters.
    async fn sync_step(&mut self) -> Result<SyncOutcome, IngestError> {
        let head = self.upstream_head().await?;
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
            None => self.first_height(head),
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

    /// The upstream's head: a node's `eth_blockNumber`, or a mirrored
    /// neve's stored tip (with its safe and finalized heights) while it
    /// follows its own upstream.
    async fn upstream_head(&mut self) -> Result<u64, IngestError> {
        Ok(if self.config.mirror {
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
        })
    }

    /// Where an empty store starts, with the upstream's head at `head`.
    fn first_height(&self, head: u64) -> u64 {
        match self.config.floor {
            StartHeight::Height(h) => h,
            StartHeight::Tip => head,
            StartHeight::Retention => self
                .config
                .retain_blocks
                .map_or(0, |keep| head.saturating_sub(keep.saturating_sub(1))),
        }
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
