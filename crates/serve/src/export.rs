//! `GET /blocks?from=&to=`: the stored tail as NDJSON, one block with its
//! receipts and raw RLP a line, streamed from the store (what a mirror
//! bootstraps from).

use bytes::Bytes;
use hyper::{Response, StatusCode};

use crate::{Chunks, Server, response};

impl Server {
    /// Streams `from..=to` (clamped to the stored tail).
    pub(crate) fn export(&self, query: &str) -> Response<Chunks> {
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
        response(
            StatusCode::OK,
            "application/x-ndjson",
            Chunks::blocks(self.ctx.reader.clone(), from, to),
        )
    }
}
