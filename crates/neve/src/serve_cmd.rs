//! `neve serve`: follow an upstream into the store and serve it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use neve_ingest::state_fetch::TouchSource;
use neve_ingest::supervise::StartError;
use neve_ingest::{Floor, IngestConfig, IngestSettings, LaunchError, StateSettings};
use neve_serve::{Origins, ServeConfig};
use neve_store::background::CpuSet;
use neve_store::{Durability, StoreConfig};
use neve_upstream::{Endpoint, Pacing, RpcClient};

use crate::chain_view::IngestChain;
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
    config: Option<PathBuf>,

    /// The upstream node's URL (see --upstream-kind).
    #[arg(long, required_unless_present = "mirror_from", help_heading = UPSTREAM)]
    upstream: Option<String>,
    /// Mirror another neve at this URL (its RPC, WebSocket, /health and
    /// /blocks: its --admin-listen address when it has one).
    #[arg(long, conflicts_with = "upstream", help_heading = UPSTREAM)]
    mirror_from: Option<String>,
    /// The upstream's WebSocket URL for newHeads (default: derived from the RPC URL; `none` to poll only).
    #[arg(long, help_heading = UPSTREAM)]
    ws_url: Option<String>,
    /// Where the upstream's credentials (--upstream-header) go with --ws-url: `same-host` sends them only to the upstream's host over TLS (or in plain text where the upstream is); `always` to any host and scheme.
    #[arg(long, value_enum, default_value_t = WsCredentials::SameHost, help_heading = UPSTREAM)]
    ws_credentials: WsCredentials,
    /// How to read --upstream.
    #[arg(long, value_enum, default_value_t = UpstreamKind::Evm, help_heading = UPSTREAM)]
    upstream_kind: UpstreamKind,
    /// A header sent with every request to the upstream (JSON-RPC,
    /// WebSocket, a mirror's /blocks), `Name: value` as curl's -H, e.g.
    /// `Authorization: Bearer KEY`; repeatable. Its value is never shown.
    /// Keep a key out of `ps` with NEVE_UPSTREAM_HEADER, the settings file
    /// or --upstream-header-file.
    #[arg(long, value_name = "NAME: VALUE", help_heading = UPSTREAM)]
    upstream_header: Vec<String>,
    /// A file of headers for the upstream, one `Name: value` a line (blank
    /// lines and `#` comments skipped).
    #[arg(long, value_name = "FILE", help_heading = UPSTREAM)]
    upstream_header_file: Option<PathBuf>,
    /// A PEM file of CA certificates trusted for https:// and wss://
    /// upstreams, mirrors and --fallback, besides the system's roots
    /// (SSL_CERT_FILE and SSL_CERT_DIR are honoured as curl does).
    #[arg(long, value_name = "FILE", help_heading = UPSTREAM)]
    ca_file: Option<PathBuf>,
    /// Requests per second neve may send its upstream, all together
    /// (backfill, live blocks, state fetch-through and prefetch); 0: no
    /// budget, for a node of your own. Set it under a provider's cap.
    #[arg(long, default_value_t = 0.0, help_heading = UPSTREAM)]
    upstream_rps: f64,
    /// Most calls in one batch sent to the upstream; an endpoint that
    /// refuses a batch as too large teaches neve to send fewer.
    #[arg(long, default_value_t = neve_upstream::DEFAULT_MAX_BATCH, help_heading = UPSTREAM)]
    upstream_max_batch: usize,
    /// How long one exchange with the upstream may take (a bare number is
    /// milliseconds).
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_upstream::DEFAULT_TIMEOUT), help_heading = UPSTREAM)]
    upstream_timeout_ms: Millis,
    /// Largest answer body accepted from the upstream; a larger (or
    /// endless) one is refused and the step retried.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_upstream::DEFAULT_MAX_RESPONSE_BYTES as u64), help_heading = UPSTREAM)]
    upstream_max_body_bytes: Bytes,
    /// How often to ask the upstream for its head (a bare number is
    /// milliseconds).
    #[arg(long, value_name = "DURATION", default_value_t = Span(Duration::from_millis(100)), help_heading = UPSTREAM)]
    poll_ms: Millis,

    /// Where the store lives.
    #[arg(long, default_value = "neve-data", help_heading = STORE)]
    data_dir: PathBuf,
    /// Where an empty store starts: a height, `tip`, or (default) the retention window back from the head.
    #[arg(long, help_heading = STORE)]
    floor: Option<String>,
    /// Keep at least this many newest blocks; 0 keeps everything (and, with
    /// the default floor, backfills from genesis).
    #[arg(long, default_value_t = neve_store::DEFAULT_RETAIN_BLOCKS, help_heading = STORE)]
    retain_blocks: u64,
    /// Keep the store under this size (whole segments are dropped), e.g.
    /// `500GiB`.
    #[arg(long, value_name = "SIZE", help_heading = STORE)]
    retain_bytes: Option<Bytes>,
    /// Heights per segment file of a new store (retention drops whole
    /// segments; small ones suit small tails and tests).
    #[arg(long, default_value_t = neve_store::DEFAULT_SEGMENT_BLOCKS, help_heading = STORE)]
    segment_blocks: u32,
    /// fsync every append (default) or leave durability to the OS (survives a crash of neve, not of the machine).
    #[arg(long, value_enum, default_value_t = DurabilityArg::Fsync, help_heading = STORE)]
    durability: DurabilityArg,

    /// Deepest reorg followed by rolling back.
    #[arg(long, default_value_t = neve_ingest::follow::DEFAULT_MAX_REORG_DEPTH, help_heading = INGEST)]
    max_reorg_depth: u64,
    /// Blocks fetched at once while backfilling.
    #[arg(long, default_value_t = neve_ingest::follow::DEFAULT_FETCH_CONCURRENCY, help_heading = INGEST)]
    fetch_concurrency: usize,
    /// Bytes of blocks ingest may hold at once (fetched, being verified,
    /// waiting to be appended).
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_ingest::follow::DEFAULT_INGEST_BUFFER_BYTES as u64), help_heading = INGEST)]
    ingest_buffer_bytes: Bytes,
    /// How often a backfill logs its progress (height, rate, ETA) when
    /// stderr is not a terminal (a bare number is seconds); a terminal gets
    /// a progress bar.
    #[arg(long, value_name = "DURATION", default_value_t = Span(Duration::from_secs(10)), help_heading = INGEST)]
    progress_interval_secs: Secs,
    /// CPUs ingest's threads (fetching, verifying, storing) and long log
    /// scans run on (`4-5`). Apart from --serve-cpus, a backfill at full
    /// speed never delays an answer: a lower priority alone does not stop
    /// a busy thread slowing one that shares its CPU [default: every CPU].
    #[arg(long, value_name = "LIST", help_heading = INGEST)]
    ingest_cpus: Option<CpuSet>,

    /// Address to serve JSON-RPC and WebSocket on (and, without
    /// --admin-listen, /health, /metrics and /blocks).
    #[arg(long, default_value = "127.0.0.1:8645", help_heading = LISTENERS)]
    listen: SocketAddr,
    /// A private address for /metrics, /health, /health/ready and /blocks
    /// (and JSON-RPC, for mirrors and probes); with it, --listen answers
    /// only JSON-RPC and WebSocket. Keep it off the internet.
    #[arg(long, value_name = "ADDR", help_heading = LISTENERS)]
    admin_listen: Option<SocketAddr>,
    /// Origins whose pages may call neve from a browser
    /// (`https://app.example`, comma-separated; `*` for any): preflights
    /// answered, CORS headers sent. Default is none, as geth's
    /// --http.corsdomain.
    #[arg(long, value_name = "ORIGINS", value_delimiter = ',', help_heading = LISTENERS)]
    cors_origins: Vec<String>,
    /// Origins whose pages may open a WebSocket (comma-separated; `*` for
    /// any), as geth's --ws.origins; an upgrade from another origin gets
    /// 403, one without an Origin header (not a browser) is accepted.
    /// Default is --cors-origins.
    #[arg(long, value_name = "ORIGINS", value_delimiter = ',', help_heading = LISTENERS)]
    ws_origins: Option<Vec<String>>,
    /// CPUs the threads that answer requests run on, as Linux lists them
    /// (`0-3`), one worker each [default: every CPU].
    #[arg(long, value_name = "LIST", help_heading = LISTENERS)]
    serve_cpus: Option<CpuSet>,
    /// On SIGTERM, how long readiness answers 503 while everything is
    /// still served, before the listeners close: a load balancer polling
    /// /health/ready takes the instance out meanwhile (a bare number is
    /// seconds). Default is 0s.
    #[arg(long, value_name = "DURATION", default_value_t = Span(Duration::ZERO), help_heading = LISTENERS)]
    drain_delay: Secs,
    /// Then, how long requests in flight (and WebSocket sessions) get to
    /// finish before neve exits anyway (a bare number is seconds).
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_serve::DEFAULT_DRAIN_TIMEOUT), help_heading = LISTENERS)]
    drain_timeout: Secs,

    /// Blocks the stored tip may trail the upstream while `latest` is still answered.
    #[arg(long, default_value_t = 0, help_heading = ANSWERS)]
    latest_lag: u64,
    /// For this long after the upstream announces a block neve does not
    /// hold yet, `latest` is still the block before it; then 421 until it
    /// is stored (a bare number is milliseconds; 0: 421 at once).
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_serve::DEFAULT_LATEST_GRACE), help_heading = ANSWERS)]
    latest_grace_ms: Millis,
    /// The longest the upstream may go without an exchange that succeeded
    /// before the stored tip is not taken for the head: `latest` is 421
    /// and /health/ready 503 until one does; sooner on fast chains (three
    /// block intervals, at least 2 s). A bare number is milliseconds.
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_ingest::view::DEFAULT_MAX_UPSTREAM_SILENCE), help_heading = ANSWERS)]
    max_upstream_silence_ms: Millis,
    /// /health/ready is 200 only within this many blocks of the upstream's head.
    #[arg(long, default_value_t = 2, help_heading = ANSWERS)]
    max_behind: u64,
    /// While more than --max-behind blocks behind the upstream (catching
    /// up), answer JSON-RPC 503 (Retry-After: 1) without reading it, so a
    /// front end with passive health checks (deploy/nginx) sends reads to
    /// mirrors that are caught up. Alone, leave it off: a mirror behind
    /// still answers its tail and 421s the rest.
    #[arg(long, value_enum, default_value_t = Switch::Off, help_heading = ANSWERS)]
    shed_when_behind: Switch,
    /// Forward misses to this full node instead of answering 421.
    #[arg(long, help_heading = ANSWERS)]
    fallback: Option<String>,
    /// Methods --fallback may forward, comma-separated: names, `prefix*`,
    /// and `!pattern` to refuse what an earlier one allowed (the last that
    /// matches decides); the rest are answered as without a fallback.
    #[arg(long, default_value = neve_serve::DEFAULT_FALLBACK_METHODS, help_heading = ANSWERS)]
    fallback_methods: String,
    /// Forwards to --fallback in flight at once; past it, a miss is 421.
    #[arg(long, default_value_t = neve_serve::DEFAULT_FALLBACK_IN_FLIGHT, help_heading = ANSWERS)]
    fallback_in_flight: usize,

    /// Largest request body.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_MAX_BODY_BYTES as u64), help_heading = LIMITS)]
    max_body_bytes: Bytes,
    /// Most elements in one batch.
    #[arg(long, default_value_t = neve_serve::DEFAULT_MAX_BATCH, help_heading = LIMITS)]
    max_batch: usize,
    /// Most bytes of answers in one batch: the calls after the one that
    /// passes it get -32003 "response too large", as geth's
    /// --rpc.batch-response-max-size (same default).
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_MAX_BATCH_ANSWER_BYTES as u64), help_heading = LIMITS)]
    max_batch_answer_bytes: Bytes,
    /// Most open connections.
    #[arg(long, default_value_t = neve_serve::DEFAULT_MAX_CONNECTIONS, help_heading = LIMITS)]
    max_connections: usize,
    /// How long a connection may go without sending a complete request
    /// header, or without taking any of an answer being sent to it (a bare
    /// number is seconds).
    #[arg(long, value_name = "DURATION", default_value_t = Span(neve_serve::DEFAULT_IDLE_TIMEOUT), help_heading = LIMITS)]
    idle_timeout: Secs,
    /// Most blocks one eth_getLogs may span.
    #[arg(long, default_value_t = neve_serve::DEFAULT_LOGS_MAX_RANGE, help_heading = LIMITS)]
    logs_max_range: u64,
    /// Most logs one eth_getLogs may return.
    #[arg(long, default_value_t = neve_serve::DEFAULT_LOGS_MAX_RESULTS, help_heading = LIMITS)]
    logs_max_results: usize,
    /// Most blocks the eth_getLogs calls of one request (a whole batch
    /// included) may scan together; the rest get -32005.
    #[arg(long, default_value_t = neve_serve::DEFAULT_LOGS_BUDGET_BLOCKS, help_heading = LIMITS)]
    logs_budget_blocks: u64,
    /// Most bytes of logs the eth_getLogs calls of one request may return
    /// together; the rest get -32005.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_LOGS_BUDGET_BYTES), help_heading = LIMITS)]
    logs_budget_bytes: Bytes,
    /// Units of work per second each client address may spend (a call, or
    /// 4 KiB of request and answer, is one; an error answer ten more, a new
    /// connection four); over it, 429 with -32005 and Retry-After. 0: no
    /// limit. For neve facing clients directly; behind a front end, limit there.
    #[arg(long, default_value_t = neve_serve::DEFAULT_CLIENT_RATE, help_heading = LIMITS)]
    client_rate: u64,

    /// Verified state reads (balance, nonce, code, storage, proofs); `off` answers them 421.
    #[arg(long, value_enum, default_value_t = Switch::On, help_heading = STATE)]
    state: Switch,
    /// A state read whose proof is not held waits for the upstream (`on`), or is 421 at once while the proof is fetched in the background (`off`).
    #[arg(long, value_enum, default_value_t = Switch::On, help_heading = STATE)]
    state_fetch: Switch,
    /// How long a state read waits for a fetch-through (a bare number is
    /// milliseconds).
    #[arg(long, alias = "state-fetch-timeout", value_name = "DURATION", default_value_t = Span(neve_serve::DEFAULT_STATE_FETCH_TIMEOUT), help_heading = STATE)]
    state_fetch_timeout_ms: Millis,
    /// Byte budget of the verified node store (trie nodes and code).
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_state::DEFAULT_CACHE_BYTES as u64), help_heading = STATE)]
    state_cache_bytes: Bytes,
    /// Byte budget of calls' answers kept to serve again at the same block
    /// (the same call at the same block hash has the same answer); 0 runs
    /// every call.
    #[arg(long, value_name = "SIZE", default_value_t = Bytes(neve_serve::DEFAULT_CALL_MEMO_BYTES), help_heading = STATE)]
    call_memo_bytes: Bytes,
    /// Keys read at `latest` that prefetch keeps fresh as blocks arrive.
    #[arg(long, default_value_t = neve_state::DEFAULT_HOT_KEYS, help_heading = STATE)]
    state_hot_keys: usize,
    /// How prefetch keeps the hot keys fresh: `block` proves what each new
    /// block touched (the upstream's tracer, or an upstream neve's list) in
    /// one batch, whatever the number of hot keys; `key` proves each hot key
    /// again at every block (for an upstream whose tracing is dear).
    #[arg(long, value_enum, default_value_t = StateRefresh::Block, help_heading = STATE)]
    state_refresh: StateRefresh,
    /// Upstream calls per second prefetch may spend (0: no prefetch).
    #[arg(long, default_value_t = neve_ingest::state_fetch::DEFAULT_PREFETCH_RATE, help_heading = STATE)]
    state_prefetch_rate: u32,

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

