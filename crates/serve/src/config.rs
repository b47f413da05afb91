//! What the binary hands serving: its settings and their defaults, and the
//! view of the upstream ingest keeps ([`ChainView`]).

use std::sync::Arc;
use std::time::Duration;

use crate::clients::DEFAULT_CLIENT_RATE;
use crate::cors::Origins;
use crate::fallback::{DEFAULT_FALLBACK_IN_FLIGHT, DEFAULT_FALLBACK_METHODS};

/// Default byte budget of the calls' answer memo (`rpc/call_memo.rs`):
/// 32 MiB, some 100,000 answers of a token read with their keys.
pub const DEFAULT_CALL_MEMO_BYTES: u64 = 32 << 20;

/// Default byte budget of the traces' answer memo: 128 MiB, some fifty
/// blocks of 1,000 transactions under `callTracer` (a trace above a
/// quarter of a generation, 16 MiB, is not kept).
pub const DEFAULT_TRACE_MEMO_BYTES: u64 = 128 << 20;

/// What serving needs to know about the upstream, provided by whoever runs
/// the ingest (the binary wires it); serve never talks to ingest directly.
pub trait ChainView: Send + Sync + 'static {
    /// The upstream's head, if known.
    fn upstream_head(&self) -> Option<u64>;
    /// The upstream's `safe` height, if it has one.
    fn safe(&self) -> Option<u64>;
    /// The upstream's `finalized` height, if it has one.
    fn finalized(&self) -> Option<u64>;
    /// The upstream as `/health` shows it.
    fn upstream_health(&self) -> UpstreamHealth;
    /// Prometheus families `/metrics` adds to serving's (the build's,
    /// ingest's counters), read now; the library's types, so that one
    /// encoder writes the whole page.
    fn metric_families(&self) -> Vec<prometheus::proto::MetricFamily> {
        Vec::new()
    }
    /// Notified whenever the store's tip changes (append or rollback), so
    /// subscribers hear of a block at once; without it the tip is polled.
    fn changes(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }
    /// How long ago the upstream's head reached its current height (when
    /// ingest first saw it); `None` when unknown. Bounds the grace in which
    /// `latest` is still the block before it.
    fn upstream_head_age(&self) -> Option<Duration> {
        None
    }
    /// Whether the last exchange with the upstream succeeded: a mirror's
    /// one peer, for `net_peerCount`.
    fn upstream_connected(&self) -> bool {
        self.upstream_health().connected
    }
    /// Whether a follower is keeping the store up with the upstream. While
    /// it is not (it died and is being restarted), `latest` is a miss and
    /// readiness is down: the stored tip is no longer known to be the head.
    fn following(&self) -> bool {
        true
    }
    /// Followers restarted after one died, for `/health`.
    fn follower_restarts(&self) -> u64 {
        0
    }
    /// Why writing to the store fails, while it does (a full disk): what
    /// is stored is still served, nothing new arrives.
    fn store_write_error(&self) -> Option<String> {
        None
    }
    /// What the upstream says about the blocks it can prove state at
    /// (its `eth_capabilities`), if it said.
    fn upstream_state_window(&self) -> Option<neve_upstream::StateWindow> {
        None
    }
}

/// The upstream's state for `/health`.
#[derive(Clone, Debug, Default)]
pub struct UpstreamHealth {
    /// Its URL, credentials masked.
    pub url: neve_upstream::RedactedUrl,
    /// Whether the last exchange with it succeeded.
    pub connected: bool,
    /// Seconds since the last exchange that succeeded.
    pub last_contact_age_seconds: Option<f64>,
    /// Seconds since the last block was stored.
    pub last_block_age_seconds: Option<f64>,
    /// What the last sync step (or the follower's death) failed with, if
    /// the last one failed.
    pub last_error: Option<String>,
    /// Whether the upstream offers raw RLP (`debug_getRaw*`): without it,
    /// blocks are stored without raw data and those methods answer 421.
    /// `None` until probed.
    pub raw_data: Option<bool>,
    /// Why no request goes to the upstream now, if none does: it refused
    /// with 429 or 503 and the pause it asked for (or neve's backoff) runs.
    pub waiting: Option<String>,
}

