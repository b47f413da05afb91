//! A native tracer's result (revm-inspectors') in geth's words, where the
//! two differ: `callTracer`'s log indices count from the block's first
//! log, `flatCallTracer` is its frames flattened as geth does (`flat.rs`),
//! and
//! `prestateTracer` writes code hashes and leaves out accounts that were
//! empty before the transaction (`account` in geth's `native/prestate.go`).
//! Inside a `muxTracer`, each of its tracers the same.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_rpc_types_trace::geth::{
    AccountState, CallFrame, GethDebugTracerType, GethTrace, PreStateFrame,
};
use revm::primitives::KECCAK_EMPTY;
use revm::state::{AccountInfo, EvmState};
use serde::Serialize;

use super::flat::{FlatConfig, Place};
use super::inspector::Halted;
use super::lookups::Lookups;

/// What geth's words need of the transaction traced.
pub(crate) struct TxFacts<'a> {
    /// Logs of the block's transactions before it.
    pub(crate) log_offset: u64,
    /// An account before it (`None`: no account).
    pub(crate) account_before: &'a dyn Fn(Address) -> Option<AccountInfo>,
    /// The state it left.
    pub(crate) after: &'a EvmState,
    /// What geth's prestate tracer looked up, when it ran.
    pub(crate) looked_up: Option<LookedUp<'a>>,
    /// Frames whose halts geth words otherwise than revm-inspectors.
    pub(crate) halts: &'a [Halted],
    /// `flatCallTracer`'s configuration, when the call frames are to be
    /// flattened, with where they happened and the rules' precompiles.
    pub(crate) flat: Option<(FlatConfig, Place, Vec<Address>)>,
}

/// `trace` as geth writes it, into `out`.
pub(crate) fn write(
    trace: GethTrace,
    facts: &TxFacts<'_>,
    out: &mut impl Write,
) -> serde_json::Result<()> {
    match trace {
        GethTrace::CallTracer(mut frame) => {
            word_halts(&mut frame, facts.halts);
            match &facts.flat {
                Some((config, place, precompiles)) => {
                    let frames = super::flat::flatten(frame, *config, place, precompiles)
                        .map_err(serde::ser::Error::custom)?;
                    serde_json::to_writer(out, &frames)
                }
                None => {
                    number_logs(&mut frame, facts.log_offset);
                    serde_json::to_writer(out, &GethFrame(&frame))
                }
            }
        }
        GethTrace::PreStateTracer(frame) => serde_json::to_writer(out, &prestate(frame, facts)),
        GethTrace::MuxTracer(mux) => {
            // geth writes a Go map: its tracers by name, sorted.
            let mut tracers: Vec<(String, GethTrace)> = mux
                .0
                .into_iter()
                .map(|(kind, trace)| (name(&kind), trace))
                .collect();
            tracers.sort_by(|a, b| a.0.cmp(&b.0));
            out.write_all(b"{").map_err(serde_json::Error::io)?;
            for (i, (name, trace)) in tracers.into_iter().enumerate() {
                if i > 0 {
                    out.write_all(b",").map_err(serde_json::Error::io)?;
                }
                serde_json::to_writer(&mut *out, &name)?;
                out.write_all(b":").map_err(serde_json::Error::io)?;
                write(trace, facts, out)?;
            }
            out.write_all(b"}").map_err(serde_json::Error::io)
        }
        other => serde_json::to_writer(out, &other),
    }
}

/// A tracer's name as geth's mux writes it.
fn name(kind: &GethDebugTracerType) -> String {
    match kind {
        GethDebugTracerType::BuiltInTracer(builtin) => serde_json::to_value(builtin)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        GethDebugTracerType::JsTracer(code) => code.clone(),
    }
}

