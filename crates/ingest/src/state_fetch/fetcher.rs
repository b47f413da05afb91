//! Fetch-through: one proof fetcher per neve, shared by serving (as
//! [`Fetch`]) and prefetch; concurrent fetches of one request share one
//! upstream call.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use neve_state::{Fetch, FetchRequest, ProofRequest, State};
use neve_upstream::RpcClient;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::error::FetchError;
use super::proof::{decode_and_verify, hex, with_value_slots};

/// Most fetches (fetch-through and prefetch together) under way at once; a
/// read that would start another is a miss at once (and counted as shed),
/// so a flood of distinct cold keys cannot queue without bound or take
/// more than this many of the upstream's connections. Default is 64.
pub const MAX_FETCHES_IN_FLIGHT: usize = 64;

/// Most of those that fetches waiting their turn ([`Fetch::fetch_in_turn`],
/// a call's rounds) hold: the rest stay free for reads and prefetch, which
/// are shed rather than wait. The waiters are the requests' own futures
/// (each request keeps at most `MAX_FETCHES_PER_REQUEST` under way, and
/// drops them at its deadline). Default is 48.
pub const MAX_IN_TURN_FETCHES: usize = 48;

/// How long one fetch may take before it fails. Longer than serving's
/// deadline on purpose: an answer that arrives after the read gave up still
/// warms the store for the next one. Default is 5 s.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Most witness fetches (from the upstream, or a held one verified again)
/// under way at once: a witness costs the node a block's execution (which
/// it does not stop when neve gives up), so a client asking for many
/// blocks' cannot pile work on it. The ones past it wait their turn (each
/// one of the [`MAX_FETCHES_IN_FLIGHT`], for [`FETCH_TIMEOUT`] at most;
/// then it is shed, and the replay fetches proofs). Default is 4.
pub const MAX_WITNESS_FETCHES_IN_FLIGHT: usize = 4;

/// Largest witness answer read from the upstream; past it the answer is
/// not read and the block's replays fetch proofs. A witness is about 4×
/// its block's bytes as hex: this is a block of some 16 MB. Default is
/// 64 MiB.
pub const MAX_WITNESS_ANSWER_BYTES: usize = 64 << 20;

/// The slots a fetch holds while under way: one of all fetches', and one
/// of the waiting ones' when it waited its turn.
pub(super) struct Slot {
    _all: OwnedSemaphorePermit,
    _waiting: Option<OwnedSemaphorePermit>,
}

/// Who a fetch is for, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purpose {
    Read,
    Prefetch,
}

/// The fetcher: one per neve, shared by serving (as [`Fetch`]) and
/// prefetch. Cheap to clone.
#[derive(Clone)]
pub struct ProofFetcher {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) client: RpcClient,
    pub(super) state: Arc<State>,
    pub(super) in_flight: Arc<Semaphore>,
    /// Slots of [`MAX_IN_TURN_FETCHES`].
    pub(super) in_turn: Arc<Semaphore>,
    /// Witness fetches under way ([`MAX_WITNESS_FETCHES_IN_FLIGHT`]).
    pub(super) witness_slots: Semaphore,
    /// The client witnesses are asked with: answers up to
    /// [`MAX_WITNESS_ANSWER_BYTES`].
    pub(super) witness_client: RpcClient,
    pub(super) pending: Mutex<HashMap<FetchRequest, watch::Receiver<bool>>>,
}

impl ProofFetcher {
    /// A fetcher asking `client` and storing into `state`.
    pub fn new(client: RpcClient, state: Arc<State>) -> Self {
        ProofFetcher {
            inner: Arc::new(Inner {
                witness_client: client
                    .clone()
                    .with_timeout(FETCH_TIMEOUT)
                    .with_max_response_bytes(MAX_WITNESS_ANSWER_BYTES),
                client: client.with_timeout(FETCH_TIMEOUT),
                witness_slots: Semaphore::new(MAX_WITNESS_FETCHES_IN_FLIGHT),
                state,
                in_flight: Arc::new(Semaphore::new(MAX_FETCHES_IN_FLIGHT)),
                in_turn: Arc::new(Semaphore::new(MAX_IN_TURN_FETCHES)),
                pending: Mutex::default(),
            }),
        }
    }

    /// Starts (or joins) a fetch; the returned future ends when it did.
    pub(super) fn start(&self, request: FetchRequest, purpose: Purpose) -> watch::Receiver<bool> {
        let pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(done) = pending.get(&request) {
            return done.clone();
        }
        let Ok(permit) = self.inner.in_flight.clone().try_acquire_owned() else {
            self.inner
                .state
                .counters
                .shed
                .fetch_add(1, Ordering::Relaxed);
            return watch::channel(true).1;
        };
        self.start_holding(
            pending,
            request,
            purpose,
            Slot {
                _all: permit,
                _waiting: None,
            },
        )
    }

