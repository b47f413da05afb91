//! Workloads: pools of real requests built from the [`Corpus`].
//!
//! A workload is a fixed pool of JSON-RPC request bodies (drawn by weight
//! for a method mix); a run sends uniformly random members of the pool. The
//! same pool goes to every target, and the static-file ceiling serves the
//! reference target's answer to member `i` as `/<slug>/<i>.json`.

use std::path::Path;

use bytes::Bytes;
use neve_upstream::quantity;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::IndexedRandom;
use serde::Deserialize;

use crate::corpus::Corpus;
use crate::error::BenchError;

/// The seeds' read mix: what a public endpoint sees.
pub const SEEDS_READ_MIX: &str = include_str!("../mixes/seeds-read.toml");
/// Only the block-tail methods neve serves.
pub const BLOCK_TAIL_MIX: &str = include_str!("../mixes/block-tail.toml");
/// Ethereum mainnet's method distribution, `eth_call` first.
pub const ETH_MAINNET_MIX: &str = include_str!("../mixes/eth-mainnet.toml");

/// The single-method workloads, by name. `balance` reads the balances of
/// the chain's own senders and recipients, `storage` the token holders'
/// balance slots of the busiest log contract; each half at random heights
/// of the common range, half at `latest`. `call` and `estimate` simulate a
/// transfer of the busiest log contract (the token) from one of the
/// chain's senders to another, at `latest`. `simulate` is a wallet's
/// preview (`eth_simulateV1`, one block of 1–3 calls: an approval and a
/// transfer on the token, and a balance read) at `latest`. `trace-block`
/// is an indexer's: a block with transactions of the common range traced
/// whole with `callTracer` or `prestateTracer` (half each); `trace-tx` an
/// explorer's: `debug_traceTransaction` with `callTracer` of one of the
/// range's first 16 transactions (the popular ones).
pub const SINGLE: [&str; 13] = [
    "randblock",
    "randblock-full",
    "tx",
    "receipt",
    "block-receipts",
    "logs",
    "balance",
    "storage",
    "call",
    "estimate",
    "simulate",
    "trace-block",
    "trace-tx",
];

/// A named pool of request bodies.
#[derive(Clone, Debug)]
pub struct Workload {
    /// As given on the command line (`randblock`, `mix:block-tail`, …).
    pub name: String,
    /// A file-system-safe form of the name, for the ceiling's files.
    pub slug: String,
    /// The request bodies.
    pub requests: Vec<Bytes>,
}

/// A method mix as written in TOML.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixSpec {
    /// What the mix models.
    #[serde(default)]
    pub description: String,
    /// The calls and their weights.
    pub call: Vec<MixCall>,
}

/// One method of a mix.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixCall {
    /// The JSON-RPC method.
    pub method: String,
    /// Relative weight.
    pub weight: u32,
    /// For block lookups: ask for full transactions.
    #[serde(default)]
    pub full_tx: bool,
    /// Literal params (a JSON array as a string) for methods the corpus
    /// cannot fill in.
    #[serde(default)]
    pub params: Option<String>,
}

impl MixSpec {
    /// Parses a mix file's text.
    pub fn parse(text: &str) -> Result<MixSpec, BenchError> {
        let spec: MixSpec =
            toml::from_str(text).map_err(|e| BenchError::Usage(format!("method mix: {e}")))?;
        if spec.call.is_empty() || spec.call.iter().all(|c| c.weight == 0) {
            return Err(BenchError::Usage(
                "a method mix needs a call with a weight".into(),
            ));
        }
        Ok(spec)
    }
}

