//! Prefetch of the hot keys: each time the stored tip moves, the keys the
//! block touched are refreshed at its root, then the hot keys it still
//! does not answer are fetched one by one.

use std::collections::BTreeMap;
use std::path::PathBuf;

use neve_state::{FetchRequest, Hash, ProofRequest, Read, State, WitnessRequest};
use neve_store::Reader;
use tokio::sync::watch;

use super::fetcher::{ProofFetcher, Purpose};
use super::hot_keys::{load_hot_keys, save_hot_keys_until_stopped};
use super::pace::{Budget, TIP_POLL};
use super::refresh::TouchSource;

/// Default upstream calls per second prefetch may spend (the notes measured
/// ~11k proofs/s from a local geth at c16, so this is under a tenth of it).
/// Default is 1,000.
pub const DEFAULT_PREFETCH_RATE: u32 = 1000;

/// After the upstream fails to say what a block touched (no `debug`
/// namespace, an upstream neve that did not keep it), blocks refreshed key
/// by key before asking again: one wasted call every this many blocks on
/// an endpoint that will never answer. Default is 64.
pub(super) const TOUCHED_RETRY_BLOCKS: u64 = 64;

/// Keeps the hot keys answerable at the stored tip: each time the tip
/// moves, proves the keys the new block touched at its root (one batch,
/// see the module's docs), then fetches the proofs of the keys read at
/// `latest` lately that the new root still does not answer, spending at
/// most `rate` upstream calls a second. A newer tip abandons the older
/// one's remaining work.
///
/// The hot keys are kept in `hot_keys_file` (every
/// `HOT_KEYS_SAVE_EVERY`; the binary writes them once more on stop with
/// `save_hot_keys`) and read back at start, so a
/// restart refreshes them at this pace instead of meeting its clients'
/// reads with a fetch each.
///
/// With `witnesses`, each new tip's execution witness is fetched too
/// (one upstream call a block), so the first trace of a new block replays
/// at once.
pub async fn prefetch(
    fetcher: ProofFetcher,
    reader: Reader,
    rate: u32,
    source: Option<TouchSource>,
    witnesses: bool,
    hot_keys_file: Option<PathBuf>,
    mut stop: watch::Receiver<bool>,
) {
    let state = fetcher.state().clone();
    if let Some(path) = &hot_keys_file {
        let (path, loading) = (path.clone(), state.clone());
        let loaded = tokio::task::spawn_blocking(move || load_hot_keys(&path, &loading))
            .await
            .unwrap_or(0);
        if loaded > 0 {
            tracing::info!(keys = loaded, "hot keys read back; refreshing them");
        }
    }
    let _saver = hot_keys_file.map(|path| {
        let (state, stop) = (state.clone(), stop.clone());
        tokio::spawn(save_hot_keys_until_stopped(path, state, stop))
    });
    if rate == 0 && !witnesses {
        let _ = stop.changed().await;
        return;
    }
    let mut budget = Budget::per_second(rate.max(1));
    let mut done_for: Option<Hash> = None;
    // Blocks left before asking a silent upstream what a block touched.
    let mut touched_pause: u64 = 0;
    loop {
        // Polled, not woken: ingest's change notification wakes one
        // waiter (the subscription watcher), and a reading of the tip
        // every few milliseconds costs nothing.
        tokio::select! {
            _ = tokio::time::sleep(TIP_POLL) => {}
            _ = stop.changed() => return,
        }
        let Some(tip) = reader.stats().max_contiguous_height else {
            continue;
        };
        let Some(block) = reader.block(tip) else {
            continue;
        };
        let block_hash = block.hash();
        if done_for == Some(block_hash) {
            continue;
        }
        // Damage is counted and logged by the store; the next block retries.
        let Ok(header) = block.hashes_only() else {
            continue;
        };
        let Some(root) = state.state_root(tip, &block_hash, || Some(&header)) else {
            continue;
        };
        if witnesses {
            prefetch_witness(&fetcher, &reader, tip, block_hash);
        }
        if rate == 0 {
            done_for = Some(block_hash);
            continue;
        }
        let hot = state.hot_keys();
        if let Some(source) = source
            && touched_pause == 0
        {
            match fetcher
                .refresh(source, &block_hash, root, &header, &hot, &mut budget)
                .await
            {
                Ok(()) => state.mark_refreshed(tip),
                Err(error) => {
                    tracing::debug!(%error, height = tip, "per-block refresh failed; refreshing key by key");
                    touched_pause = TOUCHED_RETRY_BLOCKS;
                }
            }
        } else {
            touched_pause = touched_pause.saturating_sub(1);
        }
        fetch_unanswered(&fetcher, &reader, tip, block_hash, root, hot, &mut budget).await;
        done_for = Some(block_hash);
    }
}

/// Starts fetching the execution witness of the tip (`tip`, of this
/// hash), verified from its parent's root.
fn prefetch_witness(fetcher: &ProofFetcher, reader: &Reader, tip: u64, block_hash: Hash) {
    let state = fetcher.state();
    let Some(parent) = tip.checked_sub(1).and_then(|number| reader.block(number)) else {
        return;
    };
    let parent_hash = parent.hash();
    let Ok(header) = parent.hashes_only() else {
        return;
    };
    let Some(parent_state_root) = state.state_root(tip - 1, &parent_hash, || Some(&header)) else {
        return;
    };
    let request = FetchRequest::Witness(WitnessRequest {
        block_hash,
        number: tip,
        parent_hash,
        parent_state_root,
    });
    drop(fetcher.start(request, Purpose::Prefetch));
}

/// Fetches, one account at a time within `budget`, the hot keys `root`
/// (the tip's, at `tip`) does not answer yet; a newer tip abandons the rest.
async fn fetch_unanswered(
    fetcher: &ProofFetcher,
    reader: &Reader,
    tip: u64,
    block_hash: Hash,
    root: Hash,
    hot: Vec<neve_state::HotKey>,
    budget: &mut Budget,
) {
    let state = fetcher.state();
    let mut by_address: BTreeMap<[u8; 20], Vec<Hash>> = BTreeMap::new();
    for key in hot {
        let slots = by_address.entry(key.address).or_default();
        if let Some(slot) = key.slot {
            slots.push(slot);
        }
    }
    let mut waits = Vec::new();
    for (address, mut slots) in by_address {
        if answerable(state, &root, &address, &slots) {
            continue;
        }
        // A newer tip makes this one's remaining work moot.
        if reader.stats().max_contiguous_height != Some(tip) {
            break;
        }
        budget.spend(1).await;
        slots.sort_unstable();
        slots.dedup();
        slots.truncate(neve_state::MAX_SLOTS_PER_REQUEST);
        let request = FetchRequest::Proof(ProofRequest {
            block_hash,
            state_root: root,
            address,
            slots,
            code: false,
        });
        waits.push(fetcher.start(request, Purpose::Prefetch));
    }
    for mut done in waits {
        let _ = done.wait_for(|done| *done).await;
    }
}

/// Whether `root` already answers the account and these slots.
pub(super) fn answerable(state: &State, root: &Hash, address: &[u8; 20], slots: &[Hash]) -> bool {
    let Read::Found(read) = state.account(root, address, false) else {
        return false;
    };
    let Some(account) = read.account else {
        return true;
    };
    slots.iter().all(|slot| {
        matches!(
            state.slot(&account.storage_root, slot, false),
            Read::Found(_)
        )
    })
}
