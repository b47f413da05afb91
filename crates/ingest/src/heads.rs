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
        match tokio_tungstenite::connect_async(url.as_str()).await {
            Ok((mut socket, _)) => {
                let subscribe =
                    r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#;
                if socket.send(Message::Text(subscribe.into())).await.is_ok() {
                    tracing::info!(%url, "subscribed to newHeads");
                    delay = Duration::from_millis(200);
                    loop {
                        tokio::select! {
                            message = socket.next() => match message {
                                Some(Ok(Message::Text(_) | Message::Binary(_))) => wake.notify_one(),
                                Some(Ok(_)) => {}
                                Some(Err(_)) | None => break,
                            },
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
