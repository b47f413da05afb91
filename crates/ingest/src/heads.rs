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

/// Subscribes to `newHeads` at `url` (`ws://` or `wss://`, with the
/// upstream's credentials) and notifies `wake` on every message,
/// reconnecting with exponential backoff and jitter until `shutdown` turns
/// true.
pub async fn follow_heads(
    url: neve_upstream::Endpoint,
    wake: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut delay = Duration::from_millis(200);
    let mut refusal_said = false;
    let mut failure_said = false;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let mut asked = Duration::ZERO;
        match neve_upstream::ws::connect(&url, CONNECT_TIMEOUT).await {
            Ok(mut socket) => match subscribe(&mut socket, &wake, CONNECT_TIMEOUT).await {
                Ok(id) => {
                    tracing::info!(%url, subscription = %id, "subscribed to newHeads");
                    refusal_said = false;
                    failure_said = false;
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
                    tracing::warn!(%url, "newHeads subscription dropped; polling until it is back");
                }
                // Refused (no `eth` on the socket, no subscriptions): asking
                // again soon will not help, so wait the longest, and say it
                // once until a subscription works.
                Err(SubscribeError::Refused(reason)) => {
                    if !refusal_said {
                        tracing::warn!(%url, %reason, "the upstream refused eth_subscribe newHeads; following by polling alone");
                        refusal_said = true;
                    }
                    delay = MAX_RECONNECT_DELAY;
                }
                Err(SubscribeError::Lost(reason)) => {
                    tracing::debug!(%url, %reason, "newHeads subscription failed");
                }
            },
            Err(error) => {
                if let neve_upstream::RpcError::Http {
                    retry_after: Some(seconds),
                    ..
                } = &error
                {
                    asked = Duration::from_secs(*seconds);
                }
                // A refused certificate or key is worth saying once; a
                // node restarting is not.
                let lasting = !matches!(error, neve_upstream::RpcError::Timeout { .. })
                    && !error.to_string().contains("Connection refused");
                if lasting && !failure_said {
                    tracing::warn!(%url, %error, "newHeads connection failed; following by polling until it works");
                    failure_said = true;
                } else {
                    tracing::debug!(%url, %error, "newHeads connection failed");
                }
            }
        }
        let pause = delay.max(asked) + neve_upstream::jitter(delay / 4);
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => return,
        }
        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
    }
}

/// Why a connected socket did not become a subscription.
#[derive(Debug, PartialEq, Eq)]
enum SubscribeError {
    /// The upstream answered `eth_subscribe` with an error, or with no
    /// subscription id.
    Refused(String),
    /// The socket closed, failed, or the answer did not come within
    /// the time allowed ([`CONNECT_TIMEOUT`]).
    Lost(String),
}

/// Asks for `newHeads` and waits for the answer, so a refusal is told apart
/// from a subscription instead of holding a socket that will never announce
/// a head. A head that arrives first still wakes the follower.
async fn subscribe<S>(
    socket: &mut S,
    wake: &Notify,
    within: Duration,
) -> Result<String, SubscribeError>
where
    S: futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error>
        + futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + Unpin,
{
    let subscribe = r#"{"jsonrpc":"2.0","id":1,"method":"eth_subscribe","params":["newHeads"]}"#;
    let lost = |what: &str| SubscribeError::Lost(what.to_string());
    let answered = async {
        socket
            .send(Message::Text(subscribe.into()))
            .await
            .map_err(|e| lost(&e.to_string()))?;
        loop {
            let text = match socket.next().await {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(_))) | None => return Err(lost("closed")),
                Some(Ok(_)) => continue,
                Some(Err(error)) => return Err(lost(&error.to_string())),
            };
            match read_answer(text.as_str()) {
                // A notification ahead of the answer: a head all the same.
                None => wake.notify_one(),
                Some(answer) => return answer,
            }
        }
    };
    tokio::time::timeout(within, answered)
        .await
        .unwrap_or_else(|_| Err(lost("no answer to eth_subscribe")))
}

