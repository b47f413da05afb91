//! Fetching one block from a node: probing what it offers, one batch per
//! block (block, receipts, raw RLP), preparation and verification off the
//! async workers, retries for transient failures.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use neve_upstream::{BatchAnswer, RpcClient, RpcError, quantity};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::decode::{PrepareError, RawParts, decode, fixed_hex};
use crate::error::{IngestError, rpc};
use crate::prepare::PreparedBlock;
use crate::status::{Capabilities, IngestStatus};
use crate::verify::{VerifyError, verified_time};

/// Attempts at fetching one block before a sync step gives up on it: a
/// transient failure (429, 5xx, timeout, garbage, a block that does not
/// verify) is retried at once with a short backoff, so one bad answer does
/// not cost a whole step. Default is 5.
pub const FETCH_ATTEMPTS: u32 = 5;

/// Longest wait before fetching a block again. A refusal's pause
/// that lasts longer ends the step instead (the follower then probes the
/// upstream until it answers: [`crate::follow::PAUSED_PROBE_EVERY`]), since
/// every attempt meanwhile would fail at once without being sent. Default
/// is 5 s.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(5);

/// How often a follower asks its upstream again what it offers, besides
/// after every failed step: a node restarted with other flags, or upgraded,
/// is noticed within this. Default is 10 minutes.
pub const REPROBE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(600);

/// Finds what the upstream offers by trying each optional method once. An
/// answer per method is definitive (a result: offered; an error object:
/// not); an exchange that failed is an error, never "offers nothing", so a
/// blip at start cannot leave every later block stored without its raw
/// data.
pub(crate) async fn probe(client: &RpcClient) -> Result<Capabilities, IngestError> {
    let calls = [
        ("eth_getBlockReceipts", json!(["0x0"])),
        ("debug_getRawHeader", json!(["0x0"])),
        ("debug_getRawBlock", json!(["0x0"])),
        ("debug_getRawReceipts", json!(["0x0"])),
    ];
    let items = client
        .batch(&calls)
        .await
        .map_err(rpc("probing the upstream's methods"))?;
    let caps = Capabilities {
        block_receipts: items[0].is_ok(),
        raw: items[1..].iter().all(Result::is_ok),
    };
    // A call refused for a limit says nothing of whether its method is
    // offered: a provider over quota answers every call so, and reading
    // that as "not offered" would store the blocks after it without their
    // raw data until the next probe (issue 42).
    let limited = items.into_iter().filter_map(Result::err).find(|e| {
        matches!(
            e,
            RpcError::Rpc {
                code: LIMIT_EXCEEDED,
                ..
            }
        )
    });
    match limited {
        Some(refused) => Err(rpc("probing the upstream's methods")(refused)),
        None => Ok(caps),
    }
}

/// EIP-1474's "limit exceeded": what providers answer a call over their
/// quota or rate with (often with HTTP 200).
const LIMIT_EXCEEDED: i64 = -32005;

/// What the upstream says about the blocks it can prove state at (its
/// `eth_capabilities`); `None` when it does not say (the method is not
/// offered, the answer has another shape, or the exchange failed).
pub(crate) async fn probe_state_window(client: &RpcClient) -> Option<neve_upstream::StateWindow> {
    let answer: Value = client.call("eth_capabilities", json!([])).await.ok()?;
    neve_upstream::StateWindow::from_capabilities(&answer)
}