/// The endpoint to follow: the URL with its credentials, plus the headers
/// given by flag, environment or file.
fn upstream_endpoint(url: &str, args: &ServeArgs) -> Result<Endpoint> {
    let mut endpoint = Endpoint::parse(url).context("--upstream")?;
    let mut headers = args.upstream_header.clone();
    if let Some(path) = &args.upstream_header_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--upstream-header-file {}", path.display()))?;
        headers.extend(
            text.lines()
                .map(str::trim)
                .filter(|line| !line.is_empty() && !line.starts_with('#'))
                .map(str::to_owned),
        );
    }
    for header in &headers {
        endpoint = endpoint.with_header(header).context("--upstream-header")?;
    }
    Ok(endpoint)
}

/// Puts threads on the CPUs given: this (the main) thread, and so every
/// worker of the runtime about to be built from `runtime`, on
/// --serve-cpus with one worker per CPU; background threads on
/// --ingest-cpus. Called before any thread starts, so a bad list fails at
/// start.
pub fn place_threads(args: &ServeArgs, runtime: &mut tokio::runtime::Builder) -> Result<()> {
    if let Some(cpus) = &args.ingest_cpus {
        // Pinned on a thread of its own, to learn which of them it gets.
        let probe = cpus.clone();
        let got = std::thread::spawn(move || probe.pin_current_thread())
            .join()
            .map_err(|_| anyhow::anyhow!("probing --ingest-cpus"))?
            .with_context(|| {
                format!("--ingest-cpus {cpus}: no CPU of the list is open to this process")
            })?;
        let _ = neve_store::background::set_background_cpus(got);
    }
    if let Some(cpus) = &args.serve_cpus {
        let got = cpus.pin_current_thread().with_context(|| {
            format!("--serve-cpus {cpus}: no CPU of the list is open to this process")
        })?;
        runtime.worker_threads(got.len());
    }
    Ok(())
}

