//! JSON-RPC over WebSocket on the same port: every HTTP method, plus
//! `eth_subscribe` / `eth_unsubscribe` for `newHeads`, `logs` (with
//! `removed: true` after a reorg) and `newBlocks` (whole block and receipts:
//! the stream mirrors follow).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::sync::broadcast::error::RecvError;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::errors::{self, ErrorCode};
use crate::events::Event;
use crate::methods::logs::filter::Filter;
use crate::{body, clients};

use super::{Server, until_stopped};

/// Subscriptions one connection may hold; more get -32005. Each one costs
/// a message per event, so this bounds a connection's work per block.
/// Default is 64.
pub const MAX_SUBSCRIPTIONS: usize = 64;

/// A session is pinged this often (or twice per idle timeout, if that is
/// shorter), and closed when nothing at all (a request, a pong) arrived
/// for the server's idle timeout: a peer that vanished without a FIN, or
/// stopped reading, does not hold a connection slot for ever. Default is
/// 15 s.
pub const PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(15);

/// Longest time one answer or one block's notifications may take to be
/// written; a client that stops reading is disconnected after it. Default
/// is 10 s.
pub const SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Bytes a session may hold waiting to be written, on top of the message
/// being sent: two messages of the largest size a request may have. With
/// the read side's one message, a session holds at most about three
/// request-size limits (15 MiB at the default 5 MiB). Default is 2 × the
/// body limit.
pub const WRITE_BUFFER_MESSAGES: usize = 2;

pub(crate) enum Subscription {
    NewHeads,
    Logs(Filter),
    NewBlocks,
}

#[derive(Deserialize)]
struct Request<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow)]
    method: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    params: Option<Vec<&'a RawValue>>,
}

fn reply(id: Option<&RawValue>, result: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},\"result\":{result}}}",
        id.map_or("null", |i| i.get())
    )
}

fn error(id: Option<&RawValue>, code: ErrorCode, message: &str) -> String {
    format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{},{}}}",
        id.map_or("null", |i| i.get()),
        errors::error_member(code, message)
    )
}

fn notification(subscription: &str, payload: &[Bytes]) -> Message {
    let mut text = Vec::with_capacity(128 + payload.iter().map(|p| p.len()).sum::<usize>());
    text.extend_from_slice(
        b"{\"jsonrpc\":\"2.0\",\"method\":\"eth_subscription\",\"params\":{\"subscription\":\"",
    );
    text.extend_from_slice(subscription.as_bytes());
    text.extend_from_slice(b"\",\"result\":");
    for part in payload {
        text.extend_from_slice(part);
    }
    text.extend_from_slice(b"}}");
    Message::Text(
        String::from_utf8(text)
            .expect("stored JSON is UTF-8")
            .into(),
    )
}

