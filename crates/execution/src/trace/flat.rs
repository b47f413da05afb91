//! geth's `flatCallTracer`: its `callTracer`'s frames, flattened as geth
//! flattens them (`native/call_flat.go`): parity's layout, geth's words
//! (or parity's, with `convertParityErrors`), calls to precompiles left
//! out unless `includePrecompiles`.

use alloy_primitives::{Address, B256, Bytes, U256};
use alloy_rpc_types_trace::geth::CallFrame;
use serde::Serialize;

/// `flatCallTracer`'s configuration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlatConfig {
    /// Errors in parity's words.
    pub convert_parity_errors: bool,
    /// Calls to precompiles kept.
    pub include_precompiles: bool,
}

/// Where the flattened frames happened: a block's transaction, or a call
/// traced (no block hash, no transaction hash, block number 0).
pub(crate) struct Place {
    pub(crate) block_hash: Option<B256>,
    pub(crate) block_number: u64,
    pub(crate) tx_hash: Option<B256>,
    pub(crate) tx_index: u64,
}

#[derive(Serialize)]
struct Frame {
    action: Action,
    #[serde(rename = "blockHash")]
    block_hash: Option<B256>,
    #[serde(rename = "blockNumber")]
    block_number: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<Outcome>,
    subtraces: usize,
    #[serde(rename = "traceAddress")]
    trace_address: Vec<usize>,
    #[serde(rename = "transactionHash")]
    tx_hash: Option<B256>,
    #[serde(rename = "transactionPosition")]
    tx_index: u64,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Default, Serialize)]
struct Action {
    #[serde(rename = "address", skip_serializing_if = "Option::is_none")]
    self_destructed: Option<Address>,
    #[serde(skip_serializing_if = "Option::is_none")]
    balance: Option<U256>,
    #[serde(rename = "callType", skip_serializing_if = "Option::is_none")]
    call_type: Option<String>,
    #[serde(rename = "creationMethod", skip_serializing_if = "Option::is_none")]
    creation_method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<Address>,
    #[serde(skip_serializing_if = "Option::is_none")]
    gas: Option<U256>,
    #[serde(skip_serializing_if = "Option::is_none")]
    init: Option<Bytes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<Bytes>,
    #[serde(rename = "refundAddress", skip_serializing_if = "Option::is_none")]
    refund_address: Option<Address>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<Address>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<U256>,
}

#[derive(Serialize)]
struct Outcome {
    #[serde(skip_serializing_if = "Option::is_none")]
    address: Option<Address>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<Bytes>,
    #[serde(rename = "gasUsed")]
    gas_used: U256,
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<Bytes>,
}

/// `top`'s frames flattened, as geth writes them; `precompiles` are the
/// addresses of the rules in force.
pub(crate) fn flatten(
    mut top: CallFrame,
    config: FlatConfig,
    place: &Place,
    precompiles: &[Address],
) -> Result<Vec<impl Serialize + use<>>, String> {
    if !config.include_precompiles {
        drop_precompile_calls(&mut top, precompiles);
    }
    let mut out = Vec::new();
    flat(&top, Vec::new(), config, place, &mut out)?;
    Ok(out)
}

/// Parity's traces leave out `CALL`s and `STATICCALL`s to precompiles.
fn drop_precompile_calls(frame: &mut CallFrame, precompiles: &[Address]) {
    frame.calls.retain(|call| {
        !(matches!(call.typ.as_str(), "CALL" | "STATICCALL")
            && call.to.is_some_and(|to| precompiles.contains(&to)))
    });
    for call in &mut frame.calls {
        drop_precompile_calls(call, precompiles);
    }
}

fn flat(
    input: &CallFrame,
    trace_address: Vec<usize>,
    config: FlatConfig,
    place: &Place,
    out: &mut Vec<Frame>,
) -> Result<(), String> {
    let output = || Some(input.output.clone().unwrap_or_default());
    // geth gives every frame below the top a value, zero where it has
    // none (a STATICCALL's).
    let value = match trace_address.is_empty() {
        true => input.value,
        false => input.value.or(Some(U256::ZERO)),
    };
    let (kind, action, result) = match input.typ.as_str() {
        "CREATE" | "CREATE2" => (
            "create",
            Action {
                creation_method: Some(input.typ.to_lowercase()),
                from: Some(input.from),
                gas: Some(input.gas),
                value,
                init: Some(input.input.clone()),
                ..Default::default()
            },
            Some(Outcome {
                address: input.to,
                code: output(),
                gas_used: input.gas_used,
                output: None,
            }),
        ),
        "SELFDESTRUCT" => (
            "suicide",
            Action {
                self_destructed: Some(input.from),
                balance: value,
                refund_address: input.to,
                ..Default::default()
            },
            None,
        ),
        "CALL" | "STATICCALL" | "CALLCODE" | "DELEGATECALL" => (
            "call",
            Action {
                from: Some(input.from),
                to: input.to,
                gas: Some(input.gas),
                value,
                call_type: Some(input.typ.to_lowercase()),
                input: Some(input.input.clone()),
                ..Default::default()
            },
            Some(Outcome {
                address: None,
                code: None,
                gas_used: input.gas_used,
                output: output(),
            }),
        ),
        other => return Err(format!("unrecognized call frame type: {other}")),
    };
    let error = input.error.clone().filter(|e| !e.is_empty());
    // A revert's output says why; any other failure's is dropped.
    let result = match &error {
        Some(error) if error != "execution reverted" => None,
        _ => result,
    };
    let error = match error {
        Some(error) if config.convert_parity_errors => Some(parity_words(error)),
        error => error,
    };
    out.push(Frame {
        action,
        block_hash: place.block_hash,
        block_number: place.block_number,
        error,
        result,
        subtraces: input.calls.len(),
        trace_address: trace_address.clone(),
        tx_hash: place.tx_hash,
        tx_index: place.tx_index,
        kind,
    });
    for (i, call) in input.calls.iter().enumerate() {
        let mut child = trace_address.clone();
        child.push(i);
        flat(call, child, config, place, out)?;
    }
    Ok(())
}

/// geth's error in parity's words (`convertErrorToParity`).
fn parity_words(error: String) -> String {
    let exact = match error.as_str() {
        "contract creation code storage out of gas"
        | "out of gas"
        | "gas uint64 overflow"
        | "max code size exceeded" => Some("Out of gas"),
        "invalid jump destination" => Some("Bad jump destination"),
        "execution reverted" => Some("Reverted"),
        "return data out of bounds" => Some("Out of bounds"),
        "stack limit reached 1024 (1023)" => Some("Out of stack"),
        "precompiled failed" | "invalid input length" => Some("Built-in failed"),
        _ => None,
    };
    if let Some(words) = exact {
        return words.into();
    }
    for (prefix, words) in [
        ("out of gas:", "Out of gas"),
        ("invalid opcode:", "Bad instruction"),
        ("stack underflow", "Stack underflow"),
    ] {
        if error.starts_with(prefix) {
            return words.into();
        }
    }
    error
}