/// Wiring only: settings from the flags, ingest started, serving run on
/// what ingest holds, then both stopped in order.
pub async fn serve(args: ServeArgs) -> Result<()> {
    let rpc_url = rpc_url(&args)?;
    let floor = floor(&args)?;
    neve_upstream::tls::configure(args.ca_file.as_deref()).context("--ca-file")?;
    let endpoint = upstream_endpoint(&rpc_url, &args)?;
    let (client, follower_client) = upstream_clients(&endpoint, &args)?;
    let listeners = bind_listeners(&args).await?;
    let upstream_url = client.url().to_owned();
    let shown = endpoint.clone();
    let settings = ingest_settings(&args, rpc_url, endpoint, client, follower_client, floor);
    let running = neve_ingest::start(settings, |identity| {
        tracing::info!(
            listen = %args.listen,
            admin_listen = args.admin_listen.map(|a| a.to_string()),
            chain_id = identity.chain_id,
            upstream = %shown,
            version = crate::build::VERSION_LINE,
            "serving"
        )
    })
    .await
    .map_err(|error| launch_error(error, &upstream_url, &args.data_dir))?;
    let config = serve_config(args);
    let neve_ingest::Running {
        identity,
        view,
        reader,
        state,
        stopped,
        mut handle,
    } = running;
    let state = state.map(|state| neve_serve::StateAccess {
        state: state.state,
        fetch: Some(state.fetch),
        rules: state.rules,
    });
    let server = tokio::spawn(neve_serve::serve(
        listeners,
        reader,
        Arc::new(IngestChain(view)),
        identity,
        config,
        state,
        stopped,
    ));
    shutdown_signal().await;
    tracing::info!("shutting down");
    handle.stop_following().await;
    server.await.context("server task")?.context("server")?;
    handle.close();
    Ok(())
}