/// Runs one WebSocket connection until the client leaves, sends an
/// oversized frame, or falls too far behind the chain.
/// Long: one `select!` over the socket, the subscriptions and the chain's
/// events; split, its state would travel between the pieces.
pub(crate) async fn serve(server: Arc<Server>, upgraded: Upgraded, client: IpAddr) {
    let limit = server.ctx.config.max_body_bytes;
    let idle_timeout = server.ctx.config.idle_timeout;
    let config = WebSocketConfig::default()
        .max_message_size(Some(limit))
        .max_frame_size(Some(limit))
        // A client that stops reading cannot make us buffer without bound.
        .max_write_buffer_size(WRITE_BUFFER_MESSAGES * limit);
    let mut ws =
        WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config)).await;
    let mut events = server.events.subscribe();
    let mut subscriptions: HashMap<String, Subscription> = HashMap::new();
    let mut next_id: u64 = rand_seed();
    let mut last_heard = tokio::time::Instant::now();
    // Twice per idle timeout at least, so a peer that answers pings is
    // always heard from within it.
    let mut ping = tokio::time::interval(
        PING_INTERVAL
            .min(idle_timeout / 2)
            .max(std::time::Duration::from_millis(100)),
    );
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ping.tick().await; // the first tick is immediate
    let stopping = until_stopped(server.stopping.clone());
    tokio::pin!(stopping);
    loop {
        tokio::select! {
            _ = &mut stopping => {
                // Draining: say goodbye (1001, going away) so clients reconnect elsewhere.
                let away = tokio_tungstenite::tungstenite::protocol::CloseFrame {
                    code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Away,
                    reason: "neve is shutting down".into(),
                };
                let _ = tokio::time::timeout(SEND_TIMEOUT, ws.close(Some(away))).await;
                return;
            }
            _ = ping.tick() => {
                if last_heard.elapsed() >= idle_timeout {
                    let _ = tokio::time::timeout(SEND_TIMEOUT, ws.close(None)).await;
                    return;
                }
                let pinged = tokio::time::timeout(SEND_TIMEOUT, ws.send(Message::Ping(Bytes::new()))).await;
                if !matches!(pinged, Ok(Ok(()))) {
                    return;
                }
            }
            message = ws.next() => {
                last_heard = tokio::time::Instant::now();
                let text = match message {
                    Some(Ok(Message::Text(text))) => text.to_string(),
                    Some(Ok(Message::Binary(bytes))) => String::from_utf8_lossy(&bytes).into_owned(),
                    Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                    // Closed, broken, or over the size limit: drop the socket.
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
                };
                let had_subscriptions = !subscriptions.is_empty();
                let received = text.len();
                let (answer, errors) = match subscription_call(&text, &mut subscriptions, &mut next_id) {
                    Some(answer) => (answer, 0),
                    None => {
                        // Its calls' gas is charged to `client` as it is
                        // spent, on the call threads.
                        let response = super::CLIENT
                            .scope(client, server.respond_over(&Bytes::from(text), true))
                            .await;
                        let errors = response
                            .extensions()
                            .get::<clients::Errors>()
                            .map_or(0, |e| e.0);
                        let bytes = response.into_body().collect().await.map(|c| c.to_bytes()).unwrap_or_default();
                        (String::from_utf8_lossy(&bytes).into_owned(), errors)
                    }
                };
                let spent = clients::Spent {
                    calls: 1,
                    errors,
                    bytes: (received + answer.len()) as u64,
                    new_connection: false,
                };
                // Charged before it is sent: a peer that stops reading
                // has spent it all the same.
                let debt = server.charge(client, spent, 0.0);
                // A notification is answered with nothing.
                if !answer.is_empty() {
                    let sent = tokio::time::timeout(SEND_TIMEOUT, ws.send(Message::Text(answer.into()))).await;
                    if !matches!(sent, Ok(Ok(()))) {
                        return;
                    }
                }
                if !had_subscriptions && !subscriptions.is_empty() {
                    // The first subscription starts from now, not from
                    // whatever queued while none was open.
                    events = events.resubscribe();
                }
                // Over `--client-rate`, the next message is read only after
                // the debt is paid or a refusal's hold has passed.
                if let Some(wait) = debt {
                    tokio::time::sleep(wait.min(clients::REFUSAL_HOLD)).await;
                }
            }
            event = events.recv(), if !subscriptions.is_empty() => {
                let event = match event {
                    Ok(event) => event,
                    Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => {
                        let _ = tokio::time::timeout(SEND_TIMEOUT, ws.close(None)).await;
                        return;
                    }
                };
                let mut bytes = 0;
                let sent = tokio::time::timeout(SEND_TIMEOUT, async {
                    for (id, subscription) in &subscriptions {
                        for message in notifications(id, subscription, &event) {
                            bytes += message.len();
                            ws.feed(message).await?;
                        }
                    }
                    ws.flush().await
                })
                .await;
                if !matches!(sent, Ok(Ok(()))) {
                    return;
                }
                // Notifications are copies made for this client: charged
                // like answers, so 64 `newBlocks` subscriptions cost 64
                // blocks' bytes (its next request waits out the debt).
                let spent = clients::Spent {
                    bytes: bytes as u64,
                    ..clients::Spent::default()
                };
                let _ = server.charge(client, spent, 0.0);
            }
        }
    }
}

fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

/// Answers `eth_subscribe` / `eth_unsubscribe`; `None` for anything else.
pub(crate) fn subscription_call(
    text: &str,
    subscriptions: &mut HashMap<String, Subscription>,
    next_id: &mut u64,
) -> Option<String> {
    let request: Request<'_> = serde_json::from_str(text).ok()?;
    let params = request.params.unwrap_or_default();
    match request.method.as_ref() {
        "eth_subscribe" => {
            if subscriptions.len() >= MAX_SUBSCRIPTIONS {
                return Some(error(
                    request.id,
                    ErrorCode::LimitExceeded,
                    &format!("at most {MAX_SUBSCRIPTIONS} subscriptions per connection"),
                ));
            }
            let kind: Option<&str> = params
                .first()
                .and_then(|p| serde_json::from_str(p.get()).ok());
            let subscription = match kind {
                Some("newHeads") => Subscription::NewHeads,
                Some("newBlocks") => Subscription::NewBlocks,
                Some("logs") => {
                    let filter = match params.get(1) {
                        Some(raw) => Filter::for_subscription(raw),
                        None => Filter::for_subscription(
                            &RawValue::from_string("{}".into()).expect("JSON"),
                        ),
                    };
                    match filter {
                        Ok(filter) => Subscription::Logs(filter),
                        Err(message) => {
                            return Some(error(request.id, ErrorCode::InvalidParams, &message));
                        }
                    }
                }
                _ => {
                    return Some(error(
                        request.id,
                        ErrorCode::InvalidParams,
                        "unsupported subscription: newHeads, logs and newBlocks are served",
                    ));
                }
            };
            *next_id = next_id
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let id = format!("0x{:016x}", *next_id);
            subscriptions.insert(id.clone(), subscription);
            Some(reply(request.id, &format!("\"{id}\"")))
        }
        "eth_unsubscribe" => {
            let id: Option<String> = params
                .first()
                .and_then(|p| serde_json::from_str(p.get()).ok());
            let removed = id.is_some_and(|id| subscriptions.remove(&id).is_some());
            Some(reply(request.id, if removed { "true" } else { "false" }))
        }
        _ => None,
    }
}

fn notifications(id: &str, subscription: &Subscription, event: &Event) -> Vec<Message> {
    match (subscription, event) {
        (Subscription::NewHeads, Event::Added { head, .. }) => {
            vec![notification(id, std::slice::from_ref(head))]
        }
        (Subscription::NewBlocks, Event::Added { block, .. }) => {
            // A damaged record (counted and logged by the store) is not
            // sent: a mirror following this one fetches it from upstream.
            let Ok(fields) = body::record_fields(block) else {
                return Vec::new();
            };
            let mut parts = vec![Bytes::from_static(b"{")];
            parts.extend(fields);
            parts.push(Bytes::from_static(b"}"));
            vec![notification(id, &parts)]
        }
        (Subscription::Logs(filter), Event::Added { block, .. }) => filter
            .block_logs(block)
            .into_iter()
            .map(|log| notification(id, &[log.bytes]))
            .collect(),
        (Subscription::Logs(filter), Event::Removed { block }) => filter
            .block_logs(block)
            .into_iter()
            .map(|log| {
                // The stored log says `"removed":false`; a reorg took it out.
                let text = String::from_utf8_lossy(&log.bytes).replacen(
                    "\"removed\":false",
                    "\"removed\":true",
                    1,
                );
                notification(id, &[Bytes::from(text)])
            })
            .collect(),
        (Subscription::NewHeads | Subscription::NewBlocks, Event::Removed { .. }) => Vec::new(),
    }
}
