//! The execution-apis `rpc-compat` cases, run against any JSON-RPC URL.
//!
//! A case file (`<method>/<case>.io`) holds `>>` request lines, each followed
//! by a `<<` expected-response line; `//` lines are comments. As in hive, a
//! response passes when it equals the expected one as parsed JSON, except
//! that an expected error only requires an error to be present (clients word
//! messages differently). A case marked `speconly` (its answer differs by
//! client, as `eth_capabilities` does) passes when the result is valid
//! under the method's schema ([`spec_valid`]).

use std::path::{Path, PathBuf};

use neve_upstream::RpcClient;
use serde_json::Value;

/// The methods of the block-tail read slice neve serves: the chain's
/// identity and head, blocks, transactions, receipts, logs and raw encodings.
/// The conformance cases of exactly these are the judge of serving.
pub const BLOCK_TAIL_METHODS: &[&str] = &[
    "eth_blockNumber",
    "eth_capabilities",
    "eth_chainId",
    "net_version",
    "eth_syncing",
    "eth_getBlockByHash",
    "eth_getBlockByNumber",
    "eth_getBlockTransactionCountByHash",
    "eth_getBlockTransactionCountByNumber",
    "eth_getTransactionByBlockHashAndIndex",
    "eth_getTransactionByBlockNumberAndIndex",
    "eth_getTransactionByHash",
    "eth_getTransactionReceipt",
    "eth_getBlockReceipts",
    "eth_getLogs",
    "debug_getRawBlock",
    "debug_getRawHeader",
    "debug_getRawReceipts",
    "debug_getRawTransaction",
];

/// The state methods neve serves from verified proofs.
pub const STATE_METHODS: &[&str] = &[
    "eth_getBalance",
    "eth_getTransactionCount",
    "eth_getCode",
    "eth_getStorageAt",
    "eth_getStorageValues",
    "eth_getProof",
];

/// The methods neve answers by executing calls over verified state, the
/// chain configuration they run under, and the fee methods computed from
/// stored blocks as geth's price oracle computes them.
pub const CALL_METHODS: &[&str] = &[
    "eth_call",
    "eth_estimateGas",
    "eth_createAccessList",
    "eth_config",
    "eth_feeHistory",
    "eth_blobBaseFee",
    "eth_baseFee",
    "eth_simulateV1",
];

/// The traces neve answers by replaying stored blocks over verified state,
/// and the witnesses it replays them over.
pub const TRACE_METHODS: &[&str] = &[
    "debug_traceTransaction",
    "debug_traceBlockByNumber",
    "debug_traceBlockByHash",
    "debug_traceCall",
    "debug_executionWitness",
];

/// Every method neve serves: the block tail, state, calls and traces.
pub fn served_methods() -> Vec<&'static str> {
    BLOCK_TAIL_METHODS
        .iter()
        .chain(STATE_METHODS)
        .chain(CALL_METHODS)
        .chain(TRACE_METHODS)
        .copied()
        .collect()
}

/// The `result` of a fixture's answer line (`<< {...}`), as JSON text: the
/// conformance chain's own blocks and receipts, for tests and benchmarks.
pub fn fixture_result(path: &str) -> String {
    let text = std::fs::read_to_string(fixtures_dir().join(path))
        .expect("conformance fixtures beside the workspace");
    let answer = text
        .lines()
        .find_map(|l| l.strip_prefix("<< "))
        .expect("an answer line");
    let value: Value = serde_json::from_str(answer).expect("a JSON answer");
    value["result"].to_string()
}

/// The fixtures directory: `$NEVE_CONFORMANCE_DIR`, else
/// `<workspace>/../shared/conformance/rpc-compat`.
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("NEVE_CONFORMANCE_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => crate::tools::workspace_root().join("../shared/conformance/rpc-compat"),
    }
}

/// One request and the response it must get.
#[derive(Clone, Debug)]
pub struct Exchange {
    /// The request line, sent as is.
    pub request: String,
    /// The expected response, parsed.
    pub expected: Value,
}

