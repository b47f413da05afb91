//! The per-block refresh: the keys a block touched (the upstream's tracer
//! or an upstream neve's list) proved at its root in one batch.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use neve_state::{Hash, ProofRequest};

use super::error::FetchError;
use super::fetcher::ProofFetcher;
use super::pace::{Budget, TIP_POLL};
use super::proof::{decode_and_verify, hex, with_value_slots};
use super::touched::{add_untraced, touched_as_said, touched_by_trace};

/// How long a mirror asks its upstream neve for a block's touched keys
/// before refreshing that block key by key: the upstream's own refresh of
/// a block takes a trace and a batch of proofs. Default is 1 s.
pub(super) const NEVE_TOUCHED_WAIT: Duration = Duration::from_secs(1);

/// Where the keys a block touched come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TouchSource {
    /// The upstream node's tracer: `debug_traceBlockByHash` with
    /// `prestateTracer` in diff mode, plus the writes it leaves out.
    Tracer,
    /// An upstream neve's `neve_getTouchedKeys`: it traced already.
    Neve,
}

/// Counts `calls` made by the per-block refresh (a share of prefetch's).
pub(super) fn count_refresh_calls(counters: &neve_state::Counters, calls: u64) {
    counters.refresh_calls.fetch_add(calls, Ordering::Relaxed);
    counters.prefetch_calls.fetch_add(calls, Ordering::Relaxed);
}

impl ProofFetcher {
    /// Proves at `root` the keys block `block_hash` touched, in one batch,
    /// and keeps them for mirrors. Slots are proved only for accounts with
    /// hot slots: the account trie's new nodes all lie on the touched
    /// accounts' paths, a storage trie's on its touched slots'.
    pub(super) async fn refresh(
        &self,
        source: TouchSource,
        block_hash: &Hash,
        root: Hash,
        header: &[u8],
        hot: &[neve_state::HotKey],
        budget: &mut Budget,
    ) -> Result<(), FetchError> {
        let inner = &self.inner;
        let counters = &inner.state.counters;
        budget.spend(1).await;
        count_refresh_calls(counters, 1);
        let touched = Arc::new(
            self.touched_keys(source, block_hash, header, budget)
                .await?,
        );
        // Said to mirrors once this neve holds the block's new nodes, so a
        // mirror's proofs of them are answered from here.
        if hot.is_empty() {
            inner.state.touched.record(*block_hash, touched);
            counters.refreshed_blocks.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let slotted: std::collections::HashSet<[u8; 20]> = hot
            .iter()
            .filter(|k| k.slot.is_some())
            .map(|k| k.address)
            .collect();
        let keys = inner.state.storage_keys();
        let requests: Vec<ProofRequest> = touched
            .iter()
            .map(|(address, slots)| {
                let mut slots = if slotted.contains(address) {
                    slots.clone()
                } else {
                    Vec::new()
                };
                slots.truncate(neve_state::MAX_SLOTS_PER_REQUEST);
                with_value_slots(
                    &ProofRequest {
                        block_hash: *block_hash,
                        state_root: root,
                        address: *address,
                        slots,
                        code: false,
                    },
                    keys,
                )
            })
            .collect();
        if requests.is_empty() {
            inner.state.touched.record(*block_hash, touched);
            counters.refreshed_blocks.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        let calls: Vec<(&str, serde_json::Value)> = requests
            .iter()
            .map(|r| {
                let slots: Vec<String> = r.slots.iter().map(|s| hex(s)).collect();
                (
                    "eth_getProof",
                    serde_json::json!([hex(&r.address), slots, {"blockHash": hex(block_hash)}]),
                )
            })
            .collect();
        budget.spend(calls.len() as u32).await;
        count_refresh_calls(counters, calls.len() as u64);
        let answer = inner.client.send_batch(&calls).await?;
        // Decoding the answer (MiBs for a busy block) and hashing every
        // proof in it is milliseconds of CPU: off the async workers, like
        // a round's batch.
        let state = inner.state.clone();
        let refused = tokio::task::spawn_blocking(move || {
            let answers = answer.items()?;
            let mut refused = 0u64;
            for (request, answer) in requests.iter().zip(answers) {
                let verified = answer
                    .map_err(FetchError::from)
                    .and_then(|proof| decode_and_verify(request, keys, proof.get(), None));
                match verified {
                    Ok(verified) => state.insert(verified),
                    Err(FetchError::Refused(_)) => refused += 1,
                    // An account the upstream could not prove now is left
                    // to the key-by-key pass.
                    Err(_) => {}
                }
            }
            Ok::<_, FetchError>(refused)
        })
        .await
        .map_err(|e| FetchError::Shape(format!("verification task: {e}")))??;
        if refused > 0 {
            counters.refused.fetch_add(refused, Ordering::Relaxed);
            tracing::warn!(refused, "state proofs refused while refreshing a block");
        }
        inner.state.touched.record(*block_hash, touched);
        counters.refreshed_blocks.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The keys block `block_hash` touched, from `source`; asking an
    /// upstream neve again, within `budget`, while it is still refreshing
    /// the block itself.
    async fn touched_keys(
        &self,
        source: TouchSource,
        block_hash: &Hash,
        header: &[u8],
        budget: &mut Budget,
    ) -> Result<neve_state::Touched, FetchError> {
        let inner = &self.inner;
        let counters = &inner.state.counters;
        Ok(match source {
            TouchSource::Tracer => {
                let trace = inner
                    .client
                    .call_raw(
                        "debug_traceBlockByHash",
                        serde_json::json!([
                            hex(block_hash),
                            {"tracer": "prestateTracer", "tracerConfig": {"diffMode": true}}
                        ]),
                    )
                    .await?;
                let mut touched = touched_by_trace(trace.get())?;
                add_untraced(&mut touched, header)?;
                touched
            }
            TouchSource::Neve => {
                // The upstream neve stored the block before this one
                // could; its own refresh of it may still be under way.
                let deadline = Instant::now() + NEVE_TOUCHED_WAIT;
                loop {
                    let said = inner
                        .client
                        .call_raw("neve_getTouchedKeys", serde_json::json!([hex(block_hash)]))
                        .await;
                    // Not kept (yet) is a `null` result, with a 421.
                    let said = said.map(|said| (said.get() != "null").then_some(said));
                    match said {
                        Ok(Some(said)) => break touched_as_said(said.get())?,
                        Ok(None) | Err(_) if Instant::now() < deadline => {
                            tokio::time::sleep(TIP_POLL).await;
                            budget.spend(1).await;
                            count_refresh_calls(counters, 1);
                        }
                        Ok(None) => {
                            return Err(FetchError::Shape(
                                "the upstream neve did not say what the block touched".into(),
                            ));
                        }
                        Err(error) => return Err(error.into()),
                    }
                }
            }
        })
    }
}
