//! geth nodes: the `--dev` chain and the execution-apis conformance chain.

use std::path::Path;

use crate::engine;
use crate::error::{DevnetError, io_error};
use crate::process::NodeProcess;
use crate::startup::{STARTUP_TIMEOUT, free_ports, wait_ready, with_fresh_ports};
use crate::tools::tool_path;

/// Block gas limit of the geth dev chain: room for ~2,800 plain transfers per
/// block, so the traffic generator is limited by geth, not by block space.
pub const GETH_DEV_GAS_LIMIT: u64 = 60_000_000;

/// Options for [`GethDev::start`]. Default is `period: 0` and geth's own
/// batch limit.
#[derive(Clone, Debug, Default)]
pub struct GethDevOptions {
    /// `--dev.period`: seconds between blocks; 0 seals a block as soon as
    /// transactions are pending (the fastest way to grow a long history).
    pub period: u64,
    /// `--rpc.batch-request-limit`: most calls geth answers in one batch
    /// (as a provider that caps batches); `None` keeps geth's 1,000.
    pub batch_request_limit: Option<usize>,
    /// When Osaka activates (seconds since the epoch): a chain at Prague
    /// with Osaka scheduled; `None` keeps [`DEV_GENESIS`]'s Osaka at
    /// genesis.
    pub osaka_time: Option<u64>,
}

/// The key of geth's `--dev` account (geth's own fixed dev key, in
/// `dev.key`), funded at genesis; the account is unlocked on the node, and
/// tests may sign with it.
pub const GETH_DEV_KEY: &str = include_str!("../dev.key");

/// The address of [`GETH_DEV_KEY`].
pub const GETH_DEV_ADDRESS: &str = "0x71562b71999873db5b286df957af199ec94617f7";

/// The dev chain's genesis (`dev-genesis.json`, also what the scripts'
/// geth starts from): every fork to Osaka at genesis, and nothing later,
/// with [`GETH_DEV_ADDRESS`] funded and a 60 M gas limit. geth's own
/// `--dev` genesis also turns on the forks still being specified
/// (Amsterdam and after), whose rules no released EVM library shares with
/// geth yet; a chain on released rules is one a mirror can execute calls
/// on and compare with the node.
pub const DEV_GENESIS: &str = include_str!("../dev-genesis.json");

/// A geth `--dev` chain: archive, hash state scheme, HTTP and WS on loopback,
/// txpool limits raised so the traffic generator can keep thousands pending.
#[derive(Debug)]
pub struct GethDev {
    node: GethNode,
}

impl GethDev {
    /// Starts geth and waits until its HTTP RPC answers.
    pub async fn start(options: GethDevOptions) -> Result<Self, DevnetError> {
        with_fresh_ports(|| Self::start_once(options.clone())).await
    }

    async fn start_once(options: GethDevOptions) -> Result<Self, DevnetError> {
        let geth = tool_path("geth")?;
        let data = tempfile::Builder::new()
            .prefix("neve-geth-dev-")
            .tempdir()
            .map_err(io_error("creating geth data dir"))?;
        // The dev account's key in the keystore, and the chain initialised
        // from [`DEV_GENESIS`]; `--dev` then seals on that chain.
        let datadir = data.path().join("geth").display().to_string();
        let write = |name: &str, text: &str| {
            let path = data.path().join(name);
            std::fs::write(&path, text).map_err(io_error("writing the dev chain's files"))?;
            Ok::<_, DevnetError>(path.display().to_string())
        };
        let password = write("password", "")?;
        let key = write("dev.key", GETH_DEV_KEY.trim())?;
        let genesis = match options.osaka_time {
            Some(time) => {
                DEV_GENESIS.replace("\"osakaTime\": 0,", &format!("\"osakaTime\": {time},"))
            }
            None => DEV_GENESIS.to_string(),
        };
        let genesis = write("genesis.json", &genesis)?;
        run_step(
            &geth,
            &[
                "--datadir",
                &datadir,
                "account",
                "import",
                "--password",
                &password,
                &key,
            ],
        )?;
        run_step(
            &geth,
            &[
                "--datadir",
                &datadir,
                "--state.scheme",
                "hash",
                "init",
                &genesis,
            ],
        )?;
        let [http, ws, auth] = free_ports();
        let mut args = vec![
            "--dev".to_string(),
            "--password".into(),
            password,
            "--dev.period".into(),
            options.period.to_string(),
            "--dev.gaslimit".into(),
            GETH_DEV_GAS_LIMIT.to_string(),
            "--state.scheme".into(),
            "hash".into(),
            "--gcmode".into(),
            "archive".into(),
            "--datadir".into(),
            datadir,
        ];
        args.extend(rpc_flags(http, ws, auth));
        if let Some(limit) = options.batch_request_limit {
            args.push(format!("--rpc.batch-request-limit={limit}"));
        }
        args.extend(
            [
                // The generator keeps many transactions per account in flight.
                "--txpool.globalslots=200000",
                "--txpool.accountslots=20000",
                "--txpool.globalqueue=50000",
                "--txpool.accountqueue=5000",
                "--rpc.txfeecap=0",
            ]
            .map(String::from),
        );
        let node = GethNode::spawn("geth-dev", &geth, &args, data, http, ws).await?;
        Ok(GethDev { node })
    }

    /// Kills geth (SIGKILL) and starts it again on the same chain and
    /// ports; returns once its HTTP RPC answers.
    pub async fn kill_and_restart(&self) -> Result<(), DevnetError> {
        self.node.node.kill_and_restart()?;
        wait_ready(&self.node.node, &self.node.http_url, STARTUP_TIMEOUT).await
    }
}