/// Largest request body. Large enough for a 1,000-element batch of log
/// filters; larger bodies get 413 before being read. Default is 5 MiB.
pub const DEFAULT_MAX_BODY_BYTES: usize = 5 << 20;
/// Most elements in one batch; a larger batch gets -32600 without any
/// element being answered (a batch bomb costs one parse). Default is 1,000.
pub const DEFAULT_MAX_BATCH: usize = 1000;
/// Most bytes of answers a batch gets: once its answers, in order, pass
/// this, every call after the one that passed it gets -32003 "response
/// too large", as geth does (`--rpc.batch-response-max-size`, the same
/// default). Answers the store holds cost nothing to repeat, but those
/// built per call (proofs, code) would otherwise let one 5 MiB batch build
/// hundreds of megabytes. Default is 25,000,000.
pub const DEFAULT_MAX_BATCH_ANSWER_BYTES: usize = 25_000_000;
/// Most open connections; the next one gets 503 and is closed. Default is 4,096.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// On shutdown, requests in flight get this long to finish (and WebSocket
/// sessions to end) before the server returns anyway. Default is 10 s.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection that sends no complete request header for this long is
/// closed (idle keep-alive and slow-header clients alike), and so is one
/// whose peer takes nothing of an answer for this long. Default is 60 s.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Time to receive a request body once its headers arrived. Default is 30 s.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Most blocks one `eth_getLogs` may span; the error names a range that
/// fits. Default is 10,000.
pub const DEFAULT_LOGS_MAX_RANGE: u64 = 10_000;
/// Most logs one `eth_getLogs` may return; the error names a range that
/// fits. Default is 10,000.
pub const DEFAULT_LOGS_MAX_RESULTS: usize = 10_000;
/// Most blocks the `eth_getLogs` calls of one request (a call, or all of
/// a batch's) may scan together: two queries at the range limit. With the
/// range limit alone, a batch of 1,000 whole-range queries was 10 million
/// block scans on one request; past this the rest of the batch's queries
/// get -32005. Default is 20,000.
pub const DEFAULT_LOGS_BUDGET_BLOCKS: u64 = 20_000;
/// Most bytes of logs the `eth_getLogs` calls of one request may produce
/// together, so one request cannot hold more than this of answer in
/// memory; past it the query being scanned, and the rest, get -32005.
/// Default is 64 MiB.
pub const DEFAULT_LOGS_BUDGET_BYTES: u64 = 64 << 20;

/// How the server behaves; every limit is documented at its default constant.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// See [`DEFAULT_MAX_BODY_BYTES`].
    pub max_body_bytes: usize,
    /// See [`DEFAULT_MAX_BATCH`].
    pub max_batch: usize,
    /// See [`DEFAULT_MAX_BATCH_ANSWER_BYTES`].
    pub max_batch_answer_bytes: usize,
    /// See [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// See [`DEFAULT_DRAIN_TIMEOUT`].
    pub drain_timeout: Duration,
    /// On shutdown, how long readiness answers 503 while everything is
    /// still served, before the listeners close and the drain starts: a
    /// load balancer polling readiness takes the instance out of its pool
    /// first. Default is 0 (close at once).
    pub drain_delay: Duration,
    /// See [`DEFAULT_BODY_TIMEOUT`].
    pub body_timeout: Duration,
    /// See [`DEFAULT_LOGS_MAX_RANGE`].
    pub logs_max_range: u64,
    /// See [`DEFAULT_LOGS_MAX_RESULTS`].
    pub logs_max_results: usize,
    /// See [`DEFAULT_LOGS_BUDGET_BLOCKS`].
    pub logs_budget_blocks: u64,
    /// See [`DEFAULT_LOGS_BUDGET_BYTES`].
    pub logs_budget_bytes: u64,
    /// How far the stored tip may trail the upstream's head while `latest`
    /// (and `eth_blockNumber`) are still answered from it. Default is 0:
    /// `latest` is a miss until the newest block is stored.
    pub latest_lag: u64,
    /// For this long after the upstream announces a block neve does not
    /// hold yet, `latest` is still answered with the block before it (the
    /// newest neve holds); past it, 421 until the block is stored. A pool
    /// of full nodes behind a balancer differs by a block for longer, and
    /// answering in this gap is what keeps a busy chain's `latest` reads
    /// off the full node. See [`DEFAULT_LATEST_GRACE`].
    pub latest_grace: Duration,
    /// `/health/ready` is 200 only within this many blocks of the upstream's
    /// head. Default is 2.
    pub max_behind: u64,
    /// While more than `max_behind` blocks behind the upstream, answer
    /// JSON-RPC 503 from the headers, so a front end with passive health
    /// checks sends reads to mirrors that are caught up. Default is off.
    pub shed_when_behind: bool,
    /// The store's block retention, shown by `/health`.
    pub retain_blocks: Option<u64>,
    /// The store's byte budget, shown by `/metrics`.
    pub retain_bytes: Option<u64>,
    /// A full node to forward misses to instead of answering 421.
    pub fallback: Option<String>,
    /// Which methods may be forwarded to the fallback; see
    /// [`DEFAULT_FALLBACK_METHODS`].
    pub fallback_methods: String,
    /// Forwards in flight at once; see
    /// [`DEFAULT_FALLBACK_IN_FLIGHT`].
    pub fallback_in_flight: usize,
    /// How long a state read that needs fetching waits for the fetch
    /// before it is a miss; `None` answers such reads 421 at once and
    /// lets the fetch warm the store in the background. See
    /// [`DEFAULT_STATE_FETCH_TIMEOUT`].
    pub state_fetch_timeout: Option<Duration>,
    /// Bytes of calls' answers kept to serve again at the same block; 0
    /// keeps none. See [`DEFAULT_CALL_MEMO_BYTES`].
    pub call_memo_bytes: u64,
    /// Bytes of traces kept to serve again; 0 keeps none. See
    /// [`DEFAULT_TRACE_MEMO_BYTES`].
    pub trace_memo_bytes: u64,
    /// Units of work per second each client address may spend; 0 is no
    /// limit. See [`DEFAULT_CLIENT_RATE`] and `clients`.
    pub client_rate: u64,
    /// Origins whose pages may call neve (CORS). Default is none.
    pub cors_origins: Origins,
    /// Origins whose pages may open a WebSocket. Default is none; an
    /// upgrade without an `Origin` (not a browser) is always accepted.
    pub ws_origins: Origins,
    /// `web3_clientVersion`'s answer. Default is `neve/vVERSION`.
    pub client_version: String,
    /// The upstream runs coreth's EVM (`--upstream-kind avalanchego`),
    /// whatever the chain's id: its fee oracle and its calls' words are
    /// coreth's, never geth's. A C-chain's id says so without it. Default
    /// is false.
    pub coreth_upstream: bool,
}

