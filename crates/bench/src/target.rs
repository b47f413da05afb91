//! Targets and the block range they all serve.
//!
//! A comparison is fair only over work every target can do, so each
//! target's valid range is discovered — a neve from its `/health`, a node
//! from `eth_blockNumber` and a binary search for its lowest available block
//! — and the benchmark uses the intersection.

use std::fmt;
use std::ops::RangeInclusive;

use bytes::Bytes;
use hyper::Uri;
use neve_upstream::{RpcClient, parse_quantity, quantity};

use crate::classify::{Outcome, classify};
use crate::error::BenchError;

impl BenchError {
    /// A target that could not be read, and why.
    pub(crate) fn target(target: &Target, error: impl std::fmt::Display) -> BenchError {
        BenchError::Target(target.name.clone(), error.to_string())
    }
}

/// What kind of server a target is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    /// Answers JSON-RPC (a node, or a neve).
    Rpc,
    /// Serves the reference answers as files (`GET /<workload>/<i>.json`):
    /// the machine's ceiling for sending the same bytes.
    Static,
}

/// One server under test.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Target {
    /// The name in tables and plots.
    pub name: String,
    /// The URL requests go to; an RPC path such as `/ext/bc/C/rpc` is part
    /// of it. Written to results redacted: a key in it is never shown.
    #[serde(serialize_with = "redacted")]
    pub url: String,
    /// RPC or static.
    pub kind: TargetKind,
    /// The processes to sample CPU and RSS from (each with its children),
    /// when the target runs on this machine.
    pub pids: Vec<u32>,
}

impl Target {
    /// Parses `NAME=URL`.
    pub fn parse(spec: &str, kind: TargetKind) -> Result<Target, BenchError> {
        let (name, url) = spec
            .split_once('=')
            .filter(|(name, url)| !name.is_empty() && !url.is_empty())
            .ok_or_else(|| BenchError::Usage(format!("a target is NAME=URL, not {spec:?}")))?;
        Target::new(name, url, kind)
    }

    /// A target with a URL that parses as an endpoint.
    pub fn new(name: &str, url: &str, kind: TargetKind) -> Result<Target, BenchError> {
        Endpoint::parse(url)?;
        Ok(Target {
            name: name.to_owned(),
            url: url.to_owned(),
            kind,
            pids: Vec::new(),
        })
    }

    /// Host, port and path of the URL.
    pub fn endpoint(&self) -> Result<Endpoint, BenchError> {
        Endpoint::parse(&self.url)
    }
}

fn redacted<S: serde::Serializer>(url: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(neve_upstream::RedactedUrl::of(url).as_str())
}

/// Where to connect and what path to ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`, as connected to.
    pub authority: String,
    /// The host, as its TLS certificate must name it.
    pub host: String,
    /// The port.
    pub port: u16,
    /// `https://`: requests go over TLS.
    pub tls: bool,
    /// The path requests go to (RPC), or the prefix files sit under (static).
    pub path: String,
    /// The query, with its `?` (a key some endpoints want), or empty.
    pub query: String,
}

impl Endpoint {
    /// Parses an `http://` or `https://` URL.
    pub fn parse(url: &str) -> Result<Endpoint, BenchError> {
        let shown = neve_upstream::RedactedUrl::of(url);
        let bad = |why: &str| BenchError::Usage(format!("target URL {shown}: {why}"));
        let uri: Uri = url.parse().map_err(|_| bad("not a URL"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(bad("only http:// and https:// are supported")),
        };
        let host = uri.host().ok_or_else(|| bad("no host"))?;
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let path = match uri.path() {
            "" => "/".to_owned(),
            path => path.to_owned(),
        };
        Ok(Endpoint {
            authority: format!("{host}:{port}"),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port,
            tls,
            path,
            query: uri.query().map_or_else(String::new, |q| format!("?{q}")),
        })
    }
}

/// The heights a target serves.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ValidRange {
    /// Lowest servable height.
    pub low: u64,
    /// Highest servable height.
    pub high: u64,
    /// How it was found.
    pub source: RangeSource,
}

impl ValidRange {
    /// As an inclusive range.
    pub fn heights(&self) -> RangeInclusive<u64> {
        self.low..=self.high
    }
}

/// How a range was discovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RangeSource {
    /// A neve's `/health` (`min_height` to `max_contiguous_height`).
    NeveHealth,
    /// `eth_blockNumber` and a binary search for the lowest block.
    NodeSearch,
}

impl fmt::Display for ValidRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let how = match self.source {
            RangeSource::NeveHealth => "from /health",
            RangeSource::NodeSearch => "eth_blockNumber + binary search",
        };
        write!(f, "{}..={} ({how})", self.low, self.high)
    }
}

/// Discovers what `target` serves.
pub async fn discover_range(target: &Target) -> Result<ValidRange, BenchError> {
    let client = RpcClient::new(&target.url).map_err(|e| BenchError::target(target, e))?;
    if let Some(range) = neve_range(&client).await {
        return Ok(range);
    }
    let head = block_number(&client)
        .await
        .map_err(|e| BenchError::target(target, e))?;
    let mut probe = |height| has_block(&client, height);
    let low = lowest_available(head, &mut probe).await.ok_or_else(|| {
        BenchError::Target(
            target.name.clone(),
            format!("serves no block, not even its head {head}"),
        )
    })?;
    Ok(ValidRange {
        low,
        high: head,
        source: RangeSource::NodeSearch,
    })
}

/// What the server at `url` says it is (`web3_clientVersion`), or `None`
/// when it does not answer one.
pub async fn client_version(url: &str) -> Option<String> {
    let client = RpcClient::new(url).ok()?;
    client.call("web3_clientVersion", ()).await.ok()
}