/// One `.io` file.
#[derive(Clone, Debug)]
pub struct Case {
    /// The method directory it came from (`eth_getLogs`).
    pub method: String,
    /// `method/file-stem`, for reports.
    pub name: String,
    /// The exchanges, in order.
    pub exchanges: Vec<Exchange>,
    /// Only the result's validity under the method's schema is checked.
    pub spec_only: bool,
}

/// Why a case file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    /// Reading the directory or file failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not in the `>>` / `<<` form.
    #[error("{path}: {reason}")]
    Format {
        /// The path.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

/// Parses the text of one `.io` file.
pub fn parse_case(method: &str, name: &str, text: &str) -> Result<Case, CaseError> {
    let format = |reason: String| CaseError::Format {
        path: name.to_owned(),
        reason,
    };
    let mut exchanges = Vec::new();
    let mut pending: Option<String> = None;
    let mut spec_only = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with("//") && line.contains("speconly") {
            spec_only = true;
        }
        if let Some(request) = line.strip_prefix(">>") {
            if pending.replace(request.trim().to_owned()).is_some() {
                return Err(format("two requests without a response".into()));
            }
        } else if let Some(response) = line.strip_prefix("<<") {
            let request = pending
                .take()
                .ok_or_else(|| format("a response without a request".into()))?;
            let expected = serde_json::from_str(response.trim())
                .map_err(|e| format(format!("expected response is not JSON: {e}")))?;
            exchanges.push(Exchange { request, expected });
        } else if !(line.is_empty() || line.starts_with("//")) {
            return Err(format(format!("unexpected line: {line:.60}")));
        }
    }
    if pending.is_some() || exchanges.is_empty() {
        return Err(format("no complete request/response pair".into()));
    }
    Ok(Case {
        method: method.to_owned(),
        name: name.to_owned(),
        exchanges,
        spec_only,
    })
}

/// Loads every case of the given methods, sorted by name; a method the
/// suite has no directory of has no cases.
pub fn load_cases(dir: &Path, methods: &[&str]) -> Result<Vec<Case>, CaseError> {
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| CaseError::Io { path, source }
    };
    let mut cases = Vec::new();
    for method in methods {
        let method_dir = dir.join(method);
        // A served method the suite has no cases of (yet).
        if !method_dir.exists() {
            continue;
        }
        for entry in std::fs::read_dir(&method_dir).map_err(io(&method_dir))? {
            let path = entry.map_err(io(&method_dir))?.path();
            if path.extension().is_none_or(|e| e != "io") {
                continue;
            }
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            let text = std::fs::read_to_string(&path).map_err(io(&path))?;
            cases.push(parse_case(method, &format!("{method}/{stem}"), &text)?);
        }
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(cases)
}

/// Whether `actual` passes for `expected` under hive's rule.
pub fn matches(expected: &Value, actual: &Value) -> bool {
    if expected.get("error").is_some() {
        return actual.get("error").is_some();
    }
    expected == actual
}

/// Whether `actual` is a valid answer where only the schema is checked:
/// an error where one is expected, else a result that `eth_capabilities`'
/// schema accepts, or, for methods without a schema here, a result of the
/// same JSON type as the expected one.
pub fn spec_valid(method: &str, expected: &Value, actual: &Value) -> bool {
    if expected.get("error").is_some() {
        return actual.get("error").is_some();
    }
    let (Some(want), Some(got)) = (expected.get("result"), actual.get("result")) else {
        return false;
    };
    match method {
        "eth_capabilities" => capabilities_valid(got),
        _ => std::mem::discriminant(want) == std::mem::discriminant(got),
    }
}