/// geth's words for the frames that halted at an opcode that names none
/// or on their stack (revm-inspectors' "invalid opcode", "stack
/// underflow" and the like name neither the byte nor the bounds).
fn word_halts(top: &mut CallFrame, halts: &[Halted]) {
    fn walk(frame: &mut CallFrame, number: &mut usize, halts: &HashMap<usize, &str>) {
        if let Some(words) = halts.get(number)
            && frame.error.is_some()
        {
            frame.error = Some((*words).to_owned());
        }
        *number += 1;
        for call in &mut frame.calls {
            walk(call, number, halts);
        }
    }
    if !halts.is_empty() {
        let halts: HashMap<usize, &str> = halts
            .iter()
            .map(|halted| (halted.frame, halted.words.as_str()))
            .collect();
        walk(top, &mut 0, &halts);
    }
}

/// Log indices from the block's first log (revm-inspectors counts from
/// the transaction's).
fn number_logs(frame: &mut CallFrame, offset: u64) {
    for log in &mut frame.logs {
        if let Some(index) = &mut log.index {
            *index += offset;
        }
    }
    for call in &mut frame.calls {
        number_logs(call, offset);
    }
}

/// What geth's prestate tracer looked up: the steps' lookups, and the
/// sender, the recipient and the coinbase.
pub(crate) struct LookedUp<'a> {
    pub(crate) lookups: &'a Lookups,
    pub(crate) always: [Address; 3],
}

impl LookedUp<'_> {
    fn account(&self, address: &Address) -> bool {
        self.always.contains(address) || self.lookups.accounts.contains(address)
    }

    fn slot(&self, address: Address, slot: B256) -> bool {
        self.lookups.slots.contains(&(address, slot))
    }
}

/// A call frame as geth's `callTracer` writes it (`gen_callframe_json.go`):
/// its keys, and its logs' keys, in geth's order.
struct GethFrame<'a>(&'a CallFrame);

impl Serialize for GethFrame<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        #[derive(Serialize)]
        struct Log<'a> {
            address: &'a Option<Address>,
            topics: &'a Option<Vec<B256>>,
            data: &'a Option<Bytes>,
            #[serde(with = "alloy_serde_quantity")]
            index: u64,
            #[serde(with = "alloy_serde_quantity")]
            position: u64,
        }
        let frame = self.0;
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("from", &frame.from)?;
        map.serialize_entry("gas", &frame.gas)?;
        map.serialize_entry("gasUsed", &frame.gas_used)?;
        if let Some(to) = &frame.to {
            map.serialize_entry("to", to)?;
        }
        map.serialize_entry("input", &frame.input)?;
        if let Some(output) = frame.output.as_ref().filter(|o| !o.is_empty()) {
            map.serialize_entry("output", output)?;
        }
        if let Some(error) = frame.error.as_ref().filter(|e| !e.is_empty()) {
            map.serialize_entry("error", error)?;
        }
        if let Some(reason) = frame.revert_reason.as_ref().filter(|r| !r.is_empty()) {
            map.serialize_entry("revertReason", reason)?;
        }
        if !frame.calls.is_empty() {
            let calls: Vec<GethFrame<'_>> = frame.calls.iter().map(GethFrame).collect();
            map.serialize_entry("calls", &calls)?;
        }
        if !frame.logs.is_empty() {
            let logs: Vec<Log<'_>> = frame
                .logs
                .iter()
                .map(|log| Log {
                    address: &log.address,
                    topics: &log.topics,
                    data: &log.data,
                    index: log.index.unwrap_or_default(),
                    position: log.position.unwrap_or_default(),
                })
                .collect();
            map.serialize_entry("logs", &logs)?;
        }
        if let Some(value) = &frame.value {
            map.serialize_entry("value", value)?;
        }
        map.serialize_entry("type", &frame.typ)?;
        map.end()
    }
}

