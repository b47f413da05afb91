//! `/health`, `/health/ready` and `/metrics`: what an operator and a load
//! balancer read, the state figures the last two share, and how far behind
//! the upstream this mirror is (which `--shed-when-behind` sheds on).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use hyper::{Response, StatusCode};

use crate::body::Chunks;
use crate::errors::ErrorCode;
use crate::metrics::family::{CONTENT_TYPE, encode, figure};

use super::admission::refused_unread;
use super::{Server, response};

impl Server {
    /// The state layer's figures, once for both `/metrics` and `/health`:
    /// (metric name, `/health` key, help, value). Empty when the layer is off.
    pub(crate) fn state_figures(&self) -> Vec<(&'static str, &'static str, &'static str, u64)> {
        let Some(state) = &self.ctx.state else {
            return Vec::new();
        };
        let s = state.stats();
        let w = state.witnesses.stats();
        vec![
            (
                "neve_state_hits_total",
                "hits",
                "State reads answered from held nodes at once.",
                s.hits,
            ),
            (
                "neve_state_fetched_total",
                "fetched",
                "State reads answered after fetching through.",
                s.fetched,
            ),
            (
                "neve_state_misses_total",
                "misses",
                "State reads answered 421.",
                s.misses,
            ),
            (
                "neve_state_refused_proofs_total",
                "refused_proofs",
                "Proofs or code refused because they did not verify.",
                s.refused,
            ),
            (
                "neve_state_fetch_failures_total",
                "fetch_failures",
                "Fetches that failed (upstream error or timeout).",
                s.fetch_failures,
            ),
            (
                "neve_state_fetch_shed_total",
                "fetch_shed",
                "Fetches not started: too many in flight.",
                s.shed,
            ),
            (
                "neve_state_upstream_calls_total",
                "upstream_calls",
                "Upstream calls made to fetch through.",
                s.upstream_calls,
            ),
            (
                "neve_state_prefetch_calls_total",
                "prefetch_calls",
                "Upstream calls made by prefetch.",
                s.prefetch_calls,
            ),
            (
                "neve_state_refreshed_blocks_total",
                "refreshed_blocks",
                "Blocks whose touched keys were proved at their root.",
                s.refreshed_blocks,
            ),
            (
                "neve_state_refresh_calls_total",
                "refresh_calls",
                "Upstream calls made to refresh per block (touched keys and their proofs), part of prefetch's.",
                s.refresh_calls,
            ),
            (
                "neve_state_post_states_kept_total",
                "post_states_kept",
                "Replayed blocks whose post-state hashed to their verified stateRoot and was kept as state.",
                s.post_states_kept,
            ),
            (
                "neve_state_post_states_unkept_total",
                "post_states_unkept",
                "Replayed blocks whose post-state was not kept (a node not held, a bound, a root unlike the header's).",
                s.post_states_unkept,
            ),
            (
                "neve_state_post_states_unlike_total",
                "post_states_unlike",
                "Replayed blocks whose post-state root was unlike their header's (a fault, logged once).",
                s.post_states_unlike,
            ),
            (
                "neve_state_post_state_waits_total",
                "post_state_waits",
                "Replays that waited for their parent's post-state being computed (at most 1 s a call) rather than fetch what it was about to hold.",
                s.post_state_waits,
            ),
            (
                "neve_state_post_state_overlays_total",
                "post_state_overlays",
                "Replays whose first run read their parent's post-state as its replay left it, while it was being proved, to learn what to fetch (never an answer).",
                s.post_state_overlays,
            ),
            (
                "neve_state_post_state_overlay_fetches_total",
                "post_state_overlay_fetches",
                "Of those runs, the ones that named state to fetch (fetched beside the proving rather than after it).",
                s.post_state_overlay_fetches,
            ),
            (
                "neve_state_node_bytes",
                "node_bytes",
                "Bytes held by the node store.",
                s.nodes.bytes,
            ),
            (
                "neve_state_node_entries",
                "node_entries",
                "Trie nodes and code blobs held.",
                s.nodes.entries,
            ),
            (
                "neve_state_node_budget_bytes",
                "node_budget_bytes",
                "The node store's byte budget.",
                s.nodes.budget,
            ),
            (
                "neve_state_evictions_total",
                "evictions",
                "Nodes dropped to stay under the budget.",
                s.nodes.evicted,
            ),
            (
                "neve_state_witnesses_fetched_total",
                "witnesses_fetched",
                "Execution witnesses fetched from the upstream and verified.",
                w.fetched,
            ),
            (
                "neve_state_witnesses_refused_total",
                "witnesses_refused",
                "Execution witnesses refused: malformed, or headers not the block's ancestors.",
                w.refused,
            ),
            (
                "neve_state_witness_entries_dropped_total",
                "witness_entries_dropped",
                "Nodes and codes in witnesses that no path from the parent's root reached.",
                w.dropped,
            ),
            (
                "neve_state_witnesses_held",
                "witnesses_held",
                "Execution witnesses kept to serve mirrors.",
                w.held,
            ),
            (
                "neve_state_witness_bytes",
                "witness_bytes",
                "Bytes of the execution witnesses kept (--witness-bytes).",
                w.bytes,
            ),
        ]
    }

