//! The EVM's corners through neve against the live node: every precompile
//! of the chain's fork (ecrecover to BLS12-381 and P256VERIFY) with inputs
//! that succeed, that fail and that are short, called and estimated, and
//! called with too little gas; the opcodes of the latest forks (CLZ,
//! transient storage, MCOPY, BLOBHASH with and without blob hashes,
//! CREATE2, SELFDESTRUCT) and account reads (BALANCE, EXTCODESIZE,
//! EXTCODEHASH) of absent accounts, precompiles, contracts and the caller;
//! and blob-carrying calls, well and badly formed. Each answer, result or
//! error, equals geth's byte for byte; only a precompile's refusal whose
//! wording neve cannot be sure of may be a miss (421) instead.

mod support;

use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::calls::*;

/// A precompile's address.
fn precompile(index: u16) -> String {
    format!("0x{index:040x}")
}

/// A 32-byte word of `value`.
fn word(value: u64) -> String {
    format!("{value:064x}")
}

/// Inputs for each precompile: one that succeeds where the fork has it,
/// and ones that fail or are cut short.
fn precompile_inputs() -> Vec<(u16, String)> {
    let zeros = |bytes: usize| "00".repeat(bytes);
    let mut inputs = vec![
        // ecrecover: a hash and a signature (recovering some address), a
        // v that is neither 27 nor 28, and nothing.
        (
            1,
            format!(
                "{}{}{}{}",
                "456e9aea5e197a1f1af7a3e85a3212fa4049a3ba34c2289b4c860fc0b0c64ef3",
                word(28),
                "9242685bf161793cc25603c231bc2f568eb630ea16aa137d2664ac8038825608",
                "4f8ae3bd7535248d0bd448298cc2e2071e56992d0774dc340c368ae950852ada"
            ),
        ),
        (1, format!("{}{}{}", word(7), word(29), word(1).repeat(2))),
        (1, String::new()),
        (2, "616263".into()),
        (3, "616263".into()),
        (4, "00ff".repeat(40)),
        // modexp: 3^5 mod 7; 32-byte operands; a base over Osaka's bound.
        (5, format!("{}{}{}030507", word(1), word(1), word(1))),
        (
            5,
            format!(
                "{}{}{}{}{}{}",
                word(32),
                word(32),
                word(32),
                word(3),
                "ff".repeat(32),
                word(1_000_003)
            ),
        ),
        (5, format!("{}{}{}02", word(1025), word(1), word(1))),
        // bn254: (1,2)+(1,2), 2*(1,2), an empty pairing, a point off the curve.
        (6, format!("{}{}{}{}", word(1), word(2), word(1), word(2))),
        (7, format!("{}{}{}", word(1), word(2), word(2))),
        (8, String::new()),
        (6, format!("{}{}{}{}", word(1), word(3), word(1), word(2))),
        // blake2f: one round of zeros with the final flag; a bad flag; short.
        (9, format!("00000001{}01", zeros(208))),
        (9, format!("00000001{}02", zeros(208))),
        (9, zeros(212)),
        // KZG point evaluation: malformed only (a valid proof needs the
        // trusted setup's points).
        (10, zeros(192)),
        (10, zeros(191)),
    ];
    // BLS12-381 (Prague): points at infinity and zero scalars at each
    // operation's size, and a byte short.
    for (index, size) in [
        (11, 256),
        (12, 160),
        (13, 512),
        (14, 288),
        (15, 384),
        (16, 64),
        (17, 128),
    ] {
        inputs.push((index, zeros(size)));
        inputs.push((index, zeros(size - 1)));
    }
    // Refusals neve cannot word as geth, so misses: a bn254 coordinate
    // past the field's prime (gnark words it), and a pairing's point off
    // the curve (geth has two words for what revm calls one reason).
    inputs.extend(unsure_inputs());
    // P256VERIFY (Osaka): a signature that does not verify; short.
    inputs.push((0x100, format!("{}{}", word(1).repeat(3), word(2).repeat(2))));
    inputs.push((0x100, zeros(159)));
    inputs
}