/// The execution-apis `EthCapabilities` schema: `head` {number, hash} and
/// the six resources, each {disabled, oldestBlock?, deleteStrategy?} with a
/// window strategy only, no other members anywhere.
fn capabilities_valid(result: &Value) -> bool {
    let uint = |v: &Value| {
        v.as_str()
            .and_then(|s| s.strip_prefix("0x"))
            .is_some_and(|d| {
                !d.is_empty()
                    && d.len() <= 16
                    && d.bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
                    && (d == "0" || !d.starts_with('0'))
            })
    };
    let hash32 = |v: &Value| {
        v.as_str()
            .and_then(|s| s.strip_prefix("0x"))
            .is_some_and(|d| d.len() == 64 && d.bytes().all(|b| b.is_ascii_hexdigit()))
    };
    let only = |v: &Value, allowed: &[&str], required: &[&str]| {
        v.as_object().is_some_and(|o| {
            o.keys().all(|k| allowed.contains(&k.as_str()))
                && required.iter().all(|k| o.contains_key(*k))
        })
    };
    let strategy = |v: &Value| {
        only(
            v,
            &["type", "retentionBlocks"],
            &["type", "retentionBlocks"],
        ) && v["type"] == "window"
            && uint(&v["retentionBlocks"])
    };
    let resource = |v: &Value| {
        only(
            v,
            &["disabled", "oldestBlock", "deleteStrategy"],
            &["disabled"],
        ) && v["disabled"].is_boolean()
            && v.get("oldestBlock").is_none_or(uint)
            && v.get("deleteStrategy").is_none_or(strategy)
    };
    const RESOURCES: [&str; 6] = ["state", "tx", "logs", "receipts", "blocks", "stateproofs"];
    let mut members = vec!["head"];
    members.extend(RESOURCES);
    only(result, &members, &members)
        && only(&result["head"], &["number", "hash"], &["number", "hash"])
        && uint(&result["head"]["number"])
        && hash32(&result["head"]["hash"])
        && RESOURCES.iter().all(|r| resource(&result[*r]))
}

/// Runs one case; `Err` says which exchange failed and how.
pub async fn run_case(client: &RpcClient, case: &Case) -> Result<(), String> {
    for (i, exchange) in case.exchanges.iter().enumerate() {
        let (status, body) = client
            .post(exchange.request.clone().into())
            .await
            .map_err(|e| format!("exchange {i}: {e}"))?;
        let actual: Value = serde_json::from_slice(&body).map_err(|e| {
            format!(
                "exchange {i}: HTTP {status}, body is not JSON ({e}): {:.200}",
                String::from_utf8_lossy(&body)
            )
        })?;
        let passed = if case.spec_only {
            spec_valid(&case.method, &exchange.expected, &actual)
        } else {
            matches(&exchange.expected, &actual)
        };
        if !passed {
            let differences = differences(&exchange.expected, &actual);
            return Err(format!(
                "exchange {i}: HTTP {status}\n  request:  {:.300}\n  expected: {:.600}\n  actual:   {:.600}\n  differs at: {}",
                exchange.request,
                exchange.expected,
                actual,
                differences.join("\n              ")
            ));
        }
    }
    Ok(())
}

/// Where `actual` differs from `expected` (JSON paths, at most 12): what
/// a long answer's report shows.
pub fn differences(expected: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    differ("", expected, actual, &mut out);
    out
}

fn differ(path: &str, expected: &Value, actual: &Value, out: &mut Vec<String>) {
    if out.len() >= 12 || expected == actual {
        return;
    }
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (key, value) in e {
                let at = format!("{path}.{key}");
                match a.get(key) {
                    Some(other) => differ(&at, value, other, out),
                    None => out.push(format!("{at}: missing")),
                }
            }
            for key in a.keys().filter(|key| !e.contains_key(*key)) {
                out.push(format!("{path}.{key}: not expected"));
            }
        }
        (Value::Array(e), Value::Array(a)) => {
            if e.len() != a.len() {
                out.push(format!(
                    "{path}: {} items expected, got {}",
                    e.len(),
                    a.len()
                ));
            }
            for (index, (value, other)) in e.iter().zip(a).enumerate() {
                differ(&format!("{path}[{index}]"), value, other, out);
            }
        }
        _ => out.push(format!(
            "{path}: expected {expected:.120}, got {actual:.120}"
        )),
    }
}

/// The outcome of a suite run.
#[derive(Debug, Default)]
pub struct Report {
    /// Names of the cases that passed.
    pub passed: Vec<String>,
    /// Names and reasons of the cases that failed.
    pub failed: Vec<(String, String)>,
}

impl Report {
    /// A multi-line summary, failures first.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, reason) in &self.failed {
            out.push_str(&format!("FAIL {name}: {reason}\n"));
        }
        out.push_str(&format!(
            "conformance: {} passed, {} failed\n",
            self.passed.len(),
            self.failed.len()
        ));
        out
    }
}