    /// The state layer for `/health`: `null` when off.
    pub(crate) fn state_health(&self) -> String {
        if self.ctx.state.is_none() {
            return "null".into();
        }
        let members: Vec<String> = self
            .state_figures()
            .into_iter()
            .map(|(_, key, _, value)| format!("\"{key}\":{value}"))
            .collect();
        format!("{{{}}}", members.join(","))
    }

    pub(crate) fn behind(&self) -> Option<u64> {
        let max = self.ctx.reader.stats().max_contiguous_height?;
        Some(self.ctx.chain.upstream_head()?.saturating_sub(max))
    }

    /// With `--shed-when-behind`, how far behind the upstream this mirror
    /// is while that is more than `--max-behind` (catching up); `None`
    /// otherwise, and while the upstream's head is unknown: a mirror that
    /// cannot see its upstream keeps serving what it holds.
    pub(crate) fn shedding(&self) -> Option<u64> {
        if !self.ctx.config.shed_when_behind {
            return None;
        }
        self.behind()
            .filter(|behind| *behind > self.ctx.config.max_behind)
    }

    /// 503 with `Retry-After: 1` and -32001, the body unread and the
    /// connection closed: nginx's `proxy_next_upstream http_503` retries the
    /// call on the next mirror and takes this one out for its
    /// `fail_timeout`.
    pub(crate) fn shed(&self, behind: u64) -> Response<Chunks> {
        self.metrics.shed.fetch_add(1, Ordering::Relaxed);
        let message = format!(
            "catching up: {behind} blocks behind the upstream (--shed-when-behind); ask another mirror"
        );
        refused_unread(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Unavailable,
            &message,
            1,
        )
    }

    /// `/metrics`: the serving metrics, the build's and ingest's, the
    /// store's figures and the state layer's, in Prometheus text.
    pub(super) fn metrics_page(&self) -> Response<Chunks> {
        let mut families = self.metrics.families(self.ctx.call_answers.counts());
        families.extend(self.ctx.chain.metric_families());
        let state = self
            .state_figures()
            .into_iter()
            .map(|(name, _, help, value)| (name, help, value));
        families.extend(
            self.store_figures()
                .into_iter()
                .chain(self.trace_figures())
                .chain(state)
                .map(|(name, help, value)| figure(name, help, value as f64)),
        );
        response(
            StatusCode::OK,
            CONTENT_TYPE,
            Chunks::new(vec![Bytes::from(encode(families))]),
        )
    }

