//! The headline suite: the published comparison rebuilt on this machine in
//! one command. A geth archive dev chain grown by the traffic generator, an
//! avalanchego local C-chain fed by it, a neve mirroring each, and nginx
//! serving the geth mirror's own answers from disk as the ceiling; then the
//! connection sweep on each pair over the same blocks.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use neve_devnet::{Avalanchego, GethDev, GethDevOptions, NodeProcess, free_ports};
use neve_upstream::RpcClient;

use crate::config::BenchConfig;
use crate::error::BenchError;
use crate::report::Results;
use crate::target::{Target, TargetKind, block_number, client_version};

/// What the suite builds and runs.
#[derive(Clone, Debug)]
pub struct SuiteConfig {
    /// The `neve` binary to run as the mirrors.
    pub neve: PathBuf,
    /// Grow the geth chain to at least this many blocks.
    pub geth_blocks: u64,
    /// Transactions per block to grow it with: the generator keeps this
    /// many in flight, and geth (`--dev.period 0`) seals each batch.
    pub block_txs: u64,
    /// Feed avalanchego for this long (it makes a block every few seconds
    /// under load, so its chain is short); zero skips avalanchego.
    pub avalanchego_seconds: u64,
    /// The sweep to run on each pair (targets are filled in here).
    pub bench: BenchConfig,
    /// Where results go: `<out>/geth/`, `<out>/avalanchego/`, `<out>/summary.md`.
    pub out: PathBuf,
}

