//! The serving metrics' text, against what the hand-written text said
//! before a library encoded it: the same series, labels, types and help.

use super::*;

/// What `/metrics` showed of the serving side for [`scenario`] when its
/// text was written by hand.
const BEFORE: &str = r#"# HELP neve_rpc_requests_total JSON-RPC calls by method and outcome (ok, miss = HTTP 421, error).
# TYPE neve_rpc_requests_total counter
neve_rpc_requests_total{method="eth_chainId",outcome="ok"} 1
neve_rpc_requests_total{method="eth_chainId",outcome="miss"} 1
# HELP neve_rpc_duration_seconds Time to answer one call, from parsed request to prepared response.
# TYPE neve_rpc_duration_seconds histogram
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.00005"} 0
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.0001"} 1
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.00025"} 1
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.0005"} 1
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.001"} 1
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.0025"} 1
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.005"} 2
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.01"} 2
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.025"} 2
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.1"} 2
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="0.5"} 2
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="2.5"} 2
neve_rpc_duration_seconds_bucket{method="eth_chainId",le="+Inf"} 2
neve_rpc_duration_seconds_sum{method="eth_chainId"} 0.00307
neve_rpc_duration_seconds_count{method="eth_chainId"} 2
# HELP neve_http_body_too_large_total Requests refused with 413.
# TYPE neve_http_body_too_large_total counter
neve_http_body_too_large_total 0
# HELP neve_http_batch_too_large_total Batches refused for exceeding the element limit.
# TYPE neve_http_batch_too_large_total counter
neve_http_batch_too_large_total 0
# HELP neve_http_connections_refused_total Connections refused with 503 at the connection limit.
# TYPE neve_http_connections_refused_total counter
neve_http_connections_refused_total 0
# HELP neve_http_rate_limited_total Requests refused with 429: their address was over --client-rate.
# TYPE neve_http_rate_limited_total counter
neve_http_rate_limited_total 0
# HELP neve_http_shed_total Requests answered 503 while more than --max-behind blocks behind (--shed-when-behind).
# TYPE neve_http_shed_total counter
neve_http_shed_total 0
# HELP neve_logs_scans_refused_total eth_getLogs queries refused with -32005: the scan threads' queue was full.
# TYPE neve_logs_scans_refused_total counter
neve_logs_scans_refused_total 0
# HELP neve_logs_scans_queued Requests' log scans waiting for or running on the scan threads.
# TYPE neve_logs_scans_queued gauge
neve_logs_scans_queued 0
# HELP neve_http_connections Open connections.
# TYPE neve_http_connections gauge
neve_http_connections 3
# HELP neve_store_cold_reads_total Calls answered on the I/O threads because the records they read were not in memory.
# TYPE neve_store_cold_reads_total counter
neve_store_cold_reads_total 0
# HELP neve_store_cold_reads_refused_total Cold reads answered 421 at once: the I/O threads' queue was full.
# TYPE neve_store_cold_reads_refused_total counter
neve_store_cold_reads_refused_total 0
# HELP neve_store_cold_reads_queued Requests' cold reads waiting for or running on the I/O threads.
# TYPE neve_store_cold_reads_queued gauge
neve_store_cold_reads_queued 0
# HELP neve_calls_queued Calls (eth_call, eth_estimateGas, traces; a trace's block parsed while its witness is fetched) waiting for or running on the call threads.
# TYPE neve_calls_queued gauge
neve_calls_queued 0
# HELP neve_calls_refused_total Calls answered 421 at once: the call threads' queue was full.
# TYPE neve_calls_refused_total counter
neve_calls_refused_total 0
# HELP neve_store_cold_answer_bytes Bytes of answers read from the disk and not yet written out.
# TYPE neve_store_cold_answer_bytes gauge
neve_store_cold_answer_bytes 0
# HELP neve_store_resident_bytes Bytes of stored records in memory (the page cache), estimated from a sample of their pages every 10 s.
# TYPE neve_store_resident_bytes gauge
neve_store_resident_bytes 0
# HELP neve_events_watcher_restarts_total Chain-event watchers (subscriptions' source) restarted after a panic.
# TYPE neve_events_watcher_restarts_total counter
neve_events_watcher_restarts_total 0
# HELP neve_store_resident_ratio Fraction of the stored records in memory, from the last sample.
# TYPE neve_store_resident_ratio gauge
neve_store_resident_ratio 0.25
# HELP neve_calls_total Calls (eth_call, eth_estimateGas, eth_createAccessList) by how they were answered: memo (a kept answer at the same block, not executed), local (executed on held state), fetched (executed after fetching state), miss (421).
# TYPE neve_calls_total counter
neve_calls_total{outcome="memo"} 4
neve_calls_total{outcome="local"} 0
neve_calls_total{outcome="fetched"} 1
neve_calls_total{outcome="miss"} 0
# HELP neve_call_gas_total Gas executed calls used: every run, however it ended (an answer, an error, a miss), a call's, every probe of an estimate's search, every run of an access list's making; and the fee methods' blocks read, as gas (what --client-rate charges).
# TYPE neve_call_gas_total counter
neve_call_gas_total 21000
# HELP neve_call_memo_stored_total Calls' answers kept in the memo.
# TYPE neve_call_memo_stored_total counter
neve_call_memo_stored_total 5
# HELP neve_call_memo_bytes Bytes of calls' answers kept in the memo, keys and overhead counted (at most --call-memo-bytes).
# TYPE neve_call_memo_bytes gauge
neve_call_memo_bytes 640
# HELP neve_call_duration_seconds Time from a call's hand-off to the call threads to its answer, fetches between runs included.
# TYPE neve_call_duration_seconds histogram
neve_call_duration_seconds_bucket{le="0.00005"} 0
neve_call_duration_seconds_bucket{le="0.0001"} 0
neve_call_duration_seconds_bucket{le="0.00025"} 0
neve_call_duration_seconds_bucket{le="0.0005"} 0
neve_call_duration_seconds_bucket{le="0.001"} 1
neve_call_duration_seconds_bucket{le="0.0025"} 1
neve_call_duration_seconds_bucket{le="0.005"} 1
neve_call_duration_seconds_bucket{le="0.01"} 1
neve_call_duration_seconds_bucket{le="0.025"} 1
neve_call_duration_seconds_bucket{le="0.1"} 1
neve_call_duration_seconds_bucket{le="0.5"} 1
neve_call_duration_seconds_bucket{le="2.5"} 1
neve_call_duration_seconds_bucket{le="+Inf"} 1
neve_call_duration_seconds_sum 0.001
neve_call_duration_seconds_count 1
"#;

