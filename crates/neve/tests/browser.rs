//! A dapp's page in a real browser calling neve across origins. Headless
//! Chromium loads `tests/browser/index.html` from nginx on two origins: one
//! that neve's `--cors-origins` allows and one it does not. From the allowed
//! one, `fetch` (a JSON POST, so preflighted) and a WebSocket get neve's
//! answers, the chain's own; from the other, the browser keeps the answers
//! from the page (CORS) and neve refuses the WebSocket (403), though neve
//! is reachable from there. `--cors-origins '*'` opens fetch to every page
//! while `--ws-origins` keeps WebSockets to its own list; with neither flag
//! neve sends no CORS headers and refuses upgrades that carry an Origin
//! (non-browser clients send none and are served).
//!
//! Chromium is driven over its DevTools protocol rather than with
//! `--dump-dom --virtual-time-budget`: virtual time does not wait for a
//! WebSocket handshake, so the page's own time limit would fire first.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use neve_devnet::free_ports;
use neve_upstream::{RpcClient, quantity};
use serde_json::{Value, json};
use support::*;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// What the page has written when every call has settled (else null).
const OUTCOME: &str =
    r#"document.title === "done" ? document.getElementById("out").textContent : null"#;

/// A process group started for the test, killed whole (SIGKILL) on drop.
struct Group(std::process::Child);

impl Drop for Group {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the process group of our own child, which
        // `process_group(0)` made its leader.
        unsafe {
            libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.0.wait();
    }
}

/// Headless Chromium (Debian's, installed by scripts/install-deps.sh) with
/// a fresh profile, driven over its DevTools protocol.
struct Chromium {
    devtools: Socket,
    next_id: u64,
    /// Every DevTools event received so far.
    events: Vec<Value>,
    _process: Group,
    dir: tempfile::TempDir,
}

