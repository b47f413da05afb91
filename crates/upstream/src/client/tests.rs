use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::client::RpcClient;
use crate::error::RpcError;
use crate::quantity::Quantity;

#[test]
fn http_and_https_urls_are_accepted_and_refusals_hide_the_key() {
    assert!(RpcClient::new("http://127.0.0.1:8545").is_ok());
    assert!(RpcClient::new("https://127.0.0.1:8545/?token=s3cret").is_ok());
    let refused = RpcClient::new("ws://127.0.0.1:8546/?token=s3cret").unwrap_err();
    assert!(matches!(refused, RpcError::InvalidUrl { .. }));
    assert!(!refused.to_string().contains("s3cret"), "{refused}");
}

/// Issue 32 (5): a gateway that echoes the path ("Cannot POST
/// /v3/KEY") in a 404 page or in a 200 that is not JSON-RPC, or a
/// JSON-RPC error quoting the key: no error the client returns holds
/// the key. A fault a real node does not produce, so a fake gateway.
#[tokio::test]
async fn texts_from_the_upstream_reach_errors_scrubbed_of_its_secrets() {
    const KEY: &str = "a1b2c3d4e5f6a7b8c9d0";
    let answers = [
        format!(
            "HTTP/1.1 404 Not Found\r\ncontent-type: text/html\r\ncontent-length: {{len}}\r\n\r\n<pre>Cannot POST /v3/{KEY}?apikey={KEY}</pre>"
        ),
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {{len}}\r\n\r\n<pre>Cannot POST /v3/{KEY}</pre>"
        ),
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {{len}}\r\n\r\n{{{{\"jsonrpc\":\"2.0\",\"id\":0,\"error\":{{{{\"code\":-32000,\"message\":\"bad key {KEY}\"}}}}}}}}"
        ),
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {{len}}\r\n\r\n[{{{{\"id\":5,\"result\":\"{KEY}\"}}}}]"
        ),
    ];
    for answer in answers {
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let response = format!(
            "{}\r\n\r\n{body}",
            head.replace("{len}", &body.len().to_string())
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            for _ in 0..2 {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let mut buffer = vec![0u8; 64 << 10];
                let _ = socket.read(&mut buffer).await;
                let _ = socket.write_all(response.as_bytes()).await;
            }
        });
        let client = RpcClient::new(&format!("http://127.0.0.1:{port}/v3/{KEY}?apikey={KEY}"))
            .unwrap()
            .with_max_batch(1);
        let single = client.call::<String>("eth_chainId", ()).await.unwrap_err();
        assert!(!format!("{single} {single:?}").contains(KEY), "{single}");
        if let Ok(items) = client
            .batch(&[("eth_chainId", ()), ("eth_chainId", ())])
            .await
        {
            for item in items {
                if let Err(error) = item {
                    assert!(!format!("{error} {error:?}").contains(KEY), "{error}");
                }
            }
        } else if let Err(error) = client.batch(&[("eth_chainId", ())]).await {
            assert!(!format!("{error} {error:?}").contains(KEY), "{error}");
        }
        server.abort();
    }
}

/// An HTTP server on 127.0.0.1 answering every request with what
/// `answer` holds at the time (a whole response, `{len}` standing for
/// the body's length), one request a connection; and how many requests
/// it has read.
async fn canned(answer: Arc<std::sync::Mutex<String>>) -> (u16, Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicU64::new(0));
    let seen = requests.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut read = Vec::new();
            let mut buffer = [0u8; 4096];
            // The headers, then as much body as they declare.
            let whole = loop {
                let Ok(n @ 1..) = socket.read(&mut buffer).await else {
                    break false;
                };
                read.extend_from_slice(&buffer[..n]);
                let text = String::from_utf8_lossy(&read);
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text[..end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap())
                        })
                        .unwrap_or(0);
                    if read.len() >= end + 4 + length {
                        break true;
                    }
                }
            };
            if !whole {
                continue;
            }
            seen.fetch_add(1, Ordering::SeqCst);
            let answer = answer.lock().unwrap().clone();
            let (head, body) = answer.split_once("\r\n\r\n").unwrap();
            let response = format!(
                "{}\r\nconnection: close\r\n\r\n{body}",
                head.replace("{len}", &body.len().to_string())
            );
            let _ = socket.write_all(response.as_bytes()).await;
        }
    });
    (port, requests)
}

/// Issue 42 (5): while a day's `Retry-After` holds every request, a
/// probe still goes; only a result of the shape asked for ends the
/// pause (an error answered with 200, a proxy's page or a `null`
/// leaves it), and then every request goes again.
#[tokio::test]
async fn a_probe_goes_through_a_pause_and_only_a_result_ends_it() {
    let ok = |body: &str| format!("HTTP/1.1 200 OK\r\ncontent-length: {{len}}\r\n\r\n{body}");
    let answer = Arc::new(std::sync::Mutex::new(String::from(
        "HTTP/1.1 429 Too Many Requests\r\nretry-after: 86400\r\ncontent-length: {len}\r\n\r\nslow down",
    )));
    let (port, requests) = canned(answer.clone()).await;
    let client = RpcClient::new(&format!("http://127.0.0.1:{port}")).unwrap();
    let refused = client.call::<Quantity>("eth_blockNumber", ()).await;
    assert!(
        matches!(refused, Err(RpcError::Http { status: 429, .. })),
        "{refused:?}"
    );
    assert!(client.pacing().is_paused());
    // Everything else honours the pause: failed at once, nothing sent.
    let held = client.call::<Quantity>("eth_blockNumber", ()).await;
    assert!(matches!(held, Err(RpcError::Timeout { .. })), "{held:?}");
    assert_eq!(requests.load(Ordering::SeqCst), 1);
    let not_served = [
        ok(
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32005,"message":"daily request limit reached"}}"#,
        ),
        ok("<html><body>Service over quota</body></html>"),
        ok(r#"{"jsonrpc":"2.0","id":1,"result":null}"#),
        ok(r#"{"jsonrpc":"2.0","id":1,"result":{"number":"0x2a"}}"#),
        ok(r#"{"jsonrpc":"2.0","id":1,"result":"0x2a"#),
    ];
    for (sent, body) in (2..).zip(not_served) {
        *answer.lock().unwrap() = body.clone();
        let probed = client.probe::<Quantity>("eth_blockNumber", ()).await;
        assert!(probed.is_err(), "{body}: {probed:?}");
        assert_eq!(requests.load(Ordering::SeqCst), sent, "{body}");
        assert!(client.pacing().is_paused(), "{body} ended the pause");
    }
    *answer.lock().unwrap() = ok(r#"{"jsonrpc":"2.0","id":1,"result":"0x2a"}"#);
    let probed = client.probe::<Quantity>("eth_blockNumber", ()).await;
    assert_eq!(probed.unwrap(), Quantity(42));
    assert!(!client.pacing().is_paused());
    assert_eq!(
        client
            .call::<Quantity>("eth_blockNumber", ())
            .await
            .unwrap(),
        Quantity(42)
    );
}