/// The upstream's JSON-RPC URL: a mirror's source, a node's URL, or the
/// C-chain's under an avalanchego's base.
fn rpc_url(args: &ServeArgs) -> Result<String> {
    Ok(
        match (&args.mirror_from, &args.upstream, args.upstream_kind) {
            (Some(neve), _, _) => neve.trim_end_matches('/').to_string(),
            (None, Some(url), UpstreamKind::Evm) => url.clone(),
            (None, Some(base), UpstreamKind::Avalanchego) => {
                format!("{}/ext/bc/C/rpc", base.trim_end_matches('/'))
            }
            (None, None, _) => anyhow::bail!("--upstream or --mirror-from is required"),
        },
    )
}

/// Where an empty store starts, from --floor.
fn floor(args: &ServeArgs) -> Result<Floor> {
    Ok(match args.floor.as_deref() {
        None => Floor::Retention,
        Some("tip") => Floor::Tip,
        Some(height) => Floor::Height(height.parse().context("--floor takes a height or `tip`")?),
    })
}

/// The client shared with serving, and the follower's own: each runtime
/// gets a pool of its own; the budget and what is learnt of the endpoint's
/// batch limit are shared.
fn upstream_clients(endpoint: &Endpoint, args: &ServeArgs) -> Result<(RpcClient, RpcClient)> {
    let client = RpcClient::for_endpoint(endpoint.clone())
        .context("--upstream")?
        .with_timeout(Duration::from_millis(
            args.upstream_timeout_ms.0.as_millis().max(1) as u64,
        ))
        .with_max_response_bytes(args.upstream_max_body_bytes.usize())
        .with_pacing(Arc::new(Pacing::new(args.upstream_rps)))
        .with_max_batch(args.upstream_max_batch);
    let follower_client = RpcClient::for_endpoint(endpoint.clone())
        .context("--upstream")?
        .with_timeout(client.timeout())
        .with_max_response_bytes(args.upstream_max_body_bytes.usize())
        .sharing_limits_of(&client);
    Ok((client, follower_client))
}