/// Precompile inputs whose refusal neve leaves to the node.
fn unsure_inputs() -> Vec<(u16, String)> {
    let prime = "30644e72e131a029b85045b68181585d97816a916871ca8d3c208c16d87cfd47";
    vec![
        (6, format!("{prime}{}{}", word(0), word(0).repeat(2))),
        (8, format!("{}{}{}", word(1), word(3), word(0).repeat(4))),
    ]
}

/// Probes of the latest forks' opcodes, each the whole runtime of
/// [`PROBE`] (its calldata is its argument where it takes one).
const OPCODES: &[(&str, &str)] = &[
    // CLZ(1).
    ("clz", "0x60011e5f5260205ff3"),
    // TSTORE(0, 1); TLOAD(0).
    ("transient", "0x600160005d5f5c5f5260205ff3"),
    // MSTORE(0, 0xaa); MCOPY(32, 0, 32); return 64 bytes.
    ("mcopy", "0x60aa5f5260205f60205e60405ff3"),
    // BLOBHASH(0).
    ("blobhash", "0x5f495f5260205ff3"),
    // CREATE2(0, 0, 0, 0): the address.
    ("create2", "0x5f5f5f5ff55f5260205ff3"),
    // BALANCE, EXTCODESIZE, EXTCODEHASH of calldata[0..32].
    ("balance", "0x5f35315f5260205ff3"),
    ("extcodesize", "0x5f353b5f5260205ff3"),
    ("extcodehash", "0x5f353f5f5260205ff3"),
];

/// neve's answer equals the node's, or is a miss (421, asked twice: the
/// first may have started fetches); true when it answered.
async fn same_or_miss(neve: &RpcClient, node: &RpcClient, method: &str, params: Value) -> bool {
    let (_, expected) = call(node, method, &params).await;
    let (mut status, mut got) = call(neve, method, &params).await;
    if status == 421 {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        (status, got) = call(neve, method, &params).await;
    }
    if status == 421 {
        return false;
    }
    assert_eq!(status, 200, "{method} {params}: {got}");
    assert_eq!(got, expected, "{method} {params}");
    true
}