/// One call answered and one missed of the first method, one call
/// executed after a fetch, a few gauges set.
fn scenario() -> (Metrics, MemoCounts) {
    let metrics = Metrics::default();
    metrics.record(0, Outcome::Ok, Duration::from_micros(70));
    metrics.record(0, Outcome::Miss, Duration::from_millis(3));
    metrics.record_call(CallEnd::Fetched, Duration::from_millis(1));
    metrics.record_call_gas(21000);
    metrics.connections.store(3, Ordering::Relaxed);
    metrics.store_resident_ppm.store(250_000, Ordering::Relaxed);
    (
        metrics,
        MemoCounts {
            hits: 4,
            stored: 5,
            bytes: 640,
        },
    )
}

#[test]
fn the_encoded_text_is_the_hand_written_one() {
    let (metrics, memo) = scenario();
    let text = family::encode(metrics.families(memo));
    assert_eq!(text, BEFORE);
}

/// A method never called has no samples; its families' header lines
/// go with them, and the encoder still writes the rest.
#[test]
fn families_without_samples_are_left_out() {
    let text = family::encode(Metrics::default().families(MemoCounts::default()));
    assert!(!text.contains("neve_rpc_requests_total"), "{text}");
    assert!(!text.contains("neve_rpc_duration_seconds"), "{text}");
    assert!(text.contains("\nneve_http_connections 0\n"), "{text}");
    assert!(
        text.contains("neve_call_duration_seconds_count 0\n"),
        "{text}"
    );
}

#[test]
fn label_values_are_escaped_by_the_encoder() {
    let family = family::family(
        "neve_test_total",
        "A test.",
        MetricType::COUNTER,
        vec![sample(MetricType::COUNTER, &[("method", "a\"b\\c")], 1.0)],
    );
    assert_eq!(
        family::encode(vec![family]),
        "# HELP neve_test_total A test.\n# TYPE neve_test_total counter\nneve_test_total{method=\"a\\\"b\\\\c\"} 1\n"
    );
}
