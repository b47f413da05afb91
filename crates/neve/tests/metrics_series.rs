//! `/metrics` of a live neve following geth shows exactly the series it
//! showed when its text was written by hand: the same names, label names
//! and metric types, in Prometheus' text format (0.0.4), which the
//! dashboard and the alerts query.

mod support;

use std::collections::BTreeSet;

use neve_upstream::RpcClient;
use serde_json::json;
use support::*;

/// Every family's name and type, as its `# TYPE` line says.
const TYPES: &str = "neve_build_info gauge
neve_call_duration_seconds histogram
neve_call_gas_total counter
neve_call_memo_bytes gauge
neve_call_memo_stored_total counter
neve_calls_queued gauge
neve_calls_refused_total counter
neve_calls_total counter
neve_events_watcher_restarts_total counter
neve_http_batch_too_large_total counter
neve_http_body_too_large_total counter
neve_http_connections gauge
neve_http_connections_refused_total counter
neve_http_max_connections gauge
neve_http_rate_limited_total counter
neve_http_shed_total counter
neve_ingest_appended_blocks_total counter
neve_ingest_follower_restarts_total counter
neve_ingest_follower_up gauge
neve_ingest_refused_blocks_total counter
neve_ingest_reorgs_total counter
neve_ingest_upstream_connected gauge
neve_ingest_upstream_head gauge
neve_logs_scans_queued gauge
neve_logs_scans_refused_total counter
neve_rpc_duration_seconds histogram
neve_rpc_requests_total counter
neve_state_evictions_total counter
neve_state_fetch_failures_total counter
neve_state_fetch_shed_total counter
neve_state_fetched_total counter
neve_state_hits_total counter
neve_state_misses_total counter
neve_state_node_budget_bytes gauge
neve_state_node_bytes gauge
neve_state_node_entries gauge
neve_state_post_state_overlay_fetches_total counter
neve_state_post_state_overlays_total counter
neve_state_post_state_waits_total counter
neve_state_post_states_kept_total counter
neve_state_post_states_unkept_total counter
neve_state_post_states_unlike_total counter
neve_state_prefetch_calls_total counter
neve_state_refresh_calls_total counter
neve_state_refreshed_blocks_total counter
neve_state_refused_proofs_total counter
neve_state_upstream_calls_total counter
neve_state_witness_bytes gauge
neve_state_witness_entries_dropped_total counter
neve_state_witnesses_fetched_total counter
neve_state_witnesses_held gauge
neve_state_witnesses_refused_total counter
neve_store_bytes gauge
neve_store_cold_answer_bytes gauge
neve_store_cold_reads_queued gauge
neve_store_cold_reads_refused_total counter
neve_store_cold_reads_total counter
neve_store_corrupt_reads_total counter
neve_store_max_height gauge
neve_store_min_height gauge
neve_store_resident_bytes gauge
neve_store_resident_ratio gauge
neve_store_retain_blocks gauge
neve_store_retain_bytes gauge
neve_store_segments gauge
neve_store_write_failing gauge
neve_trace_answers_along_total counter
neve_trace_blocks_prepared_total counter
neve_trace_flights_shared_total counter
neve_trace_flights_waited_out_total counter
neve_trace_memo_bytes gauge
neve_trace_memo_hits_total counter
neve_trace_memo_stored_total counter
neve_trace_proofs_ahead_total counter
neve_trace_replays_diverged_total counter
neve_upstream_budget_requests_per_second gauge
neve_upstream_max_batch gauge
neve_upstream_paused gauge
neve_upstream_refusals_total counter
neve_upstream_requests_total counter
neve_upstream_wait_seconds_total counter";

