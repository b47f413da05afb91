use alloy_primitives::{U256, keccak256};
use neve_state::{ProofRequest, State, StorageKeys};

use super::error::FetchError;
use super::hot_keys::{load_hot_keys, save_hot_keys};
use super::proof::{decode_and_verify, decode_hex};
use super::touched::{
    BEACON_ROOTS, HISTORY_STORAGE, add_untraced, touched_as_said, touched_by_trace,
    within_answer_bound,
};
use super::*;

/// geth's `eth_getProof` answer from the execution-apis suite, as
/// received, and a request whose verified root it hashes up to.
fn fixture() -> (String, ProofRequest) {
    // Where the other tests find the conformance fixtures too.
    let path =
        neve_devnet::conformance::fixtures_dir().join("eth_getProof/get-account-proof-latest.io");
    let text = std::fs::read_to_string(path).expect("the conformance fixtures beside the project");
    let line = text.lines().find(|l| l.starts_with("<<")).unwrap();
    let answer: serde_json::Value = serde_json::from_str(&line[3..]).unwrap();
    let result = answer["result"].to_string();
    let first = decode_hex(answer["result"]["accountProof"][0].as_str().unwrap()).unwrap();
    let address = decode_hex(answer["result"]["address"].as_str().unwrap()).unwrap();
    let request = ProofRequest {
        block_hash: [1; 32],
        state_root: keccak256(&first).0,
        address: address[..].try_into().unwrap(),
        slots: Vec::new(),
        code: false,
    };
    (result, request)
}

#[test]
fn a_geth_answer_verifies_and_a_changed_one_is_refused() {
    let (answer, request) = fixture();
    assert!(decode_and_verify(&request, StorageKeys::Plain, &answer, None).is_ok());
    let lying = answer.replacen("\"balance\":\"0x76\"", "\"balance\":\"0x77\"", 1);
    assert_ne!(lying, answer);
    assert!(decode_and_verify(&request, StorageKeys::Plain, &lying, None).is_err());
}

