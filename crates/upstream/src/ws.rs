//! WebSocket connections to the upstream (`ws://` or `wss://`), with the
//! endpoint's credentials in the handshake and the same TLS trust as
//! every other outbound connection.

use std::time::Duration;

use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;

use crate::endpoint::Endpoint;
use crate::error::{RpcError, error_chain};
use crate::tls::Io;

/// A connected WebSocket.
pub type Socket = WebSocketStream<Box<dyn Io>>;

/// Connects to `endpoint` and completes the WebSocket handshake within
/// `within`. A refused handshake (401, 429, …) is [`RpcError::Http`].
pub async fn connect(endpoint: &Endpoint, within: Duration) -> Result<Socket, RpcError> {
    let shown = endpoint.shown().clone();
    let transport = |reason: String| RpcError::Transport {
        url: shown.clone(),
        reason: endpoint.scrub(&reason),
    };
    let uri = endpoint.uri();
    let host = uri
        .host()
        .ok_or_else(|| transport("no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri
        .port_u16()
        .unwrap_or(if endpoint.is_tls() { 443 } else { 80 });
    let handshake = async {
        let tcp = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|e| transport(error_chain(&e)))?;
        let _ = tcp.set_nodelay(true);
        let stream: Box<dyn Io> = crate::tls::wrap(&host, tcp, endpoint.is_tls())
            .await
            .map_err(transport)?;
        let mut request = uri
            .clone()
            .into_client_request()
            .map_err(|e| transport(e.to_string()))?;
        for (name, value) in endpoint.headers() {
            request.headers_mut().insert(name.clone(), value.clone());
        }
        match tokio_tungstenite::client_async(request, stream).await {
            Ok((socket, _)) => Ok(socket),
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(RpcError::Http {
                status: response.status().as_u16(),
                retry_after: crate::pacing::retry_after_of(response.headers())
                    .map(|d| d.as_secs_f64().ceil() as u64),
                url: shown.clone(),
                snippet: String::new(),
            }),
            Err(error) => Err(transport(error_chain(&error))),
        }
    };
    tokio::time::timeout(within, handshake)
        .await
        .map_err(|_| RpcError::Timeout {
            url: shown.clone(),
            timeout: within,
        })?
}
