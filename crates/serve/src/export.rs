//! `GET /blocks?from=&to=`: the stored tail as NDJSON, one block with its
//! receipts and raw RLP a line, streamed from the store (what a mirror
//! bootstraps from). Each frame is read on the blocking pool; at most
//! [`MAX_EXPORTS`] run at once; with `--client-rate`, the bytes sent are
//! charged to the client as they go, and a client in debt waits between
//! frames.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Response, StatusCode};

use crate::{Chunks, Server, clients, response};

/// Exports in flight at once; one past it gets 503 with `Retry-After: 1`
/// (a mirror's bootstrap asks again). Default is 8.
pub const MAX_EXPORTS: usize = 8;

impl Server {
    /// Streams `from..=to` (clamped to the stored tail) to `client`.
    pub(crate) fn export(self: &Arc<Self>, query: &str, client: IpAddr) -> Response<Chunks> {
        let stats = self.ctx.reader.stats();
        let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) else {
            return response(StatusCode::OK, "application/x-ndjson", Chunks::empty());
        };
        let mut from = min;
        let mut to = max;
        for pair in query.split('&') {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let parsed = if let Some(hex) = value.strip_prefix("0x") {
                u64::from_str_radix(hex, 16)
            } else {
                value.parse()
            };
            match (key, parsed) {
                ("from", Ok(v)) => from = v.max(min),
                ("to", Ok(v)) => to = v.min(max),
                ("from" | "to", Err(_)) => {
                    return response(
                        StatusCode::BAD_REQUEST,
                        "text/plain",
                        Chunks::new(vec![Bytes::from_static(b"from and to are heights\n")]),
                    );
                }
                _ => {}
            }
        }
        let Ok(slot) = self.exports.clone().try_acquire_owned() else {
            let mut busy = response(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                Chunks::new(vec![Bytes::from_static(b"too many exports in flight\n")]),
            );
            busy.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
            return busy;
        };
        let meter = self.clients.is_some().then(|| {
            let server = self.clone();
            let meter: crate::body::Meter = Arc::new(move |bytes: usize| {
                let spent = clients::Spent {
                    bytes: bytes as u64,
                    ..clients::Spent::default()
                };
                server.charge(client, spent, 0.0)
            });
            meter
        });
        response(
            StatusCode::OK,
            "application/x-ndjson",
            Chunks::blocks(self.ctx.reader.clone(), from, to, meter, Some(slot)),
        )
    }
}
