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
use super::fetcher::{FETCH_TIMEOUT, Inner, Purpose};
use super::proof::{decode_hex, hex};

/// Most headers a witness may carry: `BLOCKHASH` reaches 256 blocks back.
const MAX_WITNESS_HEADERS: usize = 256;

/// Most nodes and codes one witness may carry (a block of 1,000
/// transactions reads some thousands); past it the witness is refused
/// before anything is decoded. Default is 262,144.
pub const MAX_WITNESS_ITEMS: usize = 1 << 18;

/// JSON-RPC's "method not found": an upstream without the method
/// (avalanchego, a node without the `debug` namespace).
const METHOD_NOT_FOUND: i64 = -32601;

/// A witness as the upstream sends it.
#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow, default)]
    headers: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    codes: Option<Items<'a>>,
    #[serde(borrow, default)]
    state: Option<Items<'a>>,
}

/// Hex items, refused past [`MAX_WITNESS_ITEMS`] while they are read, so
/// an answer of many tiny items holds no more than the cap's worth.
struct Items<'a>(Vec<&'a str>);

impl<'de: 'a, 'a> Deserialize<'de> for Items<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Items<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "at most {MAX_WITNESS_ITEMS} hex strings")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<&'de str>()? {
                    if items.len() == MAX_WITNESS_ITEMS {
                        return Err(serde::de::Error::custom("too many nodes or codes"));
                    }
                    items.push(item);
                }
                Ok(Items(items))
            }
        }
        deserializer.deserialize_seq(Visitor)
    }
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
    /// from the upstream, once. A block whose witness cannot be had
    /// (refused, failed, not kept) is remembered so, and an upstream
    /// without the method for a while ([`Witnesses`]): replays then fetch
    /// proofs.
    ///
    /// [`Witnesses`]: neve_state::Witnesses
    pub(super) async fn witness(
        &self,
        request: &WitnessRequest,
        purpose: Purpose,
    ) -> Result<(), FetchError> {
        let started = std::time::Instant::now();
        let witnesses = &self.state.witnesses;
        // Waiting for a slot is bounded by the fetches in flight
        // ([`MAX_FETCHES_IN_FLIGHT`]) and by the fetch's own time.
        let slot = tokio::time::timeout(FETCH_TIMEOUT, self.witness_slots.acquire()).await;
        let Ok(Ok(_slot)) = slot else {
            self.state.counters.shed.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        };
        let answer = match witnesses.get(&request.block_hash) {
            Some(held) => held,
            None if !witnesses.worth_asking(&request.block_hash) => return Ok(()),
            None => {
                purpose
                    .calls(&self.state.counters)
                    .fetch_add(1, Ordering::Relaxed);
                let fetched = self
                    .witness_client
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
                    Err(error) => {
                        witnesses.mark_without(request.block_hash);
                        return Err(error.into());
                    }
                    // An upstream neve that does not hold it (a 421).
                    Ok(raw) if raw.get() == "null" => {
                        witnesses.mark_without(request.block_hash);
                        return Ok(());
                    }
                    Ok(raw) => Bytes::from(String::from(Box::<str>::from(raw)).into_bytes()),
                }
            }
        };
        // Decoding and hashing a witness is milliseconds of CPU per
        // megabyte: off the async workers.
        let (request, state) = (request.clone(), self.state.clone());
        let asked = started.elapsed();
        tokio::task::spawn_blocking(move || {
            let verifying = std::time::Instant::now();
            let stored = store(&state, &request, &answer);
            if stored.is_err() {
                state.witnesses.mark_without(request.block_hash);
            }
            tracing::debug!(
                block = request.number,
                bytes = answer.len(),
                ?asked,
                verified = ?verifying.elapsed(),
                "execution witness"
            );
            stored
        })
        .await
        .map_err(|e| FetchError::Shape(format!("verification task: {e}")))?
    }
}

/// Verifies `answer` as `request`'s witness; stores its nodes and keeps
/// it (a block whose witness is not kept is remembered as without one, so
/// mirrors below are not served by a fetch each).
fn store(state: &State, request: &WitnessRequest, answer: &Bytes) -> Result<(), FetchError> {
    let witnesses = &state.witnesses;
    if witnesses.get(&request.block_hash).is_some() {
        // Held: its nodes back into the node store.
        state.insert(check(request, answer)?.verified);
        return Ok(());
    }
    let checked = check(request, answer)?;
    state.insert(checked.verified);
    witnesses
        .dropped
        .fetch_add(checked.dropped as u64, Ordering::Relaxed);
    witnesses.fetched.fetch_add(1, Ordering::Relaxed);
    witnesses.insert(request.block_hash, checked.answer);
    if witnesses.get(&request.block_hash).is_none() {
        witnesses.mark_without(request.block_hash);
    }
    Ok(())
}