/// geth on the execution-apis conformance chain: `init genesis.json`,
/// `import chain.rlp`, started with an engine port, and `headfcu.json` sent so
/// that `safe` and `finalized` resolve.
#[derive(Debug)]
pub struct GethConformance {
    node: GethNode,
}

impl GethConformance {
    /// Imports the chain in `fixtures` (see `conformance::fixtures_dir`),
    /// starts geth and marks the head safe and finalized.
    pub async fn start(fixtures: &Path) -> Result<Self, DevnetError> {
        with_fresh_ports(|| Self::start_once(fixtures)).await
    }

    async fn start_once(fixtures: &Path) -> Result<Self, DevnetError> {
        let geth = tool_path("geth")?;
        let data = tempfile::Builder::new()
            .prefix("neve-geth-conformance-")
            .tempdir()
            .map_err(io_error("creating geth data dir"))?;
        let datadir = data.path().join("geth").display().to_string();
        let scheme = ["--state.scheme", "hash"];
        let genesis = fixtures.join("genesis.json").display().to_string();
        let chain = fixtures.join("chain.rlp").display().to_string();
        run_step(
            &geth,
            &[&["--datadir", &datadir][..], &scheme, &["init", &genesis]].concat(),
        )?;
        run_step(
            &geth,
            &[
                &["--datadir", &datadir][..],
                &scheme,
                &["--gcmode", "archive", "import", &chain],
            ]
            .concat(),
        )?;

        let secret = engine::write_jwt_secret(data.path())?;
        let [http, ws, auth] = free_ports();
        let mut args: Vec<String> = [
            "--datadir",
            &datadir,
            "--state.scheme",
            "hash",
            "--gcmode",
            "archive",
            "--syncmode",
            "full",
            "--authrpc.jwtsecret",
            &secret.path.display().to_string(),
        ]
        .map(String::from)
        .to_vec();
        args.extend(rpc_flags(http, ws, auth));
        let node = GethNode::spawn("geth-conformance", &geth, &args, data, http, ws).await?;

        let fcu = std::fs::read(fixtures.join("headfcu.json"))
            .map_err(io_error("reading headfcu.json"))?;
        engine::send_forkchoice(&format!("http://127.0.0.1:{auth}"), &secret, fcu).await?;
        Ok(GethConformance { node })
    }
}

/// A running geth and its loopback URLs: what [`GethDev`] and
/// [`GethConformance`] both are once started (reached through them).
#[derive(Debug)]
pub struct GethNode {
    node: NodeProcess,
    http_url: String,
    ws_url: String,
}

impl GethNode {
    /// Spawns geth as `name` with `args`, HTTP on `http` and WS on `ws`, and
    /// waits until its HTTP RPC answers.
    async fn spawn(
        name: &str,
        geth: &Path,
        args: &[String],
        data: tempfile::TempDir,
        http: u16,
        ws: u16,
    ) -> Result<GethNode, DevnetError> {
        let node = NodeProcess::spawn(name, geth, args, data)?;
        let http_url = format!("http://127.0.0.1:{http}");
        wait_ready(&node, &http_url, STARTUP_TIMEOUT).await?;
        Ok(GethNode {
            node,
            http_url,
            ws_url: format!("ws://127.0.0.1:{ws}"),
        })
    }

    /// The HTTP JSON-RPC URL.
    pub fn http_url(&self) -> &str {
        &self.http_url
    }

    /// The WebSocket JSON-RPC URL.
    pub fn ws_url(&self) -> &str {
        &self.ws_url
    }

    /// The running process (pid, data dir, log).
    pub fn process(&self) -> &NodeProcess {
        &self.node
    }
}

impl std::ops::Deref for GethDev {
    type Target = GethNode;

    fn deref(&self) -> &GethNode {
        &self.node
    }
}

impl std::ops::Deref for GethConformance {
    type Target = GethNode;

    fn deref(&self) -> &GethNode {
        &self.node
    }
}

/// geth's RPC flags: HTTP and WS on loopback with the read and debug APIs,
/// no peers, no discovery, no IPC, a private engine port.
fn rpc_flags(http: u16, ws: u16, auth: u16) -> Vec<String> {
    const APIS: &str = "eth,net,web3,debug,txpool";
    [
        "--http",
        "--http.addr=127.0.0.1",
        &format!("--http.port={http}"),
        &format!("--http.api={APIS}"),
        "--ws",
        "--ws.addr=127.0.0.1",
        &format!("--ws.port={ws}"),
        &format!("--ws.api={APIS}"),
        "--authrpc.addr=127.0.0.1",
        &format!("--authrpc.port={auth}"),
        "--nodiscover",
        "--maxpeers=0",
        "--port=0",
        "--ipcdisable",
        "--verbosity=3",
    ]
    .map(String::from)
    .to_vec()
}

/// Runs a one-shot node command (geth init/import) to completion.
fn run_step(binary: &Path, args: &[&str]) -> Result<(), DevnetError> {
    let output = std::process::Command::new(binary)
        .args(args)
        .output()
        .map_err(io_error(format!("running {}", binary.display())))?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = stderr.lines().rev().take(20).collect();
    Err(DevnetError::Setup {
        step: format!("{} {}", binary.display(), args.join(" ")),
        detail: tail.into_iter().rev().collect::<Vec<_>>().join("\n"),
    })
}
