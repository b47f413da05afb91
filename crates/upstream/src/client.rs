//! [`RpcClient`]: what a client holds and how it is set up. The calls it
//! makes live in `calls`, `batch` and `transport`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;

use crate::endpoint::Endpoint;
use crate::error::RpcError;
use crate::pacing::Pacing;
use crate::tls;

/// Most calls sent in one batch unless the endpoint's refusals teach fewer
/// (geth's `--rpc.batch-request-limit` default). Default is 1,000.
pub const DEFAULT_MAX_BATCH: usize = 1000;

/// How long one HTTP exchange may take before it fails with
/// [`RpcError::Timeout`]. Generous because a loaded node can take seconds to
/// answer a large batch; callers that want less use [`RpcClient::with_timeout`].
/// Default is 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest answer body read from an upstream or fallback: a block with its
/// receipts and raw RLP is a few MiB on mainnet, a batch of them tens; a
/// body past this is refused (a broken or hostile peer cannot make neve
/// buffer without bound). Default is 256 MiB.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 256 << 20;

/// A JSON-RPC client over HTTP/1.1 (plain or TLS) with a keep-alive pool;
/// cheap to clone, and clones share the pool, the request budget and what
/// was learnt of the endpoint's batch limit.
#[derive(Clone, Debug)]
pub struct RpcClient {
    pub(crate) endpoint: Endpoint,
    pub(crate) http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    pub(crate) timeout: Duration,
    pub(crate) max_response_bytes: usize,
    pub(crate) next_id: Arc<AtomicU64>,
    pub(crate) pacing: Arc<Pacing>,
    pub(crate) max_batch: Arc<AtomicUsize>,
}

impl RpcClient {
    /// A client for `url` (`http://` or `https://`, credentials in any form
    /// [`Endpoint`] reads).
    pub fn new(url: &str) -> Result<Self, RpcError> {
        RpcClient::for_endpoint(Endpoint::parse(url)?)
    }

    /// A client for a parsed endpoint (with headers added).
    pub fn for_endpoint(endpoint: Endpoint) -> Result<Self, RpcError> {
        if !matches!(endpoint.uri().scheme_str(), Some("http" | "https")) {
            return Err(RpcError::InvalidUrl {
                url: endpoint.shown().clone(),
                reason: "JSON-RPC goes over http:// or https://".into(),
            });
        }
        let tls = match tls::client_config() {
            Ok(config) => config,
            Err(reason) if endpoint.is_tls() => {
                return Err(RpcError::InvalidUrl {
                    url: endpoint.shown().clone(),
                    reason,
                });
            }
            // A plain-HTTP client never uses it.
            Err(_) => tls::untrusting(),
        };
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(RpcClient {
            endpoint,
            http,
            timeout: DEFAULT_TIMEOUT,
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            next_id: Default::default(),
            pacing: Arc::new(Pacing::new(0.0)),
            max_batch: Arc::new(AtomicUsize::new(DEFAULT_MAX_BATCH)),
        })
    }

    /// The same client drawing on `pacing` (a budget shared with every
    /// other client of the same upstream).
    pub fn with_pacing(mut self, pacing: Arc<Pacing>) -> Self {
        self.pacing = pacing;
        self
    }

    /// The same client sharing `other`'s request budget and learnt batch
    /// limit (a client of the same upstream with a pool of its own).
    pub fn sharing_limits_of(mut self, other: &RpcClient) -> Self {
        self.pacing = other.pacing.clone();
        self.max_batch = other.max_batch.clone();
        self
    }

    /// The pacing this client draws on.
    pub fn pacing(&self) -> &Arc<Pacing> {
        &self.pacing
    }

    /// The same client sending at most `calls` calls per batch (at least
    /// one); the endpoint's refusals may lower it further.
    pub fn with_max_batch(mut self, calls: usize) -> Self {
        self.max_batch = Arc::new(AtomicUsize::new(calls.max(1)));
        self
    }

    /// The most calls a batch carries now (set, or learnt from refusals).
    pub fn max_batch(&self) -> usize {
        self.max_batch.load(Ordering::Relaxed)
    }

    /// The same client with another limit on answer bodies; see
    /// [`DEFAULT_MAX_RESPONSE_BYTES`].
    pub fn with_max_response_bytes(mut self, limit: usize) -> Self {
        self.max_response_bytes = limit;
        self
    }

    /// The limit on answer bodies.
    pub fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    /// The per-exchange timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same client with another per-exchange timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same client sending `Authorization: Bearer <token>` (the engine
    /// API's JWT) with every request.
    pub fn with_bearer_token(mut self, token: &str) -> Self {
        if let Ok(endpoint) = self
            .endpoint
            .clone()
            .with_header(&format!("Authorization: Bearer {token}"))
        {
            self.endpoint = endpoint;
        }
        self
    }

    /// The URL this client posts to, redacted.
    pub fn url(&self) -> &str {
        self.endpoint.shown().as_str()
    }

    /// The endpoint (credentials included) this client posts to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

#[cfg(test)]
mod tests;
