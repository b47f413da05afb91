//! State methods: balance, nonce, code, storage and proofs, read from the
//! verified node store at the `stateRoot` of a stored block; and
//! `neve_getTouchedKeys`, what a recent block touched.
//!
//! A read either answers from held nodes, or names what it needs fetched
//! ([`Reply::Fetch`]); the server then asks the fetcher, waits up to its
//! deadline, and reads again (see the server's `batch.rs`). Nothing here
//! fetches, and nothing here executes: `eth_call` and friends stay 421
//! with -32601.

use alloy_primitives::{U256, hex};
use bytes::Bytes;
use neve_state::{AccountRead, Address, FetchRequest, Hash, HotKey, ProofRequest, Read, State};
use serde_json::value::RawValue;

use crate::errors::ErrorCode;
use crate::params::{BlockRef, BlockTag, ParamError, Params};
use crate::rpc::{Context, Method, NoReply, Reads, Reply};

pub(crate) const METHODS: &[Method] = &[
    Method::new("neve_getTouchedKeys", (1, 1), touched),
    // The block is optional for state reads: `latest` when absent.
    Method::state_read("eth_getBalance", (1, 2), balance),
    Method::state_read("eth_getTransactionCount", (1, 2), transaction_count),
    Method::state_read("eth_getCode", (1, 2), code),
    Method::state_read("eth_getStorageAt", (2, 3), storage_at),
    Method::state_read("eth_getStorageValues", (1, 2), storage_values),
    Method::state_read("eth_getProof", (2, 3), proof),
];

/// Answers with the state layer; unsupported without it. The table asks a
/// state read only when the layer is on; `neve_getTouchedKeys` is asked
/// either way.
fn with_state(
    ctx: &Context,
    read: impl FnOnce(&State) -> Result<Reply, NoReply>,
) -> Result<Reply, NoReply> {
    match &ctx.state {
        Some(state) => read(state),
        None => Ok(Reply::Unsupported),
    }
}

fn touched(ctx: &Context, p: &Params<'_>, _: Reads) -> Result<Reply, NoReply> {
    with_state(ctx, |state| Ok(touched_keys(state, &p.hash(0)?)))
}

fn balance(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    with_state(ctx, |state| {
        ctx.balance_or_nonce(state, p, reads, |a| match a {
            Some(a) => quantity(a.balance),
            None => "\"0x0\"".into(),
        })
    })
}

fn transaction_count(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    with_state(ctx, |state| {
        ctx.balance_or_nonce(state, p, reads, |a| {
            format!("\"0x{:x}\"", a.map_or(0, |a| a.nonce))
        })
    })
}

fn code(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    with_state(ctx, |state| ctx.code(state, p, reads))
}

fn storage_at(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    with_state(ctx, |state| ctx.storage_at(state, p, reads))
}

fn storage_values(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    with_state(ctx, |state| ctx.storage_values(state, p, reads))
}

fn proof(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    with_state(ctx, |state| ctx.proof(state, p, reads))
}

/// The state a read is made at: a stored block's verified root.
struct At {
    root: Hash,
    block_hash: Hash,
    latest: bool,
}

impl At {
    fn request(&self, address: Address, slots: Vec<Hash>, code: bool) -> FetchRequest {
        let mut slots = slots;
        slots.sort_unstable();
        slots.dedup();
        FetchRequest::Proof(ProofRequest {
            block_hash: self.block_hash,
            state_root: self.root,
            address,
            slots,
            code,
        })
    }
}

fn quantity(value: U256) -> String {
    format!("\"{value:#x}\"")
}

fn hex32(bytes: &[u8; 32]) -> String {
    format!("\"0x{}\"", hex::encode(bytes))
}

/// `neve_getTouchedKeys(blockHash)`: the accounts and slots a recent block
/// touched, as this neve learnt them to refresh its state, for a mirror
/// to refresh its own from without tracing anything (a hint: the mirror
/// still verifies every node by hash). A miss when not kept.
fn touched_keys(state: &State, block_hash: &Hash) -> Reply {
    let Some(touched) = state.touched.get(block_hash) else {
        return Reply::Miss;
    };
    let shown: std::collections::BTreeMap<String, Vec<String>> = touched
        .iter()
        .map(|(address, slots)| {
            (
                format!("0x{}", hex::encode(address)),
                slots
                    .iter()
                    .map(|slot| format!("0x{}", hex::encode(slot)))
                    .collect(),
            )
        })
        .collect();
    Reply::json(serde_json::to_string(&shown).expect("strings serialize"))
}