/// Fetches block `height` with its receipts (and raw RLP when offered) in
/// one batch, prepares and verifies it off the async workers.
async fn fetch_once(
    client: RpcClient,
    caps: Capabilities,
    height: u64,
) -> Result<PreparedBlock, IngestError> {
    let number = quantity(height);
    let mut calls: Vec<(&str, Value)> = vec![("eth_getBlockByNumber", json!([number, true]))];
    if caps.block_receipts {
        calls.push(("eth_getBlockReceipts", json!([number])));
    }
    if caps.raw {
        for method in [
            "debug_getRawHeader",
            "debug_getRawBlock",
            "debug_getRawReceipts",
        ] {
            calls.push((method, json!([number])));
        }
    }
    let answer = client
        .send_batch(&calls)
        .await
        .map_err(rpc("fetching a block"))?;
    // Decoding the answer (megabytes for a large block) is CPU work like
    // the rest: it is done on ingest's threads, not the async workers.
    if caps.block_receipts {
        return crate::cpu::run(move || prepare_answer(height, caps, &answer, None)).await;
    }
    // Without eth_getBlockReceipts the receipts take a second exchange; the
    // block's transaction hashes are read off the async workers too.
    let (answer, hashes) = crate::cpu::run(move || {
        let hashes = transaction_hashes(height, &answer);
        (answer, hashes)
    })
    .await;
    let receipts = receipts_one_by_one(&client, &hashes?).await?;
    crate::cpu::run(move || prepare_answer(height, caps, &answer, Some(&receipts))).await
}

/// A block's batch answer (block, receipts unless given, raw parts when
/// offered) prepared and verified.
fn prepare_answer(
    height: u64,
    caps: Capabilities,
    answer: &neve_upstream::BatchAnswer,
    receipts: Option<&str>,
) -> Result<PreparedBlock, IngestError> {
    let mut items = answer.items().map_err(rpc("fetching a block"))?.into_iter();
    let block = items
        .next()
        .expect("one item per call")
        .map_err(rpc("eth_getBlockByNumber"))?;
    if block.get() == "null" {
        return Err(IngestError::Missing(height));
    }
    let receipts = match receipts {
        Some(receipts) => receipts,
        None => items
            .next()
            .expect("one item per call")
            .map_err(rpc("eth_getBlockReceipts"))?
            .get(),
    };
    let raw = if caps.raw {
        let mut next = || -> Result<Vec<u8>, IngestError> {
            let item = items
                .next()
                .expect("one item per call")
                .map_err(rpc("debug_getRaw*"))?;
            // Another neve answers null where its upstream gave no raw data.
            Ok(if item.get() == "null" {
                Vec::new()
            } else {
                item.get().as_bytes().to_vec()
            })
        };
        RawParts {
            header: next()?,
            block: next()?,
            receipts: next()?,
        }
    } else {
        RawParts::default()
    };
    prepare_verified(height, block.get(), receipts, raw)
}

/// Prepares block `height` and verifies it; any failure is a refusal. The
/// block goes one way: decoded from the answer, verified, then laid out as
/// the record to store.
pub(crate) fn prepare_verified(
    height: u64,
    full: &str,
    receipts: &str,
    raw: RawParts,
) -> Result<PreparedBlock, IngestError> {
    let refused = |reason: String| IngestError::Refused { height, reason };
    let decoded = decode(full, receipts, raw).map_err(|e: PrepareError| refused(e.to_string()))?;
    if decoded.height != height {
        return Err(refused(format!(
            "asked for {height}, got {}",
            decoded.height
        )));
    }
    let time = verified_time(&decoded).map_err(|e: VerifyError| refused(e.to_string()))?;
    let mut block = PreparedBlock::from(decoded);
    block.time = Some(time);
    Ok(block)
}