/// Every series: its name and its label names (sorted), `eth_blockNumber`
/// being the one method called.
const SERIES: &str = "neve_build_info{built,commit,version}
neve_call_duration_seconds_bucket{le}
neve_call_duration_seconds_count
neve_call_duration_seconds_sum
neve_call_gas_total
neve_call_memo_bytes
neve_call_memo_stored_total
neve_calls_queued
neve_calls_refused_total
neve_calls_total{outcome}
neve_events_watcher_restarts_total
neve_http_batch_too_large_total
neve_http_body_too_large_total
neve_http_connections
neve_http_connections_refused_total
neve_http_max_connections
neve_http_rate_limited_total
neve_http_shed_total
neve_ingest_appended_blocks_total
neve_ingest_follower_restarts_total
neve_ingest_follower_up
neve_ingest_refused_blocks_total
neve_ingest_reorgs_total
neve_ingest_upstream_connected
neve_ingest_upstream_head
neve_logs_scans_queued
neve_logs_scans_refused_total
neve_rpc_duration_seconds_bucket{le,method}
neve_rpc_duration_seconds_count{method}
neve_rpc_duration_seconds_sum{method}
neve_rpc_requests_total{method,outcome}
neve_state_evictions_total
neve_state_fetch_failures_total
neve_state_fetch_shed_total
neve_state_fetched_total
neve_state_hits_total
neve_state_misses_total
neve_state_node_budget_bytes
neve_state_node_bytes
neve_state_node_entries
neve_state_post_state_overlay_fetches_total
neve_state_post_state_overlays_total
neve_state_post_state_waits_total
neve_state_post_states_kept_total
neve_state_post_states_unkept_total
neve_state_post_states_unlike_total
neve_state_prefetch_calls_total
neve_state_refresh_calls_total
neve_state_refreshed_blocks_total
neve_state_refused_proofs_total
neve_state_upstream_calls_total
neve_state_witness_bytes
neve_state_witness_entries_dropped_total
neve_state_witnesses_fetched_total
neve_state_witnesses_held
neve_state_witnesses_refused_total
neve_store_bytes
neve_store_cold_answer_bytes
neve_store_cold_reads_queued
neve_store_cold_reads_refused_total
neve_store_cold_reads_total
neve_store_corrupt_reads_total
neve_store_max_height
neve_store_min_height
neve_store_resident_bytes
neve_store_resident_ratio
neve_store_retain_blocks
neve_store_retain_bytes
neve_store_segments
neve_store_write_failing
neve_trace_answers_along_total
neve_trace_blocks_prepared_total
neve_trace_flights_shared_total
neve_trace_flights_waited_out_total
neve_trace_memo_bytes
neve_trace_memo_hits_total
neve_trace_memo_stored_total
neve_trace_proofs_ahead_total
neve_trace_replays_diverged_total
neve_upstream_budget_requests_per_second
neve_upstream_max_batch
neve_upstream_paused
neve_upstream_refusals_total
neve_upstream_requests_total
neve_upstream_wait_seconds_total";

/// A sample line's series: its name and sorted label names, `{a,b}`.
fn series_of(line: &str) -> String {
    let sample = line.rsplit_once(' ').expect("a value after the series").0;
    let Some((name, labels)) = sample.split_once('{') else {
        return sample.to_string();
    };
    let names: BTreeSet<&str> = labels
        .trim_end_matches('}')
        .split(',')
        .map(|pair| pair.split_once('=').expect("label=\"value\"").0)
        .collect();
    format!(
        "{name}{{{}}}",
        names.into_iter().collect::<Vec<_>>().join(",")
    )
}

fn lines(list: &str) -> BTreeSet<String> {
    list.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_show_every_series_of_before() {
    let (geth, head) = dev_chain_of(2).await;
    let neve = Neve::start(geth.http_url(), &["--floor", "0"], head).await;
    let client = RpcClient::new(&neve.url).unwrap();
    answer(&client, "eth_blockNumber", json!([])).await;
    let (status, text) = neve.get("/metrics").unwrap();
    assert_eq!(status, 200);
    let types: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(str::to_string)
        .collect();
    let series: BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(series_of)
        .collect();
    assert_eq!(types, lines(TYPES), "{text}");
    assert_eq!(series, lines(SERIES), "{text}");
    assert!(
        text.contains("\nneve_rpc_requests_total{method=\"eth_blockNumber\",outcome=\"ok\"} "),
        "{text}"
    );
}
