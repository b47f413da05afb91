//! `neve serve`: follow an upstream into the store and serve it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use neve_ingest::{
    IngestConfig, IngestSettings, LaunchError, StartError, StartHeight, StateSettings, TouchSource,
};
use neve_serve::{Origins, ServeConfig};
use neve_store::{Durability, StoreConfig};
use neve_upstream::{Endpoint, Pacing, RpcClient};

mod args;

pub use args::ServeArgs;
use args::{DurabilityArg, StateRefresh, Switch, UpstreamKind, WsCredentials};

use crate::chain_view::IngestChain;

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
        let _ = neve_pool::set_background_cpus(got);
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
    // The upstream as logs may show it (credentials redacted).
    let shown = endpoint.shown().clone();
    let settings = ingest_settings(&args, rpc_url, endpoint, client, follower_client, floor);
    let running = neve_ingest::start(settings, |identity| {
        tracing::info!(
            listen = %args.listen,
            admin_listen = args.admin_listen.map(|a| a.to_string()),
            chain_id = identity.chain_id,
            upstream = %shown,
            version = crate::version::VERSION_LINE,
            "serving"
        )
    })
    .await
    .map_err(|error| launch_error(error, shown.as_str(), &args.data_dir))?;
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
fn floor(args: &ServeArgs) -> Result<StartHeight> {
    Ok(match args.floor.as_deref() {
        None => StartHeight::Retention,
        Some("tip") => StartHeight::Tip,
        Some(height) => {
            StartHeight::Height(height.parse().context("--floor takes a height or `tip`")?)
        }
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
    floor: StartHeight,
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
            witness_bytes: args.witness_bytes.usize(),
            witness_prefetch: args.witness_prefetch == Switch::On,
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
        trace_memo_bytes: args.trace_memo_bytes.0,
        client_rate: args.client_rate,
        cors_origins: Origins::from_list(&args.cors_origins),
        ws_origins: Origins::from_list(args.ws_origins.as_ref().unwrap_or(&args.cors_origins)),
        client_version: format!(
            "neve/v{}-{}",
            crate::version::VERSION,
            crate::version::COMMIT
        ),
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
