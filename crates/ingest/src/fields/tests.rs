use super::FieldError;
use crate::decode::{RawParts, decode};
use crate::verify::{VerifyError, verify};
use alloy_consensus::ReceiptEnvelope;
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::Log;
use neve_devnet::conformance::fixture_result as fixture;

fn latest() -> (String, String) {
    (
        fixture("eth_getBlockByNumber/get-latest.io"),
        fixture("eth_getBlockReceipts/get-block-receipts-latest.io"),
    )
}

/// The field a block is refused for, or `None` when it verifies.
fn refused_field(full: &str, receipts: &str, raw: RawParts) -> Option<String> {
    let block = decode(full, receipts, raw).expect("prepares");
    match verify(&block) {
        Ok(()) => None,
        Err(VerifyError::Field(FieldError { object, field, .. })) => {
            Some(format!("{object}.{field}"))
        }
        Err(other) => Some(other.to_string()),
    }
}

fn once(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "{from} is in the fixture");
    text.replacen(from, to, 1)
}

// Long: one table of every served field, each changed alone.
#[test]
fn every_served_field_that_no_hash_covers_is_checked() {
    let (full, receipts) = latest();
    assert_eq!(refused_field(&full, &receipts, RawParts::default()), None);
    let block = |from: &str, to: &str| {
        refused_field(&once(&full, from, to), &receipts, RawParts::default())
    };
    let receipt = |from: &str, to: &str| {
        refused_field(&full, &once(&receipts, from, to), RawParts::default())
    };
    let to = "0x7dcd17433742f4c0ca53122ab541d0ba67fc27df";
    let other = "0x7dcd17433742f4c0ca53122ab541d0ba67fc27de";
    let cases = [
        (
            block("\"size\":\"0x455\"", "\"size\":\"0x456\""),
            "block.size",
        ),
        (
            block(
                "\"uncles\":[]",
                &format!("\"uncles\":[\"{}\"]", "0x".to_string() + &"11".repeat(32)),
            ),
            "block.uncles",
        ),
        (
            block(
                "\"withdrawals\":[]",
                &format!(
                    "\"withdrawals\":[{{\"index\":\"0x0\",\"validatorIndex\":\"0x1\",\"address\":\"{to}\",\"amount\":\"0x1\"}}]"
                ),
            ),
            "block.withdrawals",
        ),
        (
            block(
                "\"blockTimestamp\":\"0x21c\"",
                "\"blockTimestamp\":\"0x21d\"",
            ),
            "transaction 0.blockTimestamp",
        ),
        (
            block("\"gas\":", "\"neve\":\"0x1\",\"gas\":"),
            "transaction 0.neve",
        ),
        (
            block("\"miner\":", "\"neve\":\"0x1\",\"miner\":"),
            "block.neve",
        ),
        (
            block("\"gasLimit\":\"0x", "\"gasLimit\":\"0x0"),
            "block.gasLimit",
        ),
        (
            block("\"nonce\":\"0xf5\"", "\"nonce\":\"0xF5\""),
            "transaction 0.nonce",
        ),
        (
            block("\"nonce\":\"0xf5\"", "\"nonce\":245"),
            "transaction 0.nonce",
        ),
        (
            receipt("\"gasUsed\":\"0xfc65\"", "\"gasUsed\":\"0xfc66\""),
            "receipt 1.gasUsed",
        ),
        (
            receipt(
                "\"effectiveGasPrice\":\"0x1a21398\"",
                "\"effectiveGasPrice\":\"0x1a21399\"",
            ),
            "receipt 0.effectiveGasPrice",
        ),
        (
            receipt(
                "\"from\":\"0x7435ed30a8b4aeb0877cef0c6e8cffe834eb865f\"",
                "\"from\":\"0x7435ed30a8b4aeb0877cef0c6e8cffe834eb865e\"",
            ),
            "receipt 0.from",
        ),
        (
            receipt(&format!("\"to\":\"{to}\""), &format!("\"to\":\"{other}\"")),
            "receipt 3.to",
        ),
        (
            receipt("\"to\":null", &format!("\"to\":\"{other}\"")),
            "receipt 0.to",
        ),
        (
            receipt(
                "\"contractAddress\":\"0x891baaf101b07222bbcf62e7dc519199d09255b0\"",
                "\"contractAddress\":\"0x891baaf101b07222bbcf62e7dc519199d09255b1\"",
            ),
            "receipt 0.contractAddress",
        ),
        (
            receipt(
                "\"cumulativeGasUsed\":",
                "\"gasUsed\":\"0x1\",\"cumulativeGasUsed\":",
            ),
            "receipts.(any)",
        ),
        (
            receipt("\"removed\":false", "\"removed\":true"),
            "log 0.removed",
        ),
        (
            receipt("\"blockTimestamp\":\"0x21c\"", "\"blockTimestamp\":\"0x0\""),
            "log 0.blockTimestamp",
        ),
        (
            receipt("\"status\":", "\"neve\":null,\"status\":"),
            "receipt 0.neve",
        ),
    ];
    for (got, want) in cases {
        assert_eq!(got.as_deref(), Some(want));
    }
}

#[test]
fn raw_receipts_are_the_verified_receipts_encodings() {
    let (full, receipts) = latest();
    let verified: Vec<ReceiptEnvelope<Log>> = serde_json::from_str(&receipts).unwrap();
    let encodings: Vec<alloy_primitives::Bytes> =
        verified.iter().map(|r| r.encoded_2718().into()).collect();
    let raw = serde_json::to_string(&encodings).unwrap();
    let with = |raw: String| RawParts {
        receipts: raw.into_bytes(),
        ..RawParts::default()
    };
    assert_eq!(refused_field(&full, &receipts, with(raw.clone())), None);
    let at = raw.rfind('"').unwrap() - 1;
    let mut changed = raw.clone().into_bytes();
    changed[at] = if changed[at] == b'0' { b'1' } else { b'0' };
    assert_eq!(
        refused_field(&full, &receipts, with(String::from_utf8(changed).unwrap())).as_deref(),
        Some("raw receipts.(any)")
    );
    let fewer = serde_json::to_string(&encodings[1..]).unwrap();
    assert_eq!(
        refused_field(&full, &receipts, with(fewer)).as_deref(),
        Some("raw receipts.(any)")
    );
}