/// A block's diff-mode prestate trace names every account in `pre` or
/// `post` with its slots; the header adds the fee recipient,
/// withdrawals and the system contracts' slots the trace leaves out.
#[test]
fn touched_keys_come_from_the_trace_and_the_header() {
    let a = format!("0x{}", "aa".repeat(20));
    let b = format!("0x{}", "bb".repeat(20));
    let slot = format!("0x{}", "01".repeat(32));
    let trace = format!(
        r#"[{{"txHash":"0x00","result":{{"pre":{{"{a}":{{"balance":"0x2","storage":{{"{slot}":"0x01"}}}}}},"post":{{"{a}":{{"balance":"0x1"}},"{b}":{{"nonce":1}}}}}}}},{{"txHash":"0x01","error":"execution reverted"}}]"#
    );
    let mut touched = touched_by_trace(&trace).unwrap();
    assert_eq!(touched.len(), 2);
    assert_eq!(touched[&[0xaa; 20]], vec![[1; 32]]);
    assert!(touched[&[0xbb; 20]].is_empty());
    let miner = format!("0x{}", "cc".repeat(20));
    let withdrawn = format!("0x{}", "dd".repeat(20));
    let header = format!(
        r#"{{"number":"0x10","timestamp":"0x2000","miner":"{miner}","parentBeaconBlockRoot":"0x00","requestsHash":"0x00","withdrawals":[{{"index":"0x0","validatorIndex":"0x0","address":"{withdrawn}","amount":"0x1"}}]}}"#
    );
    add_untraced(&mut touched, header.as_bytes()).unwrap();
    assert!(touched.contains_key(&[0xcc; 20]) && touched.contains_key(&[0xdd; 20]));
    let slot_of = |n: u64| U256::from(n).to_be_bytes::<32>();
    assert_eq!(
        touched[&BEACON_ROOTS],
        vec![slot_of(0x2000 % 8191), slot_of(0x2000 % 8191 + 8191)]
    );
    assert_eq!(touched[&HISTORY_STORAGE], vec![slot_of(15)]);
    // What a neve says is read back the same way.
    let said = format!(r#"{{"{a}":["{slot}"],"{b}":[]}}"#);
    let read = touched_as_said(&said).unwrap();
    assert_eq!(read[&[0xaa; 20]], vec![[1; 32]]);
    assert!(touched_as_said("[1]").is_err());
    assert!(touched_by_trace(r#"{"pre":{}}"#).is_err());
}

/// The hot keys survive a restart through their file; a damaged line
/// is skipped, not fatal.
/// Issue 32 (10): a hot-keys file past its limit is read up to it,
/// not whole, and what lies within still loads.
#[test]
fn a_hot_keys_file_is_read_up_to_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot-keys");
    let line = format!("0x{}\n", "11".repeat(20));
    let lines = (MAX_HOT_KEYS_FILE_BYTES as usize / line.len()) + 1000;
    std::fs::write(&path, line.repeat(lines)).unwrap();
    let state = State::new(1 << 20, 64);
    let loaded = load_hot_keys(&path, &state);
    assert!(loaded > 0 && loaded < lines, "{loaded} of {lines}");
}

/// Issue 32 (3): an upstream neve naming more keys than a block can
/// touch is refused (the block is then refreshed key by key).
#[test]
fn a_touched_set_past_its_bound_is_refused() {
    let many: std::collections::BTreeMap<String, Vec<String>> =
        (0..MAX_TOUCHED_KEYS_PER_BLOCK as u64 + 1)
            .map(|i| (format!("0x{i:040x}"), Vec::new()))
            .collect();
    let said = serde_json::to_string(&many).unwrap();
    assert!(matches!(touched_as_said(&said), Err(FetchError::Shape(_))));
    let few: std::collections::BTreeMap<String, Vec<String>> = (0..3u64)
        .map(|i| (format!("0x{i:040x}"), vec![format!("0x{i:064x}")]))
        .collect();
    assert_eq!(
        touched_as_said(&serde_json::to_string(&few).unwrap())
            .unwrap()
            .len(),
        3
    );
    assert!(within_answer_bound(&" ".repeat(MAX_TOUCHED_ANSWER_BYTES + 1)).is_err());
}

#[test]
fn hot_keys_are_saved_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hot-keys");
    let state = State::new(1 << 20, 64);
    state.record_hot(neve_state::HotKey {
        address: [1; 20],
        slot: None,
    });
    state.record_hot(neve_state::HotKey {
        address: [2; 20],
        slot: Some([3; 32]),
    });
    save_hot_keys(&path, &state).unwrap();
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("not a key\n0x12 0x34\n");
    std::fs::write(&path, text).unwrap();
    let restarted = State::new(1 << 20, 64);
    assert_eq!(load_hot_keys(&path, &restarted), 2);
    let mut keys = restarted.hot_keys();
    keys.sort_by_key(|k| k.address);
    assert_eq!(
        keys,
        state.hot_keys().into_iter().fold(Vec::new(), |mut v, k| {
            v.push(k);
            v.sort_by_key(|k: &neve_state::HotKey| k.address);
            v
        })
    );
    assert_eq!(load_hot_keys(&dir.path().join("absent"), &restarted), 0);
}

/// Fuzz target: an upstream's `eth_getProof` (and `eth_getCode`)
/// answer, decoded and walked from a verified root: anything but the
/// proof is refused, never a panic or a hang.
#[test]
fn fuzz_proof_answers_through_decoding_and_verification() {
    let (answer, request) = fixture();
    let with_slot = ProofRequest {
        slots: vec![[0; 32]],
        code: true,
        ..request.clone()
    };
    let seeds = vec![answer.clone().into_bytes()];
    let dictionary: [&[u8]; 10] = [
        b"\"0x\"",
        b"0x",
        b"\"storageProof\":[{\"key\":\"0x0\",\"value\":\"0x1\",\"proof\":[]}]",
        b"\"accountProof\":[]",
        b"f90211",
        b"80",
        b"\"",
        b"[",
        b"null",
        b"ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    ];
    let report = neve_devnet::fuzz::run("proof answers", &seeds, &dictionary, 64 << 10, |input| {
        let Ok(text) = std::str::from_utf8(input) else {
            return;
        };
        let _ = decode_and_verify(&request, StorageKeys::Plain, text, None);
        let _ = decode_and_verify(&with_slot, StorageKeys::Coreth, text, Some("\"0x6000\""));
    });
    eprintln!("proof answers: {report}");
}

/// A read asking what is being proved ahead joins that fetch: against an
/// upstream that takes its connection and never answers, the read waits
/// out `AHEAD_PROOFS_TIMEOUT`, not a read's `FETCH_TIMEOUT`, asking the
/// node nothing itself meanwhile; the silent proofs are counted as
/// failed.
#[tokio::test]
async fn a_read_joining_silent_proofs_ahead_waits_only_their_time() {
    use neve_state::Fetch;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let state = std::sync::Arc::new(State::new(1 << 20, 0));
    let fetcher = ProofFetcher::new(neve_upstream::RpcClient::new(&url).unwrap(), state.clone());
    let (_, request) = fixture();
    let prefetching = tokio::spawn(fetcher.prefetch_proofs(vec![request.clone()]));
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let started = std::time::Instant::now();
    fetcher.fetch_proofs_in_turn(vec![request]).await;
    let waited = started.elapsed();
    assert!(
        waited < FETCH_TIMEOUT - AHEAD_PROOFS_TIMEOUT / 2,
        "the read waited {waited:?}"
    );
    assert!(
        waited >= AHEAD_PROOFS_TIMEOUT / 2,
        "the read joined the proofs ahead ({waited:?})"
    );
    prefetching.await.unwrap();
    assert_eq!(
        state
            .counters
            .prefetch_calls
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    assert_eq!(
        state
            .counters
            .upstream_calls
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    assert_eq!(
        state
            .counters
            .fetch_failures
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}
