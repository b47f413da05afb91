//! The follower itself: connecting to the upstream (or opening the store
//! offline), resuming after a predecessor died, and what it hands out.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use neve_store::{Identity, Reader, Store, StoreConfig};
use neve_upstream::{RpcClient, parse_quantity};
use serde::Deserialize;

use crate::bootstrap::neve_health;
use crate::error::{IngestError, rpc};
use crate::fetch::probe;
use crate::status::{Capabilities, IngestStatus};

use super::config::{FIRST_BLOCK_BYTES_GUESS, IngestConfig, SharedStore};

/// Follows one upstream into one store.
pub struct Follower {
    pub(super) client: RpcClient,
    pub(super) store: SharedStore,
    pub(super) reader: Reader,
    pub(super) identity: Identity,
    pub(super) caps: Capabilities,
    /// When the upstream was last probed, and whether a failed step asks
    /// for probing again.
    pub(super) probed_at: std::time::Instant,
    pub(super) reprobe: bool,
    /// The size of recent prepared blocks (a moving average), to bound
    /// fetches in flight by bytes.
    pub(super) block_bytes: usize,
    pub(super) config: IngestConfig,
    pub(super) status: Arc<IngestStatus>,
    /// Whether the upstream was reached and probed; a follower opened
    /// [`Follower::offline`] is not, and resumes before it follows.
    pub(super) online: bool,
}

#[derive(Deserialize)]
pub(crate) struct HashAndNumber {
    pub(crate) hash: alloy_primitives::B256,
    pub(crate) number: String,
}

impl Follower {
    /// Probes the upstream (chain id, genesis hash, capabilities) and opens
    /// the store for that chain; a store of another chain is refused.
    pub async fn connect(
        client: RpcClient,
        store_dir: &Path,
        store_config: StoreConfig,
        config: IngestConfig,
    ) -> Result<Follower, IngestError> {
        let identity = upstream_identity(&client, config.mirror).await?;
        let dir = store_dir.to_path_buf();
        // Opening replays and checks the newest segment: file I/O, off the
        // async workers.
        let store = tokio::task::spawn_blocking(move || Store::open(&dir, identity, store_config))
            .await
            .expect("opening the store does not panic")?;
        let status = Arc::new(IngestStatus::default());
        Follower::resume(client, Arc::new(Mutex::new(store)), config, status).await
    }

    /// Opens the store already in `store_dir` for the chain its META names,
    /// without reaching the upstream: for serving the stored tail while the
    /// upstream refuses or cannot be reached (a wrong key, a wrong
    /// certificate, an outage). The follower is down, with `why` as its
    /// last error, until it resumes; `None` when there is no store yet.
    pub async fn offline(
        client: RpcClient,
        store_dir: &Path,
        store_config: StoreConfig,
        config: IngestConfig,
        why: String,
    ) -> Result<Option<Follower>, IngestError> {
        let Some(identity) = neve_store::stored_identity(store_dir) else {
            return Ok(None);
        };
        let dir = store_dir.to_path_buf();
        let store = tokio::task::spawn_blocking(move || Store::open(&dir, identity, store_config))
            .await
            .expect("opening the store does not panic")?;
        let status = Arc::new(IngestStatus::default());
        status.follower_down.store(true, Ordering::Relaxed);
        status.set_last_error(Some(why));
        status.contact(false);
        Ok(Some(Follower {
            client,
            reader: store.reader(),
            store: Arc::new(Mutex::new(store)),
            identity,
            caps: Capabilities::default(),
            probed_at: std::time::Instant::now(),
            reprobe: true,
            block_bytes: FIRST_BLOCK_BYTES_GUESS,
            config,
            status,
            online: false,
        }))
    }

    /// Whether the upstream was reached (see [`Follower::offline`]).
    pub fn is_online(&self) -> bool {
        self.online
    }

    /// A follower for a store already open (after the previous one died):
    /// checks the upstream still serves the store's chain and probes it
    /// again. A store whose writer panicked mid-write is not written again.
    pub async fn resume(
        client: RpcClient,
        store: SharedStore,
        config: IngestConfig,
        status: Arc<IngestStatus>,
    ) -> Result<Follower, IngestError> {
        let (reader, stored) = {
            let guard = store.lock().map_err(|_| IngestError::WriterPoisoned)?;
            (guard.reader(), guard.identity())
        };
        let identity = upstream_identity(&client, config.mirror).await?;
        if identity != stored {
            return Err(IngestError::Refused {
                height: 0,
                reason: format!(
                    "the upstream serves chain {} with another genesis than the store's chain {}",
                    identity.chain_id, stored.chain_id
                ),
            });
        }
        let caps = if config.mirror {
            // Another neve serves receipts per block and raw data (as null
            // when its own upstream had none).
            Capabilities {
                block_receipts: true,
                raw: true,
            }
        } else {
            probe(&client).await?
        };
        status.publish_capabilities(caps);
        status.publish_state_window(crate::fetch::probe_state_window(&client).await);
        tracing::info!(
            chain_id = stored.chain_id,
            ?caps,
            url = client.url(),
            mirror = config.mirror,
            "upstream probed"
        );
        status.contact(true);
        Ok(Follower {
            client,
            store,
            reader,
            identity: stored,
            caps,
            probed_at: std::time::Instant::now(),
            reprobe: false,
            block_bytes: FIRST_BLOCK_BYTES_GUESS,
            config,
            status,
            online: true,
        })
    }

    /// The store this follower writes, to hand to a successor.
    pub fn shared_store(&self) -> SharedStore {
        self.store.clone()
    }

    /// The upstream this follower reads.
    pub fn client(&self) -> &RpcClient {
        &self.client
    }

    /// How this follower was configured.
    pub fn config(&self) -> &IngestConfig {
        &self.config
    }

    /// What the probe found.
    pub fn capabilities(&self) -> Capabilities {
        self.caps
    }

    /// A reader of the store this follower writes.
    pub fn reader(&self) -> Reader {
        self.reader.clone()
    }

    /// The live counters.
    pub fn status(&self) -> Arc<IngestStatus> {
        self.status.clone()
    }

    /// The store's identity (chain id, genesis).
    pub fn identity(&self) -> Identity {
        self.identity
    }
}

/// Which chain the upstream serves: its chain id and genesis hash, from
/// `eth_chainId` and block 0, or from another neve's `/health`.
async fn upstream_identity(client: &RpcClient, mirror: bool) -> Result<Identity, IngestError> {
    if mirror {
        let health = neve_health(client).await?;
        return Ok(Identity {
            chain_id: health.chain_id,
            genesis_hash: health.genesis_hash,
        });
    }
    let chain_id: String = client
        .call("eth_chainId", ())
        .await
        .map_err(rpc("eth_chainId"))?;
    let chain_id = parse_quantity(&chain_id).ok_or_else(|| IngestError::Refused {
        height: 0,
        reason: format!("eth_chainId returned {chain_id:?}"),
    })?;
    let genesis: Option<HashAndNumber> = client
        .call("eth_getBlockByNumber", ("0x0", false))
        .await
        .map_err(rpc("fetching the genesis block"))?;
    let genesis = genesis.ok_or(IngestError::Missing(0))?;
    Ok(Identity {
        chain_id,
        genesis_hash: genesis.hash.0,
    })
}