/// Binds --listen and --admin-listen, before ingest starts.
async fn bind_listeners(args: &ServeArgs) -> Result<neve_serve::Listeners> {
    let public = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let admin = match args.admin_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding --admin-listen {addr}"))?,
        ),
        None => None,
    };
    Ok(neve_serve::Listeners { public, admin })
}

/// The store's retention: --retain-blocks, where 0 keeps everything.
fn retain_blocks(args: &ServeArgs) -> Option<u64> {
    (args.retain_blocks > 0).then_some(args.retain_blocks)
}

/// What ingest is started with, from the flags.
fn ingest_settings(
    args: &ServeArgs,
    rpc_url: String,
    endpoint: Endpoint,
    client: RpcClient,
    follower_client: RpcClient,
    floor: Floor,
) -> IngestSettings {
    let retain_blocks = retain_blocks(args);
    let mirror = args.mirror_from.is_some();
    IngestSettings {
        endpoint,
        rpc_url,
        client,
        follower_client,
        data_dir: args.data_dir.clone(),
        store: StoreConfig {
            retain_blocks,
            retain_bytes: args.retain_bytes.map(|b| b.0),
            durability: match args.durability {
                DurabilityArg::Fsync => Durability::Fsync,
                DurabilityArg::Os => Durability::OsBuffered,
            },
            segment_blocks: args.segment_blocks,
            ..StoreConfig::default()
        },
        ingest: IngestConfig {
            floor,
            retain_blocks,
            max_reorg_depth: args.max_reorg_depth,
            fetch_concurrency: args.fetch_concurrency,
            buffer_bytes: args.ingest_buffer_bytes.usize(),
            mirror,
            ..IngestConfig::default()
        },
        max_upstream_silence: args.max_upstream_silence_ms.0,
        ws_url: args.ws_url.clone(),
        ws_credentials_always: args.ws_credentials == WsCredentials::Always,
        progress_interval: args.progress_interval_secs.0,
        poll: args.poll_ms.0,
        state: (args.state == Switch::On).then(|| StateSettings {
            cache_bytes: args.state_cache_bytes.usize(),
            hot_keys: args.state_hot_keys,
            coreth_upstream: matches!(args.upstream_kind, UpstreamKind::Avalanchego),
            prefetch_rate: args.state_prefetch_rate,
            // A neve upstream says what each block touched; a node's
            // tracer is asked otherwise.
            touches: match (args.state_refresh, mirror) {
                (StateRefresh::Key, _) => None,
                (StateRefresh::Block, true) => Some(TouchSource::Neve),
                (StateRefresh::Block, false) => Some(TouchSource::Tracer),
            },
        }),
    }
}