/// Runs the suite and returns the summary it also writes, and every flagged
/// cell (`pair/target workload cell`: the pair is the results' directory).
pub async fn run(
    config: SuiteConfig,
    mut progress: impl FnMut(&str),
) -> Result<(String, Vec<String>), BenchError> {
    std::fs::create_dir_all(&config.out).map_err(BenchError::io(&config.out))?;
    let started = Instant::now();
    let mut summary = String::from("# neve bench --suite headline\n\n");
    let mut flagged = Vec::new();

    geth_pair(&config, &mut summary, &mut flagged, &mut progress).await?;

    if config.avalanchego_seconds > 0 {
        avalanchego_pair(&config, &mut summary, &mut flagged, &mut progress).await?;
    }

    let _ = writeln!(
        summary,
        "suite time: {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let path = config.out.join("summary.md");
    std::fs::write(&path, &summary).map_err(BenchError::io(&path))?;
    Ok((summary, flagged))
}

/// geth, grown and mirrored by neve, swept against neve and an nginx
/// ceiling; its section added to `summary`.
async fn geth_pair(
    config: &SuiteConfig,
    summary: &mut String,
    flagged: &mut Vec<String>,
    progress: &mut impl FnMut(&str),
) -> Result<(), BenchError> {
    progress("starting geth (archive dev chain, --dev.period 0) on 127.0.0.1");
    let geth = GethDev::start(GethDevOptions {
        period: 0,
        ..Default::default()
    })
    .await
    .map_err(|e| setup("starting geth", e))?;
    let head = grow(
        geth.http_url(),
        config.geth_blocks,
        config.block_txs,
        progress,
    )
    .await?;
    progress(&format!("geth chain: {head} blocks"));
    let neve_geth = Mirror::start(
        &config.neve,
        &["--upstream", geth.http_url(), "--ws-url", geth.ws_url()],
        head,
    )
    .await?;
    progress(&format!(
        "neve mirrors geth at {} (pid {})",
        neve_geth.url,
        neve_geth.process.pid()
    ));

    let ceiling_dir = tempfile::Builder::new()
        .prefix("neve-bench-ceiling-")
        .tempdir()
        .map_err(|e| setup("creating the ceiling directory", e))?;
    let nginx = Nginx::start(ceiling_dir.path())?;
    progress(&format!(
        "nginx serves the ceiling at {} (pids {:?})",
        nginx.url,
        nginx.pids()
    ));

    let mut bench = config.bench.clone();
    bench.targets = vec![
        local(
            "neve",
            &neve_geth.url,
            TargetKind::Rpc,
            [&neve_geth.process],
        )?,
        local("geth", geth.http_url(), TargetKind::Rpc, [geth.process()])?,
    ];
    bench.ceilings = vec![local(
        "static",
        &nginx.url,
        TargetKind::Static,
        &nginx.processes,
    )?];
    bench.ceiling_dir = Some(ceiling_dir.path().to_owned());
    bench.compare = vec![
        ("neve".into(), "geth".into()),
        ("neve".into(), "static".into()),
    ];
    bench.out = Some(config.out.join("geth"));
    let geth_results = crate::run::run(&bench, progress).await?;
    flagged.extend(pair_flags("geth", &geth_results));
    let version = title_version(geth.http_url()).await;
    section(
        summary,
        &format!("neve vs {version} vs nginx (static ceiling)"),
        &geth_results,
    );
    drop(neve_geth);
    drop(nginx);
    drop(geth);
    Ok(())
}

/// avalanchego, fed and mirrored by neve, swept against neve; its section
/// added to `summary`.
async fn avalanchego_pair(
    config: &SuiteConfig,
    summary: &mut String,
    flagged: &mut Vec<String>,
    progress: &mut impl FnMut(&str),
) -> Result<(), BenchError> {
    progress("starting avalanchego (local network, single node) on 127.0.0.1");
    let ava = Avalanchego::start()
        .await
        .map_err(|e| setup("starting avalanchego", e))?;
    let rpc = ava.c_chain_rpc_url();
    let head = feed(&rpc, config.avalanchego_seconds, progress).await?;
    progress(&format!("avalanchego C-chain: {head} blocks"));
    let neve_ava = Mirror::start(
        &config.neve,
        &[
            "--upstream-kind",
            "avalanchego",
            "--upstream",
            ava.base_url(),
        ],
        head,
    )
    .await?;
    let mut bench = config.bench.clone();
    bench.targets = vec![
        local("neve", &neve_ava.url, TargetKind::Rpc, [&neve_ava.process])?,
        local("avalanchego", &rpc, TargetKind::Rpc, [ava.process()])?,
    ];
    bench.compare = vec![("neve".into(), "avalanchego".into())];
    bench.out = Some(config.out.join("avalanchego"));
    let ava_results = crate::run::run(&bench, progress).await?;
    flagged.extend(pair_flags("avalanchego", &ava_results));
    let version = title_version(&rpc).await;
    section(
        summary,
        &format!("neve vs {version} (avalanchego C-chain)"),
        &ava_results,
    );
    Ok(())
}

/// What the node says it is (`web3_clientVersion`), or its URL, for the
/// summary's titles.
async fn title_version(url: &str) -> String {
    client_version(url).await.unwrap_or_else(|| url.to_owned())
}

/// A pair's flagged cells, named with the pair.
fn pair_flags(pair: &str, results: &Results) -> Vec<String> {
    results
        .flagged_cells()
        .into_iter()
        .map(|cell| format!("{pair}/{cell}"))
        .collect()
}

fn setup(what: &str, error: impl std::fmt::Display) -> BenchError {
    BenchError::Setup(format!("{what}: {error}"))
}

fn section(summary: &mut String, title: &str, results: &Results) {
    let _ = writeln!(summary, "## {title}\n\n{}", results.render());
}

/// A target the suite started, sampled through its processes.
fn local<'a>(
    name: &str,
    url: &str,
    kind: TargetKind,
    processes: impl IntoIterator<Item = &'a NodeProcess>,
) -> Result<Target, BenchError> {
    let mut target = Target::new(name, url, kind)?;
    target.pids = processes.into_iter().map(NodeProcess::pid).collect();
    Ok(target)
}

/// Runs the traffic generator in 10 s rounds until the chain has `blocks`
/// of about `block_txs` transactions each: with that many in flight at most,
/// a dev chain that seals as soon as transactions are pending makes blocks
/// of that size (uncapped, it would make a few huge blocks; rate-capped, many
/// tiny ones).
async fn grow(
    url: &str,
    blocks: u64,
    block_txs: u64,
    progress: &mut impl FnMut(&str),
) -> Result<u64, BenchError> {
    let client = RpcClient::new(url).map_err(|e| setup("connecting to geth", e))?;
    let (mut round, mut last) = (0u64, None);
    loop {
        let height = block_number(&client)
            .await
            .map_err(|e| setup("reading the head", e))?;
        if height >= blocks {
            return Ok(height);
        }
        if last == Some(height) {
            return Err(BenchError::Setup(format!(
                "the chain stopped growing at block {height} (wanted {blocks})"
            )));
        }
        last = Some(height);
        progress(&format!("growing the chain: {height} of {blocks} blocks"));
        let mut load = neve_load::LoadConfig::new(url, Duration::from_secs(10));
        load.batch_size = block_txs as usize;
        load.max_in_flight = block_txs;
        load.seed = 1000 + round;
        neve_load::run(load, |_| {})
            .await
            .map_err(|e| BenchError::Setup(format!("neve load: {e}")))?;
        round += 1;
    }
}

