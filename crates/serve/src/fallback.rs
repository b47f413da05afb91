//! Forwarding misses to a full node (`--fallback`) instead of answering
//! 421: only methods on an allow-list of reads (the node neve follows must
//! offer `debug`, and `debug_setHead` or `admin_*` must never reach it
//! through a public mirror), at most a bounded number at once; the missed
//! elements of a batch go in one batch, answers matched by id.

use bytes::Bytes;
use hyper::StatusCode;
use neve_upstream::RpcClient;
use serde_json::value::RawValue;

/// Methods forwarded unless `--fallback-methods` says otherwise: patterns
/// (`name`, `prefix*`), and `!pattern` to refuse what an earlier one
/// allowed. The default names each method exactly: the reads of the `eth`,
/// `net`, `web3` and `txpool` namespaces (filters included), tracing of a
/// transaction, a call or a block by number or hash, and raw data;
/// `eth_sendRawTransaction` relays a transaction the client signed. Not by
/// pattern, since a namespace also holds what no client of a mirror should
/// reach: geth's `debug_traceBlockFromFile` (reads a path on the node's
/// disk) and `debug_traceBlock` (executes RLP it is sent), `eth_resend`,
/// `eth_sendTransaction`, `eth_sign*` and `eth_fillTransaction` (the
/// node's keys or accounts), `eth_accounts`, and every `admin`,
/// `personal`, `miner` and `engine` method. `neve_tests::fallback_methods`
/// asks a live geth each of these, so a misspelt name fails.
pub const DEFAULT_FALLBACK_METHODS: &str = concat!(
    "eth_baseFee,eth_blockNumber,eth_call,eth_chainId,eth_config,eth_createAccessList,",
    "eth_estimateGas,",
    "eth_feeHistory,eth_gasPrice,eth_maxPriorityFeePerGas,eth_blobBaseFee,eth_getBalance,",
    "eth_getBlockByHash,eth_getBlockByNumber,eth_getBlockReceipts,",
    "eth_getBlockTransactionCountByHash,eth_getBlockTransactionCountByNumber,eth_getCode,",
    "eth_getHeaderByHash,eth_getHeaderByNumber,eth_getLogs,eth_getProof,eth_getStorageAt,",
    "eth_getStorageValues,eth_getTransactionByBlockHashAndIndex,",
    "eth_getTransactionByBlockNumberAndIndex,eth_getTransactionByHash,",
    "eth_getTransactionCount,eth_getTransactionReceipt,eth_getRawTransactionByHash,",
    "eth_getUncleByBlockHashAndIndex,eth_getUncleByBlockNumberAndIndex,",
    "eth_getUncleCountByBlockHash,eth_getUncleCountByBlockNumber,eth_syncing,",
    "eth_simulateV1,eth_sendRawTransaction,eth_newFilter,eth_newBlockFilter,",
    "eth_newPendingTransactionFilter,eth_getFilterChanges,eth_getFilterLogs,",
    "eth_uninstallFilter,net_version,net_listening,net_peerCount,web3_clientVersion,",
    "web3_sha3,txpool_content,txpool_contentFrom,txpool_inspect,txpool_status,",
    "debug_traceTransaction,debug_traceCall,debug_traceBlockByNumber,",
    "debug_traceBlockByHash,debug_getRawBlock,debug_getRawHeader,debug_getRawReceipts,",
    "debug_getRawTransaction"
);

/// Forwards in flight at once; a miss past it is answered as without a
/// fallback (421). Default is 64.
pub const DEFAULT_FALLBACK_IN_FLIGHT: usize = 64;

/// The full node misses go to, and which of them may.
pub(crate) struct Fallback {
    client: RpcClient,
    /// `(allow, pattern)`, the last that matches decides.
    rules: Vec<(bool, String)>,
    slots: tokio::sync::Semaphore,
}

impl Fallback {
    pub(crate) fn new(client: RpcClient, methods: &str, in_flight: usize) -> Fallback {
        let rules = methods
            .split(',')
            .map(str::trim)
            .filter(|rule| !rule.is_empty())
            .map(|rule| match rule.strip_prefix('!') {
                Some(denied) => (false, denied.to_owned()),
                None => (true, rule.to_owned()),
            })
            .collect();
        Fallback {
            client,
            rules,
            slots: tokio::sync::Semaphore::new(in_flight.max(1)),
        }
    }

    /// Whether `method` may be forwarded.
    pub(crate) fn allows(&self, method: &str) -> bool {
        self.rules
            .iter()
            .rev()
            .find(|(_, pattern)| match pattern.strip_suffix('*') {
                Some(prefix) => method.starts_with(prefix),
                None => method == pattern,
            })
            .is_some_and(|(allow, _)| *allow)
    }

    /// Whether the request `raw` names a method that may be forwarded.
    pub(crate) fn allows_request(&self, raw: &RawValue) -> bool {
        #[derive(serde::Deserialize)]
        struct Method<'a> {
            #[serde(borrow)]
            method: Option<&'a str>,
        }
        serde_json::from_str::<Method<'_>>(raw.get())
            .ok()
            .and_then(|m| m.method)
            .is_some_and(|method| self.allows(method))
    }

    /// Forwards one request's body; `None` when every slot is taken or the
    /// exchange failed.
    pub(crate) async fn forward(&self, body: Bytes) -> Option<(StatusCode, Bytes)> {
        let _slot = self.slots.try_acquire().ok()?;
        self.client.post(body).await.ok()
    }

    /// Sends the missed elements of a batch to the fallback and returns their
    /// answers in the same order, matched by id; `None` when that fails or
    /// every slot is taken.
    pub(crate) async fn forward_misses(
        &self,
        elements: &[&RawValue],
        misses: &[usize],
    ) -> Option<Vec<Bytes>> {
        let mut body = Vec::from(&b"["[..]);
        for (i, index) in misses.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            body.extend_from_slice(elements[*index].get().as_bytes());
        }
        body.push(b']');
        let (_, answer) = self.forward(Bytes::from(body)).await?;
        place_answers(&answer, elements, misses)
    }
}

