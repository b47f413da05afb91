//! Fetching state proofs from the upstream into the verified node store:
//! fetch-through for reads that miss, and prefetch of the hot keys each
//! time a block is stored.
//!
//! A fetch asks the upstream for `eth_getProof(address, slots, {blockHash})`
//! (and `eth_getCode` in the same batch when the read needs code), then,
//! off the async workers, walks the proof from the block's verified
//! `stateRoot`: the account path, each slot's path from the account's
//! `storageRoot`, the code against its `codeHash`. Only what those walks
//! used enters the store; a proof that does not verify is refused, counted
//! and logged. Concurrent fetches of the same request share one upstream
//! call; at most [`MAX_FETCHES_IN_FLIGHT`] run at once.
//!
//! Prefetch refreshes per block, not per key: when a block is stored it
//! learns the keys the block touched (the upstream's `prestateTracer` in
//! diff mode, plus what the tracer leaves out: the fee recipient,
//! withdrawals and the EIP-4788 and EIP-2935 system writes; or, from an
//! upstream neve, its `neve_getTouchedKeys`) and proves them at the new
//! root in one batch. Every node that changed from the parent's root lies
//! on one of their paths, so the keys clients read stay answerable for a
//! number of upstream calls set by what the block changed, not by how many
//! keys are hot. Keys the refresh did not cover (an untraced change, a
//! node evicted) are then fetched one by one as before.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_primitives::{U256, keccak256};
use bytes::Bytes;
use neve_state::{
    Account, EMPTY_CODE_HASH, EMPTY_ROOT, Fetch, FetchRequest, Hash, ProofError, Read, State,
    StorageKeys, Verified, proof,
};
use neve_store::Reader;
use neve_upstream::{RpcClient, RpcError};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::{Semaphore, watch};

/// Most fetches (fetch-through and prefetch together) under way at once; a
/// read that would start another is a miss at once (and counted as shed),
/// so a flood of distinct cold keys cannot queue without bound or take
/// more than this many of the upstream's connections. Default is 64.
pub const MAX_FETCHES_IN_FLIGHT: usize = 64;

/// How long one fetch may take before it fails. Longer than serving's
/// deadline on purpose: an answer that arrives after the read gave up still
/// warms the store for the next one. Default is 5 s.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

/// Default upstream calls per second prefetch may spend (the notes measured
/// ~11k proofs/s from a local geth at c16, so this is under a tenth of it).
/// Default is 1,000.
pub const DEFAULT_PREFETCH_RATE: u32 = 1000;

/// How often prefetch looks for a new tip. Default is 50 ms.
const TIP_POLL: Duration = Duration::from_millis(50);

/// After the upstream fails to say what a block touched (no `debug`
/// namespace, an upstream neve that did not keep it), blocks refreshed key
/// by key before asking again: one wasted call every this many blocks on
/// an endpoint that will never answer. Default is 64.
const TOUCHED_RETRY_BLOCKS: u64 = 64;

/// How long a mirror asks its upstream neve for a block's touched keys
/// before refreshing that block key by key: the upstream's own refresh of
/// a block takes a trace and a batch of proofs. Default is 1 s.
const NEVE_TOUCHED_WAIT: Duration = Duration::from_secs(1);

/// EIP-4788's beacon roots contract and ring size: each block writes the
/// slots `timestamp % 8191` and that plus 8191 outside any transaction.
const BEACON_ROOTS: [u8; 20] = alloy_primitives::hex!("000F3df6D732807Ef1319fB7B8bB8522d0Beac02");
/// EIP-2935's block hash history contract: each block writes the slot
/// `(number - 1) % 8191` outside any transaction.
const HISTORY_STORAGE: [u8; 20] =
    alloy_primitives::hex!("0000F90827F1C53a10cb7A02335B175320002935");
/// Both system contracts' ring size.
const SYSTEM_RING: u64 = 8191;

/// Where the keys a block touched come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TouchSource {
    /// The upstream node's tracer: `debug_traceBlockByHash` with
    /// `prestateTracer` in diff mode, plus the writes it leaves out.
    Tracer,
    /// An upstream neve's `neve_getTouchedKeys`: it traced already.
    Neve,
}

/// Who a fetch is for, for the counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Purpose {
    Read,
    Prefetch,
}

