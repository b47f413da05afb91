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

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy_primitives::{U256, keccak256};
use bytes::Bytes;
use neve_state::{
    Account, EMPTY_CODE_HASH, EMPTY_ROOT, Fetch, FetchRequest, Hash, ProofError, Read, State,
    Verified, proof,
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
            let verified =
                decode_and_verify(&request, proof.get(), code.as_deref().map(RawValue::get))?;
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
        &stated,
        &account_nodes,
        &storage_nodes,
        code.as_deref(),
    )?)
}

/// Walks an upstream's answer from the request's verified root; returns
/// what it proved.
fn verify_answer(
    request: &FetchRequest,
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
    for ((slot, nodes), stated_value) in request.slots.iter().zip(storage_nodes).zip(&stated.values)
    {
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
        if value != *stated_value {
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
/// moves, fetches the proofs of the keys read at `latest` lately that the
/// new root does not answer yet, spending at most `rate` upstream calls a
/// second. A newer tip abandons the older one's remaining work.
pub async fn prefetch(
    fetcher: ProofFetcher,
    reader: Reader,
    rate: u32,
    mut stop: watch::Receiver<bool>,
) {
    if rate == 0 {
        return;
    }
    let interval = Duration::from_secs(1) / rate;
    let state = fetcher.state().clone();
    let mut done_for: Option<Hash> = None;
    let mut next_call = Instant::now();
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
        let Some(root) = state.state_root(tip, &block_hash, &block.hashes_only()) else {
            continue;
        };
        let mut by_address: BTreeMap<[u8; 20], Vec<Hash>> = BTreeMap::new();
        for key in state.hot_keys() {
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
            let now = Instant::now();
            if next_call > now {
                tokio::time::sleep(next_call - now).await;
            }
            next_call = next_call.max(now) + interval;
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
        assert!(decode_and_verify(&request, &answer, None).is_ok());
        let lying = answer.replacen("\"balance\":\"0x76\"", "\"balance\":\"0x77\"", 1);
        assert_ne!(lying, answer);
        assert!(decode_and_verify(&request, &lying, None).is_err());
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
                let _ = decode_and_verify(&request, text, None);
                let _ = decode_and_verify(&with_slot, text, Some("\"0x6000\""));
            });
        eprintln!("proof answers: {report}");
    }
}