/// Builds `name`'s pool of `size` requests from the corpus. Names are the
/// [`SINGLE`] workloads, `mix:seeds-read`, `mix:block-tail`, or
/// `mix:PATH` for a TOML file.
pub fn build(name: &str, corpus: &Corpus, size: usize, seed: u64) -> Result<Workload, BenchError> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let requests = if let Some(mix) = name.strip_prefix("mix:") {
        let text = match mix {
            "seeds-read" => SEEDS_READ_MIX.to_owned(),
            "block-tail" => BLOCK_TAIL_MIX.to_owned(),
            "eth-mainnet" => ETH_MAINNET_MIX.to_owned(),
            path => std::fs::read_to_string(path)
                .map_err(|e| BenchError::Usage(format!("reading method mix {path}: {e}")))?,
        };
        let spec = MixSpec::parse(&text)?;
        let mut requests = Vec::with_capacity(size);
        for _ in 0..size {
            let call = spec
                .call
                .choose_weighted(&mut rng, |c| c.weight)
                .expect("a positive weight was checked");
            requests.push(request(&call.method, &params_for(call, corpus, &mut rng)?));
        }
        requests
    } else if name == "balance" || name == "storage" {
        (0..size)
            .map(|_| state_request(name, corpus, &mut rng))
            .collect::<Result<_, BenchError>>()?
    } else {
        let call = |method: &str, full_tx| MixCall {
            method: method.into(),
            weight: 1,
            full_tx,
            params: None,
        };
        let call = match name {
            "randblock" => call("eth_getBlockByNumber", false),
            "randblock-full" => call("eth_getBlockByNumber", true),
            "tx" => call("eth_getTransactionByHash", false),
            "receipt" => call("eth_getTransactionReceipt", false),
            "block-receipts" => call("eth_getBlockReceipts", false),
            "logs" => call("eth_getLogs", false),
            "call" => call("eth_call", false),
            "estimate" => call("eth_estimateGas", false),
            "simulate" => call("eth_simulateV1", false),
            "trace-block" => call("debug_traceBlockByNumber", false),
            "trace-tx" => call("debug_traceTransaction", false),
            other => {
                return Err(BenchError::Usage(format!(
                    "unknown workload {other:?}: use one of {} or mix:seeds-read, mix:block-tail, mix:eth-mainnet, mix:FILE.toml",
                    SINGLE.join(", ")
                )));
            }
        };
        (0..size)
            .map(|_| Ok(request(&call.method, &params_for(&call, corpus, &mut rng)?)))
            .collect::<Result<_, BenchError>>()?
    };
    Ok(Workload {
        name: name.to_owned(),
        slug: slug(name),
        requests,
    })
}

fn slug(name: &str) -> String {
    let base = match name.strip_prefix("mix:") {
        Some(path) => format!(
            "mix-{}",
            Path::new(path)
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or(path)
        ),
        None => name.to_owned(),
    };
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// One request of the `balance` or `storage` workload.
fn state_request(name: &str, corpus: &Corpus, rng: &mut SmallRng) -> Result<Bytes, BenchError> {
    let missing = |what: &str| {
        BenchError::Corpus(format!(
            "{name} needs {what}, and the common range has none"
        ))
    };
    let address = corpus
        .addresses
        .choose(rng)
        .ok_or_else(|| missing("an address"))?;
    let at = if rand::Rng::random_bool(rng, 0.5) {
        "latest".to_owned()
    } else {
        quantity(
            *corpus
                .heights
                .choose(rng)
                .ok_or_else(|| missing("a block"))?,
        )
    };
    Ok(if name == "balance" {
        request("eth_getBalance", &format!(r#"["{address}","{at}"]"#))
    } else {
        let token = corpus
            .log_address
            .as_ref()
            .ok_or_else(|| missing("a contract with logs"))?;
        // The token keys a holder's balance by the holder's address.
        let slot = format!("0x{:0>64}", address.trim_start_matches("0x"));
        request(
            "eth_getStorageAt",
            &format!(r#"["{token}","{slot}","{at}"]"#),
        )
    })
}

fn request(method: &str, params: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{params}}}"#
    ))
}

