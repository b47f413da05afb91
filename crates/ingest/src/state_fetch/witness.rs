//! Execution witnesses: a block's `debug_executionWitness` fetched from the
//! upstream (geth, or a neve above that holds it), verified, its nodes and
//! codes stored, and kept as the answer a mirror below is served.
//!
//! Verified means: the state nodes and codes as [`verify_witness`] takes
//! them from the parent's verified `stateRoot`; the headers as a hash
//! chain down from the parent's verified hash, each re-encoded from its
//! fields and hashed. What is kept (and served) is made from what verified
//! only, in geth's order: headers oldest first, codes and nodes sorted by
//! their bytes.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use alloy_consensus::Header;
use bytes::Bytes;
use neve_state::{EMPTY_ROOT, State, WitnessRequest, verify_witness};
use neve_upstream::RpcError;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::FetchError;
use super::fetcher::Inner;
use super::proof::{decode_hex, hex};

/// Most headers a witness may carry: `BLOCKHASH` reaches 256 blocks back.
const MAX_WITNESS_HEADERS: usize = 256;

/// JSON-RPC's "method not found": an upstream without the method
/// (avalanchego, a node without the `debug` namespace).
const METHOD_NOT_FOUND: i64 = -32601;

/// A witness as the upstream sends it.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow, default)]
    headers: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    codes: Option<Vec<&'a str>>,
    #[serde(borrow, default)]
    state: Option<Vec<&'a str>>,
}

/// A witness verified: what goes into the node store, and the answer kept.
pub(super) struct Checked {
    verified: neve_state::Verified,
    answer: Bytes,
    dropped: usize,
}

impl Inner {
    /// Brings the witness of `request`'s block into the node store: from
    /// the witnesses held (their nodes may have been evicted since), else
    /// from the upstream, once; an upstream without the method is noted
    /// and not asked again (replays then fetch proofs).
    pub(super) async fn witness(&self, request: &WitnessRequest) -> Result<(), FetchError> {
        let witnesses = &self.state.witnesses;
        let answer = match witnesses.get(&request.block_hash) {
            Some(held) => held,
            None if witnesses.unavailable() => return Ok(()),
            None => {
                self.state
                    .counters
                    .upstream_calls
                    .fetch_add(1, Ordering::Relaxed);
                let fetched = self
                    .client
                    .call_raw("debug_executionWitness", [hex(&request.block_hash)])
                    .await;
                match fetched {
                    Err(RpcError::Rpc { code, .. }) if code == METHOD_NOT_FOUND => {
                        witnesses.mark_unavailable();
                        tracing::info!(
                            "the upstream serves no execution witnesses; traces fetch proofs"
                        );
                        return Ok(());
                    }
                    fetched => Bytes::from(fetched?.get().to_owned().into_bytes()),
                }
            }
        };
        // Decoding and hashing a witness is milliseconds of CPU per
        // megabyte: off the async workers.
        let (request, state) = (request.clone(), self.state.clone());
        tokio::task::spawn_blocking(move || store(&state, &request, &answer))
            .await
            .map_err(|e| FetchError::Shape(format!("verification task: {e}")))?
    }
}

/// Verifies `answer` as `request`'s witness; stores its nodes and keeps it.
fn store(state: &State, request: &WitnessRequest, answer: &[u8]) -> Result<(), FetchError> {
    let checked = check(request, answer)?;
    let witnesses = &state.witnesses;
    state.insert(checked.verified);
    witnesses
        .dropped
        .fetch_add(checked.dropped as u64, Ordering::Relaxed);
    if witnesses.get(&request.block_hash).is_none() {
        witnesses.fetched.fetch_add(1, Ordering::Relaxed);
        witnesses.insert(request.block_hash, checked.answer);
    }
    Ok(())
}

/// `answer` verified as the witness of `request`'s block (see the
/// module's doc), and the answer made of what verified.
pub(super) fn check(request: &WitnessRequest, answer: &[u8]) -> Result<Checked, FetchError> {
    let answer: Answer<'_> =
        serde_json::from_slice(answer).map_err(|e| FetchError::Shape(e.to_string()))?;
    let headers = chained_headers(request, answer.headers.as_deref().unwrap_or_default())?;
    let decode = |items: Option<Vec<&str>>| -> Result<Vec<Bytes>, FetchError> {
        items
            .unwrap_or_default()
            .into_iter()
            .map(decode_hex)
            .collect()
    };
    let nodes = decode(answer.state)?;
    let codes = decode(answer.codes)?;
    let witnessed = verify_witness(&request.parent_state_root, &nodes, &codes)
        .map_err(|e| FetchError::Shape(format!("a reached node is malformed: {e:?}")))?;
    if witnessed.nodes == 0 && request.parent_state_root != EMPTY_ROOT {
        return Err(FetchError::Shape("no node of the parent's state".into()));
    }
    let mut state_nodes: Vec<&Bytes> = witnessed.state_nodes().collect();
    let mut code_items: Vec<&Bytes> = witnessed.code_items().collect();
    state_nodes.sort_unstable();
    code_items.sort_unstable();
    let mut out = String::with_capacity(2 * witnessed.bytes + 4096);
    out.push_str("{\"headers\":[");
    out.push_str(&headers.join(","));
    out.push_str("],\"codes\":[");
    hex_items(&mut out, &code_items);
    out.push_str("],\"state\":[");
    hex_items(&mut out, &state_nodes);
    out.push_str("],\"keys\":null}");
    let answer = Bytes::from(out.into_bytes());
    Ok(Checked {
        dropped: witnessed.dropped,
        verified: witnessed.verified,
        answer,
    })
}

