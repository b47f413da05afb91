//! What the proxy can do to a request: the [`Fault`]s of its schedule,
//! the tampering of state answers and the lies told about a field.

use std::time::Duration;

/// What the proxy does to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward it untouched.
    Pass,
    /// 429 with `Retry-After: 1`.
    TooManyRequests,
    /// 503.
    ServerError,
    /// Forward it, but answer after this long.
    Slow(Duration),
    /// Forward it and cut the answer in half.
    Truncate,
    /// Answer with something that is not JSON.
    Garbage,
    /// Change a transaction's `value` in the next answer, this one or a
    /// later one, that carries a block with full transactions.
    TamperBlock,
    /// Answer 200 with a body that never ends (and holds no newline).
    Endless,
    /// Send the first 4 KiB of the real answer (all of it if shorter), then
    /// nothing, without ever ending the body.
    Stall,
    /// Send the first half of the real answer, then reset the connection.
    Reset,
    /// Forward it, with a batch answer's elements in reverse order.
    Reorder,
    /// Forward it whole, but a slice at a time: `DRIP_BYTES` every
    /// `DRIP_EVERY` (a slow link; for `/blocks` streams).
    Drip,
    /// Answer 200 with a JSON-RPC error for each call, as a provider over
    /// its quota does (-32005 "daily request limit reached").
    OverQuota,
    /// 429 with `Retry-After: 86400`, as a provider out of its day's quota.
    RetryTomorrow,
}

/// A lie about state, told in the next answer that carries it (in a
/// batch's first element that does; the others are left honest).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateTamper {
    /// The `balance` an `eth_getProof` answer states.
    Balance,
    /// The `nonce` it states.
    Nonce,
    /// The first storage `value` it states.
    StorageValue,
    /// A byte of the last node of its `accountProof`.
    ProofNode,
    /// A byte of an `eth_getCode` answer.
    CodeByte,
    /// A digit of the `stateRoot` of the newest header of a
    /// `debug_executionWitness` answer: it no longer hashes to the block's
    /// parent.
    WitnessHeader,
    /// A node no path reaches added to the state of a
    /// `debug_executionWitness` answer.
    WitnessStray,
}

/// A lie about a field of a block answer (block, receipts and raw parts,
/// as ingest fetches them in one batch) that no hash covers, told once in
/// the next answer that carries full transactions and the text it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldLie {
    /// The last digit of a string changed (`0` to `1`, anything else to
    /// `0`): the value of the first `"field":"…"` after `after`, or, with
    /// `field` empty, the string `after` ends inside.
    Digit {
        /// Where to start looking.
        after: &'static str,
        /// The key whose value changes.
        field: &'static str,
    },
    /// As `Digit`, for the last `"field":"…"` before the first `before`
    /// (a field of the object that holds `before` further on).
    DigitBefore {
        /// Where to look back from.
        before: &'static str,
        /// The key whose value changes.
        field: &'static str,
    },
    /// The first `from` replaced by `to`.
    Replace {
        /// Text to find.
        from: &'static str,
        /// What it becomes.
        to: &'static str,
    },
}

impl FieldLie {
    /// `body` with the lie told, or `None` when it does not carry the field.
    pub fn tell(self, body: &[u8]) -> Option<Vec<u8>> {
        let text = std::str::from_utf8(body).ok()?;
        if !text.contains("\"transactions\":[{") {
            return None;
        }
        let change_string_at = |at: usize| {
            let end = at + text[at..].find('"')?;
            let digit = end.checked_sub(1).filter(|d| *d >= at)?;
            let mut bytes = body.to_vec();
            bytes[digit] = if bytes[digit] == b'0' { b'1' } else { b'0' };
            Some(bytes)
        };
        match self {
            FieldLie::Digit { after, field } => {
                let mut at = text.find(after)? + after.len();
                if !field.is_empty() {
                    let key = format!("\"{field}\":\"");
                    at += text[at..].find(&key)? + key.len();
                }
                change_string_at(at)
            }
            FieldLie::DigitBefore { before, field } => {
                let key = format!("\"{field}\":\"");
                let end = text.find(before)?;
                change_string_at(text[..end].rfind(&key)? + key.len())
            }
            FieldLie::Replace { from, to } => text
                .contains(from)
                .then(|| text.replacen(from, to, 1).into_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_lies_change_the_named_value_only_in_block_answers() {
        let body = br#"[{"result":{"size":"0x10","transactions":[{"gas":"0x5"}]}},{"result":[{"cumulativeGasUsed":"0x5","gasUsed":"0x5"}]},{"result":["0x02f0"]}]"#;
        let told = |lie: FieldLie| String::from_utf8(lie.tell(body).unwrap()).unwrap();
        let gas_used = told(FieldLie::Digit {
            after: "cumulativeGasUsed",
            field: "gasUsed",
        });
        assert!(gas_used.contains(r#""cumulativeGasUsed":"0x5","gasUsed":"0x0""#));
        let raw = told(FieldLie::Digit {
            after: r#""result":["0x"#,
            field: "",
        });
        assert!(raw.contains(r#"["0x02f1"]"#));
        let size = told(FieldLie::Digit {
            after: "",
            field: "size",
        });
        let gas = told(FieldLie::DigitBefore {
            before: "cumulativeGasUsed",
            field: "gas",
        });
        assert!(gas.contains(r#""gas":"0x0""#));
        assert!(size.contains(r#""size":"0x11""#));
        assert_eq!(
            FieldLie::Replace { from: "x", to: "y" }.tell(br#"{"result":"0x1"}"#),
            None,
            "no block, no lie"
        );
    }
}
