//! Single calls: typed, raw, and the probe that goes through a pause.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::client::RpcClient;
use crate::error::{RpcError, snippet};
use crate::transport::Admission;
use crate::wire::{RequestObject, ResponseObject, decode, into_result};

impl RpcClient {
    /// Calls `method` and decodes its result as `T`.
    pub async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, RpcError> {
        let raw = self.call_raw(method, params).await?;
        self.decode_result(method, &raw)
    }

    /// Calls `method` even while a refusal's pause (a 429's or 503's
    /// `Retry-After`, or a backoff) holds every other request, and decodes
    /// its result as `T`. Only when it decodes has the endpoint served
    /// again: then the pause ends for every client sharing this one's
    /// pacing (`Pacing::resume`); a JSON-RPC error (a quota's -32005),
    /// a body that is not JSON-RPC (a proxy's HTML page) or a result of
    /// another shape ends nothing, whatever its HTTP status. For one cheap
    /// call (`eth_blockNumber`) every few seconds at most: it finds a
    /// provider's recovery within seconds rather than at the end of a
    /// pause of minutes.
    pub async fn probe<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, RpcError> {
        let raw = self
            .call_raw_admitted(method, params, Admission::Probe)
            .await?;
        let value = self.decode_result(method, &raw)?;
        self.pacing.resume();
        Ok(value)
    }

    /// A call's result decoded as `T`, or [`RpcError::Malformed`].
    fn decode_result<T: DeserializeOwned>(
        &self,
        method: &str,
        raw: &RawValue,
    ) -> Result<T, RpcError> {
        serde_json::from_str(raw.get()).map_err(|e| {
            self.endpoint.scrub_error(RpcError::Malformed {
                reason: format!("result of {method} does not decode: {e}"),
                snippet: snippet(raw.get().as_bytes()),
            })
        })
    }

    /// Calls `method` and returns its result as the bytes the node sent.
    pub async fn call_raw(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<Box<RawValue>, RpcError> {
        self.call_raw_admitted(method, params, Admission::Paced)
            .await
    }

    async fn call_raw_admitted(
        &self,
        method: &str,
        params: impl Serialize,
        admission: Admission,
    ) -> Result<Box<RawValue>, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = serde_json::to_vec(&RequestObject {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })
        .expect("request serialises");
        let (_, bytes) = self
            .post_unscrubbed(Bytes::from(body), admission)
            .await
            .map_err(|e| self.endpoint.scrub_error(e))?;
        decode::<ResponseObject<'_>>(&bytes)
            .and_then(into_result)
            .map(ToOwned::to_owned)
            .map_err(|e| self.endpoint.scrub_error(e))
    }
}