impl Context {
    /// The verified state root of the block `at` names, if stored.
    ///
    /// `latest` is the block before the stored tip while the tip's
    /// touched keys are still being proved, for at most the grace after it
    /// was stored (the rule `latest` follows for blocks): reads then hit
    /// the refreshed nodes instead of each fetching what the refresh is
    /// about to bring.
    /// The block is looked up as `reads` allows: on an async worker only
    /// through pages in memory ([`NoReply::Cold`] otherwise).
    fn state_at(&self, state: &State, at: BlockRef, reads: Reads) -> Result<Option<At>, NoReply> {
        let latest = at == BlockRef::Tag(BlockTag::Latest);
        // `latest` is the block the request decided on, never an older
        // one: state its refresh has not proved yet is fetched through (or
        // 421), so a batch's block and proof at `latest` always agree.
        let height = match at {
            BlockRef::Tag(tag) => self.resolve(tag, reads),
            BlockRef::Hash(_) => None,
        };
        let block = match (at, height) {
            (BlockRef::Hash(hash), _) => self.block(BlockRef::Hash(hash), reads)?,
            (_, Some(height)) => self.block(BlockRef::Tag(BlockTag::Number(height)), reads)?,
            (_, None) => None,
        };
        let Some(block) = block else {
            return Ok(None);
        };
        let block_hash = block.hash();
        let mut unread = None;
        let root = state.state_root(block.height(), &block_hash, || {
            block.hashes_only().map_err(|e| unread = Some(e)).ok()
        });
        if let Some(unread) = unread {
            return Err(unread.into());
        }
        Ok(root.map(|root| At {
            root,
            block_hash,
            latest,
        }))
    }

    fn balance_or_nonce(
        &self,
        state: &State,
        p: &Params<'_>,
        reads: Reads,
        render: impl Fn(Option<&neve_state::Account>) -> String,
    ) -> Result<Reply, NoReply> {
        let address = p.address(0)?;
        let Some(at) = self.state_at(state, p.block_ref_or_latest(1)?, reads)? else {
            return Ok(Reply::Miss);
        };
        if at.latest {
            state.record_hot(HotKey {
                address,
                slot: None,
            });
        }
        Ok(match state.account(&at.root, &address, false) {
            Read::Found(read) => Reply::json(render(read.account.as_ref())),
            Read::Missing => Reply::Fetch(vec![at.request(address, vec![], false)]),
        })
    }

    fn code(&self, state: &State, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
        let address = p.address(0)?;
        let Some(at) = self.state_at(state, p.block_ref_or_latest(1)?, reads)? else {
            return Ok(Reply::Miss);
        };
        let fetch = || Reply::Fetch(vec![at.request(address, vec![], true)]);
        Ok(match state.account(&at.root, &address, false) {
            Read::Found(AccountRead { account: None, .. }) => Reply::json("\"0x\""),
            Read::Found(AccountRead {
                account: Some(account),
                ..
            }) => match state.code(&account.code_hash) {
                Read::Found(code) => Reply::Result(vec![
                    Bytes::from_static(b"\"0x"),
                    Bytes::from(hex::encode(&code)),
                    Bytes::from_static(b"\""),
                ]),
                Read::Missing => fetch(),
            },
            Read::Missing => fetch(),
        })
    }

    /// The values of `slots` of `address`, or what must be fetched.
    fn slots(
        &self,
        state: &State,
        at: &At,
        address: Address,
        slots: &[Hash],
        with_proof: bool,
    ) -> Result<(AccountRead, Vec<neve_state::SlotRead>), FetchRequest> {
        if at.latest {
            for slot in slots {
                state.record_hot(HotKey {
                    address,
                    slot: Some(*slot),
                });
            }
        }
        let fetch = || at.request(address, slots.to_vec(), false);
        let Read::Found(account) = state.account(&at.root, &address, with_proof) else {
            return Err(fetch());
        };
        // No account, or no storage: every slot is zero with an empty proof
        // (what geth answers).
        let storage_root = match &account.account {
            Some(a) if a.storage_root != neve_state::EMPTY_ROOT => a.storage_root,
            _ => {
                let zero = neve_state::SlotRead {
                    value: U256::ZERO,
                    proof: vec![],
                };
                return Ok((account, vec![zero; slots.len()]));
            }
        };
        let mut values = Vec::with_capacity(slots.len());
        for slot in slots {
            match state.slot(&storage_root, slot, with_proof) {
                Read::Found(read) => values.push(read),
                Read::Missing => return Err(fetch()),
            }
        }
        Ok((account, values))
    }

