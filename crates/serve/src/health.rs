//! `/health`, `/health/ready` and the state figures `/metrics` shares with
//! `/health`: what an operator and a load balancer read.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use hyper::{Response, StatusCode};

use crate::{Chunks, ErrorCode, Server, refused_unread, response};

impl Server {
    /// The state layer's figures, once for both `/metrics` and `/health`:
    /// (metric name, `/health` key, help, value). Empty when the layer is off.
    pub(crate) fn state_figures(&self) -> Vec<(&'static str, &'static str, &'static str, u64)> {
        let Some(state) = &self.ctx.state else {
            return Vec::new();
        };
        let s = state.stats();
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