/// Params for one call, from the corpus.
fn params_for(call: &MixCall, corpus: &Corpus, rng: &mut SmallRng) -> Result<String, BenchError> {
    if let Some(params) = &call.params {
        serde_json::from_str::<Vec<serde_json::Value>>(params).map_err(|e| {
            BenchError::Usage(format!(
                "params of {} are not a JSON array: {e}",
                call.method
            ))
        })?;
        return Ok(params.clone());
    }
    let missing = |what: &str| {
        BenchError::Corpus(format!(
            "{} needs {what}, and the common range has none",
            call.method
        ))
    };
    let pick = |items: &[String], what: &str, rng: &mut SmallRng| {
        items.choose(rng).cloned().ok_or_else(|| missing(what))
    };
    let height = |rng: &mut SmallRng| {
        corpus
            .heights
            .choose(rng)
            .map(|h| quantity(*h))
            .ok_or_else(|| missing("a block"))
    };
    let params = match call.method.as_str() {
        "eth_blockNumber" | "eth_chainId" | "net_version" | "web3_clientVersion"
        | "eth_syncing" | "eth_gasPrice" => "[]".to_owned(),
        "eth_getBalance" | "eth_getTransactionCount" | "eth_getCode" => {
            format!(
                r#"["{}","latest"]"#,
                pick(&corpus.addresses, "an address", rng)?
            )
        }
        "eth_getBlockByNumber" => format!(r#"["{}",{}]"#, height(rng)?, call.full_tx),
        "eth_getBlockByHash" => {
            let (_, hash) = corpus
                .blocks
                .choose(rng)
                .ok_or_else(|| missing("a block"))?;
            format!(r#"["{hash}",{}]"#, call.full_tx)
        }
        "eth_getBlockTransactionCountByNumber" | "eth_getBlockReceipts" => {
            format!(r#"["{}"]"#, height(rng)?)
        }
        "eth_getBlockTransactionCountByHash" => {
            let (_, hash) = corpus
                .blocks
                .choose(rng)
                .ok_or_else(|| missing("a block"))?;
            format!(r#"["{hash}"]"#)
        }
        "eth_getTransactionByHash" | "eth_getTransactionReceipt" => {
            format!(r#"["{}"]"#, pick(&corpus.txs, "a transaction", rng)?)
        }
        "eth_getTransactionByBlockNumberAndIndex" => {
            let (height, count) = corpus
                .blocks_with_txs
                .choose(rng)
                .ok_or_else(|| missing("a block with transactions"))?;
            let index = rand::Rng::random_range(rng, 0..*count as u64);
            format!(r#"["{}","{}"]"#, quantity(*height), quantity(index))
        }
        "eth_call" | "eth_estimateGas" => call_params(call, corpus, rng)?,
        "eth_simulateV1" => preview_params(corpus, rng)?,
        "debug_traceBlockByNumber" => {
            let (height, _) = corpus
                .blocks_with_txs
                .choose(rng)
                .ok_or_else(|| missing("a block with transactions"))?;
            let tracer = ["callTracer", "prestateTracer"]
                .choose(rng)
                .expect("two tracers");
            format!(r#"["{}",{{"tracer":"{tracer}"}}]"#, quantity(*height))
        }
        "debug_traceTransaction" => {
            let popular = &corpus.txs[..corpus.txs.len().min(16)];
            let tx = pick(popular, "a transaction", rng)?;
            format!(r#"["{tx}",{{"tracer":"callTracer"}}]"#)
        }
        "eth_getLogs" => {
            let address = corpus
                .log_address
                .as_ref()
                .ok_or_else(|| missing("a contract with logs"))?;
            let (from, to) = corpus.log_window(rng);
            format!(
                r#"[{{"fromBlock":"{}","toBlock":"{}","address":"{address}"}}]"#,
                quantity(from),
                quantity(to)
            )
        }
        other => {
            return Err(BenchError::Usage(format!(
                "the mix names {other}, whose params the benchmark cannot fill from the chain: give them as params = '[…]'"
            )));
        }
    };
    Ok(params)
}

/// What `method` needs that the corpus's common range does not have.
fn missing(method: &str, what: &str) -> BenchError {
    BenchError::Corpus(format!(
        "{method} needs {what}, and the common range has none"
    ))
}

/// The corpus's token (its busiest log contract).
fn token_of<'a>(corpus: &'a Corpus, method: &str) -> Result<&'a String, BenchError> {
    corpus
        .log_address
        .as_ref()
        .ok_or_else(|| missing(method, "a contract with logs"))
}

/// One of the chain's senders or recipients, at random.
fn address_of(corpus: &Corpus, rng: &mut SmallRng, method: &str) -> Result<String, BenchError> {
    corpus
        .addresses
        .choose(rng)
        .cloned()
        .ok_or_else(|| missing(method, "an address"))
}

/// Params of `eth_call` or `eth_estimateGas` against the corpus's token.
fn call_params(call: &MixCall, corpus: &Corpus, rng: &mut SmallRng) -> Result<String, BenchError> {
    let token = token_of(corpus, &call.method)?;
    let from = address_of(corpus, rng, &call.method)?;
    let to = address_of(corpus, rng, &call.method)?;
    let word = |address: &str| format!("{:0>64}", address.trim_start_matches("0x"));
    // A token's reads and a simulated transfer, a third each for
    // calls (what a wallet or dapp front end asks of a token); a
    // transfer for estimates.
    let kind = if call.method == "eth_estimateGas" {
        0
    } else {
        rand::Rng::random_range(rng, 0..3)
    };
    let input = match kind {
        // balanceOf(holder)
        1 => format!("0x70a08231{}", word(&to)),
        // allowance(owner, spender)
        2 => format!("0xdd62ed3e{}{}", word(&from), word(&to)),
        // transfer(to, 1)
        _ => format!("0xa9059cbb{}{:064x}", word(&to), 1),
    };
    let args = format!(r#"{{"from":"{from}","to":"{token}","input":"{input}"}}"#);
    Ok(if call.method == "eth_estimateGas" {
        format!("[{args}]")
    } else {
        format!(r#"[{args},"latest"]"#)
    })
}

/// Params of `eth_simulateV1` as a wallet previews a swap on the corpus's
/// token before sending it: one block at `latest` of 1–3 calls from one
/// of the chain's senders (`approve(spender, 1)`, `transfer(to, 1)`,
/// `balanceOf(to)`), with traced transfers, as viem's `simulateCalls` asks.
fn preview_params(corpus: &Corpus, rng: &mut SmallRng) -> Result<String, BenchError> {
    let method = "eth_simulateV1";
    let token = token_of(corpus, method)?;
    let (from, spender, to) = (
        address_of(corpus, rng, method)?,
        address_of(corpus, rng, method)?,
        address_of(corpus, rng, method)?,
    );
    let word = |address: &str| format!("{:0>64}", address.trim_start_matches("0x"));
    let inputs = [
        format!("0x095ea7b3{}{:064x}", word(&spender), 1),
        format!("0xa9059cbb{}{:064x}", word(&to), 1),
        format!("0x70a08231{}", word(&to)),
    ];
    let count = rand::Rng::random_range(rng, 1..=inputs.len());
    let calls: Vec<String> = inputs[..count]
        .iter()
        .map(|input| format!(r#"{{"from":"{from}","to":"{token}","input":"{input}"}}"#))
        .collect();
    Ok(format!(
        r#"[{{"blockStateCalls":[{{"calls":[{}]}}],"traceTransfers":true}},"latest"]"#,
        calls.join(",")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus() -> Corpus {
        Corpus {
            range: (100, 199),
            heights: (100..200).collect(),
            blocks: vec![(150, format!("0x{}", "ab".repeat(32)))],
            blocks_with_txs: vec![(150, 3)],
            txs: vec![format!("0x{}", "cd".repeat(32))],
            addresses: vec![format!("0x{}", "11".repeat(20))],
            log_address: Some(format!("0x{}", "22".repeat(20))),
            log_heights: vec![150],
            log_topics: vec![],
        }
    }

    fn parsed(body: &Bytes) -> serde_json::Value {
        serde_json::from_slice(body).expect("a request is JSON")
    }

    #[test]
    fn single_workloads_ask_for_keys_inside_the_range() {
        let corpus = corpus();
        for name in SINGLE {
            let workload = build(name, &corpus, 50, 1).unwrap();
            assert_eq!(workload.requests.len(), 50);
            for body in &workload.requests {
                let request = parsed(body);
                assert_eq!(request["jsonrpc"], "2.0");
                if name == "logs" {
                    let filter = &request["params"][0];
                    let from = neve_upstream::parse_quantity(filter["fromBlock"].as_str().unwrap())
                        .unwrap();
                    let to =
                        neve_upstream::parse_quantity(filter["toBlock"].as_str().unwrap()).unwrap();
                    assert!(
                        100 <= from && from <= to && to <= 199 && to - from == 9,
                        "{request}"
                    );
                    assert!(
                        (from..=to).contains(&150),
                        "holds the logged block: {request}"
                    );
                }
            }
        }
        let full = parsed(&build("randblock-full", &corpus, 1, 1).unwrap().requests[0]);
        assert_eq!(full["params"][1], true);
    }

    #[test]
    fn the_shipped_mixes_parse_and_keep_their_weights() {
        let spec = MixSpec::parse(SEEDS_READ_MIX).unwrap();
        let weight = |m: &str| {
            spec.call
                .iter()
                .filter(|c| c.method == m)
                .map(|c| c.weight)
                .sum::<u32>()
        };
        assert_eq!(weight("eth_getBalance"), 35);
        assert_eq!(weight("eth_blockNumber"), 20);
        assert_eq!(weight("eth_getBlockByNumber"), 20);
        assert_eq!(weight("eth_chainId"), 8);
        assert_eq!(weight("net_version"), 7);
        assert_eq!(weight("eth_getLogs"), 2);
        assert_eq!(spec.call.iter().map(|c| c.weight).sum::<u32>(), 100);

        let workload = build("mix:seeds-read", &corpus(), 4000, 9).unwrap();
        let balance = workload
            .requests
            .iter()
            .filter(|b| parsed(b)["method"] == "eth_getBalance")
            .count();
        assert!(
            (1250..1550).contains(&balance),
            "35 % of 4000 ≈ 1400, got {balance}"
        );
        assert_eq!(workload.slug, "mix-seeds-read");

        let tail = build("mix:block-tail", &corpus(), 500, 9).unwrap();
        for body in &tail.requests {
            let method = parsed(body)["method"].as_str().unwrap().to_owned();
            assert!(
                !["eth_getBalance", "eth_call", "eth_getTransactionCount"]
                    .contains(&method.as_str()),
                "{method}"
            );
        }
    }

    #[test]
    fn the_mainnet_mix_is_half_calls_of_a_tokens_reads_and_transfers() {
        let spec = MixSpec::parse(ETH_MAINNET_MIX).unwrap();
        assert_eq!(spec.call[0].method, "eth_call");
        let workload = build("mix:eth-mainnet", &corpus(), 4000, 3).unwrap();
        let calls: Vec<serde_json::Value> = workload
            .requests
            .iter()
            .map(parsed)
            .filter(|r| r["method"] == "eth_call")
            .collect();
        assert!((1950..2300).contains(&calls.len()), "{}", calls.len());
        let call = &calls[0]["params"];
        assert_eq!(call[1], "latest");
        // balanceOf, allowance and transfer, each about a third.
        for selector in ["0x70a08231", "0xdd62ed3e", "0xa9059cbb"] {
            let share = calls
                .iter()
                .filter(|c| {
                    c["params"][0]["input"]
                        .as_str()
                        .unwrap()
                        .starts_with(selector)
                })
                .count();
            assert!(share * 4 > calls.len(), "{selector}: {share}");
        }
        let estimate = parsed(&build("estimate", &corpus(), 1, 1).unwrap().requests[0]);
        assert_eq!(
            estimate["params"].as_array().unwrap().len(),
            1,
            "{estimate}"
        );
    }

    #[test]
    fn a_wallet_preview_is_one_block_of_one_to_three_calls_at_latest() {
        let workload = build("simulate", &corpus(), 60, 1).unwrap();
        let mut counts = std::collections::BTreeSet::new();
        for body in &workload.requests {
            let request = parsed(body);
            assert_eq!(request["method"], "eth_simulateV1");
            assert_eq!(request["params"][1], "latest");
            let blocks = request["params"][0]["blockStateCalls"].as_array().unwrap();
            assert_eq!(blocks.len(), 1);
            let calls = blocks[0]["calls"].as_array().unwrap();
            assert_eq!(calls[0]["input"].as_str().unwrap()[..10], *"0x095ea7b3");
            assert!(
                calls
                    .iter()
                    .all(|c| c["to"] == format!("0x{}", "22".repeat(20)))
            );
            counts.insert(calls.len());
        }
        assert_eq!(counts, [1, 2, 3].into_iter().collect());
    }

    #[test]
    fn bad_names_and_mixes_are_explained() {
        let error = build("randblok", &corpus(), 1, 1).unwrap_err().to_string();
        assert!(error.contains("randblock"), "{error}");
        assert!(MixSpec::parse("call = []").is_err());
        assert!(MixSpec::parse("[[call]]\nmethod = \"x\"\nweight = 1\ncolour = 1").is_err());
        let spec = "[[call]]\nmethod = \"eth_sendRawTransaction\"\nweight = 1";
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calls.toml");
        std::fs::write(&path, spec).unwrap();
        let error = build(&format!("mix:{}", path.display()), &corpus(), 1, 1)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("eth_sendRawTransaction") && error.contains("params"),
            "{error}"
        );
        std::fs::write(
            &path,
            format!("{spec}\nparams = '[{{\"to\":\"0x00\"}},\"latest\"]'"),
        )
        .unwrap();
        let workload = build(&format!("mix:{}", path.display()), &corpus(), 2, 1).unwrap();
        assert_eq!(parsed(&workload.requests[0])["params"][1], "latest");
        assert_eq!(workload.slug, "mix-calls");
        let empty = Corpus::default();
        let error = build("tx", &empty, 1, 1).unwrap_err().to_string();
        assert!(error.contains("a transaction"), "{error}");
    }
}