/// Runs `cases` one after another against `client`.
pub async fn run_all(client: &RpcClient, cases: &[Case]) -> Report {
    let mut report = Report::default();
    for case in cases {
        match run_case(client, case).await {
            Ok(()) => report.passed.push(case.name.clone()),
            Err(reason) => report.failed.push((case.name.clone(), reason)),
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_comments_requests_and_responses() {
        let text = "// a comment\n>> {\"id\":1}\n<< {\"id\":1,\"result\":\"0x1\"}\n\n>> {\"id\":2}\n<< {\"id\":2,\"result\":null}\n";
        let case = parse_case("m", "m/c", text).unwrap();
        assert_eq!(case.exchanges.len(), 2);
        assert_eq!(case.exchanges[1].expected, json!({"id":2,"result":null}));
    }

    #[test]
    fn capabilities_are_checked_against_the_schema() {
        let geth = json!({"head":{"number":"0x36","hash":format!("0x{}", "d2".repeat(32))},
            "state":{"disabled":false,"oldestBlock":"0x0"},"tx":{"disabled":false,"oldestBlock":"0x0"},
            "logs":{"disabled":false,"oldestBlock":"0x0","deleteStrategy":{"type":"window","retentionBlocks":"0x23dbb0"}},
            "receipts":{"disabled":false,"oldestBlock":"0x0"},"blocks":{"disabled":false,"oldestBlock":"0x0"},
            "stateproofs":{"disabled":true}});
        assert!(capabilities_valid(&geth));
        let broken = |path: &[&str], value: Value| {
            let mut v = geth.clone();
            let mut at = &mut v;
            for key in &path[..path.len() - 1] {
                at = &mut at[*key];
            }
            match value {
                Value::Null => {
                    at.as_object_mut().unwrap().remove(path[path.len() - 1]);
                }
                value => at[path[path.len() - 1]] = value,
            }
            capabilities_valid(&v)
        };
        assert!(!broken(&["stateproofs"], Value::Null), "a resource missing");
        assert!(!broken(&["extra"], json!(1)), "an unknown member");
        assert!(
            !broken(&["tx", "disabled"], Value::Null),
            "disabled missing"
        );
        assert!(
            !broken(&["tx", "oldestBlock"], json!("0x01")),
            "a leading zero"
        );
        assert!(
            !broken(&["head", "number"], json!(54)),
            "a number, not a quantity"
        );
        assert!(!broken(&["head", "hash"], json!("0x12")), "a short hash");
        assert!(!broken(&["logs", "deleteStrategy", "type"], json!("epoch")));
        assert!(!broken(
            &["blocks", "deleteStrategy"],
            json!({"type": "window"})
        ));
        let case = parse_case("m", "m/c", "// speconly: schema\n>> {}\n<< {}\n").unwrap();
        assert!(case.spec_only);
    }

    #[test]
    fn rejects_dangling_requests_and_stray_lines() {
        assert!(parse_case("m", "m/c", ">> {}\n").is_err());
        assert!(parse_case("m", "m/c", "<< {}\n").is_err());
        assert!(parse_case("m", "m/c", "hello\n>> {}\n<< {}\n").is_err());
    }

    #[test]
    fn an_expected_error_needs_only_some_error() {
        let expected = json!({"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"}});
        assert!(matches(
            &expected,
            &json!({"id":1,"error":{"code":-1,"message":"y"}})
        ));
        assert!(!matches(&expected, &json!({"id":1,"result":null})));
    }

    #[test]
    fn results_must_match_as_parsed_json() {
        let expected = json!({"id":1,"result":{"a":1,"b":[1,2]}});
        assert!(matches(
            &expected,
            &serde_json::from_str(r#"{"result":{"b":[1,2],"a":1},"id":1}"#).unwrap()
        ));
        assert!(!matches(
            &expected,
            &json!({"id":1,"result":{"a":1,"b":[2,1]}})
        ));
    }

    #[test]
    fn the_shared_fixtures_all_parse() {
        let dir = fixtures_dir();
        let methods: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        let methods: Vec<&str> = methods.iter().map(String::as_str).collect();
        let cases = load_cases(&dir, &methods).unwrap();
        assert!(cases.len() > 100, "only {} cases", cases.len());
    }
}
