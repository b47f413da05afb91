//! The WebSocket upgrade on `/`: whose pages may open one
//! (`--ws-origins`), the handshake, and the session handed to its own task
//! (`ws.rs`) with the connection's slot.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::body::Chunks;
use crate::cors;

use super::{ConnectionPermit, Server, response, ws};

pub(super) fn is_websocket_upgrade(request: &Request<Incoming>) -> bool {
    request
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

impl Server {
    /// Accepts a WebSocket handshake from an allowed origin and serves the
    /// socket on its own task.
    pub(super) fn upgrade(
        self: &Arc<Self>,
        mut request: Request<Incoming>,
        permit: ConnectionPermit,
        client: IpAddr,
    ) -> Response<Chunks> {
        if let Some(origin) = cors::origin(request.headers())
            && !self.ctx.config.ws_origins.allows(origin.as_bytes())
        {
            return response(
                StatusCode::FORBIDDEN,
                "text/plain",
                Chunks::new(vec![Bytes::from_static(
                    b"WebSocket from this origin not allowed (--ws-origins)\n",
                )]),
            );
        }
        let key = request
            .headers()
            .get(hyper::header::SEC_WEBSOCKET_KEY)
            .map(|k| k.as_bytes().to_vec());
        let Some(key) = key else {
            return response(
                StatusCode::BAD_REQUEST,
                "text/plain",
                Chunks::new(vec![Bytes::from_static(b"missing Sec-WebSocket-Key\n")]),
            );
        };
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(&key);
        let server = self.clone();
        tokio::spawn(async move {
            if let Ok(upgraded) = hyper::upgrade::on(&mut request).await {
                ws::serve(server, upgraded, client).await;
            }
            drop(permit);
        });
        let mut answer = response(
            StatusCode::SWITCHING_PROTOCOLS,
            "text/plain",
            Chunks::empty(),
        );
        let headers = answer.headers_mut();
        headers.remove(CONTENT_TYPE);
        headers.insert(
            hyper::header::UPGRADE,
            HeaderValue::from_static("websocket"),
        );
        headers.insert(
            hyper::header::CONNECTION,
            HeaderValue::from_static("Upgrade"),
        );
        headers.insert(
            hyper::header::SEC_WEBSOCKET_ACCEPT,
            HeaderValue::from_str(&accept).expect("base64 is a header value"),
        );
        answer
    }
}