/// The node's head, from `eth_blockNumber`.
pub async fn block_number(client: &RpcClient) -> Result<u64, String> {
    let head: String = client
        .call("eth_blockNumber", ())
        .await
        .map_err(|e| format!("eth_blockNumber on {}: {e}", client.url()))?;
    parse_quantity(&head).ok_or_else(|| format!("eth_blockNumber said {head:?}"))
}

/// A neve says its range on `/health`; anything else has no such page.
async fn neve_range(client: &RpcClient) -> Option<ValidRange> {
    let (status, body) = client.get("/health").await.ok()?;
    if !status.is_success() {
        return None;
    }
    let health: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let blocks = health.get("blocks")?;
    Some(ValidRange {
        low: blocks.get("min_height")?.as_u64()?,
        high: blocks.get("max_contiguous_height")?.as_u64()?,
        source: RangeSource::NeveHealth,
    })
}

async fn has_block(client: &RpcClient, height: u64) -> bool {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["{}",false]}}"#,
        quantity(height)
    );
    match client.post(Bytes::from(body)).await {
        Ok((status, body)) => classify(status.as_u16(), &body) == Outcome::Ok,
        Err(_) => false,
    }
}

/// The lowest height in `0..=head` for which `available` holds, assuming
/// availability is a suffix (a node keeps everything above its pruning
/// floor). `None` when not even `head` is available.
pub async fn lowest_available<F, Fut>(head: u64, available: &mut F) -> Option<u64>
where
    F: FnMut(u64) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    if !available(head).await {
        return None;
    }
    let (mut missing_below, mut present) = (None::<u64>, head);
    // Invariant: `present` is available; everything at or below
    // `missing_below` is not.
    loop {
        let low = missing_below.map_or(0, |m| m + 1);
        if low == present {
            return Some(present);
        }
        let mid = low + (present - low) / 2;
        if available(mid).await {
            present = mid;
        } else {
            missing_below = Some(mid);
        }
    }
}

/// The heights every target serves, or an error naming who does not overlap.
pub fn intersect(ranges: &[(String, ValidRange)]) -> Result<RangeInclusive<u64>, BenchError> {
    let low = ranges.iter().map(|(_, r)| r.low).max().unwrap_or(0);
    let high = ranges.iter().map(|(_, r)| r.high).min().unwrap_or(0);
    if ranges.is_empty() || low > high {
        let listed: Vec<String> = ranges
            .iter()
            .map(|(name, range)| format!("{name} {range}"))
            .collect();
        return Err(BenchError::NoCommonRange(listed.join("; ")));
    }
    Ok(low..=high)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(low: u64, high: u64) -> ValidRange {
        ValidRange {
            low,
            high,
            source: RangeSource::NodeSearch,
        }
    }

    #[test]
    fn the_common_range_is_the_intersection() {
        let ranges = vec![
            ("geth".to_owned(), range(0, 2100)),
            ("neve".to_owned(), range(1000, 2095)),
            ("avalanchego".to_owned(), range(3, 3000)),
        ];
        assert_eq!(intersect(&ranges).unwrap(), 1000..=2095);
        let disjoint = vec![
            ("a".to_owned(), range(0, 10)),
            ("b".to_owned(), range(11, 20)),
        ];
        let error = intersect(&disjoint).unwrap_err().to_string();
        assert!(
            error.contains("a 0..=10") && error.contains("b 11..=20"),
            "{error}"
        );
        assert!(intersect(&[]).is_err());
    }

    #[tokio::test]
    async fn binary_search_finds_the_pruning_floor() {
        for (floor, head) in [
            (0u64, 0u64),
            (0, 2000),
            (1, 2000),
            (1999, 2000),
            (2000, 2000),
            (777, 100_000),
        ] {
            let mut probes = 0;
            let mut probe = |height: u64| {
                probes += 1;
                std::future::ready(height >= floor)
            };
            assert_eq!(
                lowest_available(head, &mut probe).await,
                Some(floor),
                "{floor} {head}"
            );
            assert!(probes <= 2 + 64 - head.leading_zeros(), "{probes} probes");
        }
        let mut nothing = |_| std::future::ready(false);
        assert_eq!(lowest_available(50, &mut nothing).await, None);
    }

    #[test]
    fn targets_parse_with_paths_and_refuse_nonsense() {
        let target =
            Target::parse("ava=http://127.0.0.1:9650/ext/bc/C/rpc", TargetKind::Rpc).unwrap();
        assert_eq!(target.name, "ava");
        let endpoint = target.endpoint().unwrap();
        assert_eq!(endpoint.authority, "127.0.0.1:9650");
        assert_eq!(endpoint.port, 9650);
        assert_eq!(endpoint.path, "/ext/bc/C/rpc");
        let plain = Target::parse("neve=http://localhost:8545", TargetKind::Rpc).unwrap();
        assert_eq!(plain.endpoint().unwrap().path, "/");
        let keyed = Target::parse("p=https://rpc.example/v3?token=s3cret", TargetKind::Rpc)
            .unwrap()
            .endpoint()
            .unwrap();
        assert!(keyed.tls);
        assert_eq!(keyed.port, 443);
        assert_eq!(keyed.host, "rpc.example");
        assert_eq!(keyed.query, "?token=s3cret");
        for bad in ["neve", "=http://x:1", "neve=", "neve=ws://x:1", "neve=::"] {
            assert!(Target::parse(bad, TargetKind::Rpc).is_err(), "{bad}");
        }
    }
}