/// A quantity as geth's `hexutil.Uint` writes it.
mod alloy_serde_quantity {
    pub(super) fn serialize<S: serde::Serializer>(value: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{value:#x}"))
    }
}

/// An account as geth's prestate tracer writes it, its keys in geth's
/// order.
#[derive(Serialize)]
struct Account {
    #[serde(skip_serializing_if = "Option::is_none")]
    balance: Option<U256>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<Bytes>,
    #[serde(rename = "codeHash", skip_serializing_if = "Option::is_none")]
    code_hash: Option<B256>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nonce: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    storage: BTreeMap<B256, B256>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum Prestate {
    Default(BTreeMap<Address, Account>),
    Diff {
        post: BTreeMap<Address, Account>,
        pre: BTreeMap<Address, Account>,
    },
}

/// A code hash as geth writes one: none for an account without code.
fn written_hash(hash: Option<B256>) -> Option<B256> {
    hash.filter(|hash| *hash != KECCAK_EMPTY && *hash != B256::ZERO)
}

fn prestate(frame: PreStateFrame, facts: &TxFacts<'_>) -> Prestate {
    let looked_up = facts.looked_up.as_ref();
    let code_hash_before =
        |address: Address| written_hash((facts.account_before)(address).map(|a| a.code_hash));
    // What geth looked up: revm-inspectors reports what revm loaded.
    let slot_owners: HashSet<Address> = looked_up
        .map(|l| l.lookups.slots.iter().map(|(a, _)| *a).collect())
        .unwrap_or_default();
    let kept = |address: &Address, state: &mut AccountState| {
        let Some(looked_up) = looked_up else {
            return true;
        };
        state
            .storage
            .retain(|slot, _| looked_up.slot(*address, *slot));
        looked_up.account(address) || slot_owners.contains(address)
    };
    let before = |address: Address, mut state: AccountState| -> Option<(Address, Account)> {
        if !kept(&address, &mut state) {
            return None;
        }
        let code_hash = code_hash_before(address);
        // geth leaves out what was empty before: no nonce, no balance, no
        // code.
        let empty = state.nonce.unwrap_or(0) == 0
            && state.balance.unwrap_or_default().is_zero()
            && code_hash.is_none();
        (!empty).then(|| {
            (
                address,
                Account {
                    balance: state.balance,
                    code: state.code,
                    code_hash,
                    nonce: state.nonce.filter(|n| *n != 0),
                    storage: state.storage,
                },
            )
        })
    };
    match frame {
        PreStateFrame::Default(mode) => Prestate::Default(
            mode.0
                .into_iter()
                .filter_map(|(address, state)| before(address, state))
                .collect(),
        ),
        PreStateFrame::Diff(diff) => {
            let mut post: BTreeMap<Address, Account> = diff
                .post
                .into_iter()
                .filter_map(|(address, mut state)| {
                    if !kept(&address, &mut state) {
                        return None;
                    }
                    let was = code_hash_before(address);
                    let now = facts
                        .after
                        .get(&address)
                        .and_then(|account| written_hash(Some(account.info.code_hash)));
                    let account = Account {
                        balance: state.balance,
                        code: state.code,
                        // geth names the code hash where it changed.
                        code_hash: (now != was).then(|| now.unwrap_or(KECCAK_EMPTY)),
                        nonce: state.nonce,
                        storage: state.storage,
                    };
                    Some((address, account))
                })
                .collect();
            // An account geth looked up that is none before and after (a
            // precompile called, an empty account read): geth's state
            // names no code hash for it, zero, unlike the empty code's.
            if let Some(looked_up) = looked_up {
                let looked: Vec<Address> = looked_up
                    .always
                    .iter()
                    .chain(&looked_up.lookups.accounts)
                    .copied()
                    .collect();
                for address in looked {
                    let none_before = (facts.account_before)(address).is_none_or(|a| a.is_empty());
                    let none_after = facts
                        .after
                        .get(&address)
                        .is_none_or(|a| a.info.is_empty() && !a.is_selfdestructed());
                    if none_before && none_after && !post.contains_key(&address) {
                        post.insert(
                            address,
                            Account {
                                balance: None,
                                code: None,
                                code_hash: Some(B256::ZERO),
                                nonce: None,
                                storage: BTreeMap::new(),
                            },
                        );
                    }
                }
            }
            let pre = diff
                .pre
                .into_iter()
                .filter_map(|(address, state)| before(address, state))
                .collect();
            Prestate::Diff { post, pre }
        }
    }
}
