//! `neve serve`'s flags: what an operator sets, by heading.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use neve_pool::CpuSet;

use crate::logging::LogArgs;
use crate::units::{Bytes, Millis, Secs, Span};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum UpstreamKind {
    /// Any EVM JSON-RPC node: the URL is its RPC endpoint.
    Evm,
    /// avalanchego: the URL is the node's base; the C-chain RPC is derived.
    /// With --mirror-from, it says the neve followed mirrors an avalanchego
    /// (a C-chain's id says so without it): state, calls and fee methods
    /// then follow coreth.
    Avalanchego,
}

/// Where the upstream's credentials go besides the upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WsCredentials {
    /// To --ws-url only on the upstream's host over TLS (or in plain text
    /// where the upstream is plain text).
    SameHost,
    /// To --ws-url whatever its host or scheme.
    Always,
}

#[derive(Args)]
pub struct ServeArgs {
    /// A TOML file of settings: keys are these flags' long names; a flag or
    /// its NEVE_* environment variable wins over the file.
    #[arg(long)]
    pub(super) config: Option<PathBuf>,

    /// The upstream node's URL (see --upstream-kind).
    #[arg(long, required_unless_present = "mirror_from", help_heading = UPSTREAM)]
    pub(super) upstream: Option<String>,
    /// Mirror another neve at this URL (its RPC, WebSocket, /health and
    /// /blocks: its --admin-listen address when it has one).
    #[arg(long, conflicts_with = "upstream", help_heading = UPSTREAM)]
    pub(super) mirror_from: Option<String>,
    /// The upstream's WebSocket URL for newHeads (default: derived from the RPC URL; `none` to poll only).
    #[arg(long, help_heading = UPSTREAM)]
    pub(super) ws_url: Option<String>,
    /// Where the upstream's credentials (--upstream-header) go with --ws-url: `same-host` sends them only to the upstream's host over TLS (or in plain text where the upstream is); `always` to any host and scheme.
    #[arg(long, value_enum, default_value_t = WsCredentials::SameHost, help_heading = UPSTREAM)]
    pub(super) ws_credentials: WsCredentials,
    /// How to read --upstream.
    #[arg(long, value_enum, default_value_t = UpstreamKind::Evm, help_heading = UPSTREAM)]
    pub(super) upstream_kind: UpstreamKind,
    /// A header sent with every request to the upstream (JSON-RPC,
    /// WebSocket, a mirror's /blocks), `Name: value` as curl's -H, e.g.
    /// `Authorization: Bearer KEY`; repeatable. Its value is never shown.
    /// Keep a key out of `ps` with NEVE_UPSTREAM_HEADER, the settings file
    /// or --upstream-header-file.
    #[arg(long, value_name = "NAME: VALUE", help_heading = UPSTREAM)]
    pub(super) upstream_header: Vec<String>,
    /// A file of headers for the upstream, one `Name: value` a line (blank
    /// lines and `#` comments skipped).
    #[arg(long, value_name = "FILE", help_heading = UPSTREAM)]
    pub(super) upstream_header_file: Option<PathBuf>,
    /// A PEM file of CA certificates trusted for https:// and wss://
    /// upstreams, mirrors and --fallback, besides the system's roots
    /// (SSL_CERT_FILE and SSL_CERT_DIR are honoured as curl does).
    #[arg(long, value_name = "FILE", help_heading = UPSTREAM)]
    pub(super) ca_file: Option<PathBuf>,
    /// Requests per second neve may send its upstream, all together
    /// (backfill, live blocks, state fetch-through and prefetch); 0: no
    /// budget, for a node of your own. Set it under a provider's cap.
    #[arg(long, default_value_t = 0.0, help_heading = UPSTREAM)]
    pub(super) upstream_rps: f64,
    /// Most calls in one batch sent to the upstream; an endpoint that
    /// refuses a batch as too large teaches neve to send fewer.
    #[arg(long, default_value_t = neve_upstream::DEFAULT_MAX_BATCH, help_heading = UPSTREAM)]
    pub(super) upstream_max_batch: usize,
    /// How long one exchange with the upstream may take (a bare number is
    /// milliseconds).
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_upstream::DEFAULT_TIMEOUT), help_heading = UPSTREAM)]
    pub(super) upstream_timeout_ms: Millis,
    /// Largest answer body accepted from the upstream; a larger (or
    /// endless) one is refused and the step retried.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_upstream::DEFAULT_MAX_RESPONSE_BYTES as u64), help_heading = UPSTREAM)]
    pub(super) upstream_max_body_bytes: Bytes,
    /// How often to ask the upstream for its head (a bare number is
    /// milliseconds).
    #[arg(long, value_name = "DURATION", default_value_t = Span(Duration::from_millis(100)), help_heading = UPSTREAM)]
    pub(super) poll_ms: Millis,

    /// Where the store lives.
    #[arg(long, default_value = "neve-data", help_heading = STORE)]
    pub(super) data_dir: PathBuf,
    /// Where an empty store starts: a height, `tip`, or (default) the retention window back from the head.
    #[arg(long, help_heading = STORE)]
    pub(super) floor: Option<String>,
    /// Keep at least this many newest blocks; 0 keeps everything (and, with
    /// the default floor, backfills from genesis).
    #[arg(long, default_value_t = neve_store::DEFAULT_RETAIN_BLOCKS, help_heading = STORE)]
    pub(super) retain_blocks: u64,
    /// Keep the store under this size (whole segments are dropped), e.g.
    /// `500GiB`.
    #[arg(long, value_name = "SIZE", help_heading = STORE)]
    pub(super) retain_bytes: Option<Bytes>,
    /// Heights per segment file of a new store (retention drops whole
    /// segments; small ones suit small tails and tests).
    #[arg(long, default_value_t = neve_store::DEFAULT_SEGMENT_BLOCKS, help_heading = STORE)]
    pub(super) segment_blocks: u32,
    /// fsync every append (default) or leave durability to the OS (survives a crash of neve, not of the machine).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Fsync, help_heading = STORE)]
    pub(super) durability: DurabilityArg,

    /// Deepest reorg followed by rolling back.
    #[arg(long, default_value_t = neve_ingest::follow::DEFAULT_MAX_REORG_DEPTH, help_heading = INGEST)]
    pub(super) max_reorg_depth: u64,
    /// Blocks fetched at once while backfilling.
    #[arg(long, default_value_t = neve_ingest::follow::DEFAULT_FETCH_CONCURRENCY, help_heading = INGEST)]
    pub(super) fetch_concurrency: usize,
    /// Bytes of blocks ingest may hold at once (fetched, being verified,
    /// waiting to be appended).
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_ingest::follow::DEFAULT_INGEST_BUFFER_BYTES as u64), help_heading = INGEST)]
    pub(super) ingest_buffer_bytes: Bytes,
    /// How often a backfill logs its progress (height, rate, ETA) when
    /// stderr is not a terminal (a bare number is seconds); a terminal gets
    /// a progress bar.
    #[arg(long, value_name = "DURATION", default_value_t = Span(Duration::from_secs(10)), help_heading = INGEST)]
    pub(super) progress_interval_secs: Secs,
    /// CPUs ingest's threads (fetching, verifying, storing) and long log
    /// scans run on (`4-5`). Apart from --serve-cpus, a backfill at full
    /// speed never delays an answer: a lower priority alone does not stop
    /// a busy thread slowing one that shares its CPU [default: every CPU].
    #[arg(long, value_name = "LIST", help_heading = INGEST)]
    pub(super) ingest_cpus: Option<CpuSet>,

    /// Address to serve JSON-RPC and WebSocket on (and, without
    /// --admin-listen, /health, /metrics and /blocks).
    #[arg(long, default_value = "127.0.0.1:8645", help_heading = LISTENERS)]
    pub(super) listen: SocketAddr,
    /// A private address for /metrics, /health, /health/ready and /blocks
    /// (and JSON-RPC, for mirrors and probes); with it, --listen answers
    /// only JSON-RPC and WebSocket. Keep it off the internet.
    #[arg(long, value_name = "ADDR", help_heading = LISTENERS)]
    pub(super) admin_listen: Option<SocketAddr>,
    /// Origins whose pages may call neve from a browser
    /// (`https://app.example`, comma-separated; `*` for any): preflights
    /// answered, CORS headers sent. Default is none, as geth's
    /// --http.corsdomain.
    #[arg(long, value_name = "ORIGINS", value_delimiter = ',', help_heading = LISTENERS)]
    pub(super) cors_origins: Vec<String>,
    /// Origins whose pages may open a WebSocket (comma-separated; `*` for
    /// any), as geth's --ws.origins; an upgrade from another origin gets
    /// 403, one without an Origin header (not a browser) is accepted.
    /// Default is --cors-origins.
    #[arg(long, value_name = "ORIGINS", value_delimiter = ',', help_heading = LISTENERS)]
    pub(super) ws_origins: Option<Vec<String>>,
    /// CPUs the threads that answer requests run on, as Linux lists them
    /// (`0-3`), one worker each [default: every CPU].
    #[arg(long, value_name = "LIST", help_heading = LISTENERS)]
    pub(super) serve_cpus: Option<CpuSet>,
    /// On SIGTERM, how long readiness answers 503 while everything is
    /// still served, before the listeners close: a load balancer polling
    /// /health/ready takes the instance out meanwhile (a bare number is
    /// seconds). Default is 0s.
    #[arg(long, value_name = "DURATION", default_value_t = Span(Duration::ZERO), help_heading = LISTENERS)]
    pub(super) drain_delay: Secs,
    /// Then, how long requests in flight (and WebSocket sessions) get to
    /// finish before neve exits anyway (a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_serve::DEFAULT_DRAIN_TIMEOUT), help_heading = LISTENERS)]
    pub(super) drain_timeout: Secs,

    /// Blocks the stored tip may trail the upstream while `latest` is still answered.
    #[arg(long, default_value_t = 0, help_heading = ANSWERS)]
    pub(super) latest_lag: u64,
    /// For this long after the upstream announces a block neve does not
    /// hold yet, `latest` is still the block before it; then 421 until it
    /// is stored (a bare number is milliseconds; 0: 421 at once).
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_serve::DEFAULT_LATEST_GRACE), help_heading = ANSWERS)]
    pub(super) latest_grace_ms: Millis,
    /// The longest the upstream may go without an exchange that succeeded
    /// before the stored tip is not taken for the head: `latest` is 421
    /// and /health/ready 503 until one does; sooner on fast chains (three
    /// block intervals, at least 2 s). A bare number is milliseconds.
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_ingest::view::DEFAULT_MAX_UPSTREAM_SILENCE), help_heading = ANSWERS)]
    pub(super) max_upstream_silence_ms: Millis,
    /// /health/ready is 200 only within this many blocks of the upstream's head.
    #[arg(long, default_value_t = 2, help_heading = ANSWERS)]
    pub(super) max_behind: u64,
    /// While more than --max-behind blocks behind the upstream (catching
    /// up), answer JSON-RPC 503 (Retry-After: 1) without reading it, so a
    /// front end with passive health checks (deploy/nginx) sends reads to
    /// mirrors that are caught up. Alone, leave it off: a mirror behind
    /// still answers its tail and 421s the rest.
    #[arg(long, value_enum, default_value_t = Switch::Off, help_heading = ANSWERS)]
    pub(super) shed_when_behind: Switch,
    /// Forward misses to this full node instead of answering 421.
    #[arg(long, help_heading = ANSWERS)]
    pub(super) fallback: Option<String>,
    /// Methods --fallback may forward, comma-separated: names, `prefix*`,
    /// and `!pattern` to refuse what an earlier one allowed (the last that
    /// matches decides); the rest are answered as without a fallback.
    #[arg(long, default_value = neve_serve::DEFAULT_FALLBACK_METHODS, help_heading = ANSWERS)]
    pub(super) fallback_methods: String,
    /// Forwards to --fallback in flight at once; past it, a miss is 421.
    #[arg(long, default_value_t = neve_serve::DEFAULT_FALLBACK_IN_FLIGHT, help_heading = ANSWERS)]
    pub(super) fallback_in_flight: usize,

    /// Largest request body.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_MAX_BODY_BYTES as u64), help_heading = LIMITS)]
    pub(super) max_body_bytes: Bytes,
    /// Most elements in one batch.
    #[arg(long, default_value_t = neve_serve::DEFAULT_MAX_BATCH, help_heading = LIMITS)]
    pub(super) max_batch: usize,
    /// Most bytes of answers in one batch: the calls after the one that
    /// passes it get -32003 "response too large", as geth's
    /// --rpc.batch-response-max-size (same default).
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_MAX_BATCH_ANSWER_BYTES as u64), help_heading = LIMITS)]
    pub(super) max_batch_answer_bytes: Bytes,
    /// Most open connections.
    #[arg(long, default_value_t = neve_serve::DEFAULT_MAX_CONNECTIONS, help_heading = LIMITS)]
    pub(super) max_connections: usize,
    /// How long a connection may go without sending a complete request
    /// header, or without taking any of an answer being sent to it (a bare
    /// number is seconds).
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_serve::DEFAULT_IDLE_TIMEOUT), help_heading = LIMITS)]
    pub(super) idle_timeout: Secs,
    /// Most blocks one eth_getLogs may span.
    #[arg(long, default_value_t = neve_serve::DEFAULT_LOGS_MAX_RANGE, help_heading = LIMITS)]
    pub(super) logs_max_range: u64,
    /// Most logs one eth_getLogs may return.
    #[arg(long, default_value_t = neve_serve::DEFAULT_LOGS_MAX_RESULTS, help_heading = LIMITS)]
    pub(super) logs_max_results: usize,
    /// Most blocks the eth_getLogs calls of one request (a whole batch
    /// included) may scan together; the rest get -32005.
    #[arg(long, default_value_t = neve_serve::DEFAULT_LOGS_BUDGET_BLOCKS, help_heading = LIMITS)]
    pub(super) logs_budget_blocks: u64,
    /// Most bytes of logs the eth_getLogs calls of one request may return
    /// together; the rest get -32005.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_LOGS_BUDGET_BYTES), help_heading = LIMITS)]
    pub(super) logs_budget_bytes: Bytes,
    /// Units of work per second each client address may spend (a call, or
    /// 4 KiB of request and answer, is one; an error answer ten more, a new
    /// connection four); over it, 429 with -32005 and Retry-After. 0: no
    /// limit. For neve facing clients directly; behind a front end, limit there.
    #[arg(long, default_value_t = neve_serve::DEFAULT_CLIENT_RATE, help_heading = LIMITS)]
    pub(super) client_rate: u64,

    /// Verified state reads (balance, nonce, code, storage, proofs); `off` answers them 421.
    #[arg(long, value_enum, default_value_t = Switch::On, help_heading = STATE)]
    pub(super) state: Switch,
    /// A state read whose proof is not held waits for the upstream (`on`), or is 421 at once while the proof is fetched in the background (`off`).
    #[arg(long, value_enum, default_value_t = Switch::On, help_heading = STATE)]
    pub(super) state_fetch: Switch,
    /// How long a state read waits for a fetch-through (a bare number is
    /// milliseconds).
    #[arg(long, alias = "state-fetch-timeout", value_name = "DURATION", default_value_t = Span(neve_serve::DEFAULT_STATE_FETCH_TIMEOUT), help_heading = STATE)]
    pub(super) state_fetch_timeout_ms: Millis,
    /// Byte budget of the verified node store (trie nodes and code).
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_state::DEFAULT_CACHE_BYTES as u64), help_heading = STATE)]
    pub(super) state_cache_bytes: Bytes,
    /// Byte budget of calls' answers kept to serve again at the same block
    /// (the same call at the same block hash has the same answer); 0 runs
    /// every call.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_CALL_MEMO_BYTES), help_heading = STATE)]
    pub(super) call_memo_bytes: Bytes,
    /// Byte budget of traces kept to serve again (`debug_trace*`: a block
    /// traced once serves every indexer that asks); 0 replays every
    /// trace.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_TRACE_MEMO_BYTES), help_heading = STATE)]
    pub(super) trace_memo_bytes: Bytes,
    /// Byte budget of execution witnesses kept (`debug_executionWitness`,
    /// fetched on a block's first trace): served to mirrors below, so a
    /// tree of mirrors traces without asking the node; 0 keeps none.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_state::DEFAULT_WITNESS_BYTES as u64), help_heading = STATE)]
    pub(super) witness_bytes: Bytes,
    /// Fetch each new block's execution witness as it is stored, before a
    /// trace asks (one upstream call a block; for mirrors whose clients
    /// trace every new block).
    #[arg(long, value_enum, default_value_t = Switch::Off, help_heading = STATE)]
    pub(super) witness_prefetch: Switch,
    /// Keys read at `latest` that prefetch keeps fresh as blocks arrive.
    #[arg(long, default_value_t = neve_state::DEFAULT_HOT_KEYS, help_heading = STATE)]
    pub(super) state_hot_keys: usize,
    /// How prefetch keeps the hot keys fresh: `block` proves what each new
    /// block touched (the upstream's tracer, or an upstream neve's list) in
    /// one batch, whatever the number of hot keys; `key` proves each hot key
    /// again at every block (for an upstream whose tracing is dear).
    #[arg(long, value_enum, default_value_t = StateRefresh::Block, help_heading = STATE)]
    pub(super) state_refresh: StateRefresh,
    /// Upstream calls per second prefetch may spend (0: no prefetch).
    #[arg(long, default_value_t = neve_ingest::state_fetch::DEFAULT_PREFETCH_RATE, help_heading = STATE)]
    pub(super) state_prefetch_rate: u32,

    #[command(flatten)]
    pub log: LogArgs,
}

// Headings of `neve serve --help`, in the order an operator sets things up.
const UPSTREAM: &str = "Upstream";
const STORE: &str = "Store";
const INGEST: &str = "Ingest";
const LISTENERS: &str = "Listeners";
const ANSWERS: &str = "Answers";
const LIMITS: &str = "Limits";
const STATE: &str = "State";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StateRefresh {
    /// Per block: the keys the block touched, in one batch.
    Block,
    /// Per key: every hot key again at every block.
    Key,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DurabilityArg {
    /// fdatasync before an append is acknowledged.
    Fsync,
    /// Written to the OS only.
    Os,
}