impl Chromium {
    async fn launch() -> Chromium {
        use std::os::unix::process::CommandExt;
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("profile");
        let log = std::fs::File::create(dir.path().join("chromium.log")).unwrap();
        let child = std::process::Command::new("chromium")
            .args([
                "--headless",
                // As root (containers, CI) Chromium runs only unsandboxed.
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            // Crash reports, caches and settings land in the temp dir.
            .env("HOME", dir.path())
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("XDG_CACHE_HOME", dir.path().join("cache"))
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            // Its own group: renderers and helpers are killed with it.
            .process_group(0)
            .spawn()
            .expect("chromium runs (scripts/install-deps.sh installs it)");
        let mut process = Group(child);
        // Chromium writes the DevTools port and path into the profile.
        let port_file = profile.join("DevToolsActivePort");
        let deadline = Instant::now() + Duration::from_secs(30);
        let url = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file)
                && let Some((port, path)) = text.split_once('\n')
                && path.trim().starts_with("/devtools/")
            {
                break format!("ws://127.0.0.1:{}{}", port.trim(), path.trim());
            }
            if let Ok(Some(status)) = process.0.try_wait() {
                panic!(
                    "chromium exited with {status}:\n{}",
                    chromium_log(dir.path())
                );
            }
            assert!(
                Instant::now() < deadline,
                "chromium did not open its DevTools port in 30 s:\n{}",
                chromium_log(dir.path())
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let (devtools, _) = tokio::time::timeout(
            Duration::from_secs(10),
            tokio_tungstenite::connect_async(&url),
        )
        .await
        .expect("DevTools connects in 10 s")
        .unwrap_or_else(|e| panic!("DevTools at {url}: {e}\n{}", chromium_log(dir.path())));
        Chromium {
            devtools,
            next_id: 0,
            events: Vec::new(),
            _process: process,
            dir,
        }
    }

    /// What Chromium has written to stderr, for failure messages.
    fn log(&self) -> String {
        chromium_log(self.dir.path())
    }

    /// Sends one DevTools command, to the page of `session` or else to the
    /// browser, and waits for its answer: the result, or the error.
    async fn call(
        &mut self,
        session: Option<&str>,
        method: &str,
        params: Value,
    ) -> Result<Value, Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut command = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            command["sessionId"] = json!(session);
        }
        self.devtools
            .send(Message::Text(command.to_string().into()))
            .await
            .unwrap_or_else(|e| panic!("DevTools {method}: {e}"));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let message = match tokio::time::timeout(left, self.devtools.next()).await {
                Ok(message) => message,
                Err(_) => panic!("Chromium did not answer {method} in 20 s:\n{}", self.log()),
            };
            let text = match message {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(_)) => continue,
                other => panic!("DevTools closed during {method}: {other:?}\n{}", self.log()),
            };
            let value: Value = serde_json::from_str(&text).unwrap();
            if value["id"] == id {
                return match value.get("error") {
                    Some(error) => Err(error.clone()),
                    None => Ok(value["result"].clone()),
                };
            }
            self.events.push(value);
        }
    }

    /// Opens `url` in a new tab and waits until the page has written its
    /// outcome; returns it with what the browser logged for the tab
    /// (network and console errors, CORS refusals among them).
    async fn visit(&mut self, url: &str) -> (Value, Vec<String>) {
        let tab = self
            .call(None, "Target.createTarget", json!({"url": "about:blank"}))
            .await
            .expect("a new tab")["targetId"]
            .clone();
        let session = self
            .call(
                None,
                "Target.attachToTarget",
                json!({"targetId": tab, "flatten": true}),
            )
            .await
            .expect("attached to the tab")["sessionId"]
            .as_str()
            .unwrap()
            .to_owned();
        // Logging on before the page loads, so nothing it logs is missed.
        for enable in ["Log.enable", "Runtime.enable"] {
            self.call(Some(&session), enable, json!({}))
                .await
                .expect(enable);
        }
        self.call(Some(&session), "Page.navigate", json!({"url": url}))
            .await
            .expect("navigates");
        // The page bounds each of its four calls at 5 s.
        let deadline = Instant::now() + Duration::from_secs(40);
        let outcome = loop {
            let answer = self
                .call(
                    Some(&session),
                    "Runtime.evaluate",
                    json!({"expression": OUTCOME, "returnByValue": true}),
                )
                .await;
            // An error while the page is being replaced is asked again.
            if let Ok(answer) = &answer
                && let Some(text) = answer["result"]["value"].as_str()
            {
                break serde_json::from_str::<Value>(text)
                    .unwrap_or_else(|e| panic!("the page wrote {text:?}: {e}"));
            }
            if Instant::now() > deadline {
                panic!(
                    "{url} wrote no outcome in 40 s (last: {answer:?}); it logged:\n{}\nChromium:\n{}",
                    self.logged(&session).join("\n"),
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let logged = self.logged(&session);
        let _ = self
            .call(None, "Target.closeTarget", json!({"targetId": tab}))
            .await;
        (outcome, logged)
    }

    /// What the tab of `session` logged: log entries, exceptions, console.
    fn logged(&self, session: &str) -> Vec<String> {
        self.events
            .iter()
            .filter(|event| event["sessionId"] == session)
            .filter_map(|event| {
                let params = &event["params"];
                match event["method"].as_str()? {
                    "Log.entryAdded" => Some(format!(
                        "{} {}: {}",
                        params["entry"]["level"].as_str().unwrap_or(""),
                        params["entry"]["source"].as_str().unwrap_or(""),
                        params["entry"]["text"].as_str().unwrap_or("")
                    )),
                    "Runtime.exceptionThrown" => {
                        Some(format!("exception: {}", params["exceptionDetails"]))
                    }
                    "Runtime.consoleAPICalled" => Some(format!(
                        "console.{}: {}",
                        params["type"].as_str().unwrap_or(""),
                        params["args"]
                    )),
                    _ => None,
                }
            })
            .collect()
    }
}

fn chromium_log(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("chromium.log")).unwrap_or_default();
    // The last lines: the start is dbus noise on a machine without one.
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The test page from `origin`, calling the neve at `neve`.
fn page(origin: &str, neve: &Neve) -> String {
    format!(
        "{origin}/index.html?rpc={}/&ws={}/&limit_ms=5000",
        neve.url,
        neve.url.replacen("http://", "ws://", 1)
    )
}

/// Both fetch calls answered 200 with neve's head and the chain id.
fn assert_fetched(outcome: &Value, logged: &[String], head: &str, chain_id: &str) {
    let why = format!("{outcome:#}\nlogged:\n{}", logged.join("\n"));
    for (call, expected) in [("eth_blockNumber", head), ("eth_chainId", chain_id)] {
        assert_eq!(outcome[call]["ok"], true, "{call}: {why}");
        assert_eq!(outcome[call]["status"], 200, "{call}: {why}");
        assert_eq!(outcome[call]["result"], expected, "{call}: {why}");
    }
    assert!(
        !logged.iter().any(|l| l.contains("CORS policy")),
        "no CORS refusal: {why}"
    );
}

/// Both fetch calls failed in the browser as CORS refusals, though neve was
/// reachable from the page (an opaque `no-cors` answer).
fn assert_fetch_blocked(outcome: &Value, logged: &[String]) {
    let why = format!("{outcome:#}\nlogged:\n{}", logged.join("\n"));
    for call in ["eth_blockNumber", "eth_chainId"] {
        assert_eq!(outcome[call]["ok"], false, "{call}: {why}");
        assert!(
            outcome[call]["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("TypeError")),
            "{call} fails as fetch does when CORS refuses: {why}"
        );
    }
    assert_eq!(
        outcome["no_cors"]["type"], "opaque",
        "neve reachable: {why}"
    );
    assert!(
        logged
            .iter()
            .any(|l| l.contains("blocked by CORS policy") && l.contains("preflight")),
        "the browser says CORS refused the preflight: {why}"
    );
}

/// The WebSocket opened and answered eth_chainId and eth_subscribe.
fn assert_socket_served(outcome: &Value, logged: &[String], chain_id: &str) {
    let why = format!("{outcome:#}\nlogged:\n{}", logged.join("\n"));
    let socket = &outcome["websocket"];
    assert_eq!(socket["ok"], true, "{why}");
    assert_eq!(socket["answers"]["eth_chainId"], chain_id, "{why}");
    assert!(
        socket["answers"]["eth_subscribe"]
            .as_str()
            .is_some_and(|id| id.starts_with("0x")),
        "a subscription id: {why}"
    );
}

/// The WebSocket never opened: the handshake was answered 403.
fn assert_socket_refused(outcome: &Value, logged: &[String]) {
    let why = format!("{outcome:#}\nlogged:\n{}", logged.join("\n"));
    let socket = &outcome["websocket"];
    assert_eq!(socket["ok"], false, "{why}");
    assert_ne!(socket["opened"], true, "{why}");
    assert!(
        logged
            .iter()
            .any(|l| l.contains("WebSocket") && l.contains("403")),
        "the browser saw the handshake refused 403: {why}"
    );
}

/// One HTTP/1.1 request for `/` on a fresh connection: the status and the
/// headers (names lowercased).
fn exchange(
    addr: &str,
    method: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>) {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut request = format!(
        "{method} / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = Vec::new();
    // A timeout keeps what was read.
    let _ = stream.read_to_end(&mut response);
    let text = String::from_utf8_lossy(&response);
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP answer to {method} from {addr}: {text:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}

fn cors_headers(headers: &[(String, String)]) -> Vec<&(String, String)> {
    headers
        .iter()
        .filter(|(n, _)| n.starts_with("access-control-"))
        .collect()
}

/// A browser's preflight for a JSON POST from `origin`.
fn preflight(addr: &str, origin: &str) -> (u16, Vec<(String, String)>) {
    exchange(
        addr,
        "OPTIONS",
        &[
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "content-type"),
        ],
        "",
    )
}

/// A JSON POST of eth_chainId sent with `Origin: origin`.
fn post_from(addr: &str, origin: &str) -> (u16, Vec<(String, String)>) {
    exchange(
        addr,
        "POST",
        &[("Origin", origin), ("Content-Type", "application/json")],
        r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#,
    )
}

/// A WebSocket upgrade of `ws://addr/`, with `Origin: origin` if given:
/// eth_chainId's answer over the socket, or the status refusing it.
async fn upgrade(addr: &str, origin: Option<&str>) -> Result<String, u16> {
    let mut request = format!("ws://{addr}/").into_client_request().unwrap();
    if let Some(origin) = origin {
        request
            .headers_mut()
            .insert("origin", HeaderValue::from_str(origin).unwrap());
    }
    let connected = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async(request),
    )
    .await
    .expect("the upgrade is answered in 10 s");
    let mut socket = match connected {
        Ok((socket, _)) => socket,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            return Err(response.status().as_u16());
        }
        Err(e) => panic!("upgrade at {addr}: {e}"),
    };
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    socket.send(Message::Text(call.into())).await.unwrap();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(10), socket.next())
            .await
            .expect("an answer over the socket in 10 s");
        if let Some(Ok(Message::Text(text))) = message {
            let answer: Value = serde_json::from_str(&text).unwrap();
            return Ok(answer["result"].as_str().unwrap().to_owned());
        }
        assert!(matches!(message, Some(Ok(_))), "socket ended: {message:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_reads_neve_from_the_origins_it_allows_and_from_no_other() {
    let (geth, top) = dev_chain_of(3).await;
    let chain_id: String = RpcClient::new(geth.http_url())
        .unwrap()
        .call("eth_chainId", ())
        .await
        .unwrap();
    let head = quantity(top);
    let [page_port, other_port] = free_ports();
    let allowed = format!("http://127.0.0.1:{page_port}");
    let other = format!("http://127.0.0.1:{other_port}");

    // The same page on two origins: the dapp's, and somebody else's.
    let pages = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser");
    let _pages = Nginx::start(
        |_| {
            format!(
                "  access_log off;\n  types {{ text/html html; }}\n  server {{\n    \
                 listen 127.0.0.1:{page_port};\n    listen 127.0.0.1:{other_port};\n    \
                 root {};\n    location = /favicon.ico {{ return 204; }}\n  }}",
                pages.display()
            )
        },
        &[page_port, other_port],
    );
    let mut browser = Chromium::launch().await;

    // neve allowing the dapp's origin.
    let neve = Neve::start(
        geth.http_url(),
        &[
            "--floor",
            "0",
            "--ws-url",
            geth.ws_url(),
            "--cors-origins",
            &allowed,
        ],
        top,
    )
    .await;
    let (outcome, logged) = browser.visit(&page(&allowed, &neve)).await;
    assert_eq!(outcome["origin"], allowed.as_str());
    assert_fetched(&outcome, &logged, &head, &chain_id);
    assert_socket_served(&outcome, &logged, &chain_id);
    eprintln!("from {allowed}: {outcome}");

    let (outcome, logged) = browser.visit(&page(&other, &neve)).await;
    assert_eq!(outcome["origin"], other.as_str());
    assert_fetch_blocked(&outcome, &logged);
    assert_socket_refused(&outcome, &logged);
    eprintln!("from {other}: {outcome}");

    // What the browser saw, header by header.
    let (status, headers) = preflight(&neve.addr, &allowed);
    assert_eq!(status, 204, "{headers:?}");
    assert_eq!(
        header(&headers, "access-control-allow-origin"),
        Some(allowed.as_str()),
        "{headers:?}"
    );
    assert!(
        header(&headers, "access-control-allow-methods").is_some_and(|m| m.contains("POST")),
        "{headers:?}"
    );
    assert!(
        header(&headers, "access-control-allow-headers")
            .is_some_and(|h| h.to_ascii_lowercase().contains("content-type")),
        "{headers:?}"
    );
    assert!(
        header(&headers, "access-control-max-age")
            .and_then(|s| s.parse::<u64>().ok())
            .is_some_and(|s| s > 0),
        "{headers:?}"
    );
    let (status, headers) = preflight(&neve.addr, &other);
    assert_eq!(status, 403, "{headers:?}");
    assert!(cors_headers(&headers).is_empty(), "{headers:?}");
    let (status, headers) = post_from(&neve.addr, &allowed);
    assert_eq!(status, 200, "{headers:?}");
    assert_eq!(
        header(&headers, "access-control-allow-origin"),
        Some(allowed.as_str()),
        "{headers:?}"
    );
    let (_, headers) = post_from(&neve.addr, &other);
    assert!(cors_headers(&headers).is_empty(), "{headers:?}");
    assert_eq!(
        upgrade(&neve.addr, Some(allowed.as_str())).await,
        Ok(chain_id.clone())
    );
    assert_eq!(upgrade(&neve.addr, Some(other.as_str())).await, Err(403));
    assert_eq!(upgrade(&neve.addr, None).await, Ok(chain_id.clone()));
    drop(neve);

    // Any page may fetch; WebSockets only from the dapp's.
    let open = Neve::start(
        geth.http_url(),
        &[
            "--floor",
            "0",
            "--ws-url",
            geth.ws_url(),
            "--cors-origins",
            "*",
            "--ws-origins",
            &allowed,
        ],
        top,
    )
    .await;
    let (outcome, logged) = browser.visit(&page(&other, &open)).await;
    assert_fetched(&outcome, &logged, &head, &chain_id);
    assert_socket_refused(&outcome, &logged);
    assert_eq!(
        upgrade(&open.addr, Some(allowed.as_str())).await,
        Ok(chain_id.clone())
    );
    drop(open);

    // Neither flag: no CORS headers for anyone, no WebSocket from a page;
    // clients that send no Origin are served as ever.
    let closed = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", geth.ws_url()],
        top,
    )
    .await;
    let (status, headers) = preflight(&closed.addr, &allowed);
    assert!(
        status >= 400 && cors_headers(&headers).is_empty(),
        "{status} {headers:?}"
    );
    let (_, headers) = post_from(&closed.addr, &allowed);
    assert!(cors_headers(&headers).is_empty(), "{headers:?}");
    assert_eq!(
        upgrade(&closed.addr, Some(allowed.as_str())).await,
        Err(403)
    );
    assert_eq!(upgrade(&closed.addr, None).await, Ok(chain_id.clone()));
    let (outcome, logged) = browser.visit(&page(&allowed, &closed)).await;
    assert_fetch_blocked(&outcome, &logged);
    assert_socket_refused(&outcome, &logged);
}