/// The witness's headers, checked as a hash chain down from the block's
/// parent (each re-encoded from its fields and hashed), as JSON oldest
/// first with their hashes.
fn chained_headers(request: &WitnessRequest, raw: &[&RawValue]) -> Result<Vec<String>, FetchError> {
    if raw.len() > MAX_WITNESS_HEADERS {
        return Err(FetchError::Shape(format!("{} headers", raw.len())));
    }
    let mut headers: Vec<Header> = raw
        .iter()
        .map(|h| serde_json::from_str(h.get()).map_err(|e| FetchError::Shape(e.to_string())))
        .collect::<Result<_, _>>()?;
    headers.sort_by_key(|h| std::cmp::Reverse(h.number));
    let mut expected = (request.number.checked_sub(1), request.parent_hash);
    let mut out = Vec::with_capacity(headers.len());
    for header in headers {
        let hash = header.hash_slow();
        if Some(header.number) != expected.0 || hash.0 != expected.1 {
            return Err(FetchError::Shape(format!(
                "header {} is not the block's ancestor",
                header.number
            )));
        }
        expected = (header.number.checked_sub(1), header.parent_hash.0);
        out.push(header_json(&header, &hash));
    }
    out.reverse();
    Ok(out)
}

/// A header as geth writes it in a witness: its fields in its order, the
/// ones a fork has not brought as `null`, and its hash.
fn header_json(h: &Header, hash: &alloy_primitives::B256) -> String {
    fn or_null<T>(value: Option<T>, show: impl Fn(T) -> String) -> String {
        value.map_or_else(|| "null".to_owned(), show)
    }
    let quoted = |text: String| format!("\"{text}\"");
    let number = |n: u64| quoted(format!("{n:#x}"));
    let mut out = String::with_capacity(1400);
    let _ = write!(
        out,
        "{{\"parentHash\":\"{}\",\"sha3Uncles\":\"{}\",\"miner\":\"{}\",\"stateRoot\":\"{}\",\
         \"transactionsRoot\":\"{}\",\"receiptsRoot\":\"{}\",\"logsBloom\":\"{}\",\
         \"difficulty\":\"{:#x}\",\"number\":\"{:#x}\",\"gasLimit\":\"{:#x}\",\"gasUsed\":\"{:#x}\",\
         \"timestamp\":\"{:#x}\",\"extraData\":\"{}\",\"mixHash\":\"{}\",\"nonce\":\"{}\",",
        h.parent_hash,
        h.ommers_hash,
        alloy_primitives::hex::encode_prefixed(h.beneficiary),
        h.state_root,
        h.transactions_root,
        h.receipts_root,
        h.logs_bloom,
        h.difficulty,
        h.number,
        h.gas_limit,
        h.gas_used,
        h.timestamp,
        h.extra_data,
        h.mix_hash,
        h.nonce,
    );
    let _ = write!(
        out,
        "\"baseFeePerGas\":{},\"withdrawalsRoot\":{},\"blobGasUsed\":{},\"excessBlobGas\":{},\
         \"parentBeaconBlockRoot\":{},\"requestsHash\":{},\"blockAccessListHash\":{},\
         \"slotNumber\":{},\"hash\":\"{hash}\"}}",
        or_null(h.base_fee_per_gas, number),
        or_null(h.withdrawals_root, |r| quoted(r.to_string())),
        or_null(h.blob_gas_used, number),
        or_null(h.excess_blob_gas, number),
        or_null(h.parent_beacon_block_root, |r| quoted(r.to_string())),
        or_null(h.requests_hash, |r| quoted(r.to_string())),
        or_null(h.block_access_list_hash, |r| quoted(r.to_string())),
        or_null(h.slot_number, number),
    );
    out
}

fn hex_items(out: &mut String, items: &[&Bytes]) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("\"0x");
        out.push_str(&alloy_primitives::hex::encode(item));
        out.push('"');
    }
}
