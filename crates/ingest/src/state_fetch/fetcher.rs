//! Fetch-through: one proof fetcher per neve, shared by serving (as
//! [`Fetch`]) and prefetch; concurrent fetches of one request share one
//! upstream call.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use neve_state::{Fetch, FetchRequest, ProofRequest, State, WitnessRequest};
use neve_upstream::{BatchAnswer, RpcClient};
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

/// How long proofs fetched ahead of the reads that will want them
/// ([`Fetch::prefetch_proofs`]: the accounts a traced block's child
/// names) may take, their admission to the upstream included. A read
/// asking one of them joins that fetch rather than ask the node again, so
/// an upstream that leaves it unanswered holds such a read no longer than
/// this, and the read's next round asks for itself. Their use is over
/// once the child is traced (tens of ms later on a local node; `OFFER_KEPT`
/// in serving). Other prefetches (the hot keys at a new tip, witnesses)
/// keep [`FETCH_TIMEOUT`]. Default is 2 s.
pub const AHEAD_PROOFS_TIMEOUT: Duration = Duration::from_secs(2);

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

/// Largest answer to one batch of proofs ([`neve_state::proof_batches`]:
/// 64 accounts and 512 slots, each with its normalized one on coreth, and
/// their codes, are some 15 MiB as hex); past it the answer is not read
/// and its accounts are fetched again in a later round (less when
/// `--upstream-max-body-bytes` says less). Default is 32 MiB.
pub const MAX_PROOF_BATCH_ANSWER_BYTES: usize = 32 << 20;

/// The slots a fetch holds while under way: one of all fetches', and one
/// of the waiting ones' when it waited its turn.
pub(super) struct Slot {
    _all: OwnedSemaphorePermit,
    _waiting: Option<OwnedSemaphorePermit>,
}

/// Who a fetch is for: for the counters, and how long it may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Purpose {
    Read,
    Prefetch,
    /// Proofs ahead of the reads that will want them
    /// ([`AHEAD_PROOFS_TIMEOUT`]); counted as prefetch.
    Ahead,
}

impl Purpose {
    /// How long a fetch of proofs for it may take.
    fn limit(self) -> Duration {
        match self {
            Purpose::Ahead => AHEAD_PROOFS_TIMEOUT,
            Purpose::Read | Purpose::Prefetch => FETCH_TIMEOUT,
        }
    }

    /// The counter of the upstream calls made for it.
    pub(super) fn calls(self, counters: &neve_state::Counters) -> &std::sync::atomic::AtomicU64 {
        match self {
            Purpose::Read => &counters.upstream_calls,
            Purpose::Prefetch | Purpose::Ahead => &counters.prefetch_calls,
        }
    }
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
    /// The client batches of proofs are asked with: answers up to
    /// [`MAX_PROOF_BATCH_ANSWER_BYTES`].
    pub(super) proofs_client: RpcClient,
    /// As `proofs_client`, within [`AHEAD_PROOFS_TIMEOUT`].
    pub(super) ahead_client: RpcClient,
    pub(super) pending: Mutex<Pending>,
}

/// The fetches under way, by request: what a fetch of the same request
/// waits on rather than asking again.
pub(super) type Pending = HashMap<FetchRequest, watch::Receiver<bool>>;

/// A fetch under way, ended when dropped: its requests leave `pending`,
/// its slot goes back, and its waiters are woken.
struct Ending {
    inner: Arc<Inner>,
    requests: Vec<FetchRequest>,
    done: watch::Sender<bool>,
    slot: Option<Slot>,
}

impl Drop for Ending {
    fn drop(&mut self) {
        let mut pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        for request in &self.requests {
            pending.remove(request);
        }
        drop(pending);
        // The slot back before the waiters wake, so a fetch one of them
        // starts at once finds it.
        drop(self.slot.take());
        let _ = self.done.send(true);
    }
}