/// Feeds avalanchego from its prefunded key for `seconds` and returns the
/// head the traffic generator saw last (the C-chain makes no empty blocks).
async fn feed(url: &str, seconds: u64, progress: &mut impl FnMut(&str)) -> Result<u64, BenchError> {
    progress(&format!("feeding {url} with neve load for {seconds} s"));
    let mut load = neve_load::LoadConfig::new(url, Duration::from_secs(seconds));
    load.funder_key = Some(neve_devnet::AVALANCHEGO_PREFUNDED_KEY.to_owned());
    load.accounts = 16;
    let report = neve_load::run(load, |_| {})
        .await
        .map_err(|e| BenchError::Setup(format!("neve load: {e}")))?;
    Ok(report.last_block)
}

/// A `neve serve` child process mirroring from genesis.
struct Mirror {
    process: NodeProcess,
    url: String,
}

impl Mirror {
    async fn start(neve: &Path, upstream: &[&str], until: u64) -> Result<Mirror, BenchError> {
        let data = tempfile::Builder::new()
            .prefix("neve-bench-store-")
            .tempdir()
            .map_err(|e| BenchError::Setup(format!("creating a store directory: {e}")))?;
        let [port] = free_ports();
        let mut args = vec!["serve".to_owned()];
        args.extend(upstream.iter().map(|s| s.to_string()));
        args.extend([
            "--floor".into(),
            "0".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--data-dir".into(),
            data.path().join("store").display().to_string(),
        ]);
        let process = NodeProcess::spawn("neve", neve, &args, data)
            .map_err(|e| BenchError::Setup(format!("starting neve: {e}")))?;
        let url = format!("http://127.0.0.1:{port}");
        let client = RpcClient::new(&url).map_err(|e| BenchError::Setup(e.to_string()))?;
        let deadline = Instant::now() + Duration::from_secs(900);
        loop {
            if let Ok((_, body)) = client.get("/health").await
                && let Ok(health) = serde_json::from_slice::<serde_json::Value>(&body)
                && health["blocks"]["max_contiguous_height"].as_u64() >= Some(until)
            {
                return Ok(Mirror { process, url });
            }
            if process.exit_status().is_some() || Instant::now() > deadline {
                return Err(BenchError::Setup(format!(
                    "neve did not mirror up to block {until}:\n{}",
                    process.log_tail(20)
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// nginx from Debian serving a directory on a free loopback port: one
/// single-process instance per core sharing the port (`reuseport`), rather
/// than a master and workers, so each is a direct child that dies with us
/// (a killed master leaves its workers running).
struct Nginx {
    processes: Vec<NodeProcess>,
    url: String,
}

impl Nginx {
    fn start(root: &Path) -> Result<Nginx, BenchError> {
        let binary = ["/usr/sbin/nginx", "/usr/bin/nginx", "/usr/local/sbin/nginx"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .ok_or_else(|| {
                BenchError::Setup(
                    "nginx is not installed (scripts/install-deps.sh installs it)".into(),
                )
            })?;
        let [port] = free_ports();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut processes = Vec::new();
        for _ in 0..cores {
            let dir = tempfile::Builder::new()
                .prefix("neve-bench-nginx-")
                .tempdir()
                .map_err(|e| setup("creating nginx's directory", e))?;
            let d = dir.path().display();
            let config = format!(
                "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log;\n\
                 events {{ worker_connections 4096; }}\n\
                 http {{ access_log off; sendfile on; tcp_nopush on; keepalive_requests 1000000;\n\
                 client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
                 server {{ listen 127.0.0.1:{port} reuseport; location / {{ root {root}; default_type application/json; }} }} }}\n",
                root = root.display()
            );
            let conf = dir.path().join("nginx.conf");
            std::fs::write(&conf, config).map_err(BenchError::io(&conf))?;
            let args = vec![
                "-e".to_owned(),
                format!("{d}/error.log"),
                "-c".to_owned(),
                conf.display().to_string(),
            ];
            let process = NodeProcess::spawn("nginx", &binary, &args, dir)
                .map_err(|e| setup("starting nginx", e))?;
            processes.push(process);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(dead) = processes
                .iter()
                .find(|p| p.exit_status().is_some())
                .or_else(|| (Instant::now() > deadline).then(|| &processes[0]))
            {
                return Err(BenchError::Setup(format!(
                    "nginx did not start:\n{}",
                    dead.log_tail(10)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Nginx {
            processes,
            url: format!("http://127.0.0.1:{port}"),
        })
    }

    fn pids(&self) -> Vec<u32> {
        self.processes.iter().map(NodeProcess::pid).collect()
    }
}
