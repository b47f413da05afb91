//! Following the endpoints operators have: nginx terminating TLS with a CA
//! made here, wanting a key, and rate limiting with `limit_req` (429 with
//! `Retry-After`), in front of real geth. neve follows it over `https://`
//! and `wss://` and answers as geth; a second neve mirrors the first
//! through TLS and a bearer key; a wrong CA, host name or key is a clear
//! error while stored blocks are still served; neve's request rate stays
//! within its budget by nginx's own log; and no log line, `/health`,
//! `/metrics` or `neve config` shows a key.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use neve_devnet::free_ports;
use neve_upstream::RpcClient;
use support::*;

const KEY: &str = "s3cret-k3y-4242";
const MIRROR_KEY: &str = "m1rror-b3arer-77";

/// A CA made for this test, a certificate it signed for `localhost` and
/// 127.0.0.1, one it signed for another name, and a CA nobody uses.
struct Pki {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    stranger_ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    elsewhere_cert: PathBuf,
    elsewhere_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

fn make_leaf(dir: &Path, name: &str, san: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    std::fs::write(
        dir.join(format!("{name}.ext")),
        format!(
            "subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

fn make_pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_ca(d, "ca");
    make_ca(d, "stranger");
    make_leaf(d, "server", "DNS:localhost,IP:127.0.0.1");
    make_leaf(d, "elsewhere", "DNS:elsewhere.test");
    Pki {
        ca: d.join("ca.pem"),
        stranger_ca: d.join("stranger.pem"),
        cert: d.join("server.pem"),
        key: d.join("server.key"),
        elsewhere_cert: d.join("elsewhere.pem"),
        elsewhere_key: d.join("elsewhere.key"),
        _dir: dir,
    }
}

/// The provider: TLS, a key in the query, 40 requests a second per
/// location (`/rpc`), 4 for `/tight`, 429 with `Retry-After: 1` past it;
/// `/ws` the WebSocket. A second port serves a certificate for another
/// name.
fn provider(pki: &Pki, geth_http: &str, geth_ws: &str) -> (Nginx, u16, u16) {
    let [port, elsewhere] = free_ports();
    let (cert, key) = (pki.cert.display(), pki.key.display());
    let (other_cert, other_key) = (pki.elsewhere_cert.display(), pki.elsewhere_key.display());
    let proxied = |zone: &str, burst: u32| {
        format!(
            "if ($arg_token != \"{KEY}\") {{ return 401; }}\n      \
             limit_req zone={zone} burst={burst} nodelay;\n      \
             proxy_pass http://geth_http/;\n      proxy_http_version 1.1;\n      \
             proxy_set_header Host localhost;\n      \
             proxy_set_header Connection \"\";"
        )
    };
    let (rpc, tight) = (proxied("budget", 8), proxied("tight", 2));
    // Unlimited, for measuring through TLS.
    let open = proxied("budget", 8).replace("limit_req zone=budget burst=8 nodelay;", "");
    let nginx = Nginx::start(
        |dir| {
            let d = dir.display();
            format!(
                "  log_format timed '$msec $request_time $status $request_method $uri';\n  \
                 access_log {d}/access.log timed;\n  \
                 limit_req_zone $server_port zone=budget:1m rate=40r/s;\n  \
                 limit_req_zone $server_port zone=tight:1m rate=4r/s;\n  \
                 limit_req_status 429;\n  \
                 upstream geth_http {{ server {geth_http}; keepalive 8; }}\n  \
                 upstream geth_ws {{ server {geth_ws}; }}\n  \
                 server {{\n    listen 127.0.0.1:{port} ssl;\n    \
                 ssl_certificate {cert};\n    ssl_certificate_key {key};\n    \
                 error_page 429 @limited;\n    \
                 location @limited {{\n      add_header Retry-After 1 always;\n      \
                 default_type application/json;\n      \
                 return 429 '{{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{{\"code\":-32005,\"message\":\"rate limited\"}}}}';\n    }}\n    \
                 location = /rpc {{\n      {rpc}\n    }}\n    \
                 location = /tight {{\n      {tight}\n    }}\n    \
                 location = /open {{\n      {open}\n    }}\n    \
                 location = /ws {{\n      if ($arg_token != \"{KEY}\") {{ return 401; }}\n      \
                 proxy_pass http://geth_ws/;\n      proxy_http_version 1.1;\n      \
                 proxy_set_header Host localhost;\n      \
                 proxy_set_header Upgrade $http_upgrade;\n      \
                 proxy_set_header Connection \"upgrade\";\n      proxy_read_timeout 1h;\n    }}\n  }}\n  \
                 server {{\n    listen 127.0.0.1:{elsewhere} ssl;\n    \
                 ssl_certificate {other_cert};\n    ssl_certificate_key {other_key};\n    \
                 location / {{ return 200; }}\n  }}"
            )
        },
        &[port, elsewhere],
    );
    (nginx, port, elsewhere)
}

/// TLS in front of a neve, wanting a bearer key: what a mirror follows.
fn neve_front(pki: &Pki, neve_addr: &str) -> (Nginx, u16) {
    let [port] = free_ports();
    let (cert, key) = (pki.cert.display(), pki.key.display());
    let nginx = Nginx::start(
        |_| {
            format!(
                "  access_log off;\n  \
                 map $http_upgrade $connection_upgrade {{ default upgrade; '' \"\"; }}\n  \
                 server {{\n    listen 127.0.0.1:{port} ssl;\n    \
                 ssl_certificate {cert};\n    ssl_certificate_key {key};\n    \
                 location / {{\n      \
                 if ($http_authorization != \"Bearer {MIRROR_KEY}\") {{ return 401; }}\n      \
                 proxy_pass http://{neve_addr};\n      proxy_http_version 1.1;\n      \
                 proxy_set_header Upgrade $http_upgrade;\n      \
                 proxy_set_header Connection $connection_upgrade;\n      \
                 proxy_buffering off;\n      proxy_read_timeout 1h;\n    }}\n  }}"
            )
        },
        &[port],
    );
    (nginx, port)
}

/// nginx's access log as (arrival time, status, uri) per request.
fn access_log(nginx: &Nginx) -> Vec<(f64, u16, String)> {
    let mut log: Vec<(f64, u16, String)> = std::fs::read_to_string(nginx.dir.join("access.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let logged: f64 = fields.next()?.parse().ok()?;
            let took: f64 = fields.next()?.parse().ok()?;
            let time = logged - took;
            let status = fields.next()?.parse().ok()?;
            let _method = fields.next()?;
            Some((time, status, fields.next()?.to_string()))
        })
        .collect();
    log.sort_by(|a, b| a.0.total_cmp(&b.0));
    log
}

/// The most requests to `uri` nginx saw in any one-second window.
fn peak_per_second(log: &[(f64, u16, String)], uri: &str) -> usize {
    let times: Vec<f64> = log
        .iter()
        .filter(|(_, _, u)| u == uri)
        .map(|(t, _, _)| *t)
        .collect();
    let mut peak = 0;
    let mut start = 0;
    for end in 0..times.len() {
        while times[end] - times[start] >= 1.0 {
            start += 1;
        }
        peak = peak.max(end - start + 1);
    }
    peak
}

fn metric(neve: &Neve, name: &str) -> f64 {
    let (_, text) = neve.get("/metrics").expect("metrics");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics"))
}

/// Waits until neve's log holds `needle`; panics with the log after 30 s.
async fn wait_for_log(neve: &Neve, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let log = neve.log();
        if log.contains(needle) {
            return log;
        }
        assert!(Instant::now() < deadline, "no {needle:?} in:\n{log}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The sender of a transaction in the newest block that has one.
async fn sender_of_a_transaction(client: &RpcClient, head: u64) -> serde_json::Value {
    for height in (0..=head).rev() {
        let params = serde_json::json!([format!("0x{height:x}"), true]);
        let block = answer(client, "eth_getBlockByNumber", params).await;
        if let Some(tx) = block["result"]["transactions"].get(0) {
            return tx["from"].clone();
        }
    }
    panic!("no transaction on the chain")
}

fn assert_no_key(what: &str, text: &str) {
    for key in [KEY, MIRROR_KEY] {
        assert!(!text.contains(key), "{what} shows a key:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn neve_follows_a_keyed_rate_limited_tls_endpoint_and_never_shows_the_key() {
    let (geth, head) = chain_with_logs().await;
    let pki = make_pki();
    let host_port = |url: &str| {
        url.trim_start_matches("http://")
            .trim_start_matches("ws://")
            .trim_end_matches('/')
            .to_string()
    };
    let (provider, port, elsewhere) =
        provider(&pki, &host_port(geth.http_url()), &host_port(geth.ws_url()));
    let ca = pki.ca.display().to_string();
    let rpc = format!("https://localhost:{port}/rpc?token={KEY}");
    let ws = format!("wss://localhost:{port}/ws?token={KEY}");

    // Following over https:// and wss://, under a budget below the cap.
    let floor = head.saturating_sub(150);
    let floor_flag = floor.to_string();
    let started = Instant::now();
    let a = Neve::start(
        &rpc,
        &[
            "--ws-url",
            &ws,
            "--ca-file",
            &ca,
            "--floor",
            &floor_flag,
            "--upstream-rps",
            "30",
        ],
        head,
    )
    .await;
    let backfill = started.elapsed();
    let direct = RpcClient::new(geth.http_url()).unwrap();
    let through_a = RpcClient::new(&a.url).unwrap();
    assert_same_as_geth(&through_a, &direct, floor..=head).await;
    let log = wait_for_log(&a, "subscribed to newHeads").await;
    assert!(log.contains("wss://localhost"), "{log}");
    // State through TLS: a balance fetched through and verified.
    let coinbase = sender_of_a_transaction(&direct, head).await;
    for block in [
        serde_json::json!("latest"),
        serde_json::json!(format!("0x{head:x}")),
    ] {
        let params = serde_json::json!([coinbase, block]);
        assert_eq!(
            answer(&through_a, "eth_getBalance", params.clone()).await,
            answer(&direct, "eth_getBalance", params).await
        );
    }

    // nginx's own log: never more than the budget in a second, few 429s,
    // and each one counted by neve.
    let log = access_log(&provider);
    let peak = peak_per_second(&log, "/rpc");
    let refused = log
        .iter()
        .filter(|(_, s, u)| *s == 429 && u == "/rpc")
        .count();
    eprintln!(
        "backfill of {} blocks through TLS at --upstream-rps 30: {backfill:?}; peak {peak} req/s; {refused} refused",
        head - floor + 1
    );
    assert!(peak <= 31, "neve sent {peak} requests in one second");
    assert!(refused <= 2, "{refused} requests refused");
    assert_eq!(metric(&a, "neve_upstream_refusals_total") as usize, refused);
    assert_eq!(metric(&a, "neve_upstream_budget_requests_per_second"), 30.0);

    // Without a budget against a tighter cap (4/s): refused, paused as
    // asked, still caught up, and each refusal counted.
    let tight = Neve::start(
        &format!("https://localhost:{port}/tight?token={KEY}"),
        &[
            "--ws-url",
            "none",
            "--ca-file",
            &ca,
            "--floor",
            &(head.saturating_sub(40)).to_string(),
        ],
        head,
    )
    .await;
    let log = access_log(&provider);
    let tight_refused = log
        .iter()
        .filter(|(_, s, u)| *s == 429 && u == "/tight")
        .count();
    let tight_answered = log
        .iter()
        .filter(|(_, s, u)| *s == 200 && u == "/tight")
        .count();
    eprintln!("no budget against 4 req/s: {tight_answered} answered, {tight_refused} refused");
    assert!(tight_refused > 0, "the tight cap refused nothing");
    assert!(
        tight_refused <= tight_answered,
        "{tight_refused} refused against {tight_answered} answered"
    );
    assert_eq!(
        metric(&tight, "neve_upstream_refusals_total") as usize,
        tight_refused
    );
    assert!(metric(&tight, "neve_upstream_wait_seconds_total") > 0.5);

    // A mirror of A through TLS and a bearer key kept in a file.
    let (_front, front_port) = neve_front(&pki, &a.addr);
    let headers = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        headers.path(),
        format!("# the mirror's key\nAuthorization: Bearer {MIRROR_KEY}\n"),
    )
    .unwrap();
    let headers_path = headers.path().display().to_string();
    let b = Neve::start_with(
        &[
            "--mirror-from",
            &format!("https://localhost:{front_port}"),
            "--upstream-header-file",
            &headers_path,
            "--ca-file",
            &ca,
            "--floor",
            &floor_flag,
        ],
        head,
    )
    .await;
    let through_b = RpcClient::new(&b.url).unwrap();
    assert_same_as_geth(&through_b, &direct, floor..=head).await;
    let params = serde_json::json!([coinbase, "latest"]);
    assert_eq!(
        answer(&through_b, "eth_getBalance", params.clone()).await,
        answer(&direct, "eth_getBalance", params).await
    );

    // Wrong CA, wrong host name, wrong key: a clear, redacted error.
    let stranger = pki.stranger_ca.display().to_string();
    for (url, ca, says) in [
        (rpc.clone(), stranger.as_str(), "--ca-file"),
        (
            format!("https://127.0.0.1:{elsewhere}/rpc?token={KEY}"),
            ca.as_str(),
            "does not name this host",
        ),
        (
            format!("https://localhost:{port}/rpc?token=wrong-{KEY}"),
            ca.as_str(),
            "refused the credentials",
        ),
    ] {
        let neve = Neve::spawn(&["--upstream", &url, "--ca-file", ca, "--ws-url", "none"]);
        let log = wait_for_log(&neve, says).await;
        assert!(log.contains("https://"), "the URL is named:\n{log}");
        assert_no_key("a refused neve's log", &log);
    }

    // A neve holding blocks, restarted with a wrong key, serves them while
    // it retries, and says why in /health.
    let mut a = a;
    a.kill();
    let wrong = Neve::spawn_in(
        Some(&a.store),
        &[
            "--upstream",
            &format!("https://localhost:{port}/rpc?token=wrong-{KEY}"),
            "--ca-file",
            &ca,
            "--ws-url",
            "none",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let health = loop {
        if let Some(health) = wrong.health() {
            break health;
        }
        assert!(Instant::now() < deadline, "not serving:\n{}", wrong.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let last_error = health["upstream"]["last_error"]
        .as_str()
        .unwrap_or_default();
    assert!(last_error.contains("401"), "{health}");
    let through_wrong = RpcClient::new(&wrong.url).unwrap();
    assert_same_as_geth(&through_wrong, &direct, head - 2..=head).await;

    // No key anywhere an operator or a scraper looks.
    for neve in [&tight, &b, &wrong] {
        assert_no_key("the log", &neve.log());
        assert_no_key("/health", &neve.get("/health").unwrap().1);
        assert_no_key("/metrics", &neve.get("/metrics").unwrap().1);
    }
    let config = run_neve(&[
        "config",
        "--upstream",
        &rpc,
        "--upstream-header",
        &format!("Authorization: Bearer {MIRROR_KEY}"),
    ])
    .await;
    let config = expect_success(&config);
    assert!(
        config.contains("upstream-header = \"Authorization: ***\""),
        "{config}"
    );
    assert_no_key("neve config", &config);
    assert_no_key(
        "nginx's log",
        &std::fs::read_to_string(provider.dir.join("access.log")).unwrap(),
    );
}
