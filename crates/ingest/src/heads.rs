//! Live wake-ups: a WebSocket `newHeads` subscription to the upstream that
//! wakes the follower the moment a block is announced. Polling stays the
//! safety net, so a silent upstream (avalanchego makes no empty blocks) or a
//! dropped socket only costs latency, never progress.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::{Notify, watch};
use tokio_tungstenite::tungstenite::Message;

/// Longest pause between reconnection attempts. Default is 10 s.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(10);
/// The subscription is pinged this often, so a connection that died
/// without a word (a NAT or a proxy forgetting it) is noticed.
pub const PING_EVERY: Duration = Duration::from_secs(15);
/// Nothing at all (no head, no pong) for this long: reconnect.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(45);
/// A connection and handshake that take longer are abandoned and retried.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The WebSocket URL that usually goes with an HTTP RPC URL: same host, port
/// and path with the scheme swapped, and avalanchego's `/rpc` → `/ws`.
pub fn derive_ws_url(http_url: &str) -> String {
    let swapped = if let Some(rest) = http_url.strip_prefix("https://") {
        format!("wss://{rest}")
    } else if let Some(rest) = http_url.strip_prefix("http://") {
        format!("ws://{rest}")
    } else {
        http_url.to_string()
    };
    match swapped.strip_suffix("/ext/bc/C/rpc") {
        Some(base) => format!("{base}/ext/bc/C/ws"),
        None => swapped,
    }
}

/// Subscribes to `newHeads` at `url` and notifies `wake` on every message,
/// reconnecting with exponential backoff until `shutdown` turns true.
pub async fn follow_heads(url: String, wake: Arc<Notify>, mut shutdown: watch::Receiver<bool>) {
    let mut delay = Duration::from_millis(200);
    loop {
        if *shutdown.borrow() {
            return;
        }
        let connect = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_tungstenite::connect_async(url.as_str()),
        );
        match connect.await.unwrap_or_else(|_| {
            Err(tokio_tungstenite::tungstenite::Error::Io(
                std::io::ErrorKind::TimedOut.into(),
            ))
        }) {
            Ok((mut socket, _)) => {
                let subscribe =
                    r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#;
                if socket.send(Message::Text(subscribe.into())).await.is_ok() {
                    tracing::info!(%url, "subscribed to newHeads");
                    delay = Duration::from_millis(200);
                    let mut ping = tokio::time::interval(PING_EVERY);
                    let mut heard = tokio::time::Instant::now();
                    loop {
                        tokio::select! {
                            message = socket.next() => match message {
                                Some(Ok(Message::Text(_) | Message::Binary(_))) => {
                                    heard = tokio::time::Instant::now();
                                    wake.notify_one();
                                }
                                Some(Ok(_)) => heard = tokio::time::Instant::now(),
                                Some(Err(_)) | None => break,
                            },
                            _ = ping.tick() => {
                                if heard.elapsed() > SILENCE_LIMIT {
                                    tracing::warn!(%url, "newHeads connection silent; reconnecting");
                                    break;
                                }
                                let sent = tokio::time::timeout(
                                    PING_EVERY,
                                    socket.send(Message::Ping(Vec::new().into())),
                                );
                                if !matches!(sent.await, Ok(Ok(()))) {
                                    break;
                                }
                            }
                            _ = shutdown.changed() => return,
                        }
                    }
                }
                tracing::warn!(%url, "newHeads subscription dropped; polling until it is back");
            }
            Err(error) => tracing::debug!(%url, %error, "newHeads connection failed"),
        }
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = shutdown.changed() => return,
        }
        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ws_urls_are_derived_from_rpc_urls() {
        assert_eq!(
            derive_ws_url("http://127.0.0.1:8545"),
            "ws://127.0.0.1:8545"
        );
        assert_eq!(
            derive_ws_url("http://h:9650/ext/bc/C/rpc"),
            "ws://h:9650/ext/bc/C/ws"
        );
        assert_eq!(
            derive_ws_url("https://x.example/rpc"),
            "wss://x.example/rpc"
        );
    }
}
