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

use crate::body::{self, Chunks};
use crate::clients;

use super::{Server, response};

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
            let meter: body::Meter = Arc::new(move |bytes: usize| {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use http_body_util::BodyExt;

    use crate::clients;
    use crate::server::export;
    use crate::server::tests::{runtime, server};

    #[test]
    fn exports_are_bounded_and_charged_by_the_bytes_they_send() {
        let (server, _dir) = server();
        let mut server = server;
        // One unit a second: a few KiB of export puts the client in debt.
        server.clients = clients::ClientBudget::new(1).map(std::sync::Arc::new);
        let server = Arc::new(server);
        let runtime = runtime();
        let client: std::net::IpAddr = "127.0.0.7".parse().unwrap();
        let _entered = runtime.enter();
        let held: Vec<_> = (0..export::MAX_EXPORTS)
            .map(|_| server.export("from=0&to=9", client))
            .collect();
        assert!(held.iter().all(|r| r.status() == 200));
        let refused = server.export("", client);
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.headers()["retry-after"], "1");
        drop(held);
        let export = server.export("from=0&to=9", client);
        assert_eq!(export.status(), 200);
        let body = runtime
            .block_on(export.into_body().collect())
            .unwrap()
            .to_bytes();
        assert_eq!(
            body.split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count(),
            10
        );
        assert!(body.len() > 2 * clients::BYTES_PER_UNIT, "{}", body.len());
        // The bytes sent were charged: the client is in debt.
        let in_debt = server
            .clients
            .as_ref()
            .unwrap()
            .admit(client, Instant::now());
        assert!(in_debt.is_err());
    }
}
