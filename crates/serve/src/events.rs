//! Chain events for subscribers: new blocks and rollbacks, found by watching
//! the store's tip. Payloads are prepared once per block and shared by every
//! subscriber.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use neve_pool::Pool;
use neve_store::{Block, Reader};
use tokio::sync::broadcast;

use crate::config::ChainView;
use crate::metrics::Metrics;

/// Blocks remembered below the tip, to tell rollbacks apart from growth and
/// to replay the logs of removed blocks with `removed: true`. Reorgs deeper
/// than this reach subscribers as a jump without removed logs. Default is 256.
pub const REMEMBERED_BLOCKS: usize = 256;

/// Events buffered per subscriber connection; a subscriber that falls this
/// far behind is disconnected rather than allowed to hold memory. Default is 1,024.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// How often the tip is checked when the chain view offers no notification.
const POLL: Duration = Duration::from_millis(20);

/// Something that happened to the stored chain.
#[derive(Clone)]
pub(crate) enum Event {
    /// A block became part of the stored chain.
    Added { block: Block, head: Bytes },
    /// A block left it (a reorg), newest first.
    Removed { block: Block },
}

/// The header of a block, as `newHeads` sends it: the hashes-only block
/// without its body fields. Done once per block, off the request path.
pub(crate) fn header_json(block: &Block) -> Bytes {
    // A damaged record (counted and logged by the store) heads as null.
    let Ok(hashes_only) = block.hashes_only() else {
        return Bytes::from_static(b"null");
    };
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_slice(&hashes_only) else {
        return hashes_only;
    };
    for body_field in [
        "transactions",
        "uncles",
        "withdrawals",
        "size",
        "totalDifficulty",
    ] {
        fields.remove(body_field);
    }
    Bytes::from(serde_json::to_vec(&fields).expect("a map serialises"))
}

/// Pause before restarting a watcher that panicked; a crash loop costs a
/// log line a second, not a core. Default is 1 s.
const WATCH_RESTART_PAUSE: Duration = Duration::from_secs(1);

/// Runs [`watch`] and restarts it whenever it panics (counted in
/// `restarts`), so subscribers never silently stop hearing of blocks.
pub(crate) async fn watch_supervised(
    reader: Reader,
    chain: Arc<dyn ChainView>,
    sender: broadcast::Sender<Event>,
    restarts: Arc<Metrics>,
    io: Arc<Pool>,
) {
    loop {
        let watcher = tokio::spawn(watch(
            reader.clone(),
            chain.clone(),
            sender.clone(),
            io.clone(),
        ));
        match watcher.await {
            Err(error) if error.is_panic() => {
                restarts
                    .events_restarts
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::error!(%error, "the chain-event watcher panicked; restarting it");
                tokio::time::sleep(WATCH_RESTART_PAUSE).await;
            }
            // It never returns on its own; cancelled means the runtime is
            // shutting down.
            _ => return,
        }
    }
}

/// Watches the tip and broadcasts events.
pub(crate) async fn watch(
    reader: Reader,
    chain: Arc<dyn ChainView>,
    sender: broadcast::Sender<Event>,
    io: Arc<Pool>,
) {
    let notify = chain.changes();
    let mut recent: VecDeque<Block> = VecDeque::new();
    let stats = reader.stats();
    if let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) {
        recent = remember_tail(&reader, &io, min, max).await;
    }
    let mut again = false;
    loop {
        if !std::mem::take(&mut again) {
            match &notify {
                Some(notify) => {
                    let _ = tokio::time::timeout(Duration::from_secs(1), notify.notified()).await;
                }
                None => tokio::time::sleep(POLL).await,
            }
        }
        let stats = reader.stats();
        let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) else {
            recent.clear();
            continue;
        };
        let listening = sender.receiver_count() > 0;
        // Undo what is no longer on the stored chain, newest first.
        let mut lowest_removed = None;
        while let Some(top) = recent.back() {
            let still_there = top.height() <= max
                && reader
                    .block(top.height())
                    .is_some_and(|b| b.hash() == top.hash());
            if still_there {
                break;
            }
            let block = recent.pop_back().expect("checked");
            lowest_removed = Some(block.height());
            if listening {
                let _ = sender.send(Event::Removed { block });
            }
        }
        if recent.is_empty() && lowest_removed.is_none() && max > min {
            // Nothing known yet (the store was empty when watching began,
            // or was emptied): what is stored below the tip was stored
            // before anyone could be told, and is remembered, not
            // announced.
            recent = remember_tail(&reader, &io, min, max - 1).await;
        }
        // Then announce what is new, from just above what is still known
        // (or from the fork point when the reorg went deeper than memory).
        let mut next = match recent.back() {
            Some(block) => block.height() + 1,
            None => lowest_removed.unwrap_or(max).max(min),
        };
        while next <= max {
            let Some(block) = reader.block(next) else {
                break;
            };
            // A reorg between the check above and this read: undo first.
            if recent
                .back()
                .is_some_and(|top| top.height() + 1 == next && top.hash() != block.parent_hash())
            {
                again = true;
                break;
            }
            if listening {
                let head = header_json(&block);
                let _ = sender.send(Event::Added {
                    block: block.clone(),
                    head,
                });
            }
            recent.push_back(block);
            if recent.len() > REMEMBERED_BLOCKS {
                recent.pop_front();
            }
            next += 1;
        }
    }
}

/// The stored blocks up to `top`, the newest [`REMEMBERED_BLOCKS`] of them,
/// to remember so a reorg of any of them (right after a client subscribes,
/// or of blocks stored while the watcher was not yet looking) still
/// replays the logs it removes. Read on the I/O pool: after a restart
/// their pages may be on the disk.
async fn remember_tail(reader: &Reader, io: &Pool, min: u64, top: u64) -> VecDeque<Block> {
    let reader = reader.clone();
    let from = top.saturating_sub(REMEMBERED_BLOCKS as u64 - 1).max(min);
    io.run(move || (from..=top).filter_map(|h| reader.block(h)).collect())
        .await
}