/// Why ingest did not start, with what it was doing.
fn launch_error(error: LaunchError, upstream_url: &str, data_dir: &Path) -> anyhow::Error {
    match error {
        LaunchError::Runtime(error) => {
            anyhow::Error::new(error).context("starting ingest's runtime")
        }
        LaunchError::Task(error) => anyhow::Error::new(error).context("ingest's runtime"),
        LaunchError::Start(StartError::Opening(error)) => {
            anyhow::Error::new(error).context(format!("opening {}", data_dir.display()))
        }
        // The same endpoint as ingest's own client.
        LaunchError::Start(StartError::Connecting(error)) => {
            anyhow::Error::new(error).context(format!(
                "connecting to {} and opening {}",
                upstream_url,
                data_dir.display()
            ))
        }
        LaunchError::WsUrl(error) => anyhow::Error::new(error).context("--ws-url"),
    }
}

/// Serving's settings, from the flags.
fn serve_config(args: ServeArgs) -> ServeConfig {
    ServeConfig {
        max_body_bytes: args.max_body_bytes.usize(),
        max_batch: args.max_batch,
        max_batch_answer_bytes: args.max_batch_answer_bytes.usize(),
        max_connections: args.max_connections,
        idle_timeout: args.idle_timeout.0.max(Duration::from_secs(1)),
        drain_timeout: args.drain_timeout.0,
        drain_delay: args.drain_delay.0,
        logs_max_range: args.logs_max_range,
        logs_max_results: args.logs_max_results,
        logs_budget_blocks: args.logs_budget_blocks,
        logs_budget_bytes: args.logs_budget_bytes.0,
        latest_lag: args.latest_lag,
        latest_grace: args.latest_grace_ms.0,
        max_behind: args.max_behind,
        shed_when_behind: args.shed_when_behind == Switch::On,
        retain_blocks: retain_blocks(&args),
        retain_bytes: args.retain_bytes.map(|b| b.0),
        state_fetch_timeout: (args.state_fetch == Switch::On)
            .then_some(args.state_fetch_timeout_ms.0),
        call_memo_bytes: args.call_memo_bytes.0,
        client_rate: args.client_rate,
        cors_origins: Origins::from_list(&args.cors_origins),
        ws_origins: Origins::from_list(args.ws_origins.as_ref().unwrap_or(&args.cors_origins)),
        client_version: format!("neve/v{}-{}", crate::build::VERSION, crate::build::COMMIT),
        coreth_upstream: matches!(args.upstream_kind, UpstreamKind::Avalanchego),
        fallback: args.fallback,
        fallback_methods: args.fallback_methods,
        fallback_in_flight: args.fallback_in_flight,
        ..ServeConfig::default()
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
