//! Helpers shared by the integration tests: run the real `neve` binary and
//! read the chain back over RPC.

#![allow(dead_code)] // each test binary uses its own subset

pub mod calls;

use std::process::Output;

use neve_upstream::{RpcClient, parse_quantity, quantity};
use serde_json::Value;

/// Runs `neve ARGS…` to completion off the async runtime and returns its output.
pub async fn run_neve(args: &[&str]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_neve"))
            .args(&args)
            .output()
            .expect("neve runs")
    })
    .await
    .expect("join")
}

/// Asserts success and returns stdout, showing stderr on failure.
pub fn expect_success(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "neve failed with {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The whole JSON-RPC answer (envelope included) to one call, whatever
/// the HTTP status.
pub async fn answer(client: &RpcClient, method: &str, params: Value) -> Value {
    let body =
        serde_json::json!({"jsonrpc":"2.0","id":1,"method":method,"params":params}).to_string();
    let (_, bytes) = client.post(body.into()).await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// Every height's blocks (full and hashes-only), receipts and raw data
/// from neve equal geth's.
pub async fn assert_same_as_geth(
    neve: &RpcClient,
    geth: &RpcClient,
    heights: std::ops::RangeInclusive<u64>,
) {
    for height in heights {
        let h = quantity(height);
        for (method, params) in [
            ("eth_getBlockByNumber", serde_json::json!([h, true])),
            ("eth_getBlockByNumber", serde_json::json!([h, false])),
            ("eth_getBlockReceipts", serde_json::json!([h])),
            ("debug_getRawBlock", serde_json::json!([h])),
            ("debug_getRawReceipts", serde_json::json!([h])),
        ] {
            assert_eq!(
                answer(neve, method, params.clone()).await,
                answer(geth, method, params.clone()).await,
                "{method} {params}"
            );
        }
    }
}

pub async fn head(client: &RpcClient) -> u64 {
    let head: String = client.call("eth_blockNumber", ()).await.unwrap();
    parse_quantity(&head).unwrap()
}

/// Every block from 1 to the head with full transactions.
pub async fn blocks(client: &RpcClient) -> Vec<Value> {
    let head = head(client).await;
    let mut blocks = Vec::new();
    let heights: Vec<u64> = (1..=head).collect();
    // Small chunks: geth caps a batch response at 25 MB and these blocks
    // carry hundreds of full transactions each.
    for chunk in heights.chunks(4) {
        let calls: Vec<(&str, (String, bool))> = chunk
            .iter()
            .map(|n| ("eth_getBlockByNumber", (quantity(*n), true)))
            .collect();
        for item in client.batch(&calls).await.unwrap() {
            blocks.push(serde_json::from_str(item.unwrap().get()).unwrap());
        }
    }
    blocks
}

/// Transactions per envelope type ("0x0", "0x1", "0x2") over `blocks`.
pub fn count_types(blocks: &[Value]) -> std::collections::BTreeMap<String, usize> {
    let mut types = std::collections::BTreeMap::new();
    for block in blocks {
        for tx in block["transactions"].as_array().unwrap() {
            *types
                .entry(tx["type"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    types
}

/// Logs with the ERC-20 `Transfer` topic between block 1 and the head.
pub async fn transfer_logs(client: &RpcClient) -> Vec<Value> {
    let topic = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef";
    client
        .call(
            "eth_getLogs",
            [serde_json::json!({"fromBlock": "0x1", "toBlock": "latest", "topics": [topic]})],
        )
        .await
        .unwrap()
}

/// A running `neve serve`, killed on drop.
pub struct Neve {
    child: std::process::Child,
    pub url: String,
    pub addr: String,
    /// Its store.
    pub store: std::path::PathBuf,
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Drop for Neve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Neve {
    /// Starts `neve serve --upstream UPSTREAM EXTRA…` on a free port with a
    /// fresh data dir, and waits until its store reaches `height`.
    pub async fn start(upstream: &str, extra: &[&str], height: u64) -> Neve {
        let mut args = vec!["--upstream", upstream];
        args.extend_from_slice(extra);
        Neve::start_with(&args, height).await
    }

    /// Starts `neve serve ARGS…` on a free port with a fresh data dir, and
    /// waits until its store reaches `height`.
    pub async fn start_with(extra: &[&str], height: u64) -> Neve {
        let neve = Neve::spawn(extra);
        neve.wait_for_height(height, std::time::Duration::from_secs(180))
            .await;
        neve
    }

    /// Starts `neve serve ARGS…` on a free port with a fresh data dir,
    /// without waiting for anything.
    pub fn spawn(extra: &[&str]) -> Neve {
        Neve::spawn_in(None, extra)
    }

    /// [`Neve::spawn`] with the store in `data_dir` (else a fresh one).
    pub fn spawn_in(data_dir: Option<&std::path::Path>, extra: &[&str]) -> Neve {
        let dir = tempfile::tempdir().unwrap();
        let [port] = neve_devnet::free_ports();
        let addr = format!("127.0.0.1:{port}");
        let store = data_dir.map_or_else(|| dir.path().join("store"), |d| d.to_path_buf());
        let mut args = vec![
            "serve".to_string(),
            "--listen".into(),
            addr.clone(),
            "--data-dir".into(),
            store.display().to_string(),
            "--durability".into(),
            "os".into(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let child = launch(&args, &dir.path().join("neve.log"));
        Neve {
            child,
            url: format!("http://{addr}"),
            addr,
            store,
            args,
            _dir: dir,
        }
    }

    /// Kills it (SIGKILL) and leaves it down; [`Neve::restart`] starts it
    /// again on the same address and store.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again with the same arguments (address, store, flags).
    pub fn restart(&mut self) {
        self.kill();
        self.child = launch(&self.args, &self._dir.path().join("neve.log"));
    }

    /// Waits until the store reaches `height`; panics with the log after
    /// `timeout`.
    pub async fn wait_for_height(&self, height: u64, timeout: std::time::Duration) {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Some(health) = self.health()
                && health["blocks"]["max_contiguous_height"]
                    .as_u64()
                    .is_some_and(|h| h >= height)
            {
                return;
            }
            if std::time::Instant::now() > deadline {
                panic!("neve did not reach height {height}:\n{}", self.log());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// Anonymous resident memory (`RssAnon`), in bytes.
    pub fn rss_anon_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("RssAnon:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM, as systemd and container runtimes do to stop it.
    pub fn terminate(&self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
        }
    }

    /// Waits up to `timeout` for the process to exit; `None` if it has not.
    pub fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// What neve has logged so far, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("neve.log")).unwrap_or_default()
    }

    /// `GET path` → (status, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&self.addr, path)
    }

    /// `/health` parsed.
    pub fn health(&self) -> Option<Value> {
        let (status, body) = self.get("/health")?;
        (status == 200)
            .then(|| serde_json::from_str(&body).ok())
            .flatten()
    }
}

/// JSON-RPC calls the neve at `addr` answered (those with `outcome`, or
/// all), from its `/metrics`.
pub fn rpc_calls(addr: &str, outcome: Option<&str>) -> Option<u64> {
    let (_, metrics) = http_get(addr, "/metrics")?;
    let outcome = outcome.map(|o| format!("outcome=\"{o}\""));
    Some(
        metrics
            .lines()
            .filter(|l| l.starts_with("neve_rpc_requests_total{"))
            .filter(|l| outcome.as_ref().is_none_or(|o| l.contains(o.as_str())))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum(),
    )
}

/// A plain HTTP/1.1 GET over a fresh connection.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

impl Neve {
    /// Starts `neve serve --mirror-from UPSTREAM` and waits for `height`.
    pub async fn start_mirror(upstream: &str, height: u64) -> Neve {
        Neve::start_with(&["--mirror-from", upstream, "--floor", "0"], height).await
    }
}

/// A neve backfilling from `upstream` through a proxy that answers every
/// call `delay` late, so the backfill lasts a while; `extra` flags added.
pub async fn slow_backfill(
    upstream: &str,
    delay: std::time::Duration,
    extra: &[&str],
) -> (neve_devnet::faults::FaultProxy, Neve) {
    use neve_devnet::faults::{Fault, FaultProxy};
    let proxy = FaultProxy::start(upstream, vec![Fault::Slow(delay)]).await;
    let neve = Neve::behind(&proxy, extra);
    (proxy, neve)
}

impl Neve {
    /// A neve following, from genesis and by polling, whatever is behind
    /// `proxy`; `extra` flags added. Does not wait.
    pub fn behind(proxy: &neve_devnet::faults::FaultProxy, extra: &[&str]) -> Neve {
        let mut args = vec![
            "--upstream",
            proxy.url(),
            "--floor",
            "0",
            "--ws-url",
            "none",
        ];
        args.extend_from_slice(extra);
        Neve::spawn(&args)
    }

    /// A neve mirroring, from genesis and without a WebSocket, the neve
    /// behind `proxy`; `extra` flags added. Does not wait.
    pub fn mirroring(proxy: &neve_devnet::faults::FaultProxy, extra: &[&str]) -> Neve {
        let mut args = vec![
            "--mirror-from",
            proxy.url(),
            "--floor",
            "0",
            "--ws-url",
            "none",
        ];
        args.extend_from_slice(extra);
        Neve::spawn(&args)
    }
}

/// A geth dev chain grown by light `neve load` traffic until its head is
/// at least `height`; returns it and its head.
pub async fn dev_chain_of(height: u64) -> (neve_devnet::GethDev, u64) {
    let geth = neve_devnet::GethDev::start(neve_devnet::GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .expect("geth dev");
    let client = RpcClient::new(geth.http_url()).unwrap();
    while head(&client).await < height {
        let mut load =
            neve_load::LoadConfig::new(geth.http_url(), std::time::Duration::from_secs(2));
        load.accounts = 2;
        load.tps = Some(200);
        neve_load::run(load, |_| {}).await.expect("load");
    }
    let top = head(&client).await;
    (geth, top)
}

/// A geth dev chain with a few seconds of `neve load` traffic (blocks,
/// transactions, token logs); returns it and its head.
pub async fn chain_with_logs() -> (neve_devnet::GethDev, u64) {
    chain_with_logs_on(neve_devnet::GethDevOptions::default()).await
}

/// [`chain_with_logs`] on a geth started with `options`.
pub async fn chain_with_logs_on(
    options: neve_devnet::GethDevOptions,
) -> (neve_devnet::GethDev, u64) {
    let geth = neve_devnet::GethDev::start(options)
        .await
        .expect("geth dev");
    let mut config = neve_load::LoadConfig::new(geth.http_url(), std::time::Duration::from_secs(4));
    config.accounts = 8;
    config.tps = Some(300);
    let report = neve_load::run(config, |_| {}).await.expect("load");
    (geth, report.last_block)
}

/// A neve mirroring [`chain_with_logs`] from genesis, caught up.
pub async fn neve_mirroring_a_chain_with_logs() -> (neve_devnet::GethDev, Neve) {
    let (geth, head) = chain_with_logs().await;
    let neve = Neve::start(
        geth.http_url(),
        &["--floor", "0", "--ws-url", geth.ws_url()],
        head,
    )
    .await;
    (geth, neve)
}

/// A JSON file, parsed.
pub fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// `neve ARGS…` with its output appended to `log`.
fn launch(args: &[String], log: &std::path::Path) -> std::process::Child {
    let log = std::fs::File::options()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_neve"))
        .args(args)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// nginx (Debian's, installed by scripts/install-deps.sh) running the
/// `http { … }` body that `http` writes for its directory, killed on drop.
pub struct Nginx {
    process: neve_devnet::NodeProcess,
    /// Its directory: configuration, logs, temp files.
    pub dir: std::path::PathBuf,
}

impl Nginx {
    /// Starts nginx with `http(dir)` as its `http` block's body and waits
    /// until every port of `ports` accepts connections.
    pub fn start(http: impl FnOnce(&std::path::Path) -> String, ports: &[u16]) -> Nginx {
        use std::time::{Duration, Instant};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        let d = path.display();
        let conf = path.join("nginx.conf");
        std::fs::write(
            &conf,
            format!(
                "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 1024; }}\n\
                 http {{\n  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n  \
                 fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
                 {}\n}}\n",
                http(&path)
            ),
        )
        .unwrap();
        let args = vec![
            "-e".to_owned(),
            format!("{d}/error.log"),
            "-c".to_owned(),
            conf.display().to_string(),
        ];
        let process = neve_devnet::NodeProcess::spawn(
            "nginx",
            std::path::Path::new("/usr/sbin/nginx"),
            &args,
            dir,
        )
        .expect("nginx (scripts/install-deps.sh installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in ports {
            while std::net::TcpStream::connect(("127.0.0.1", *port)).is_err() {
                assert!(
                    process.exit_status().is_none() && Instant::now() < deadline,
                    "nginx did not start:\n{}",
                    process.log_tail(20)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Nginx { process, dir: path }
    }

    /// Its error log's last lines, for failure messages.
    pub fn log_tail(&self) -> String {
        self.process.log_tail(20)
    }
}

/// nginx running `deploy/nginx/neve.conf` as shipped, with this site's
/// `neve/upstreams.conf` and `neve/listen.conf`: the mirrors at `mirrors`,
/// the full node at `node` (host:port each). Returns it and its address.
pub fn shipped_front_end(mirrors: &[&str], node: &str) -> (Nginx, String) {
    let [port] = neve_devnet::free_ports();
    let servers: String = mirrors
        .iter()
        .map(|m| format!("    server {m} max_fails=1 fail_timeout=5s;\n"))
        .collect();
    let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/nginx/neve.conf")
        .canonicalize()
        .unwrap();
    let site = |dir: &std::path::Path| {
        std::fs::create_dir_all(dir.join("neve")).unwrap();
        std::fs::write(
            dir.join("neve/upstreams.conf"),
            format!(
                "upstream neve_mirrors {{\n    zone neve_mirrors 64k;\n{servers}    keepalive 16;\n}}\n\
                 upstream full_node {{\n    server {node};\n    keepalive 4;\n}}\n"
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("neve/listen.conf"),
            format!("listen 127.0.0.1:{port};\n"),
        )
        .unwrap();
        format!("  access_log off;\n  include {};", shipped.display())
    };
    (Nginx::start(site, &[port]), format!("127.0.0.1:{port}"))
}

/// A local avalanchego whose C-chain `neve load` gave a token and holders
/// (six seconds of traffic from the prefunded key), its C-chain client,
/// and its head then.
pub async fn avalanchego_with_a_token() -> (neve_devnet::Avalanchego, RpcClient, u64) {
    let node = neve_devnet::Avalanchego::start()
        .await
        .expect("avalanchego starts");
    let rpc = node.c_chain_rpc_url();
    let output = run_neve(&[
        "load",
        "--rpc",
        &rpc,
        "--seconds",
        "6",
        "--funder-key",
        neve_devnet::AVALANCHEGO_PREFUNDED_KEY,
        "--accounts",
        "8",
    ])
    .await;
    expect_success(&output);
    let client = RpcClient::new(&rpc).unwrap();
    let head = head(&client).await;
    (node, client, head)
}

/// A neve following `node`'s C-chain from genesis, caught up to `head`.
pub async fn neve_following_avalanchego(node: &neve_devnet::Avalanchego, head: u64) -> Neve {
    let args = [
        "--upstream-kind",
        "avalanchego",
        "--floor",
        "0",
        "--ws-url",
        "none",
    ];
    Neve::start(node.base_url(), &args, head).await
}