/// What one frame on the socket says while the subscription's answer is
/// awaited: `None` for a notification (a head), else the answer.
fn read_answer(text: &str) -> Option<Result<String, SubscribeError>> {
    #[derive(serde::Deserialize)]
    struct Answer {
        /// Set on notifications (`eth_subscription`), never on answers.
        method: Option<String>,
        result: Option<String>,
        error: Option<Box<serde_json::value::RawValue>>,
    }
    let Ok(answer) = serde_json::from_str::<Answer>(text) else {
        return Some(Err(SubscribeError::Refused(format!(
            "not JSON-RPC: {}",
            text.chars().take(120).collect::<String>()
        ))));
    };
    if answer.method.is_some() {
        return None;
    }
    Some(match (answer.result, answer.error) {
        (Some(id), None) => Ok(id),
        (_, Some(error)) => Err(SubscribeError::Refused(
            error.get().chars().take(200).collect(),
        )),
        (None, None) => Err(SubscribeError::Refused("no subscription id".into())),
    })
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

    /// A WebSocket peer on 127.0.0.1 that reads the subscription request
    /// and answers with `replies`, then stays open; and a client socket
    /// connected to it.
    async fn peer_answering(replies: Vec<&'static str>) -> neve_upstream::ws::Socket {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("ws://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
            let request = socket.next().await.unwrap().unwrap();
            assert!(request.to_text().unwrap().contains("\"eth_subscribe\""));
            for reply in replies {
                socket.send(Message::Text(reply.into())).await.unwrap();
            }
            // Hold the socket open until the client goes.
            while socket.next().await.is_some() {}
        });
        let endpoint = neve_upstream::Endpoint::parse(&url).unwrap();
        neve_upstream::ws::connect(&endpoint, WITHIN).await.unwrap()
    }

    const WITHIN: Duration = Duration::from_millis(500);

    #[tokio::test]
    async fn a_subscription_id_is_a_subscription() {
        let mut socket =
            peer_answering(vec![r#"{"jsonrpc":"2.0","id":1,"result":"0x9ce5"}"#]).await;
        let wake = Notify::new();
        assert_eq!(
            subscribe(&mut socket, &wake, WITHIN).await,
            Ok("0x9ce5".into())
        );
    }

    #[tokio::test]
    async fn an_error_answer_is_a_refusal_that_names_the_reason() {
        let mut socket = peer_answering(vec![
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method eth_subscribe does not exist/is not available"}}"#,
        ])
        .await;
        let wake = Notify::new();
        match subscribe(&mut socket, &wake, WITHIN).await {
            Err(SubscribeError::Refused(reason)) => {
                assert!(reason.contains("does not exist"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn an_error_without_an_id_is_a_refusal_too() {
        let mut socket = peer_answering(vec![
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request"}}"#,
        ])
        .await;
        let wake = Notify::new();
        assert!(matches!(
            subscribe(&mut socket, &wake, WITHIN).await,
            Err(SubscribeError::Refused(_))
        ));
    }

    #[tokio::test]
    async fn a_head_ahead_of_the_answer_wakes_the_follower() {
        let mut socket = peer_answering(vec![
            r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#,
        ])
        .await;
        let wake = Notify::new();
        assert_eq!(
            subscribe(&mut socket, &wake, WITHIN).await,
            Ok("0x1".into())
        );
        // The stored permit makes this return at once.
        tokio::time::timeout(WITHIN, wake.notified()).await.unwrap();
    }

    #[tokio::test]
    async fn garbage_or_silence_is_not_a_subscription() {
        let mut socket = peer_answering(vec!["not json"]).await;
        let wake = Notify::new();
        assert!(matches!(
            subscribe(&mut socket, &wake, WITHIN).await,
            Err(SubscribeError::Refused(_))
        ));
        let mut socket = peer_answering(vec![]).await;
        assert_eq!(
            subscribe(&mut socket, &wake, WITHIN).await,
            Err(SubscribeError::Lost("no answer to eth_subscribe".into()))
        );
    }

    /// Fuzz target: `newHeads` frames (the subscription's answer and the
    /// notifications around it): any text is a head, an id or a refusal,
    /// never a panic.
    #[test]
    fn fuzz_newheads_frames() {
        let seeds: Vec<Vec<u8>> = [
            r#"{"jsonrpc":"2.0","id":1,"result":"0x9ce59a13059e417087c02d3236a0b1cc"}"#,
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#,
            r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{"number":"0x1b4","hash":"0x01"}}}"#,
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let dictionary: [&[u8]; 6] = [
            b"\"method\"",
            b"\"result\"",
            b"\"error\"",
            b"null",
            b"{",
            b"\\u0000",
        ];
        let report =
            neve_devnet::fuzz::run("newHeads frames", &seeds, &dictionary, 16 << 10, |input| {
                let text = String::from_utf8_lossy(input);
                let _ = read_answer(&text);
            });
        eprintln!("newHeads frames: {report}");
    }
}