    fn storage_at(&self, state: &State, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
        let address = p.address(0)?;
        let (slot, _) = p.storage_key(1)?;
        let Some(at) = self.state_at(state, p.block_ref_or_latest(2)?, reads)? else {
            return Ok(Reply::Miss);
        };
        // Where the chain keeps the slot's value (coreth: normalized).
        let slot = state.storage_keys().value_slot(&slot);
        Ok(match self.slots(state, &at, address, &[slot], false) {
            Ok((_, values)) => Reply::json(hex32(&values[0].value.to_be_bytes())),
            Err(request) => Reply::Fetch(vec![request]),
        })
    }

    fn storage_values(
        &self,
        state: &State,
        p: &Params<'_>,
        reads: Reads,
    ) -> Result<Reply, NoReply> {
        let requests = parse_storage_requests(p.object(0)?)?;
        let total: usize = requests.iter().map(|(_, slots)| slots.len()).sum();
        if total > neve_state::MAX_SLOTS_PER_REQUEST {
            return Ok(Reply::Error(
                ErrorCode::LimitExceeded,
                format!("too many slots (max {})", neve_state::MAX_SLOTS_PER_REQUEST),
            ));
        }
        if total == 0 {
            return Err(ParamError("empty request".into()).into());
        }
        let Some(at) = self.state_at(state, p.block_ref_or_latest(1)?, reads)? else {
            return Ok(Reply::Miss);
        };
        let mut out = String::from("{");
        let mut fetches = Vec::new();
        for (i, (address, slots)) in requests.iter().enumerate() {
            // No slots, nothing to read (and no walk for each of the many
            // empty lists a body can hold).
            let read = if slots.is_empty() {
                Ok((
                    AccountRead {
                        account: None,
                        proof: vec![],
                    },
                    vec![],
                ))
            } else {
                let keys = state.storage_keys();
                let slots: Vec<Hash> = slots.iter().map(|s| keys.value_slot(s)).collect();
                self.slots(state, &at, *address, &slots, false)
            };
            match read {
                Ok((_, values)) if fetches.is_empty() => {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&format!("\"0x{}\":[", hex::encode(address)));
                    for (j, value) in values.iter().enumerate() {
                        if j > 0 {
                            out.push(',');
                        }
                        out.push_str(&hex32(&value.value.to_be_bytes()));
                    }
                    out.push(']');
                }
                Ok(_) => {}
                Err(request) => fetches.push(request),
            }
        }
        out.push('}');
        Ok(if fetches.is_empty() {
            Reply::json(out)
        } else {
            Reply::Fetch(fetches)
        })
    }

    fn proof(&self, state: &State, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
        let address = p.address(0)?;
        let keys = parse_proof_keys(p.object(1)?)?;
        let Some(at) = self.state_at(state, p.block_ref_or_latest(2)?, reads)? else {
            return Ok(Reply::Miss);
        };
        let slots: Vec<Hash> = keys.iter().map(|(key, _)| *key).collect();
        // Each key's own path is proved; its value is read where the chain
        // keeps it (the same slot, but on coreth: see `StorageKeys`), as
        // the node answers.
        let storage_keys = state.storage_keys();
        let asked = storage_keys.with_value_slots(&slots);
        let (account, reads_of_asked) = match self.slots(state, &at, address, &asked, true) {
            Ok(found) => found,
            Err(request) => return Ok(Reply::Fetch(vec![request])),
        };
        let value_of = |slot: &Hash| {
            let value_slot = storage_keys.value_slot(slot);
            let at = asked.iter().position(|s| *s == value_slot).expect("asked");
            reads_of_asked[at].value
        };
        let values = &reads_of_asked[..slots.len()];
        let nodes = |proof: &[Bytes], out: &mut String| {
            out.push('[');
            for (i, node) in proof.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str("\"0x");
                out.push_str(&hex::encode(node));
                out.push('"');
            }
            out.push(']');
        };
        let mut out = format!(
            "{{\"address\":\"0x{}\",\"accountProof\":",
            hex::encode(address)
        );
        nodes(&account.proof, &mut out);
        // geth states a missing account's code and storage hashes as zero.
        let (balance, code_hash, nonce, storage_hash) = match &account.account {
            Some(a) => (a.balance, a.code_hash, a.nonce, a.storage_root),
            None => (U256::ZERO, [0; 32], 0, [0; 32]),
        };
        out.push_str(&format!(
            ",\"balance\":{},\"codeHash\":{},\"nonce\":\"0x{nonce:x}\",\"storageHash\":{},\"storageProof\":[",
            quantity(balance),
            hex32(&code_hash),
            hex32(&storage_hash)
        ));
        for (i, ((key, given), read)) in keys.iter().zip(values).enumerate() {
            if i > 0 {
                out.push(',');
            }
            // geth echoes a 32-byte key as given (lower case), others as a
            // quantity.
            let key = if *given == 32 {
                hex32(key)
            } else {
                quantity(U256::from_be_bytes(*key))
            };
            out.push_str(&format!(
                "{{\"key\":{key},\"value\":{},\"proof\":",
                quantity(value_of(&slots[i]))
            ));
            nodes(&read.proof, &mut out);
            out.push('}');
        }
        out.push_str("]}");
        Ok(Reply::json(out))
    }
}

