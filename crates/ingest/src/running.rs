//! Ingest's one door: [`start`] does everything a running neve needs of
//! ingest (the follower on a runtime of its own, `newHeads`, catch-up
//! progress, state fetching and the chain's call rules, supervision) and
//! returns what the binary holds while it runs ([`Running`]): the view
//! serving reads, the store's reader, the state serving answers from, and
//! the handle that stops it all in order ([`IngestHandle`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use neve_execution::{Dialect, RulesCell};
use neve_state::{Fetch, State, StorageKeys};
use neve_store::{Identity, Reader, StoreConfig};
use neve_upstream::{Credentials, Endpoint, RpcClient, RpcError};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

use crate::follow::IngestConfig;
use crate::state_fetch::{ProofFetcher, TouchSource, prefetch, save_hot_keys};
use crate::supervise::{StartError, supervise};
use crate::view::IngestView;

/// The hot keys' file in the data directory (beside the store's own
/// directory): what prefetch refreshes first after a restart.
pub const HOT_KEYS_FILE: &str = "hot-keys";

/// What ingest is started with.
pub struct IngestSettings {
    /// The upstream, with its credentials.
    pub endpoint: Endpoint,
    /// The upstream's JSON-RPC URL, from which `newHeads`' WebSocket URL is
    /// derived when `ws_url` does not say it.
    pub rpc_url: String,
    /// The client shared with serving: the view's, state fetching's and the
    /// call rules'.
    pub client: RpcClient,
    /// The follower's own client (a pool of its own on ingest's runtime,
    /// sharing `client`'s budget and batch limit).
    pub follower_client: RpcClient,
    /// Where the store lives.
    pub data_dir: PathBuf,
    /// The store's settings.
    pub store: StoreConfig,
    /// The follower's settings.
    pub ingest: IngestConfig,
    /// How long the upstream may be silent before the tip is not taken for
    /// the head.
    pub max_upstream_silence: Duration,
    /// `newHeads`' WebSocket URL as given: `None` derives it, `none` polls
    /// only.
    pub ws_url: Option<String>,
    /// Send the upstream's credentials to `ws_url` whatever its host or
    /// scheme.
    pub ws_credentials_always: bool,
    /// How often catch-up progress is logged when stderr is no terminal.
    pub progress_interval: Duration,
    /// How often the follower asks the upstream for its head.
    pub poll: Duration,
    /// State fetching and call rules; `None` leaves them off.
    pub state: Option<StateSettings>,
}

/// What state fetching is started with.
pub struct StateSettings {
    /// Bytes of verified nodes kept.
    pub cache_bytes: usize,
    /// Hot keys remembered for prefetch.
    pub hot_keys: usize,
    /// The upstream is an avalanchego: coreth's storage keys and rules
    /// whatever the chain id.
    pub coreth_upstream: bool,
    /// Upstream calls per second prefetch may spend (0: no prefetch).
    pub prefetch_rate: u32,
    /// Where the keys each block touched come from; `None` refreshes every
    /// hot key at every block.
    pub touches: Option<TouchSource>,
    /// Bytes of execution witnesses kept to serve mirrors.
    pub witness_bytes: usize,
    /// Whether each new block's execution witness is fetched as it is
    /// stored, before any trace asks for it.
    pub witness_prefetch: bool,
}

/// The state serving answers from, while ingest fetches into it.
pub struct IngestState {
    /// The verified node store.
    pub state: Arc<State>,
    /// Fetch-through for reads that miss.
    pub fetch: Arc<dyn Fetch>,
    /// The chain's rules for calls, once learnt.
    pub rules: Arc<RulesCell>,
}

/// What the binary holds while ingest runs.
pub struct Running {
    /// The store's identity (chain id, genesis).
    pub identity: Identity,
    /// Heights, health and metrics, for serving.
    pub view: IngestView,
    /// Reads what ingest stored.
    pub reader: Reader,
    /// State and call rules, when started with them.
    pub state: Option<IngestState>,
    /// Turns true when [`IngestHandle::stop_following`] is called: what
    /// serving stops on too.
    pub stopped: watch::Receiver<bool>,
    /// Stops ingest.
    pub handle: IngestHandle,
}

/// Why ingest did not start.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Ingest's runtime could not be built.
    #[error(transparent)]
    Runtime(std::io::Error),
    /// The task starting the follower on ingest's runtime died.
    #[error(transparent)]
    Task(tokio::task::JoinError),
    /// No follower: the store or the upstream refused.
    #[error(transparent)]
    Start(StartError),
    /// The WebSocket URL for `newHeads` is not one.
    #[error(transparent)]
    WsUrl(RpcError),
}

/// Stops what [`start`] started, in order.
pub struct IngestHandle {
    runtime: tokio::runtime::Runtime,
    supervisor: JoinHandle<()>,
    stop: watch::Sender<bool>,
    /// Kept to save the hot keys once serving stopped.
    state: Option<Arc<State>>,
    hot_keys_file: PathBuf,
}