/// The grace after an upstream's new head in which `latest` is still the
/// block before it: ten times what storing a new block takes at idle here,
/// and under any chain's block time, so `latest` is never more than one
/// block old. Default is 500 ms.
pub const DEFAULT_LATEST_GRACE: Duration = Duration::from_millis(500);

/// How long a state read waits for a fetch-through: long enough for a proof
/// from a busy local node, short enough that a front end's retry on the
/// node still answers quickly. Default is 1 s.
pub const DEFAULT_STATE_FETCH_TIMEOUT: Duration = Duration::from_secs(1);

/// The state layer as serving sees it: verified nodes to read, and who to
/// ask for missing ones.
#[derive(Clone)]
pub struct StateAccess {
    /// The verified node store and its counters.
    pub state: Arc<neve_state::State>,
    /// Brings missing nodes; without it, a read that misses is 421.
    pub fetch: Option<Arc<dyn neve_state::Fetch>>,
    /// The chain's rules for executing calls, once learnt; calls are 421
    /// until then.
    pub rules: Arc<neve_execution::RulesCell>,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            max_batch: DEFAULT_MAX_BATCH,
            max_batch_answer_bytes: DEFAULT_MAX_BATCH_ANSWER_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            drain_timeout: DEFAULT_DRAIN_TIMEOUT,
            drain_delay: Duration::ZERO,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            logs_max_range: DEFAULT_LOGS_MAX_RANGE,
            logs_max_results: DEFAULT_LOGS_MAX_RESULTS,
            logs_budget_blocks: DEFAULT_LOGS_BUDGET_BLOCKS,
            logs_budget_bytes: DEFAULT_LOGS_BUDGET_BYTES,
            latest_lag: 0,
            latest_grace: DEFAULT_LATEST_GRACE,
            max_behind: 2,
            shed_when_behind: false,
            retain_blocks: None,
            retain_bytes: None,
            fallback: None,
            fallback_methods: DEFAULT_FALLBACK_METHODS.to_owned(),
            fallback_in_flight: DEFAULT_FALLBACK_IN_FLIGHT,
            state_fetch_timeout: Some(DEFAULT_STATE_FETCH_TIMEOUT),
            call_memo_bytes: DEFAULT_CALL_MEMO_BYTES,
            trace_memo_bytes: DEFAULT_TRACE_MEMO_BYTES,
            client_rate: DEFAULT_CLIENT_RATE,
            cors_origins: Origins::None,
            ws_origins: Origins::None,
            client_version: format!("neve/v{}", env!("CARGO_PKG_VERSION")),
            coreth_upstream: false,
        }
    }
}
