//! Rewriting a forwarded answer: reordered batches, tampered blocks,
//! senders and state, and heads that lag.

use super::kinds::StateTamper;

/// A batch answer with its elements in reverse order (anything else as is).
pub(crate) fn reorder(body: &[u8]) -> Vec<u8> {
    match serde_json::from_slice::<Vec<&serde_json::value::RawValue>>(body) {
        Ok(mut items) => {
            items.reverse();
            serde_json::to_vec(&items).expect("raw values serialise")
        }
        Err(_) => body.to_vec(),
    }
}

/// A quantity made different but still well-formed.
pub(crate) fn other_quantity(text: &str) -> String {
    if text == "0x0" {
        "0x1".into()
    } else {
        format!("{text}0")
    }
}

/// A hex string with one digit in its middle changed.
pub(crate) fn flip_digit(text: &str) -> String {
    let mut bytes = text.as_bytes().to_vec();
    let i = 2 + (bytes.len() - 2) / 2;
    bytes[i] = if bytes[i] == b'0' { b'1' } else { b'0' };
    String::from_utf8(bytes).expect("hex is ASCII")
}

/// Tells `kind`'s lie in a (batch) answer; `None` when it carries nothing
/// that lie changes.
pub(crate) fn tamper_state(body: &[u8], kind: StateTamper) -> Option<Vec<u8>> {
    let mut value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let items: Vec<&mut serde_json::Value> = match &mut value {
        serde_json::Value::Array(items) => items.iter_mut().collect(),
        item => vec![item],
    };
    // neve asks for code in the same batch as the account's proof; only
    // such an answer's code is touched (raw blocks are hex strings too).
    let with_proof = items.iter().any(|item| {
        item.get("result")
            .and_then(|r| r.get("accountProof"))
            .is_some()
    });
    let mut done = false;
    for item in items {
        let Some(result) = item.get_mut("result") else {
            continue;
        };
        let is_proof = result.get("accountProof").is_some();
        match kind {
            StateTamper::Balance | StateTamper::Nonce if is_proof => {
                let field = if kind == StateTamper::Balance {
                    "balance"
                } else {
                    "nonce"
                };
                let text = result[field].as_str()?.to_string();
                result[field] = other_quantity(&text).into();
                done = true;
            }
            StateTamper::StorageValue if is_proof => {
                let slot = result["storageProof"].get_mut(0)?;
                let text = slot["value"].as_str()?.to_string();
                slot["value"] = other_quantity(&text).into();
                done = true;
            }
            StateTamper::ProofNode if is_proof => {
                let node = result["accountProof"].as_array_mut()?.last_mut()?;
                let text = node.as_str()?.to_string();
                *node = flip_digit(&text).into();
                done = true;
            }
            StateTamper::WitnessHeader if result.get("state").is_some() => {
                let header = result["headers"].as_array_mut()?.last_mut()?;
                let text = header["stateRoot"].as_str()?.to_string();
                header["stateRoot"] = flip_digit(&text).into();
                done = true;
            }
            StateTamper::WitnessStray if result.get("state").is_some() => {
                // A leaf of a trie nobody has.
                let stray =
                    "0xe2a0200000000000000000000000000000000000000000000000000000000000000001";
                result["state"].as_array_mut()?.push(stray.into());
                done = true;
            }
            StateTamper::CodeByte if with_proof => {
                if let Some(code) = result
                    .as_str()
                    .filter(|c| c.len() > 4 && c.starts_with("0x"))
                {
                    *result = flip_digit(code).into();
                    done = true;
                }
            }
            _ => {}
        }
        // One lie, among a batch's honest answers.
        if done {
            break;
        }
    }
    done.then(|| serde_json::to_vec(&value).expect("JSON serialises"))
}

/// Rewrites every `eth_blockNumber` answer in a (batch) response `lag` lower.
pub(crate) fn lag_head(body: &[u8], lag: u64) -> Vec<u8> {
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return body.to_vec();
    };
    let lower = |item: &mut serde_json::Value| {
        // Only quantities (heads), not hashes or objects.
        let head = item
            .get("result")
            .and_then(|r| r.as_str())
            .filter(|r| r.len() < 18)
            .and_then(neve_upstream::parse_quantity);
        if let Some(head) = head {
            item["result"] = neve_upstream::quantity(head.saturating_sub(lag)).into();
        }
    };

    match &mut value {
        serde_json::Value::Array(items) => items.iter_mut().for_each(lower),
        item => lower(item),
    }
    serde_json::to_vec(&value).expect("JSON serialises")
}

/// Changes the first transaction `value` in a body that carries full
/// transactions, keeping the JSON valid: the block no longer verifies.
/// `None` for a body without full transactions.
/// The first transaction's `from` with one digit changed, if the answer
/// carries a block with full transactions.
pub(crate) fn tamper_sender(body: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(body);
    let block = text.find("\"transactions\":[{")?;
    let at = block + text[block..].find("\"from\":\"0x")? + "\"from\":\"0x".len();
    let mut bytes = text.into_owned().into_bytes();
    bytes[at] = if bytes[at] == b'0' { b'1' } else { b'0' };
    Some(bytes)
}

pub(crate) fn tamper(body: &[u8]) -> Option<Vec<u8>> {
    let text = String::from_utf8_lossy(body);
    if !text.contains("\"transactions\":[{") {
        return None;
    }
    Some(
        text.replacen("\"value\":\"0x", "\"value\":\"0x1", 1)
            .into_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tampering_keeps_json_valid_and_changes_a_value() {
        let body = br#"{"result":{"transactions":[{"value":"0x5"}]}}"#;
        let tampered = tamper(body).unwrap();
        let value: serde_json::Value = serde_json::from_slice(&tampered).unwrap();
        assert_eq!(value["result"]["transactions"][0]["value"], "0x15");
        assert_eq!(tamper(br#"{"result":"0x1"}"#), None);
    }

    #[test]
    fn lagging_rewrites_heads_in_batches() {
        let body = br#"[{"id":1,"result":"0x10"},{"id":2,"result":{"a":1}}]"#;
        let value: serde_json::Value = serde_json::from_slice(&lag_head(body, 3)).unwrap();
        assert_eq!(value[0]["result"], "0xd");
        assert_eq!(value[1]["result"]["a"], 1);
    }
}