/// The fallback's answer to the missed elements, matched to them by id;
/// `None` when it is not a batch answer that answers each.
fn place_answers(answer: &[u8], elements: &[&RawValue], misses: &[usize]) -> Option<Vec<Bytes>> {
    let answers: Vec<&RawValue> = serde_json::from_slice(answer).ok()?;
    #[derive(serde::Deserialize)]
    struct Id<'a> {
        #[serde(borrow)]
        id: Option<&'a RawValue>,
    }
    let id_of = |raw: &RawValue| {
        serde_json::from_str::<Id<'_>>(raw.get())
            .ok()?
            .id
            .map(|id| id.get().to_string())
    };
    // Each answer is used once, so repeated ids get their own answers.
    let mut unused: Vec<Option<&RawValue>> = answers.into_iter().map(Some).collect();
    misses
        .iter()
        .map(|index| {
            let wanted = id_of(elements[*index])?;
            let slot = unused
                .iter_mut()
                .find(|a| a.is_some_and(|a| id_of(a).as_deref() == Some(wanted.as_str())))?;
            slot.take()
                .map(|a| Bytes::copy_from_slice(a.get().as_bytes()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fallback(methods: &str) -> Fallback {
        Fallback::new(RpcClient::new("http://127.0.0.1:9").unwrap(), methods, 1)
    }

    #[test]
    fn the_default_forwards_reads_and_nothing_that_changes_the_node() {
        let fallback = fallback(DEFAULT_FALLBACK_METHODS);
        for method in [
            "eth_call",
            "eth_estimateGas",
            "eth_getBlockByNumber",
            "eth_sendRawTransaction",
            "net_version",
            "txpool_status",
            "debug_traceTransaction",
            "debug_getRawBlock",
        ] {
            assert!(fallback.allows(method), "{method}");
        }
        for method in [
            "debug_setHead",
            "debug_traceBlockFromFile",
            "debug_traceBlock",
            "debug_traceBadBlock",
            "debug_standardTraceBlockToFile",
            "eth_resend",
            "eth_fillTransaction",
            "eth_accounts",
            "eth_signTypedData_v4",
            "admin_nodeInfo",
            "admin_addPeer",
            "personal_unlockAccount",
            "miner_start",
            "engine_forkchoiceUpdatedV3",
            "eth_sendTransaction",
            "eth_sign",
            "eth_signTransaction",
            "testing_buildBlockV1",
            "",
        ] {
            assert!(!fallback.allows(method), "{method}");
        }
    }

    #[test]
    fn the_last_matching_rule_decides_and_requests_are_read_for_their_method() {
        let fallback = fallback("eth_*, !eth_call, eth_call, testing_*");
        assert!(fallback.allows("eth_call"));
        assert!(fallback.allows("testing_buildBlockV1"));
        let raw = |text: &str| RawValue::from_string(text.into()).unwrap();
        assert!(fallback.allows_request(&raw(r#"{"jsonrpc":"2.0","id":1,"method":"eth_call"}"#)));
        assert!(
            !fallback.allows_request(&raw(r#"{"jsonrpc":"2.0","id":1,"method":"admin_peers"}"#))
        );
        assert!(!fallback.allows_request(&raw(r#"{"id":1}"#)));
        assert!(!fallback.allows_request(&raw(r#"[1]"#)));
    }

    #[tokio::test]
    async fn forwards_past_the_bound_are_not_sent() {
        let fallback = fallback("*");
        let _taken = fallback.slots.try_acquire().unwrap();
        assert!(fallback.forward(Bytes::from_static(b"{}")).await.is_none());
    }

    /// Fuzz target: a fallback node's answer to forwarded elements: matched
    /// to them by id or refused, never a panic.
    #[test]
    fn fuzz_fallback_answers() {
        let raw = |text: &str| RawValue::from_string(text.into()).unwrap();
        let elements = [
            raw(r#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[]}"#),
            raw(r#"{"jsonrpc":"2.0","id":"a","method":"eth_call","params":[]}"#),
            raw(r#"{"jsonrpc":"2.0","id":1,"method":"eth_call","params":[]}"#),
        ];
        let elements: Vec<&RawValue> = elements.iter().map(|e| &**e).collect();
        let seed = br#"[{"jsonrpc":"2.0","id":"a","result":"0x"},{"jsonrpc":"2.0","id":1,"result":"0x1"},{"jsonrpc":"2.0","id":1,"error":{"code":3}}]"#;
        let placed = place_answers(seed, &elements, &[0, 1, 2]).unwrap();
        assert_eq!(
            &placed[1][..],
            br#"{"jsonrpc":"2.0","id":"a","result":"0x"}"#
        );
        let dictionary: [&[u8]; 5] = [b"\"id\":", b"null", b"[", b"{", b"\"a\""];
        let report = neve_devnet::fuzz::run(
            "fallback answers",
            &[seed.to_vec()],
            &dictionary,
            16 << 10,
            |input| {
                if let Some(placed) = place_answers(input, &elements, &[0, 1, 2]) {
                    assert_eq!(placed.len(), 3);
                }
            },
        );
        eprintln!("fallback answers: {report}");
    }
}