/// Starts ingest: the tip's threads and ingest's runtime, the follower
/// (waiting for an upstream not up yet), then `announce` with the chain's
/// identity, then `newHeads`, progress, state fetching with the call rules,
/// and the follower's supervisor. Called on serving's runtime, from the
/// thread with serving's priority.
pub async fn start(
    settings: IngestSettings,
    announce: impl FnOnce(&Identity),
) -> Result<Running, LaunchError> {
    // The tip's work runs at serving's priority: started from this thread,
    // which has it, before ingest's runtime lowers its own.
    crate::cpu::start_tip_threads();
    // Ingest (fetching, verifying, storing, following heads, prefetching)
    // runs on a runtime of its own, with a client of its own: reading
    // megabytes of blocks from the upstream then never holds a worker that
    // answers requests.
    let runtime = crate::cpu::runtime().map_err(LaunchError::Runtime)?;
    let follower = runtime
        .spawn(crate::supervise::start(
            settings.follower_client.clone(),
            settings.data_dir.clone(),
            settings.store.clone(),
            settings.ingest.clone(),
        ))
        .await
        .map_err(LaunchError::Task)?
        .map_err(LaunchError::Start)?;
    let identity = follower.identity();
    let view = IngestView::new(
        follower.status(),
        settings.endpoint.shown().clone(),
        settings.client.clone(),
    )
    .with_max_silence(settings.max_upstream_silence);
    let reader = follower.reader();
    announce(&identity);

    let (stop, stopped) = watch::channel(false);
    let wake = Arc::new(Notify::new());
    if let Some(ws) = heads_endpoint(&settings)? {
        runtime.spawn(crate::heads::follow_heads(
            ws,
            wake.clone(),
            stopped.clone(),
        ));
    }
    tokio::spawn(crate::progress::report_progress(
        settings.ingest.mirror,
        view.status().clone(),
        reader.clone(),
        settings.progress_interval.max(Duration::from_secs(1)),
        stopped.clone(),
    ));
    let hot_keys_file = settings.data_dir.join(HOT_KEYS_FILE);
    let state = settings.state.as_ref().map(|state| {
        start_state(
            state,
            &settings.client,
            &runtime,
            &reader,
            identity.chain_id,
            &hot_keys_file,
            &stopped,
        )
    });
    let supervisor = runtime.spawn(supervise(follower, wake, settings.poll, stopped.clone()));
    Ok(Running {
        identity,
        view,
        reader,
        handle: IngestHandle {
            runtime,
            supervisor,
            stop,
            state: state.as_ref().map(|access| access.state.clone()),
            hot_keys_file,
        },
        state,
        stopped,
    })
}

/// `newHeads`' endpoint, or `None` to poll only; says where the upstream's
/// credentials go when that is not plain.
fn heads_endpoint(settings: &IngestSettings) -> Result<Option<Endpoint>, LaunchError> {
    let ws_url = settings
        .ws_url
        .clone()
        .unwrap_or_else(|| crate::heads::derive_ws_url(&settings.rpc_url));
    if ws_url == "none" {
        return Ok(None);
    }
    let (ws, credentials) = settings
        .endpoint
        .with_url(&ws_url, settings.ws_credentials_always)
        .map_err(LaunchError::WsUrl)?;
    match credentials {
        Credentials::Withheld => tracing::warn!(
            ws = %ws.shown(),
            "the upstream's credentials are not sent to this WebSocket (another host, or plain text); --ws-credentials always sends them"
        ),
        Credentials::Inherited if settings.ws_credentials_always => {
            tracing::info!(
                ws = %ws.shown(),
                "the upstream's credentials are sent to this WebSocket (--ws-credentials always)"
            )
        }
        _ => {}
    }
    Ok(Some(ws))
}

/// The verified node store with its fetcher, prefetch on ingest's runtime,
/// and the call rules learnt on serving's.
fn start_state(
    settings: &StateSettings,
    client: &RpcClient,
    runtime: &tokio::runtime::Runtime,
    reader: &Reader,
    chain_id: u64,
    hot_keys_file: &std::path::Path,
    stopped: &watch::Receiver<bool>,
) -> IngestState {
    // coreth's rule for storage keys: a C-chain by its id, or any chain
    // behind an avalanchego.
    let storage_keys = if settings.coreth_upstream {
        StorageKeys::Coreth
    } else {
        StorageKeys::of_chain(chain_id)
    };
    let state = Arc::new(
        State::new(settings.cache_bytes, settings.hot_keys)
            .with_storage_keys(storage_keys)
            .with_witness_bytes(settings.witness_bytes),
    );
    let fetcher = ProofFetcher::new(client.clone(), state.clone());
    runtime.spawn(prefetch(
        fetcher.clone(),
        reader.clone(),
        settings.prefetch_rate,
        settings.touches,
        settings.witness_prefetch,
        Some(hot_keys_file.to_path_buf()),
        stopped.clone(),
    ));
    let fetch: Arc<dyn Fetch> = Arc::new(fetcher);
    let rules = Arc::new(RulesCell::default());
    // The rules must be of the EVM whose storage keys the state follows.
    let dialect = match storage_keys {
        StorageKeys::Coreth => Dialect::Coreth,
        StorageKeys::Plain => Dialect::Ethereum,
    };
    tokio::spawn(crate::call_rules::learn(
        client.clone(),
        rules.clone(),
        chain_id,
        dialect,
        stopped.clone(),
    ));
    IngestState {
        state,
        fetch,
        rules,
    }
}

impl IngestHandle {
    /// Tells ingest and serving to stop, and waits for the follower's
    /// supervisor to end.
    pub async fn stop_following(&mut self) {
        let _ = self.stop.send(true);
        if let Err(error) = (&mut self.supervisor).await {
            tracing::error!(%error, "the follower's supervisor ended abnormally");
        }
    }

    /// Once serving stopped: saves the hot keys, for a warm start (here,
    /// before ingest's runtime is dropped, so a stop never races the
    /// write), then lets ingest's runtime go.
    pub fn close(self) {
        if let Some(state) = &self.state
            && let Err(error) = save_hot_keys(&self.hot_keys_file, state)
        {
            tracing::warn!(%error, "could not save the hot keys");
        }
        self.runtime.shutdown_background();
    }
}