/// Why a fetch did not store anything.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("upstream: {0}")]
    Upstream(#[from] RpcError),
    #[error("upstream answer is not a proof: {0}")]
    Shape(String),
    #[error("proof refused: {0}")]
    Refused(#[from] ProofError),
}

/// The fetcher: one per neve, shared by serving (as [`Fetch`]) and
/// prefetch. Cheap to clone.
#[derive(Clone)]
pub struct ProofFetcher {
    inner: Arc<Inner>,
}

struct Inner {
    client: RpcClient,
    state: Arc<State>,
    in_flight: Arc<Semaphore>,
    pending: Mutex<HashMap<FetchRequest, watch::Receiver<bool>>>,
}

impl ProofFetcher {
    /// A fetcher asking `client` and storing into `state`.
    pub fn new(client: RpcClient, state: Arc<State>) -> Self {
        ProofFetcher {
            inner: Arc::new(Inner {
                client: client.with_timeout(FETCH_TIMEOUT),
                state,
                in_flight: Arc::new(Semaphore::new(MAX_FETCHES_IN_FLIGHT)),
                pending: Mutex::default(),
            }),
        }
    }

    /// Starts (or joins) a fetch; the returned future ends when it did.
    fn start(&self, request: FetchRequest, purpose: Purpose) -> watch::Receiver<bool> {
        let mut pending = self.inner.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(done) = pending.get(&request) {
            return done.clone();
        }
        let (tx, rx) = watch::channel(false);
        let Ok(permit) = self.inner.in_flight.clone().try_acquire_owned() else {
            self.inner
                .state
                .counters
                .shed
                .fetch_add(1, Ordering::Relaxed);
            let _ = tx.send(true);
            return rx;
        };
        pending.insert(request.clone(), rx.clone());
        drop(pending);
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let counters = &inner.state.counters;
            match inner.fetch(&request, purpose).await {
                Ok(()) => {}
                Err(FetchError::Refused(error)) => {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%error, address = %hex(&request.address), "state proof refused");
                }
                Err(error) => {
                    counters.fetch_failures.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%error, address = %hex(&request.address), "state fetch failed");
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
}

/// An `eth_getProof` answer. Only the nodes are stored (and every value
/// served is read back from them); the values it states are checked
/// against the nodes, so an upstream that lies about them is caught and
/// counted even where its nodes are honest.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProofAnswer {
    account_proof: Vec<String>,
    balance: String,
    nonce: String,
    code_hash: String,
    storage_hash: String,
    #[serde(default)]
    storage_proof: Vec<StorageAnswer>,
}

#[derive(Deserialize)]
struct StorageAnswer {
    value: String,
    #[serde(default)]
    proof: Vec<String>,
}

/// What an answer states, decoded.
struct Stated {
    balance: U256,
    nonce: u64,
    code_hash: Hash,
    storage_hash: Hash,
    values: Vec<U256>,
}

fn quantity_u256(text: &str) -> Result<U256, FetchError> {
    text.strip_prefix("0x")
        .and_then(|digits| U256::from_str_radix(digits, 16).ok())
        .ok_or_else(|| FetchError::Shape(format!("{text:?} is not a quantity")))
}

fn hash32(text: &str) -> Result<Hash, FetchError> {
    decode_hex(text)?
        .as_ref()
        .try_into()
        .map_err(|_| FetchError::Shape(format!("{text:?} is not a 32-byte hash")))
}

impl ProofAnswer {
    fn stated(&self) -> Result<Stated, FetchError> {
        Ok(Stated {
            balance: quantity_u256(&self.balance)?,
            nonce: u64::try_from(quantity_u256(&self.nonce)?)
                .map_err(|_| FetchError::Shape("nonce over 64 bits".into()))?,
            code_hash: hash32(&self.code_hash)?,
            storage_hash: hash32(&self.storage_hash)?,
            values: self
                .storage_proof
                .iter()
                .map(|s| quantity_u256(&s.value))
                .collect::<Result<_, _>>()?,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    format!("0x{}", alloy_primitives::hex::encode(bytes))
}

fn decode_hex(text: &str) -> Result<Bytes, FetchError> {
    alloy_primitives::hex::decode(text)
        .map(Bytes::from)
        .map_err(|_| FetchError::Shape("a node is not hex".into()))
}

impl Inner {
    async fn fetch(&self, request: &FetchRequest, purpose: Purpose) -> Result<(), FetchError> {
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

/// An upstream's `eth_getProof` answer (and `eth_getCode`'s, when asked
/// for), as received, decoded and walked from the request's verified root.
fn decode_and_verify(
    request: &FetchRequest,
    keys: StorageKeys,
    proof: &str,
    code: Option<&str>,
) -> Result<Verified, FetchError> {
    let proof: ProofAnswer =
        serde_json::from_str(proof).map_err(|e| FetchError::Shape(e.to_string()))?;
    let code: Option<Bytes> = match code {
        Some(raw) => {
            let text: String =
                serde_json::from_str(raw).map_err(|e| FetchError::Shape(e.to_string()))?;
            Some(decode_hex(&text)?)
        }
        None => None,
    };
    let stated = proof.stated()?;
    let account_nodes = proof
        .account_proof
        .iter()
        .map(|n| decode_hex(n))
        .collect::<Result<Vec<_>, _>>()?;
    let storage_nodes = proof
        .storage_proof
        .iter()
        .map(|s| s.proof.iter().map(|n| decode_hex(n)).collect())
        .collect::<Result<Vec<Vec<Bytes>>, _>>()?;
    Ok(verify_answer(
        request,
        keys,
        &stated,
        &account_nodes,
        &storage_nodes,
        code.as_deref(),
    )?)
}

/// `request` with the value slot of each of its slots (see
/// [`StorageKeys`]) named too, so the values an answer states can be
/// checked: a coreth node proves a slot's own path but states the value of
/// its normalized one.
fn with_value_slots(request: &FetchRequest, keys: StorageKeys) -> FetchRequest {
    FetchRequest {
        slots: keys.with_value_slots(&request.slots),
        ..request.clone()
    }
}

/// Walks an upstream's answer from the request's verified root; returns
/// what it proved. Each stated storage value is checked against the value
/// proved at its value slot (the slot itself, but on coreth; see
/// [`StorageKeys`]), which the request must name.
fn verify_answer(
    request: &FetchRequest,
    keys: StorageKeys,
    stated: &Stated,
    account_nodes: &[Bytes],
    storage_nodes: &[Vec<Bytes>],
    code: Option<&[u8]>,
) -> Result<Verified, ProofError> {
    let (mut verified, leaf) = proof::verify(
        &request.state_root,
        &keccak256(request.address).0,
        account_nodes,
    )?;
    if stated.values.len() != request.slots.len() || storage_nodes.len() != request.slots.len() {
        return Err(ProofError::Disagrees("number of storage proofs"));
    }
    let Some(leaf) = leaf else {
        // The account does not exist: its proof of absence is all there is.
        if stated.balance != U256::ZERO || stated.nonce != 0 {
            return Err(ProofError::Disagrees(
                "balance or nonce of a missing account",
            ));
        }
        if stated.values.iter().any(|v| *v != U256::ZERO) {
            return Err(ProofError::Disagrees("storage value of a missing account"));
        }
        return Ok(verified);
    };
    let account =
        Account::decode(&leaf).map_err(|_| ProofError::BadLeaf("account does not decode"))?;
    for (disagrees, what) in [
        (stated.balance != account.balance, "balance"),
        (stated.nonce != account.nonce, "nonce"),
        (stated.code_hash != account.code_hash, "code hash"),
        (stated.storage_hash != account.storage_root, "storage hash"),
    ] {
        if disagrees {
            return Err(ProofError::Disagrees(what));
        }
    }
    let mut proved = Vec::with_capacity(request.slots.len());
    for (slot, nodes) in request.slots.iter().zip(storage_nodes) {
        let value = if account.storage_root == EMPTY_ROOT {
            U256::ZERO
        } else {
            let (slot_nodes, leaf) =
                proof::verify(&account.storage_root, &keccak256(slot).0, nodes)?;
            verified.extend(slot_nodes);
            match leaf {
                None => U256::ZERO,
                Some(leaf) => {
                    let bytes = neve_state::trie::rlp_string(&leaf)
                        .map_err(|_| ProofError::BadLeaf("slot value does not decode"))?;
                    if bytes.len() > 32 {
                        return Err(ProofError::BadLeaf("slot value over 32 bytes"));
                    }
                    U256::from_be_slice(bytes)
                }
            }
        };
        proved.push(value);
    }
    for (slot, stated_value) in request.slots.iter().zip(&stated.values) {
        let value_slot = keys.value_slot(slot);
        let at = request
            .slots
            .iter()
            .position(|s| *s == value_slot)
            .ok_or(ProofError::Disagrees("a value slot was not asked for"))?;
        if proved[at] != *stated_value {
            return Err(ProofError::Disagrees("storage value"));
        }
    }
    if request.code && account.code_hash != EMPTY_CODE_HASH {
        let code = code.ok_or(ProofError::BadLeaf("code asked for but not given"))?;
        verified.extend(neve_state::verify_code(&account.code_hash, code)?);
    }
    Ok(verified)
}

/// Keeps the hot keys answerable at the stored tip: each time the tip
/// moves, proves the keys the new block touched at its root (one batch,
/// see the module's docs), then fetches the proofs of the keys read at
/// `latest` lately that the new root still does not answer, spending at
/// most `rate` upstream calls a second. A newer tip abandons the older
/// one's remaining work.
///
/// The hot keys are kept in `hot_keys_file` (every
/// [`HOT_KEYS_SAVE_EVERY`]; the binary writes them once more on stop with
/// [`save_hot_keys`]) and read back at start, so a
/// restart refreshes them at this pace instead of meeting its clients'
/// reads with a fetch each.
pub async fn prefetch(
    fetcher: ProofFetcher,
    reader: Reader,
    rate: u32,
    source: Option<TouchSource>,
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
    if rate == 0 {
        let _ = stop.changed().await;
        return;
    }
    let mut budget = Budget::per_second(rate);
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
        let mut by_address: BTreeMap<[u8; 20], Vec<Hash>> = BTreeMap::new();
        for key in hot {
            let slots = by_address.entry(key.address).or_default();
            if let Some(slot) = key.slot {
                slots.push(slot);
            }
        }
        let mut waits = Vec::new();
        for (address, mut slots) in by_address {
            if answerable(&state, &root, &address, &slots) {
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
            let request = FetchRequest {
                block_hash,
                state_root: root,
                address,
                slots,
                code: false,
            };
            waits.push(fetcher.start(request, Purpose::Prefetch));
        }
        for mut done in waits {
            let _ = done.wait_for(|done| *done).await;
        }
        done_for = Some(block_hash);
    }
}

/// How often the hot keys are written to their file, besides on stop: a
/// neve killed outright comes back with keys at most this old. Default
/// is 30 s.
pub const HOT_KEYS_SAVE_EVERY: Duration = Duration::from_secs(30);

/// Writes the hot keys every [`HOT_KEYS_SAVE_EVERY`] until stopped (the
/// binary writes them once more after serving stopped).
async fn save_hot_keys_until_stopped(
    path: PathBuf,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(HOT_KEYS_SAVE_EVERY) => {}
            _ = stop.changed() => return,
        }
        let (path, state) = (path.clone(), state.clone());
        let saved = tokio::task::spawn_blocking(move || save_hot_keys(&path, &state)).await;
        if let Ok(Err(error)) = saved {
            tracing::warn!(%error, "could not save the hot keys");
        }
    }
}

/// The hot-keys file is read up to this many bytes, the rest ignored: a
/// hint must not cost a start-up an unbounded read and allocation (a
/// damaged or planted file). 16 MiB is ~150,000 keys with slots, past any
/// hot set's capacity. Default is 16 MiB.
pub const MAX_HOT_KEYS_FILE_BYTES: u64 = 16 << 20;

/// The hot keys, one a line (`0xADDRESS` or `0xADDRESS 0xSLOT`), written to
/// a temporary file, made durable, and renamed over `path` (the directory
/// synced after), so a crash or a power loss leaves the old file or the
/// new one. One save at a time in the process: the periodic one and the
/// last one on stop never write the same temporary file together.
pub fn save_hot_keys(path: &std::path::Path, state: &State) -> std::io::Result<()> {
    use std::io::Write;
    static SAVING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = SAVING.lock().unwrap_or_else(|p| p.into_inner());
    let mut text = String::new();
    for key in state.hot_keys() {
        text.push_str(&hex(&key.address));
        if let Some(slot) = key.slot {
            text.push(' ');
            text.push_str(&hex(&slot));
        }
        text.push('\n');
    }
    let partial = path.with_extension("partial");
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&partial, path)?;
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::File::open(dir)?.sync_all(),
        _ => Ok(()),
    }
}

/// Records the keys of a file [`save_hot_keys`] wrote as hot; a line that
/// does not parse is skipped (the file is a hint), and nothing past
/// [`MAX_HOT_KEYS_FILE_BYTES`] is read. Returns how many.
fn load_hot_keys(path: &std::path::Path, state: &State) -> usize {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(path) else {
        return 0;
    };
    let mut bytes = Vec::new();
    if file
        .take(MAX_HOT_KEYS_FILE_BYTES)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return 0;
    }
    if bytes.len() as u64 == MAX_HOT_KEYS_FILE_BYTES {
        tracing::warn!(
            path = %path.display(),
            limit = MAX_HOT_KEYS_FILE_BYTES,
            "the hot-keys file is larger than its limit; the rest is ignored"
        );
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut loaded = 0;
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let Some(Ok(address)) = words.next().map(address20) else {
            continue;
        };
        let slot = match words.next().map(hash32) {
            Some(Ok(slot)) => Some(slot),
            Some(Err(_)) => continue,
            None => None,
        };
        state.record_hot(neve_state::HotKey { address, slot });
        loaded += 1;
    }
    loaded
}

/// Prefetch's upstream calls per second (`--state-prefetch-rate`), spent
/// evenly.
struct Budget {
    interval: Duration,
    next_call: Instant,
}

impl Budget {
    fn per_second(rate: u32) -> Budget {
        Budget {
            interval: Duration::from_secs(1) / rate,
            next_call: Instant::now(),
        }
    }

    /// Waits until `calls` more calls fit.
    async fn spend(&mut self, calls: u32) {
        let now = Instant::now();
        if self.next_call > now {
            tokio::time::sleep(self.next_call - now).await;
        }
        self.next_call = self.next_call.max(now) + self.interval * calls;
    }
}

/// Counts `calls` made by the per-block refresh (a share of prefetch's).
fn count_refresh_calls(counters: &neve_state::Counters, calls: u64) {
    counters.refresh_calls.fetch_add(calls, Ordering::Relaxed);
    counters.prefetch_calls.fetch_add(calls, Ordering::Relaxed);
}

impl ProofFetcher {
    /// Proves at `root` the keys block `block_hash` touched, in one batch,
    /// and keeps them for mirrors. Slots are proved only for accounts with
    /// hot slots: the account trie's new nodes all lie on the touched
    /// accounts' paths, a storage trie's on its touched slots'.
    async fn refresh(
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
        let touched = Arc::new(match source {
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
        });
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
        let requests: Vec<FetchRequest> = touched
            .iter()
            .map(|(address, slots)| {
                let mut slots = if slotted.contains(address) {
                    slots.clone()
                } else {
                    Vec::new()
                };
                slots.truncate(neve_state::MAX_SLOTS_PER_REQUEST);
                with_value_slots(
                    &FetchRequest {
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
        let answers = inner.client.batch(&calls).await?;
        // Hashing every proof of a busy block is milliseconds of CPU: off
        // the async workers, like a single fetch's.
        let state = inner.state.clone();
        let refused = tokio::task::spawn_blocking(move || {
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
            refused
        })
        .await
        .map_err(|e| FetchError::Shape(format!("verification task: {e}")))?;
        if refused > 0 {
            counters.refused.fetch_add(refused, Ordering::Relaxed);
            tracing::warn!(refused, "state proofs refused while refreshing a block");
        }
        inner.state.touched.record(*block_hash, touched);
        counters.refreshed_blocks.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// The keys a `prestateTracer` diff-mode trace of a block names: every
/// account in any transaction's `pre` or `post`, with the slots of its
/// `storage` there.
fn touched_by_trace(trace: &str) -> Result<neve_state::Touched, FetchError> {
    within_answer_bound(trace)?;
    #[derive(Deserialize)]
    struct Traced {
        result: Option<Diff>,
    }
    #[derive(Deserialize)]
    struct Diff {
        #[serde(default)]
        pre: BTreeMap<String, Changed>,
        #[serde(default)]
        post: BTreeMap<String, Changed>,
    }
    #[derive(Deserialize)]
    struct Changed {
        #[serde(default)]
        storage: BTreeMap<String, serde::de::IgnoredAny>,
    }
    let traced: Vec<Traced> =
        serde_json::from_str(trace).map_err(|e| FetchError::Shape(e.to_string()))?;
    let mut touched = neve_state::Touched::new();
    for diff in traced.into_iter().filter_map(|t| t.result) {
        for (address, changed) in diff.pre.into_iter().chain(diff.post) {
            let slots = touched.entry(address20(&address)?).or_default();
            for slot in changed.storage.keys() {
                slots.push(hash32(slot)?);
            }
        }
    }
    for slots in touched.values_mut() {
        slots.sort_unstable();
        slots.dedup();
    }
    within_key_bound(touched.values().map(|slots| 1 + slots.len()).sum())?;
    Ok(touched)
}

/// Adds what a block changes outside its transactions, which the tracer
/// does not see: the fee recipient, withdrawals' recipients, and the
/// EIP-4788 and EIP-2935 system contracts' slots, read from the verified
/// header.
fn add_untraced(touched: &mut neve_state::Touched, header: &[u8]) -> Result<(), FetchError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Header {
        number: String,
        timestamp: String,
        miner: String,
        #[serde(default)]
        parent_beacon_block_root: Option<String>,
        #[serde(default)]
        requests_hash: Option<String>,
        #[serde(default)]
        withdrawals: Vec<Withdrawal>,
    }
    #[derive(Deserialize)]
    struct Withdrawal {
        address: String,
    }
    let header: Header =
        serde_json::from_slice(header).map_err(|e| FetchError::Shape(e.to_string()))?;
    let number = u64::try_from(quantity_u256(&header.number)?)
        .map_err(|_| FetchError::Shape("height over 64 bits".into()))?;
    let timestamp = u64::try_from(quantity_u256(&header.timestamp)?)
        .map_err(|_| FetchError::Shape("timestamp over 64 bits".into()))?;
    touched.entry(address20(&header.miner)?).or_default();
    for withdrawal in &header.withdrawals {
        touched.entry(address20(&withdrawal.address)?).or_default();
    }
    let slot = |n: u64| U256::from(n).to_be_bytes::<32>();
    if header.parent_beacon_block_root.is_some() {
        let ring = timestamp % SYSTEM_RING;
        let slots = touched.entry(BEACON_ROOTS).or_default();
        slots.extend([slot(ring), slot(ring + SYSTEM_RING)]);
    }
    if header.requests_hash.is_some() && number > 0 {
        let slots = touched.entry(HISTORY_STORAGE).or_default();
        slots.push(slot((number - 1) % SYSTEM_RING));
    }
    for slots in touched.values_mut() {
        slots.sort_unstable();
        slots.dedup();
    }
    Ok(())
}

/// Keys (accounts and slots together) one block's touched set may name,
/// from the upstream's trace or an upstream neve: past it the answer is
/// refused (logged) and that block is refreshed key by key, so a hostile
/// or broken upstream naming millions of keys costs neither gigabytes nor
/// an hour of prefetch budget. A block of Ethereum mainnet touches a few
/// thousand; 100,000 is far above any. Default is 100,000.
pub const MAX_TOUCHED_KEYS_PER_BLOCK: usize = 100_000;

/// Bytes of a touched-keys answer (a trace or a neve's list) parsed at
/// most, so the key bound is not reached only after the parse allocated
/// them. Default is 64 MiB.
pub const MAX_TOUCHED_ANSWER_BYTES: usize = 64 << 20;

/// Refuses a touched set naming `keys` keys past
/// [`MAX_TOUCHED_KEYS_PER_BLOCK`].
fn within_key_bound(keys: usize) -> Result<(), FetchError> {
    if keys > MAX_TOUCHED_KEYS_PER_BLOCK {
        tracing::warn!(
            keys,
            limit = MAX_TOUCHED_KEYS_PER_BLOCK,
            "the upstream named more touched keys than a block can have; refreshing key by key"
        );
        return Err(FetchError::Shape(format!(
            "{keys} touched keys, past the bound of {MAX_TOUCHED_KEYS_PER_BLOCK}"
        )));
    }
    Ok(())
}

/// Refuses a touched-keys answer past [`MAX_TOUCHED_ANSWER_BYTES`] unparsed.
fn within_answer_bound(answer: &str) -> Result<(), FetchError> {
    if answer.len() > MAX_TOUCHED_ANSWER_BYTES {
        tracing::warn!(
            bytes = answer.len(),
            limit = MAX_TOUCHED_ANSWER_BYTES,
            "a touched-keys answer past its bound; refreshing key by key"
        );
        return Err(FetchError::Shape(format!(
            "a touched-keys answer of {} bytes, past the bound of {MAX_TOUCHED_ANSWER_BYTES}",
            answer.len()
        )));
    }
    Ok(())
}

/// An upstream neve's `neve_getTouchedKeys` answer.
fn touched_as_said(said: &str) -> Result<neve_state::Touched, FetchError> {
    within_answer_bound(said)?;
    let said: BTreeMap<String, Vec<String>> =
        serde_json::from_str(said).map_err(|e| FetchError::Shape(e.to_string()))?;
    within_key_bound(said.values().map(|slots| 1 + slots.len()).sum())?;
    said.iter()
        .map(|(address, slots)| {
            Ok((
                address20(address)?,
                slots.iter().map(|s| hash32(s)).collect::<Result<_, _>>()?,
            ))
        })
        .collect()
}

fn address20(text: &str) -> Result<[u8; 20], FetchError> {
    decode_hex(text)?
        .as_ref()
        .try_into()
        .map_err(|_| FetchError::Shape(format!("{text:?} is not an address")))
}

/// Whether `root` already answers the account and these slots.
fn answerable(state: &State, root: &Hash, address: &[u8; 20], slots: &[Hash]) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// geth's `eth_getProof` answer from the execution-apis suite, as
    /// received, and a request whose verified root it hashes up to.
    fn fixture() -> (String, FetchRequest) {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../../shared/conformance/rpc-compat/eth_getProof/get-account-proof-latest.io"
        );
        let text =
            std::fs::read_to_string(path).expect("the conformance fixtures beside the project");
        let line = text.lines().find(|l| l.starts_with("<<")).unwrap();
        let answer: serde_json::Value = serde_json::from_str(&line[3..]).unwrap();
        let result = answer["result"].to_string();
        let first = decode_hex(answer["result"]["accountProof"][0].as_str().unwrap()).unwrap();
        let address = decode_hex(answer["result"]["address"].as_str().unwrap()).unwrap();
        let request = FetchRequest {
            block_hash: [1; 32],
            state_root: keccak256(&first).0,
            address: address[..].try_into().unwrap(),
            slots: Vec::new(),
            code: false,
        };
        (result, request)
    }

    #[test]
    fn a_geth_answer_verifies_and_a_changed_one_is_refused() {
        let (answer, request) = fixture();
        assert!(decode_and_verify(&request, StorageKeys::Plain, &answer, None).is_ok());
        let lying = answer.replacen("\"balance\":\"0x76\"", "\"balance\":\"0x77\"", 1);
        assert_ne!(lying, answer);
        assert!(decode_and_verify(&request, StorageKeys::Plain, &lying, None).is_err());
    }

    /// A block's diff-mode prestate trace names every account in `pre` or
    /// `post` with its slots; the header adds the fee recipient,
    /// withdrawals and the system contracts' slots the trace leaves out.
    #[test]
    fn touched_keys_come_from_the_trace_and_the_header() {
        let a = format!("0x{}", "aa".repeat(20));
        let b = format!("0x{}", "bb".repeat(20));
        let slot = format!("0x{}", "01".repeat(32));
        let trace = format!(
            r#"[{{"txHash":"0x00","result":{{"pre":{{"{a}":{{"balance":"0x2","storage":{{"{slot}":"0x01"}}}}}},"post":{{"{a}":{{"balance":"0x1"}},"{b}":{{"nonce":1}}}}}}}},{{"txHash":"0x01","error":"execution reverted"}}]"#
        );
        let mut touched = touched_by_trace(&trace).unwrap();
        assert_eq!(touched.len(), 2);
        assert_eq!(touched[&[0xaa; 20]], vec![[1; 32]]);
        assert!(touched[&[0xbb; 20]].is_empty());
        let miner = format!("0x{}", "cc".repeat(20));
        let withdrawn = format!("0x{}", "dd".repeat(20));
        let header = format!(
            r#"{{"number":"0x10","timestamp":"0x2000","miner":"{miner}","parentBeaconBlockRoot":"0x00","requestsHash":"0x00","withdrawals":[{{"index":"0x0","validatorIndex":"0x0","address":"{withdrawn}","amount":"0x1"}}]}}"#
        );
        add_untraced(&mut touched, header.as_bytes()).unwrap();
        assert!(touched.contains_key(&[0xcc; 20]) && touched.contains_key(&[0xdd; 20]));
        let slot_of = |n: u64| U256::from(n).to_be_bytes::<32>();
        assert_eq!(
            touched[&BEACON_ROOTS],
            vec![slot_of(0x2000 % 8191), slot_of(0x2000 % 8191 + 8191)]
        );
        assert_eq!(touched[&HISTORY_STORAGE], vec![slot_of(15)]);
        // What a neve says is read back the same way.
        let said = format!(r#"{{"{a}":["{slot}"],"{b}":[]}}"#);
        let read = touched_as_said(&said).unwrap();
        assert_eq!(read[&[0xaa; 20]], vec![[1; 32]]);
        assert!(touched_as_said("[1]").is_err());
        assert!(touched_by_trace(r#"{"pre":{}}"#).is_err());
    }

    /// The hot keys survive a restart through their file; a damaged line
    /// is skipped, not fatal.
    /// Issue 32 (10): a hot-keys file past its limit is read up to it,
    /// not whole, and what lies within still loads.
    #[test]
    fn a_hot_keys_file_is_read_up_to_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hot-keys");
        let line = format!("0x{}\n", "11".repeat(20));
        let lines = (MAX_HOT_KEYS_FILE_BYTES as usize / line.len()) + 1000;
        std::fs::write(&path, line.repeat(lines)).unwrap();
        let state = State::new(1 << 20, 64);
        let loaded = load_hot_keys(&path, &state);
        assert!(loaded > 0 && loaded < lines, "{loaded} of {lines}");
    }

    /// Issue 32 (3): an upstream neve naming more keys than a block can
    /// touch is refused (the block is then refreshed key by key).
    #[test]
    fn a_touched_set_past_its_bound_is_refused() {
        let many: std::collections::BTreeMap<String, Vec<String>> =
            (0..MAX_TOUCHED_KEYS_PER_BLOCK as u64 + 1)
                .map(|i| (format!("0x{i:040x}"), Vec::new()))
                .collect();
        let said = serde_json::to_string(&many).unwrap();
        assert!(matches!(touched_as_said(&said), Err(FetchError::Shape(_))));
        let few: std::collections::BTreeMap<String, Vec<String>> = (0..3u64)
            .map(|i| (format!("0x{i:040x}"), vec![format!("0x{i:064x}")]))
            .collect();
        assert_eq!(
            touched_as_said(&serde_json::to_string(&few).unwrap())
                .unwrap()
                .len(),
            3
        );
        assert!(within_answer_bound(&" ".repeat(MAX_TOUCHED_ANSWER_BYTES + 1)).is_err());
    }

    #[test]
    fn hot_keys_are_saved_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hot-keys");
        let state = State::new(1 << 20, 64);
        state.record_hot(neve_state::HotKey {
            address: [1; 20],
            slot: None,
        });
        state.record_hot(neve_state::HotKey {
            address: [2; 20],
            slot: Some([3; 32]),
        });
        save_hot_keys(&path, &state).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("not a key\n0x12 0x34\n");
        std::fs::write(&path, text).unwrap();
        let restarted = State::new(1 << 20, 64);
        assert_eq!(load_hot_keys(&path, &restarted), 2);
        let mut keys = restarted.hot_keys();
        keys.sort_by_key(|k| k.address);
        assert_eq!(
            keys,
            state.hot_keys().into_iter().fold(Vec::new(), |mut v, k| {
                v.push(k);
                v.sort_by_key(|k: &neve_state::HotKey| k.address);
                v
            })
        );
        assert_eq!(load_hot_keys(&dir.path().join("absent"), &restarted), 0);
    }

    /// Fuzz target: an upstream's `eth_getProof` (and `eth_getCode`)
    /// answer, decoded and walked from a verified root: anything but the
    /// proof is refused, never a panic or a hang.
    #[test]
    fn fuzz_proof_answers_through_decoding_and_verification() {
        let (answer, request) = fixture();
        let with_slot = FetchRequest {
            slots: vec![[0; 32]],
            code: true,
            ..request.clone()
        };
        let seeds = vec![answer.clone().into_bytes()];
        let dictionary: [&[u8]; 10] = [
            b"\"0x\"",
            b"0x",
            b"\"storageProof\":[{\"key\":\"0x0\",\"value\":\"0x1\",\"proof\":[]}]",
            b"\"accountProof\":[]",
            b"f90211",
            b"80",
            b"\"",
            b"[",
            b"null",
            b"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        ];
        let report =
            neve_devnet::fuzz::run("proof answers", &seeds, &dictionary, 64 << 10, |input| {
                let Ok(text) = std::str::from_utf8(input) else {
                    return;
                };
                let _ = decode_and_verify(&request, StorageKeys::Plain, text, None);
                let _ =
                    decode_and_verify(&with_slot, StorageKeys::Coreth, text, Some("\"0x6000\""));
            });
        eprintln!("proof answers: {report}");
    }
}