/// `eth_getProof`'s keys: an array of storage keys, at most
/// [`neve_state::MAX_SLOTS_PER_REQUEST`].
fn parse_proof_keys(raw: &RawValue) -> Result<Vec<(Hash, usize)>, ParamError> {
    let keys: Vec<&str> = serde_json::from_str(raw.get())
        .map_err(|_| ParamError("invalid argument 1: expected an array of storage keys".into()))?;
    if keys.len() > neve_state::MAX_SLOTS_PER_REQUEST {
        return Err(ParamError(format!(
            "too many storage keys requested (max {}, got {})",
            neve_state::MAX_SLOTS_PER_REQUEST,
            keys.len()
        )));
    }
    keys.into_iter()
        .map(|k| crate::params::storage_key(k).map_err(ParamError))
        .collect()
}

/// `eth_getStorageValues`' requests: `{address: [slot, …]}`, addresses in
/// the order geth answers (sorted, a repeated address's last list kept).
fn parse_storage_requests(raw: &RawValue) -> Result<Vec<(Address, Vec<Hash>)>, ParamError> {
    let bad = |what: String| ParamError(format!("invalid argument 0: {what}"));
    let pairs: RawPairs<'_> = serde_json::from_str(raw.get())
        .map_err(|_| bad("expected an object of addresses to slot arrays".into()))?;
    // A map: sorted as geth's answer is, a repeated address's last list
    // kept, and O(log n) per member however many the body holds.
    let mut requests = std::collections::BTreeMap::new();
    for (address, slots) in pairs.0 {
        let address = crate::params::address(address).map_err(bad)?;
        let slots = slots
            .into_iter()
            .map(crate::params::hash)
            .collect::<Result<Vec<_>, _>>()
            .map_err(bad)?;
        requests.insert(address, slots);
    }
    Ok(requests.into_iter().collect())
}

/// A JSON object's members in order, borrowed.
struct RawPairs<'a>(Vec<(&'a str, Vec<&'a str>)>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for RawPairs<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = RawPairs<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of addresses to slot arrays")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut pairs = Vec::new();
                while let Some(entry) = map.next_entry::<&'de str, Vec<&'de str>>()? {
                    pairs.push(entry);
                }
                Ok(RawPairs(pairs))
            }
        }
        deserializer.deserialize_map(Visitor(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::params::{BlockRef, BlockTag};
    use crate::rpc::Reads;
    use crate::server::tests::{FixedChain, server_with};

    /// issue 32.4: state at `latest` is read at the block `latest` names,
    /// even while that block's refresh runs (before, the block below it:
    /// with the head's grace, two blocks behind the upstream, and a batch's
    /// proof at `latest` not matching its block at `latest`).
    #[test]
    fn state_at_latest_is_the_latest_block_even_while_its_refresh_runs() {
        // Block 9 stored (the upstream's head), its refresh still running.
        let (server, _dir) = server_with(Arc::new(FixedChain));
        let ctx = &server.ctx;
        let state = ctx.state.clone().unwrap();
        state.mark_refreshed(8);
        let root_of = |height: u64| [height as u8; 32];
        for height in [8, 9] {
            let block = ctx.reader.block(height).unwrap();
            let header = format!(
                "{{\"stateRoot\":\"0x{}\"}}",
                alloy_primitives::hex::encode(root_of(height))
            );
            assert_eq!(
                state.state_root(height, &block.hash(), || Some(header)),
                Some(root_of(height))
            );
        }
        let latest = ctx.latest();
        assert_eq!(latest, Some(9));
        let at = ctx
            .state_at(
                &state,
                BlockRef::Tag(BlockTag::Latest),
                Reads::in_memory(latest),
            )
            .ok()
            .flatten()
            .expect("a stored block");
        assert_eq!(at.root, root_of(9));
        assert_eq!(at.block_hash, ctx.reader.block(9).unwrap().hash());
    }
}