#[tokio::test(flavor = "multi_thread")]
async fn precompiles_new_opcodes_and_blob_calls_equal_geths() {
    // Every field bound: what is left out is dropped at once, and the
    // node and neve with it.
    let TokenChain {
        node: _node,
        geth,
        neve,
        client,
        head,
        token,
        holders,
        slots: _,
    } = neve_on_a_token_chain().await;
    let funded = &holders[0];
    let mut missed = Vec::new();
    let mut missed_tags = Vec::new();
    let mut lists_answered = 0;

    for at in [json!("latest"), json!(quantity(head - 1))] {
        for (index, input) in precompile_inputs() {
            let to = precompile(index);
            let input = format!("0x{input}");
            for call in [
                json!({"to": to, "input": input}),
                json!({"to": to, "input": input, "from": funded, "gas": "0x5300"}),
            ] {
                let params = json!([call, at]);
                if !same_or_miss(&client, &geth, "eth_call", params.clone()).await {
                    missed.push(params);
                }
            }
            let params = json!([{"to": to, "input": input, "from": funded}, at]);
            if !same_or_miss(&client, &geth, "eth_estimateGas", params.clone()).await {
                missed.push(params);
            }
        }

        let accounts = [
            STRANGER.to_string(),
            precompile(1),
            precompile(0x100),
            token.clone(),
            PROBE.to_string(),
            funded.clone(),
        ];
        for (name, code) in OPCODES {
            let probe = json!({PROBE: {"code": code, "balance": "0x100"}});
            let arguments: Vec<String> = match *name {
                "balance" | "extcodesize" | "extcodehash" => accounts
                    .iter()
                    .map(|a| format!("0x{:0>64}", a.trim_start_matches("0x")))
                    .collect(),
                _ => vec!["0x".into()],
            };
            for input in arguments {
                let call = json!({"to": PROBE, "input": input, "from": funded});
                same(&client, &geth, "eth_call", json!([call, at, probe])).await;
                // Its fee defaults need the oracle's tip, which geth may
                // answer from its own history: a miss is allowed.
                lists_answered += same_or_miss(
                    &client,
                    &geth,
                    "eth_createAccessList",
                    json!([call, at, probe]),
                )
                .await as usize;
                same(&client, &geth, "eth_estimateGas", json!([call, at, probe])).await;
            }
        }
        // SELFDESTRUCT to a stranger, with a balance to send.
        let destruct = format!("0x73{}ff", STRANGER.trim_start_matches("0x"));
        let probe = json!({PROBE: {"code": destruct, "balance": "0x100"}});
        same(
            &client,
            &geth,
            "eth_call",
            json!([{"to": PROBE}, at, probe]),
        )
        .await;
        same(
            &client,
            &geth,
            "eth_estimateGas",
            json!([{"to": PROBE}, at, probe]),
        )
        .await;

        // Calls carrying blob hashes: BLOBHASH sees them; a hash of the
        // wrong version, none at all, a creation, and fees for blobs
        // from a funded sender and from nobody.
        let probe = json!({PROBE: {"code": "0x5f495f5260205ff3"}});
        let blob = format!("0x01{}", "ab".repeat(31));
        let bad_version = format!("0x02{}", "ab".repeat(31));
        for call in [
            json!({"to": PROBE, "blobVersionedHashes": [blob]}),
            json!({"to": PROBE, "blobVersionedHashes": [blob, blob], "from": funded, "maxFeePerBlobGas": "0x3b9aca00"}),
            json!({"to": PROBE, "blobVersionedHashes": [blob], "maxFeePerBlobGas": "0x3b9aca00", "maxFeePerGas": "0x77359400"}),
            json!({"to": PROBE, "blobVersionedHashes": [bad_version]}),
            json!({"to": PROBE, "blobVersionedHashes": []}),
            json!({"blobVersionedHashes": [blob], "input": "0x00"}),
        ] {
            same(&client, &geth, "eth_call", json!([call, at, probe])).await;
            same(&client, &geth, "eth_estimateGas", json!([call, at, probe])).await;
        }
    }
    // Gas around Osaka's cap on a transaction's gas (2^24) and geth's cap
    // on a call's (50,000,000), asked and estimated.
    let loop_probe = json!({PROBE: {"code": "0x5b5f56"}});
    for gas in [
        "0xffffff",
        "0x1000000",
        "0x1000001",
        "0x2faf080",
        "0x2faf081",
        "0x10000000",
    ] {
        for call in [
            json!({"to": PROBE, "gas": gas}),
            json!({"to": PROBE, "gas": gas, "from": funded, "maxFeePerGas": "0x77359400"}),
        ] {
            same(
                &client,
                &geth,
                "eth_call",
                json!([call, "latest", loop_probe]),
            )
            .await;
            same(&client, &geth, "eth_estimateGas", json!([call, "latest"])).await;
        }
    }
    // Pinned at genesis, by number, tag and hash; and at the safe and
    // finalized heads.
    let env = json!({PROBE: {"code": ENV}});
    let genesis: Value = geth
        .call("eth_getBlockByNumber", ("0x0", false))
        .await
        .unwrap();
    for at in [
        json!("0x0"),
        json!("earliest"),
        json!({"blockHash": genesis["hash"]}),
        json!("safe"),
        json!("finalized"),
    ] {
        if !same_or_miss(&client, &geth, "eth_call", json!([{"to": PROBE}, at, env])).await {
            missed_tags.push(at);
        }
    }
    // The misses are exactly the refusals neve cannot word (where the
    // call got that far: too little gas is answered before).
    let unsure: Vec<(String, String)> = unsure_inputs()
        .into_iter()
        .map(|(index, input)| (precompile(index), format!("0x{input}")))
        .collect();
    for params in &missed {
        let asked = (
            params[0]["to"].as_str().unwrap().to_string(),
            params[0]["input"].as_str().unwrap().to_string(),
        );
        assert!(
            unsure.contains(&asked),
            "answered by geth, missed by neve: {params}"
        );
    }
    for (to, input) in &unsure {
        assert!(
            missed
                .iter()
                .any(|p| p[0]["to"] == *to && p[0]["input"] == *input),
            "{to} {input} was answered: neve words what it cannot be sure of"
        );
    }
    assert!(missed_tags.is_empty(), "{missed_tags:?}");
    assert!(lists_answered > 0, "no access list answered");
    assert_eq!(neve.health().unwrap()["state"]["refused_proofs"], 0);
}

