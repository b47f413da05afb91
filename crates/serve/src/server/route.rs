//! One HTTP request, by listener, method and path: calls (`POST /` and
//! the WebSocket upgrade) go through shedding and admission first; a
//! public listener beside an admin one answers nothing else.

use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use crate::body::Chunks;
use crate::clients;
use crate::cors::{self, Origins};
use crate::errors::ErrorCode;
use crate::rpc::error_element;

use super::upgrade::is_websocket_upgrade;
use super::{ConnectionPermit, Server, json_response, not_found};

/// What a listener answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// JSON-RPC and WebSocket only; every other path is 404.
    Public,
    /// Everything (the one listener, or the admin one).
    Everything,
}

impl Server {
    pub(super) async fn handle(
        self: &Arc<Self>,
        request: Request<Incoming>,
        permit: ConnectionPermit,
        client: IpAddr,
        new_connection: bool,
        role: Role,
    ) -> Response<Chunks> {
        let answers_calls = request.uri().path() == "/"
            && (request.method() == Method::POST || is_websocket_upgrade(&request));
        // A public listener beside an admin one answers calls on `/` and
        // nothing else: health, metrics and the bulk export stay private.
        if role == Role::Public && request.uri().path() != "/" {
            return not_found();
        }
        // The export streams whole blocks: under the budget too.
        let exports = request.uri().path() == "/blocks";
        if answers_calls && let Some(behind) = self.shedding() {
            return self.shed(behind);
        }
        let mut prepaid = 0.0;
        if answers_calls || exports {
            match self.admit(client, &request) {
                Ok(units) => prepaid = units,
                Err(wait) => {
                    // Held first: a client sending one request at a time
                    // cannot outpace its budget by being refused quickly.
                    let hold = wait.min(clients::REFUSAL_HOLD);
                    tokio::time::sleep(hold).await;
                    return self.rate_limited(wait - hold);
                }
            }
        }
        if is_websocket_upgrade(&request) {
            return self.upgrade(request, permit, client);
        }
        match (request.method(), request.uri().path()) {
            (&Method::POST, "/") => {
                // No header lookup on the hot path unless CORS is on.
                let origin = (self.ctx.config.cors_origins != Origins::None)
                    .then(|| cors::origin(request.headers()).cloned())
                    .flatten();
                let mut answer = self.rpc(request, client, new_connection, prepaid).await;
                cors::allow(&mut answer, &self.ctx.config.cors_origins, origin);
                answer
            }
            (&Method::OPTIONS, "/") => cors::preflight(
                &self.ctx.config.cors_origins,
                cors::origin(request.headers()),
                request.headers(),
            ),
            (&Method::GET, "/health") => {
                json_response(StatusCode::OK, vec![Bytes::from(self.health())])
            }
            (&Method::GET, "/health/ready") => self.ready(),
            (&Method::GET, "/metrics") => self.metrics_page(),
            (&Method::GET, "/blocks") => self.export(request.uri().query().unwrap_or(""), client),
            (_, "/") => json_response(
                StatusCode::METHOD_NOT_ALLOWED,
                error_element(ErrorCode::InvalidRequest, "JSON-RPC requests are POSTed"),
            ),
            _ => not_found(),
        }
    }
}