    /// Joins a fetch of `request` under way, or waits for a slot and starts
    /// it; ends when it did.
    async fn in_turn(&self, request: FetchRequest, purpose: Purpose) {
        let joined = {
            let pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.get(&request).cloned()
        };
        let mut done = match joined {
            Some(done) => done,
            None => {
                // In turn among the waiting (at most MAX_IN_TURN_FETCHES of
                // the slots), then a slot of all fetches'.
                let Ok(turn) = self.inner.in_turn.clone().acquire_owned().await else {
                    return;
                };
                let Ok(permit) = self.inner.in_flight.clone().acquire_owned().await else {
                    return;
                };
                let permit = Slot {
                    _all: permit,
                    _waiting: Some(turn),
                };
                let pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
                match pending.get(&request) {
                    // Started by another meanwhile: the slot goes back.
                    Some(done) => done.clone(),
                    None => self.start_holding(pending, request, purpose, permit),
                }
            }
        };
        let _ = done.wait_for(|done| *done).await;
    }

    /// Starts fetching `request` in the slot `permit` holds, noted in
    /// `pending` (locked) so fetches of the same request join it.
    fn start_holding(
        &self,
        mut pending: std::sync::MutexGuard<'_, HashMap<FetchRequest, watch::Receiver<bool>>>,
        request: FetchRequest,
        purpose: Purpose,
        permit: Slot,
    ) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        pending.insert(request.clone(), rx.clone());
        drop(pending);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let counters = &inner.state.counters;
            let fetched = match &request {
                FetchRequest::Proof(proof) => inner.prove(proof, purpose).await,
                FetchRequest::Witness(witness) => inner.witness(witness, purpose).await,
            };
            match (fetched, &request) {
                (Ok(()), _) => {}
                (Err(FetchError::Refused(error)), FetchRequest::Proof(proof)) => {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, address = %hex(&proof.address), "state proof refused");
                }
                (
                    Err(error @ (FetchError::Refused(_) | FetchError::Shape(_))),
                    FetchRequest::Witness(witness),
                ) => {
                    inner
                        .state
                        .witnesses
                        .refused
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, block = witness.number, "execution witness refused");
                }
                (Err(error), _) => {
                    counters.fetch_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%error, "state fetch failed");
                }
            }
            inner
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&request);
            drop(permit);
            let _ = tx.send(true);
        });
        rx
    }

    /// The state store this fetcher fills.
    pub fn state(&self) -> &Arc<State> {
        &self.inner.state
    }
}

impl Fetch for ProofFetcher {
    fn fetch(&self, request: FetchRequest) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut done = self.start(request, Purpose::Read);
        Box::pin(async move {
            let _ = done.wait_for(|done| *done).await;
        })
    }

    fn fetch_in_turn(&self, request: FetchRequest) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let fetcher = self.clone();
        Box::pin(async move { fetcher.in_turn(request, Purpose::Read).await })
    }
}

impl Inner {
    /// Fetches and verifies one account's proof.
    async fn prove(&self, request: &ProofRequest, purpose: Purpose) -> Result<(), FetchError> {
        let keys = self.state.storage_keys();
        let request = &with_value_slots(request, keys);
        let at = serde_json::json!({ "blockHash": hex(&request.block_hash) });
        let address = hex(&request.address);
        let slots: Vec<String> = request.slots.iter().map(|s| hex(s)).collect();
        let proof_params = serde_json::json!([address, slots, at]);
        let code_params = serde_json::json!([address, at]);
        let mut calls = vec![("eth_getProof", proof_params)];
        if request.code {
            calls.push(("eth_getCode", code_params));
        }
        let counter = match purpose {
            Purpose::Read => &self.state.counters.upstream_calls,
            Purpose::Prefetch => &self.state.counters.prefetch_calls,
        };
        counter.fetch_add(calls.len() as u64, Ordering::Relaxed);
        let mut answers = self.client.batch(&calls).await?.into_iter();
        let proof = answers.next().expect("one answer per call")?;
        let code = answers.next().transpose()?;
        // Decoding and hashing a proof of up to 1,024 slots is milliseconds
        // of CPU, and an insert may free an evicted generation: off the
        // async workers.
        let request = request.clone();
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || {
            let verified = decode_and_verify(
                &request,
                keys,
                proof.get(),
                code.as_deref().map(RawValue::get),
            )?;
            state.insert(verified);
            Ok::<_, FetchError>(())
        })
        .await
        .map_err(|e| FetchError::Shape(format!("verification task: {e}")))??;
        Ok(())
    }
}