/// One EIP-7702 authorization as JSON-RPC sends it, signed by `signer`.
fn authorization(
    signer: &alloy_signer_local::PrivateKeySigner,
    chain_id: u64,
    delegate: &str,
    nonce: u64,
) -> Value {
    use alloy_signer::SignerSync;
    let auth = alloy_eips::eip7702::Authorization {
        chain_id: alloy_primitives::U256::from(chain_id),
        address: delegate.parse().unwrap(),
        nonce,
    };
    let signature = signer.sign_hash_sync(&auth.signature_hash()).unwrap();
    json!({
        "chainId": quantity(chain_id),
        "address": delegate,
        "nonce": quantity(nonce),
        "yParity": quantity(signature.v() as u64),
        "r": format!("{:#x}", signature.r()),
        "s": format!("{:#x}", signature.s()),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn calls_with_authorization_lists_equal_geths() {
    let TokenChain {
        node: _node,
        geth,
        neve: _neve,
        client,
        head,
        holders,
        token: _,
        slots: _,
    } = neve_on_a_token_chain().await;
    let funded = &holders[0];
    let chain_id: String = geth.call("eth_chainId", ()).await.unwrap();
    let chain_id = u64::from_str_radix(chain_id.trim_start_matches("0x"), 16).unwrap();
    let signer = alloy_signer_local::PrivateKeySigner::from_slice(&[0x42; 32]).unwrap();
    let authority = format!("{:#x}", signer.address());
    // The delegate returns ADDRESS and CALLER: run as the authority's code.
    let delegate = json!({PROBE: {"code": "0x305f523360205260405ff3"}});
    let mut lists_answered = 0;

    for at in [json!("latest"), json!(quantity(head - 1))] {
        for list in [
            json!([authorization(&signer, chain_id, PROBE, 0)]),
            // Any chain's.
            json!([authorization(&signer, 0, PROBE, 0)]),
            // Another chain's, and a nonce the authority does not have:
            // skipped, so the authority has no code.
            json!([authorization(&signer, chain_id + 1, PROBE, 0)]),
            json!([authorization(&signer, chain_id, PROBE, 5)]),
            // Two for one authority: the second's nonce is the first's + 1.
            json!([
                authorization(&signer, chain_id, STRANGER, 0),
                authorization(&signer, chain_id, PROBE, 1)
            ]),
            // Delegation to nothing clears it.
            json!([authorization(
                &signer,
                chain_id,
                "0x0000000000000000000000000000000000000000",
                0
            )]),
            json!([]),
        ] {
            for call in [
                json!({"from": funded, "to": authority, "authorizationList": list}),
                json!({"to": authority, "authorizationList": list, "maxFeePerGas": "0x77359400"}),
                json!({"from": funded, "authorizationList": list, "input": "0x00"}),
                json!({"from": funded, "to": authority, "authorizationList": list, "gas": "0x5300"}),
            ] {
                same(&client, &geth, "eth_call", json!([call, at, delegate])).await;
                same(
                    &client,
                    &geth,
                    "eth_estimateGas",
                    json!([call, at, delegate]),
                )
                .await;
                // Its fee defaults need the oracle's tip, which geth may
                // answer from its own history: a miss is allowed.
                lists_answered += same_or_miss(
                    &client,
                    &geth,
                    "eth_createAccessList",
                    json!([call, at, delegate]),
                )
                .await as usize;
            }
        }
    }
    assert!(lists_answered > 0, "no access list answered");
}