/// [`fetch_once`] with retries for transient failures; every refused block
/// is counted and logged, also when a later attempt succeeds.
pub(crate) async fn fetch_verified(
    client: RpcClient,
    caps: Capabilities,
    height: u64,
    status: Arc<IngestStatus>,
) -> Result<PreparedBlock, IngestError> {
    let mut delay = Duration::from_millis(50);
    let mut attempt = 1;
    loop {
        let error = match fetch_once(client.clone(), caps, height).await {
            Ok(block) => return Ok(block),
            Err(error) => error,
        };
        if let IngestError::Refused { height, reason } = &error {
            // Logged before it is counted: whoever sees the count can read
            // why in the log.
            tracing::warn!(height, %reason, "refused a block from the upstream");
            status.refused_blocks.fetch_add(1, Ordering::Relaxed);
        }
        // A missing block waits for the next step: the upstream is behind.
        if !error.is_transient()
            || matches!(error, IngestError::Missing(_))
            || attempt >= FETCH_ATTEMPTS
            || client
                .pacing()
                .paused_for()
                .is_some_and(|left| left > MAX_RETRY_WAIT)
        {
            return Err(error);
        }
        let asked = error.retry_after().unwrap_or_default();
        // Said every time: a slow or hung upstream costs a timeout per
        // attempt, and an operator should not wait for the last to know.
        tracing::warn!(height, attempt, %error, "fetching a block failed; retrying");
        let pause = delay.max(asked).min(MAX_RETRY_WAIT);
        tokio::time::sleep(pause + neve_upstream::jitter(pause / 4)).await;
        delay *= 2;
        attempt += 1;
    }
}

/// The transaction hashes of the block in a batch answer's first item, for
/// fetching its receipts one by one.
fn transaction_hashes(height: u64, answer: &BatchAnswer) -> Result<Vec<String>, IngestError> {
    #[derive(Deserialize)]
    struct Txs<'a> {
        #[serde(borrow)]
        transactions: Vec<TxHash<'a>>,
    }
    #[derive(Deserialize)]
    struct TxHash<'a> {
        #[serde(borrow)]
        hash: &'a str,
    }
    let items = answer.items().map_err(rpc("fetching a block"))?;
    let block = items
        .into_iter()
        .next()
        .expect("one item per call")
        .map_err(rpc("eth_getBlockByNumber"))?;
    if block.get() == "null" {
        return Err(IngestError::Missing(height));
    }
    let txs: Txs<'_> = serde_json::from_str(block.get()).map_err(|e| IngestError::Refused {
        height,
        reason: format!("block JSON: {e}"),
    })?;
    if txs
        .transactions
        .iter()
        .any(|t| fixed_hex::<32>(t.hash).is_none())
    {
        return Err(IngestError::Refused {
            height,
            reason: "transaction hash malformed".into(),
        });
    }
    Ok(txs
        .transactions
        .iter()
        .map(|t| t.hash.to_string())
        .collect())
}

/// For upstreams without `eth_getBlockReceipts`: one batch of
/// `eth_getTransactionReceipt`, joined into the array that method returns.
async fn receipts_one_by_one(client: &RpcClient, hashes: &[String]) -> Result<String, IngestError> {
    let calls: Vec<(&str, [&str; 1])> = hashes
        .iter()
        .map(|hash| ("eth_getTransactionReceipt", [hash.as_str()]))
        .collect();
    let items = client
        .batch(&calls)
        .await
        .map_err(rpc("eth_getTransactionReceipt"))?;
    let mut out = String::from("[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item.map_err(rpc("eth_getTransactionReceipt"))?.get());
    }
    out.push(']');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ok, upstream};

    /// Issue 42: a provider over quota refuses each call of the probe with
    /// -32005; that is a failed probe (the capabilities known are kept),
    /// not four methods found missing. A method refused as unknown is.
    #[tokio::test]
    async fn a_probe_refused_for_a_limit_is_a_failed_probe_not_methods_missing() {
        let refusing = |code: i64| {
            move |_: &str| {
                let item = |id: u64| {
                    format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":"no"}}}}"#
                    )
                };
                ok(&format!(
                    "[{}]",
                    (0..4).map(item).collect::<Vec<_>>().join(",")
                ))
            }
        };
        let (url, _) = upstream(refusing(-32005)).await;
        let refused = probe(&RpcClient::new(&url).unwrap()).await;
        assert!(
            matches!(
                refused,
                Err(IngestError::Rpc {
                    source: RpcError::Rpc { code: -32005, .. },
                    ..
                })
            ),
            "{refused:?}"
        );
        let (url, _) = upstream(refusing(-32601)).await;
        let found = probe(&RpcClient::new(&url).unwrap()).await.unwrap();
        assert_eq!(found, Capabilities::default());
    }
}
