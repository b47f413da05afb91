//! A native tracer's result (revm-inspectors') in geth's words, where the
//! two differ: `callTracer`'s log indices count from the block's first
//! log, `flatCallTracer` is its frames flattened as geth does (`flat.rs`),
//! and
//! `prestateTracer` writes code hashes and leaves out accounts that were
//! empty before the transaction (`account` in geth's `native/prestate.go`).
//! Inside a `muxTracer`, each of its tracers the same.

use std::collections::BTreeMap;
use std::io::Write;

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_rpc_types_trace::geth::{
    AccountState, CallFrame, GethDebugTracerType, GethTrace, PreStateFrame,
};
use revm::primitives::KECCAK_EMPTY;
use revm::state::EvmState;
use serde::Serialize;

use super::flat::{FlatConfig, Place};
use super::inspector::Halted;

/// What geth's words need of the transaction traced.
pub(crate) struct TxFacts<'a> {
    /// Logs of the block's transactions before it.
    pub(crate) log_offset: u64,
    /// An account's code hash before it (`None`: no account).
    pub(crate) code_hash_before: &'a dyn Fn(Address) -> Option<B256>,
    /// The state it left.
    pub(crate) after: &'a EvmState,
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
        GethTrace::CallTracer(mut frame) if facts.flat.is_some() => {
            word_halts(&mut frame, facts.halts);
            let (config, place, precompiles) = facts.flat.as_ref().expect("checked");
            let frames = super::flat::flatten(frame, *config, place, precompiles)
                .map_err(serde::ser::Error::custom)?;
            serde_json::to_writer(out, &frames)
        }
        GethTrace::CallTracer(mut frame) => {
            word_halts(&mut frame, facts.halts);
            number_logs(&mut frame, facts.log_offset);
            serde_json::to_writer(out, &frame)
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
    fn walk(frame: &mut CallFrame, number: &mut usize, halts: &[Halted]) {
        if let Some(halted) = halts.iter().find(|h| h.frame == *number)
            && frame.error.is_some()
        {
            frame.error = Some(halted.words.clone());
        }
        *number += 1;
        for call in &mut frame.calls {
            walk(call, number, halts);
        }
    }
    if !halts.is_empty() {
        walk(top, &mut 0, halts);
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
    let before = |address: Address, state: AccountState| -> Option<(Address, Account)> {
        let code_hash = written_hash((facts.code_hash_before)(address));
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
            let post = diff
                .post
                .into_iter()
                .map(|(address, state)| {
                    let was = written_hash((facts.code_hash_before)(address));
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
                    (address, account)
                })
                .collect();
            let pre = diff
                .pre
                .into_iter()
                .filter_map(|(address, state)| before(address, state))
                .collect();
            Prestate::Diff { post, pre }
        }
    }
}
