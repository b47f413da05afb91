//! A stand-in upstream for unit tests: answers each HTTP request with what
//! a function of its body returns, for the answers a real node does not
//! give on demand (a quota's error answered with 200, a proxy's page, a
//! day's `Retry-After`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A whole HTTP/1.1 response of `status` (with its reason) carrying `body`,
/// plus `headers` (each `name: value`).
pub(crate) fn response(status: &str, headers: &[&str], body: &str) -> String {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for header in headers {
        out.push_str(header);
        out.push_str("\r\n");
    }
    out.push_str(&format!(
        "content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    ));
    out
}

/// `200 OK` carrying `body`.
pub(crate) fn ok(body: &str) -> String {
    response("200 OK", &[], body)
}

/// Serves on a free 127.0.0.1 port until the runtime ends: each request's
/// body is given to `answer`, whose response is sent and the connection
/// closed. Returns the URL and the count of requests read.
pub(crate) async fn upstream(
    answer: impl Fn(&str) -> String + Send + Sync + 'static,
) -> (String, Arc<AtomicU64>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicU64::new(0));
    let (seen, answer) = (requests.clone(), Arc::new(answer));
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let (seen, answer) = (seen.clone(), answer.clone());
            tokio::spawn(async move {
                let Some(body) = read_request(&mut socket).await else {
                    return;
                };
                seen.fetch_add(1, Ordering::SeqCst);
                let _ = socket.write_all(answer(&body).as_bytes()).await;
            });
        }
    });
    (url, requests)
}

/// The body of the request on `socket`, once its headers and as many bytes
/// as they declare are read.
async fn read_request(socket: &mut tokio::net::TcpStream) -> Option<String> {
    let mut read = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        let n = socket.read(&mut buffer).await.ok()?;
        if n == 0 {
            return None;
        }
        read.extend_from_slice(&buffer[..n]);
        let text = String::from_utf8_lossy(&read);
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let length = text[..end]
            .lines()
            .find_map(|line| {
                let line = line.to_ascii_lowercase();
                line.strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            })
            .unwrap_or(0);
        if read.len() >= end + 4 + length {
            return Some(text[end + 4..].to_string());
        }
    }
}