    /// (name, help, value) of the traces' figures: the memo's and the
    /// replays that were not the chain's.
    fn trace_figures(&self) -> [(&'static str, &'static str, u64); 9] {
        let memo = self.ctx.trace_answers.counts();
        [
            (
                "neve_trace_memo_bytes",
                "Bytes of traces' answers kept in the memo, keys and overhead counted (at most --trace-memo-bytes).",
                memo.bytes,
            ),
            (
                "neve_trace_memo_hits_total",
                "Traces answered from the memo, without a replay.",
                memo.hits,
            ),
            (
                "neve_trace_memo_stored_total",
                "Traces kept in the memo.",
                memo.stored,
            ),
            (
                "neve_trace_replays_diverged_total",
                "Replays of a block that did not reproduce its verified receipts (answered 421, logged).",
                self.ctx
                    .replays_diverged
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            (
                "neve_trace_answers_along_total",
                "Traces of a whole block made by another configuration's replay of it, for the configurations clients trace blocks with lately, and kept in the memo.",
                self.ctx
                    .answers_along
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            (
                "neve_trace_blocks_prepared_total",
                "Blocks whose transactions and receipts were parsed for a replay while the node made the block's witness.",
                self.ctx
                    .blocks_prepared
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            (
                "neve_trace_proofs_ahead_total",
                "Accounts a block's transactions name that its parent's state did not hold, proved at the parent's root while the parent was traced (ahead of a client tracing the chain block by block).",
                self.ctx.proofs_ahead.accounts(),
            ),
            (
                "neve_trace_flights_shared_total",
                "Traces answered with an identical trace's answer, in flight at once (one replay).",
                self.flights
                    .shared
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            (
                "neve_trace_flights_waited_out_total",
                "Traces that waited for an identical one in flight and got no answer from it (the memo's, or a run of their own).",
                self.flights
                    .waited_out
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
        ]
    }

    /// (name, help, value) of the store's figures and the limits it and
    /// the listener are kept under, for `/metrics`.
    fn store_figures(&self) -> [(&'static str, &'static str, u64); 9] {
        let stats = self.ctx.reader.stats();
        [
            ("neve_store_bytes", "Bytes of segment files.", stats.bytes),
            (
                "neve_store_segments",
                "Segment files.",
                stats.segments as u64,
            ),
            (
                "neve_store_min_height",
                "Lowest stored height.",
                stats.min_height.unwrap_or(0),
            ),
            (
                "neve_store_max_height",
                "Highest stored height.",
                stats.max_contiguous_height.unwrap_or(0),
            ),
            (
                "neve_store_corrupt_reads_total",
                "Reads answered as misses because a record failed its checksum.",
                stats.corrupt_reads,
            ),
            (
                "neve_http_max_connections",
                "Most open connections on the public listener (--max-connections).",
                self.ctx.config.max_connections as u64,
            ),
            (
                "neve_store_retain_blocks",
                "Newest blocks the store keeps (--retain-blocks); 0: all.",
                self.ctx.config.retain_blocks.unwrap_or(0),
            ),
            (
                "neve_store_retain_bytes",
                "Bytes the store is kept under (--retain-bytes); 0: no byte budget.",
                self.ctx.config.retain_bytes.unwrap_or(0),
            ),
            (
                "neve_store_write_failing",
                "1 while writing to the store fails (a full disk): what is stored is served, nothing new arrives.",
                self.ctx.chain.store_write_error().is_some() as u64,
            ),
        ]
    }

    pub(crate) fn ready(&self) -> Response<Chunks> {
        let upstream = self.ctx.chain.upstream_health();
        let fresh = upstream
            .last_contact_age_seconds
            .is_some_and(|age| age < 30.0);
        let ready = !self.shutting_down.load(Ordering::Relaxed)
            && self.ctx.chain.following()
            && upstream.connected
            && fresh
            && self
                .behind()
                .is_some_and(|behind| behind <= self.ctx.config.max_behind);
        let (status, text) = if ready {
            (StatusCode::OK, "ready\n")
        } else {
            (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
        };
        response(
            status,
            "text/plain",
            Chunks::new(vec![Bytes::from_static(text.as_bytes())]),
        )
    }

    pub(crate) fn health(&self) -> String {
        let stats = self.ctx.reader.stats();
        let memory = Memory::now();
        let upstream = self.ctx.chain.upstream_health();
        let opt = |v: Option<u64>| v.map_or("null".to_string(), |v| v.to_string());
        let optf = |v: Option<f64>| v.map_or("null".to_string(), |v| format!("{v:.3}"));
        let behind = self.behind();
        let status = if self.shutting_down.load(Ordering::Relaxed) {
            "stopping"
        } else if stats.max_contiguous_height.is_none() {
            "starting"
        } else if behind.is_some_and(|b| b > self.ctx.config.max_behind)
            || !upstream.connected
            || !self.ctx.chain.following()
            || self.ctx.chain.store_write_error().is_some()
        {
            "degraded"
        } else {
            "ok"
        };
        let chain_id = std::str::from_utf8(&self.ctx.net_version)
            .unwrap_or("\"0\"")
            .trim_matches('"')
            .to_string();
        format!(
            "{{\"status\":\"{status}\",\"chain_id\":{chain_id},\"genesis_hash\":\"0x{}\",\"version\":\"{}\",\"uptime_seconds\":{:.0},\
             \"blocks\":{{\"min_height\":{},\"max_contiguous_height\":{},\"high_water\":{},\"safe\":{},\"finalized\":{},\"behind\":{}}},\
             \"upstream\":{{\"url\":{},\"connected\":{},\"head\":{},\"last_contact_age_seconds\":{},\"last_block_age_seconds\":{},\"last_error\":{},\"raw_data\":{},\"waiting\":{}}},\
             \"follower\":{{\"running\":{},\"restarts\":{}}},\
             \"storage\":{{\"bytes\":{},\"segments\":{},\"retain_blocks\":{},\"corrupt_reads\":{},\"write_error\":{},\"resident_bytes\":{},\"resident_fraction\":{:.3}}},\
             \"state\":{},\"memory\":{{\"rss_bytes\":{},\"anonymous_bytes\":{},\"file_bytes\":{}}}}}",
            self.ctx.genesis_hash,
            env!("CARGO_PKG_VERSION"),
            self.started.elapsed().as_secs_f64(),
            opt(stats.min_height),
            opt(stats.max_contiguous_height),
            opt(stats.high_water),
            opt(self.ctx.chain.safe()),
            opt(self.ctx.chain.finalized()),
            opt(behind),
            serde_json::to_string(upstream.url.as_str()).expect("strings serialise"),
            upstream.connected,
            opt(self.ctx.chain.upstream_head()),
            optf(upstream.last_contact_age_seconds),
            optf(upstream.last_block_age_seconds),
            serde_json::to_string(&upstream.last_error).expect("strings serialise"),
            upstream.raw_data.map_or("null".into(), |b| b.to_string()),
            serde_json::to_string(&upstream.waiting).expect("strings serialise"),
            self.ctx.chain.following(),
            self.ctx.chain.follower_restarts(),
            stats.bytes,
            stats.segments,
            opt(self.ctx.config.retain_blocks),
            stats.corrupt_reads,
            serde_json::to_string(&self.ctx.chain.store_write_error()).expect("strings serialise"),
            self.metrics.store_resident_bytes.load(Ordering::Relaxed),
            self.metrics.store_resident_ppm.load(Ordering::Relaxed) as f64 / 1e6,
            self.state_health(),
            opt(memory.rss),
            opt(memory.anonymous),
            opt(memory.file),
        )
    }
}

/// This process's resident memory, from `/proc/self/status` (one small
/// read): anonymous (the heap) apart from file-backed (the mapped store's
/// pages in the page cache, which the kernel can reclaim).
struct Memory {
    rss: Option<u64>,
    anonymous: Option<u64>,
    file: Option<u64>,
}

impl Memory {
    fn now() -> Memory {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| {
            status.lines().find_map(|line| {
                let kib: u64 = line
                    .strip_prefix(name)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()?;
                Some(kib * 1024)
            })
        };
        Memory {
            rss: field("VmRSS:"),
            anonymous: field("RssAnon:"),
            file: field("RssFile:"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::server::tests::{Following, answer, runtime, server_with};

    #[test]
    fn while_no_follower_runs_latest_is_a_miss_and_readiness_is_down() {
        let runtime = runtime();
        let head = r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}"#;
        let by_number =
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x3",false]}"#;
        for following in [true, false] {
            let (server, _dir) = server_with(Arc::new(Following(following, None)));
            let (status, _) = answer(&server, &runtime, head);
            assert_eq!(
                status,
                if following { 200 } else { 421 },
                "following: {following}"
            );
            // What is stored stays served.
            assert_eq!(answer(&server, &runtime, by_number).0, 200);
            let ready = server.ready().status().as_u16();
            assert_eq!(ready, if following { 200 } else { 503 });
            let health: serde_json::Value = serde_json::from_str(&server.health()).unwrap();
            assert_eq!(health["follower"]["running"], following);
            assert_eq!(health["status"], if following { "ok" } else { "degraded" });
        }
    }
}
