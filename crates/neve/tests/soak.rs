//! Soak: neve follows geth while blocks keep coming and readers keep it
//! saturated, for `NEVE_SOAK_SECONDS` (default 120: the suite's run;
//! `scripts/soak.sh` runs an hour). Anonymous RSS, sampled every 10 s,
//! stays flat after warm-up; no read gets anything but 200; a final sample
//! of blocks and receipts equals geth's.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use neve_upstream::RpcClient;
use serde_json::{Value, json};
use support::*;

/// Readers hammering neve at once.
const READERS: usize = 16;
/// RSS samples are this far apart.
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread")]
async fn neve_stays_flat_and_right_under_sustained_reads_and_blocks() {
    let seconds: u64 = std::env::var("NEVE_SOAK_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120);
    let (geth, head) = chain_with_logs().await;
    let neve = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", geth.ws_url()],
        head,
    )
    .await;
    let duration = Duration::from_secs(seconds);

    // Blocks keep coming for the whole run.
    let mut trickle = neve_load::LoadConfig::new(geth.http_url(), duration);
    trickle.accounts = 4;
    trickle.tps = Some(20);
    let load = tokio::spawn(neve_load::run(trickle, |_| {}));

    // Readers: numbered heights within what neve holds (never `latest`,
    // which is a 421 whenever neve is a block behind), transactions by
    // hash, receipts, and logs over short ranges.
    let stored = Arc::new(AtomicU64::new(head));
    let stop = Arc::new(AtomicBool::new(false));
    let geth_client = RpcClient::new(geth.http_url()).unwrap();
    let tx_hashes: Vec<String> = blocks(&geth_client)
        .await
        .iter()
        .flat_map(|b| b["transactions"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["hash"].as_str().map(String::from))
        .take(2000)
        .collect();
    let tx_hashes = Arc::new(tx_hashes);
    let readers: Vec<_> = (0..READERS)
        .map(|reader| {
            let (url, stored, stop, tx_hashes) = (
                neve.url.clone(),
                stored.clone(),
                stop.clone(),
                tx_hashes.clone(),
            );
            tokio::spawn(async move {
                let client = RpcClient::new(&url).unwrap();
                let (mut ok, mut unexpected) = (0u64, Vec::new());
                let mut i = reader as u64 * 7919;
                while !stop.load(Ordering::Relaxed) {
                    i = i
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let max = stored.load(Ordering::Relaxed);
                    let height = format!("0x{:x}", (i >> 33) % (max + 1));
                    let (method, params) = match (i >> 20) % 5 {
                        0 => ("eth_getBlockByNumber", json!([height, false])),
                        1 => ("eth_getBlockByNumber", json!([height, true])),
                        2 => ("eth_getBlockReceipts", json!([height])),
                        3 => (
                            "eth_getTransactionReceipt",
                            json!([tx_hashes[(i >> 40) as usize % tx_hashes.len()]]),
                        ),
                        _ => (
                            "eth_getLogs",
                            json!([{"fromBlock": height, "toBlock": height}]),
                        ),
                    };
                    let body = json!({"jsonrpc":"2.0","id":1,"method":method,"params":params});
                    match client.post(body.to_string().into()).await {
                        Ok((status, _)) if status.as_u16() == 200 => ok += 1,
                        Ok((status, answer)) => unexpected.push(format!(
                            "{status} for {method} {params}: {}",
                            String::from_utf8_lossy(&answer)
                        )),
                        Err(error) => unexpected.push(format!("{method} {params}: {error}")),
                    }
                }
                (ok, unexpected)
            })
        })
        .collect();

    let began = Instant::now();
    let warm_up = (duration / 4).max(Duration::from_secs(20));
    let mut samples: Vec<(f64, u64)> = Vec::new();
    while began.elapsed() < duration {
        tokio::time::sleep(SAMPLE_EVERY.min(duration.saturating_sub(began.elapsed()))).await;
        if let Some(max) = neve
            .health()
            .and_then(|h| h["blocks"]["max_contiguous_height"].as_u64())
        {
            stored.store(max, Ordering::Relaxed);
        }
        samples.push((began.elapsed().as_secs_f64(), neve.rss_anon_bytes()));
    }
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut unexpected) = (0, Vec::new());
    for reader in readers {
        let (o, u) = reader.await.unwrap();
        ok += o;
        unexpected.extend(u);
    }
    let report = load.await.unwrap().expect("load");

    let line: Vec<String> = samples
        .iter()
        .map(|(t, rss)| format!("{t:.0}s {:.1}", *rss as f64 / (1 << 20) as f64))
        .collect();
    eprintln!(
        "soak {seconds} s: {ok} reads ({:.0}/s), {} unexpected; anonymous RSS MiB by time: {}",
        ok as f64 / duration.as_secs_f64(),
        unexpected.len(),
        line.join(", ")
    );
    assert!(
        unexpected.is_empty(),
        "{} unexpected answers, first: {}",
        unexpected.len(),
        unexpected[0]
    );
    // Flat after warm-up: within 10 % of the first sample after it (or
    // 2 MiB, the allocator's granularity at these sizes).
    let after: Vec<u64> = samples
        .iter()
        .filter(|(t, _)| *t >= warm_up.as_secs_f64())
        .map(|(_, rss)| *rss)
        .collect();
    if let (Some(first), Some(max)) = (after.first(), after.iter().max()) {
        let grew = max.saturating_sub(*first);
        assert!(
            grew * 10 <= *first || grew <= 2 << 20,
            "anonymous RSS grew {:.1} MiB after warm-up: {}",
            grew as f64 / (1 << 20) as f64,
            line.join(", ")
        );
    }

    // A final differential sample: neve holds what geth has.
    neve.wait_for_height(report.last_block, Duration::from_secs(60))
        .await;
    let neve_client = RpcClient::new(&neve.url).unwrap();
    let last = report.last_block;
    for k in 0..40u64 {
        let height = format!("0x{:x}", k * 7919 % (last + 1));
        for (method, params) in [
            ("eth_getBlockByNumber", json!([height, true])),
            ("eth_getBlockReceipts", json!([height])),
        ] {
            let a: Value = answer(&neve_client, method, params.clone()).await;
            let b: Value = answer(&geth_client, method, params.clone()).await;
            assert_eq!(a, b, "{method} {params}");
        }
    }
    drop(geth);
}
