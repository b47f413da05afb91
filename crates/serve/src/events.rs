//! Chain events for subscribers: new blocks and rollbacks, found by watching
//! the store's tip. Payloads are prepared once per block and shared by every
//! subscriber.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use neve_store::{Block, Reader};
use tokio::sync::broadcast;

use crate::ChainView;

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
    let Ok(serde_json::Value::Object(mut fields)) = serde_json::from_slice(&block.hashes_only())
    else {
        return block.hashes_only();
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

/// Watches the tip and broadcasts events until every receiver is gone.
pub(crate) async fn watch(
    reader: Reader,
    chain: Arc<dyn ChainView>,
    sender: broadcast::Sender<Event>,
) {
    let notify = chain.changes();
    let mut recent: VecDeque<Block> = VecDeque::new();
    if let Some(block) = reader
        .stats()
        .max_contiguous_height
        .and_then(|h| reader.block(h))
    {
        recent.push_back(block);
    }
    loop {
        match &notify {
            Some(notify) => {
                let _ = tokio::time::timeout(Duration::from_secs(1), notify.notified()).await;
            }
            None => tokio::time::sleep(POLL).await,
        }
        if sender.receiver_count() == 0 && sender.is_empty() {
            // Nobody listens: just track the tip.
            recent.clear();
        }
        let Some(max) = reader.stats().max_contiguous_height else {
            continue;
        };
        // Undo what is no longer on the stored chain.
        while let Some(top) = recent.back() {
            let still_there = top.height() <= max
                && reader
                    .block(top.height())
                    .is_some_and(|b| b.hash() == top.hash());
            if still_there {
                break;
            }
            let block = recent.pop_back().expect("checked");
            let _ = sender.send(Event::Removed { block });
        }
        let mut next = recent.back().map_or(max, |b| b.height() + 1);
        if recent.is_empty() {
            next = max;
        }
        while next <= max {
            let Some(block) = reader.block(next) else {
                break;
            };
            let head = header_json(&block);
            recent.push_back(block.clone());
            if recent.len() > REMEMBERED_BLOCKS {
                recent.pop_front();
            }
            let _ = sender.send(Event::Added { block, head });
            next += 1;
        }
    }
}
