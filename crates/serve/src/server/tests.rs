//! What the crate's tests answer with: a server over a store of ten
//! synthetic blocks (heights 0 to 9), chain views that put it in a given
//! state, and the status and body it answers a request with.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use neve_store::testing::SyntheticBlock;
use neve_store::{Durability, Identity, Store, StoreConfig};

use crate::config::{ChainView, ServeConfig, UpstreamHealth};
use crate::metrics::Metrics;
use crate::rpc::Context;

use super::Server;
use super::export;
use super::offload::{io_pool, scan_pool};

pub(crate) struct FixedChain;

impl ChainView for FixedChain {
    fn upstream_head(&self) -> Option<u64> {
        Some(9)
    }
    fn safe(&self) -> Option<u64> {
        Some(8)
    }
    fn finalized(&self) -> Option<u64> {
        Some(7)
    }
    fn upstream_health(&self) -> UpstreamHealth {
        UpstreamHealth::default()
    }
}

pub(crate) fn server() -> (Server, tempfile::TempDir) {
    server_with(Arc::new(FixedChain))
}

pub(crate) fn server_with(chain: Arc<dyn ChainView>) -> (Server, tempfile::TempDir) {
    server_configured(chain, |_| {})
}

pub(crate) fn server_configured(
    chain: Arc<dyn ChainView>,
    configure: impl FnOnce(&mut ServeConfig),
) -> (Server, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let identity = Identity {
        chain_id: 5,
        genesis_hash: [0; 32],
    };
    let mut store = Store::open(
        dir.path(),
        identity,
        StoreConfig {
            durability: Durability::OsBuffered,
            ..StoreConfig::default()
        },
    )
    .unwrap();
    let blocks: Vec<_> = (0..10).map(|h| SyntheticBlock::new(0, h, 3, 200)).collect();
    store
        .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
        .unwrap();
    let server = Server {
        events: tokio::sync::broadcast::channel(4).0,
        scans: scan_pool(),
        io: Arc::new(io_pool()),
        calls: super::execute::call_pool(),
        ctx: Arc::new(Context {
            reader: store.reader(),
            chain,
            state: Some(Arc::new(neve_state::State::new(1 << 20, 64))),
            post_states: None,
            state_answers: false,
            call_rules: Default::default(),
            call_blocks: Default::default(),
            call_codes: Default::default(),
            replay_blocks: neve_execution::HeightCache::with_entries(
                neve_execution::trace::REPLAY_BLOCKS_KEPT,
            ),
            call_answers: Default::default(),
            trace_answers: Default::default(),
            replays_diverged: Default::default(),
            trace_asks: Default::default(),
            answers_along: Default::default(),
            blocks_prepared: Default::default(),
            proofs_ahead: Default::default(),
            fee_blocks: Default::default(),
            coreth: false,
            config: {
                let mut config = ServeConfig {
                    logs_max_range: 5,
                    logs_max_results: 4,
                    ..ServeConfig::default()
                };
                configure(&mut config);
                config
            },
            chain_id: Bytes::from_static(b"\"0x5\""),
            net_version: Bytes::from_static(b"\"5\""),
            client_version: Bytes::from_static(b"\"neve/test\""),
            genesis_hash: "00".repeat(32),
        }),
        metrics: Arc::new(Metrics::default()),
        clients: None,
        shutting_down: AtomicBool::new(false),
        stopping: {
            let (never, stopping) = tokio::sync::watch::channel(false);
            std::mem::forget(never);
            stopping
        },
        fallback: None,
        fetch: None,
        exports: Arc::new(tokio::sync::Semaphore::new(export::MAX_EXPORTS)),
        flights: Default::default(),
        started: Instant::now(),
    };
    std::mem::forget(store); // keep the writer (and its lock) for the reader's lifetime
    (server, dir)
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

/// A chain view whose follower may be down, with a fresh upstream that
/// may say which blocks it proves state at.
pub(crate) struct Following(
    pub(crate) bool,
    pub(crate) Option<neve_upstream::StateWindow>,
);

impl ChainView for Following {
    fn upstream_head(&self) -> Option<u64> {
        Some(9)
    }
    fn safe(&self) -> Option<u64> {
        None
    }
    fn finalized(&self) -> Option<u64> {
        None
    }
    fn upstream_health(&self) -> UpstreamHealth {
        UpstreamHealth {
            connected: true,
            last_contact_age_seconds: Some(0.1),
            ..UpstreamHealth::default()
        }
    }
    fn following(&self) -> bool {
        self.0
    }
    fn upstream_state_window(&self) -> Option<neve_upstream::StateWindow> {
        self.1
    }
}

pub(crate) fn answer(
    server: &Server,
    runtime: &tokio::runtime::Runtime,
    body: &str,
) -> (u16, String) {
    let response = runtime.block_on(server.respond(&Bytes::copy_from_slice(body.as_bytes())));
    let status = response.status().as_u16();
    let bytes = runtime
        .block_on(response.into_body().collect())
        .unwrap()
        .to_bytes();
    (status, String::from_utf8(bytes.to_vec()).unwrap())
}

/// Whether `server`'s store is out of memory, paged out again a few times
/// while the kernel keeps some of it: paging out is its best effort (a
/// page under I/O stays).
pub(crate) fn paged_out(server: &Server) -> bool {
    let resident = || server.ctx.reader.residency(1 << 16).resident_bytes();
    for _ in 0..5 {
        if resident() == 0 {
            break;
        }
        neve_store::testing::page_out(&server.ctx.reader);
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    resident() == 0
}