/// `answer` verified as the witness of `request`'s block (see the
/// module's doc), and the answer made of what verified.
pub(super) fn check(request: &WitnessRequest, answer: &[u8]) -> Result<Checked, FetchError> {
    let answer: Answer<'_> =
        serde_json::from_slice(answer).map_err(|e| FetchError::Shape(e.to_string()))?;
    let items = answer.state.as_ref().map_or(0, |i| i.0.len())
        + answer.codes.as_ref().map_or(0, |i| i.0.len());
    if items > MAX_WITNESS_ITEMS {
        return Err(FetchError::Shape(format!("{items} nodes and codes")));
    }
    let headers = chained_headers(request, answer.headers.as_deref().unwrap_or_default())?;
    let decode = |items: Option<Items<'_>>| -> Result<Vec<Bytes>, FetchError> {
        items
            .map(|i| i.0)
            .unwrap_or_default()
            .into_iter()
            .map(|item| match decode_hex(item)? {
                empty if empty.is_empty() => Err(FetchError::Shape("an empty node or code".into())),
                bytes => Ok(bytes),
            })
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
    let mut out = Vec::with_capacity(2 * witnessed.bytes + 4096);
    out.extend_from_slice(b"{\"headers\":[");
    out.extend_from_slice(headers.join(",").as_bytes());
    out.extend_from_slice(b"],\"codes\":[");
    hex_items(&mut out, &code_items);
    out.extend_from_slice(b"],\"state\":[");
    hex_items(&mut out, &state_nodes);
    out.extend_from_slice(b"],\"keys\":null}");
    let answer = Bytes::from(out);
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
    // geth's always has the parent's, and a witness without it is refused
    // by geth's own stateless execution.
    if raw.is_empty() && request.number > 0 {
        return Err(FetchError::Shape("no header of the parent".into()));
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

/// `items` as JSON strings of `0x`-prefixed hex, comma-separated, each
/// written in place (no string of its own).
fn hex_items(out: &mut Vec<u8>, items: &[&Bytes]) {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"\"0x");
        let start = out.len();
        out.resize(start + 2 * item.len(), 0);
        alloy_primitives::hex::encode_to_slice(item, &mut out[start..])
            .expect("room for two digits a byte");
        out.push(b'"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(number: u64, parent_hash: [u8; 32]) -> Header {
        Header {
            number,
            parent_hash: parent_hash.into(),
            ..Header::default()
        }
    }

    fn answer(headers: &[Header], state: &[&str]) -> Vec<u8> {
        let headers: Vec<String> = headers
            .iter()
            .map(|h| header_json(h, &h.hash_slow()))
            .collect();
        format!(
            r#"{{"headers":[{}],"codes":[],"state":{},"keys":null}}"#,
            headers.join(","),
            serde_json::to_string(state).unwrap()
        )
        .into_bytes()
    }

    fn request(number: u64, parent: &Header) -> WitnessRequest {
        WitnessRequest {
            block_hash: [9; 32],
            number,
            parent_hash: parent.hash_slow().0,
            parent_state_root: EMPTY_ROOT,
        }
    }

    #[test]
    fn headers_must_chain_down_from_the_parent() {
        let grandparent = header(3, [1; 32]);
        let parent = header(4, grandparent.hash_slow().0);
        let request = request(5, &parent);
        let checked = check(
            &request,
            &answer(&[grandparent.clone(), parent.clone()], &[]),
        )
        .expect("the parent and its parent");
        let text = String::from_utf8(checked.answer.to_vec()).unwrap();
        let first = text.find("\"number\":\"0x3\"").unwrap();
        assert!(
            first < text.find("\"number\":\"0x4\"").unwrap(),
            "oldest first"
        );
        assert!(check(&request, &answer(&[], &[])).is_err(), "no header");
        let stranger = header(4, [2; 32]);
        assert!(
            check(&request, &answer(&[stranger], &[])).is_err(),
            "another parent"
        );
        let older = header(2, [3; 32]);
        assert!(
            check(&request, &answer(&[parent, older], &[])).is_err(),
            "a gap below the parent"
        );
    }

    #[test]
    fn empty_items_and_too_many_are_refused_before_anything_is_kept() {
        let parent = header(4, [1; 32]);
        let request = request(5, &parent);
        let refused = |state: &[&str]| {
            check(&request, &answer(std::slice::from_ref(&parent), state)).is_err()
        };
        assert!(refused(&["0x"]), "an empty node");
        assert!(
            refused(&["0x01"; MAX_WITNESS_ITEMS + 1]),
            "one past the cap"
        );
        assert!(
            !refused(&["0x01"; 3]),
            "nodes the root does not reach: dropped"
        );
    }
}