impl ProofFetcher {
    /// A fetcher asking `client` and storing into `state`.
    pub fn new(client: RpcClient, state: Arc<State>) -> Self {
        // An operator's lower `--upstream-max-body-bytes` holds.
        let proofs_client = client
            .clone()
            .with_timeout(FETCH_TIMEOUT)
            .with_max_response_bytes(MAX_PROOF_BATCH_ANSWER_BYTES.min(client.max_response_bytes()));
        ProofFetcher {
            inner: Arc::new(Inner {
                witness_client: client
                    .clone()
                    .with_timeout(FETCH_TIMEOUT)
                    .with_max_response_bytes(MAX_WITNESS_ANSWER_BYTES),
                ahead_client: proofs_client.clone().with_timeout(AHEAD_PROOFS_TIMEOUT),
                proofs_client,
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
            Work::of(request),
            purpose,
            Slot {
                _all: permit,
                _waiting: None,
            },
        )
    }

    /// Joins the fetches of `work`'s requests under way, waits for a slot,
    /// and starts the rest as one fetch (a batch of proofs, or a witness);
    /// ends when all of them did.
    async fn in_turn(&self, work: Work, purpose: Purpose) {
        let mut waits = Vec::new();
        let ours = work.less_pending(&self.lock_pending(), &mut waits);
        if let Some(ours) = ours {
            // In turn among the waiting (at most MAX_IN_TURN_FETCHES of
            // the slots), then a slot of all fetches'.
            let Ok(turn) = self.inner.in_turn.clone().acquire_owned().await else {
                return;
            };
            let Ok(permit) = self.inner.in_flight.clone().acquire_owned().await else {
                return;
            };
            let slot = Slot {
                _all: permit,
                _waiting: Some(turn),
            };
            // Those started by another meanwhile are joined; when that is
            // all of them, the slot goes back.
            let pending = self.lock_pending();
            if let Some(left) = ours.less_pending(&pending, &mut waits) {
                waits.push(self.start_holding(pending, left, purpose, slot));
            }
        }
        for mut done in waits {
            let _ = done.wait_for(|done| *done).await;
        }
    }

    /// Starts `work`'s requests not under way at once, as `purpose`, when
    /// more of all fetches' slots are free than reads may wait for in turn
    /// ([`MAX_IN_TURN_FETCHES`]): so a read waiting in turn always finds
    /// one. Else shed. Ends when all of them did.
    async fn spare(&self, work: Work, purpose: Purpose) {
        let waits = self.start_spare(work, purpose);
        for mut done in waits {
            let _ = done.wait_for(|done| *done).await;
        }
    }

    /// [`Self::spare`]'s start: the ends to wait for.
    fn start_spare(&self, work: Work, purpose: Purpose) -> Vec<watch::Receiver<bool>> {
        let mut waits = Vec::new();
        let pending = self.lock_pending();
        let Some(ours) = work.less_pending(&pending, &mut waits) else {
            return waits;
        };
        let spare = self.inner.in_flight.available_permits() > MAX_IN_TURN_FETCHES;
        match spare
            .then(|| self.inner.in_flight.clone().try_acquire_owned().ok())
            .flatten()
        {
            Some(permit) => {
                let slot = Slot {
                    _all: permit,
                    _waiting: None,
                };
                waits.push(self.start_holding(pending, ours, purpose, slot));
            }
            None => {
                drop(pending);
                self.inner
                    .state
                    .counters
                    .shed
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        waits
    }

    fn lock_pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.inner.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts fetching `work` in the slot `permit` holds, each of its
    /// requests noted in `pending` (locked) so fetches of the same request
    /// join it.
    fn start_holding(
        &self,
        mut pending: std::sync::MutexGuard<'_, Pending>,
        work: Work,
        purpose: Purpose,
        permit: Slot,
    ) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        let requests = work.requests();
        for request in &requests {
            pending.insert(request.clone(), rx.clone());
        }
        drop(pending);
        // However the fetch ends (a panic included), its requests leave
        // `pending`, its slot goes back and its waiters are woken.
        let ending = Ending {
            inner: self.inner.clone(),
            requests,
            done: tx,
            slot: Some(permit),
        };
        tokio::spawn(async move {
            let inner = &ending.inner;
            let counters = &inner.state.counters;
            match &work {
                Work::Proofs(proofs) => inner.prove(proofs, purpose).await,
                Work::Witness(witness) => match inner.witness(witness, purpose).await {
                    Ok(()) => {}
                    Err(error @ (FetchError::Refused(_) | FetchError::Shape(_))) => {
                        inner
                            .state
                            .witnesses
                            .refused
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%error, block = witness.number, "execution witness refused");
                    }
                    Err(error) => {
                        counters.fetch_failures.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%error, "state fetch failed");
                    }
                },
            }
            drop(ending);
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
        Box::pin(async move { fetcher.in_turn(Work::of(request), Purpose::Read).await })
    }

    fn fetch_proofs_in_turn(
        &self,
        requests: Vec<ProofRequest>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let fetcher = self.clone();
        Box::pin(async move { fetcher.in_turn(Work::Proofs(requests), Purpose::Read).await })
    }

    fn prefetch_proofs(
        &self,
        requests: Vec<ProofRequest>,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let fetcher = self.clone();
        Box::pin(async move { fetcher.spare(Work::Proofs(requests), Purpose::Ahead).await })
    }
}

/// What one slot of the fetcher fetches: proofs, asked in one batch, or a
/// block's witness.
pub(super) enum Work {
    Proofs(Vec<ProofRequest>),
    Witness(WitnessRequest),
}

impl Work {
    fn of(request: FetchRequest) -> Work {
        match request {
            FetchRequest::Proof(proof) => Work::Proofs(vec![proof]),
            FetchRequest::Witness(witness) => Work::Witness(witness),
        }
    }

    /// Itself less its requests under way (in `pending`), whose ends are
    /// added to `waits`; `None` when nothing is left.
    fn less_pending(
        self,
        pending: &Pending,
        waits: &mut Vec<watch::Receiver<bool>>,
    ) -> Option<Work> {
        let mut joined = |request: FetchRequest| match pending.get(&request) {
            Some(done) => {
                waits.push(done.clone());
                true
            }
            None => false,
        };
        match self {
            Work::Proofs(proofs) => {
                let left: Vec<ProofRequest> = proofs
                    .into_iter()
                    .filter(|proof| !joined(FetchRequest::Proof(proof.clone())))
                    .collect();
                (!left.is_empty()).then_some(Work::Proofs(left))
            }
            Work::Witness(witness) => {
                (!joined(FetchRequest::Witness(witness.clone()))).then_some(Work::Witness(witness))
            }
        }
    }

    /// The requests it answers, as fetches of them are joined.
    fn requests(&self) -> Vec<FetchRequest> {
        match self {
            Work::Proofs(proofs) => proofs.iter().cloned().map(FetchRequest::Proof).collect(),
            Work::Witness(witness) => vec![FetchRequest::Witness(witness.clone())],
        }
    }
}

impl Inner {
    /// Fetches and verifies the proofs of `requests` (and the codes asked
    /// for): in one batch, or in parts as large as the upstream takes in
    /// one (its batch limit, set or learnt), each verified as it comes,
    /// all within [`FETCH_TIMEOUT`] ([`AHEAD_PROOFS_TIMEOUT`] for proofs
    /// ahead) as the slot is held meanwhile. Every account is counted
    /// and logged here: one whose answer is refused or unusable, and each
    /// one not reached when an exchange failed or the time ran out; the
    /// others are kept.
    async fn prove(&self, requests: &[ProofRequest], purpose: Purpose) {
        let keys = self.state.storage_keys();
        let asked: Vec<ProofRequest> = requests.iter().map(|r| with_value_slots(r, keys)).collect();
        let limit = purpose.limit();
        let deadline = tokio::time::Instant::now() + limit;
        // Two calls an account that asks its code.
        let per_part = (self.proofs_client.max_batch() / 2).max(1);
        for (i, part) in asked.chunks(per_part).enumerate() {
            let answer = tokio::time::timeout_at(deadline, self.ask(part, purpose))
                .await
                .map_err(|_| FetchError::TimedOut(limit))
                .and_then(|answer| answer);
            let verified = match answer {
                Ok(answer) => self.verify(part.to_vec(), keys, answer).await,
                Err(error) => Err(error),
            };
            if let Err(error) = verified {
                let unreached = asked.len() - i * per_part;
                self.state
                    .counters
                    .fetch_failures
                    .fetch_add(unreached as u64, Ordering::Relaxed);
                tracing::debug!(%error, accounts = unreached, "state fetch failed");
                return;
            }
        }
    }

    /// Asks the proofs of `part` (and codes) in one batch.
    async fn ask(
        &self,
        part: &[ProofRequest],
        purpose: Purpose,
    ) -> Result<BatchAnswer, FetchError> {
        let mut calls = Vec::with_capacity(part.len() * 2);
        for request in part {
            let at = serde_json::json!({ "blockHash": hex(&request.block_hash) });
            let address = hex(&request.address);
            let slots: Vec<String> = request.slots.iter().map(|s| hex(s)).collect();
            calls.push(("eth_getProof", serde_json::json!([address, slots, at])));
            if request.code {
                calls.push(("eth_getCode", serde_json::json!([address, at])));
            }
        }
        let client = match purpose {
            // Admitted only if it can start within its own time: a place
            // in the upstream's pacing is never kept for a fetch given up.
            Purpose::Ahead => &self.ahead_client,
            Purpose::Read | Purpose::Prefetch => &self.proofs_client,
        };
        purpose
            .calls(&self.state.counters)
            .fetch_add(calls.len() as u64, Ordering::Relaxed);
        Ok(client.send_batch(&calls).await?)
    }

    /// Verifies each account of `part` against `answer` and keeps what
    /// verifies; each other one counted and logged. Decoding an answer
    /// and hashing its proofs (up to 512 slots) is milliseconds of CPU,
    /// and an insert may free an evicted generation: off the async
    /// workers. Fails as a whole only when the answer is not a batch
    /// answering every call.
    async fn verify(
        &self,
        part: Vec<ProofRequest>,
        keys: neve_state::StorageKeys,
        answer: BatchAnswer,
    ) -> Result<(), FetchError> {
        let state = self.state.clone();
        tokio::task::spawn_blocking(move || {
            let mut answers = answer.items()?.into_iter();
            let counters = &state.counters;
            for request in &part {
                let proof = answers.next().expect("one answer per call");
                let code = request
                    .code
                    .then(|| answers.next().expect("one answer per call"));
                let verified = proof.map_err(FetchError::from).and_then(|proof| {
                    let code = code.transpose()?;
                    decode_and_verify(request, keys, proof.get(), code.map(RawValue::get))
                });
                match verified {
                    Ok(verified) => state.insert(verified),
                    Err(FetchError::Refused(error)) => {
                        counters.refused.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%error, address = %hex(&request.address), "state proof refused");
                    }
                    Err(error) => {
                        counters.fetch_failures.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(%error, address = %hex(&request.address), "state fetch failed");
                    }
                }
            }
            Ok::<_, FetchError>(())
        })
        .await
        .map_err(|e| FetchError::Shape(format!("verification task: {e}")))?
    }
}
