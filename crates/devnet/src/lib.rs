//! devnet: real EVM nodes on loopback, for tests, the demo and benchmarks.
//!
//! Owns finding the pinned node binaries (installed by
//! `scripts/install-tools.sh`), starting geth and avalanchego on 127.0.0.1
//! with free ports in temporary directories, waiting until they answer, and
//! killing them when the handle drops — also when a test panics, and (through
//! `PR_SET_PDEATHSIG`) when the process that started them dies. It also runs
//! the execution-apis conformance cases against any URL ([`conformance`]).
//!
//! It must not be used to reach anything but loopback, and knows nothing of
//! neve's store or server. Start at [`GethDev::start`], [`GethConformance::start`]
//! and [`Avalanchego::start`].

pub mod conformance;
mod engine;
pub mod faults;
pub mod fuzz;
mod process;
mod tools;

use std::path::Path;
use std::time::{Duration, Instant};

use neve_upstream::RpcClient;

pub use process::NodeProcess;
pub use tools::{ToolError, tool_path, tools_dir, workspace_root};

/// The private key avalanchego's `local` network prefunds on the C-chain
/// (the well-known "ewoq" key, public by design).
pub const AVALANCHEGO_PREFUNDED_KEY: &str =
    "0x56289e99c94b6912bfc12adc093c9b51124f0dc54ac7a766b2bc5ccf558d8027";

/// The C-chain id of avalanchego's `local` network.
pub const AVALANCHEGO_LOCAL_CHAIN_ID: u64 = 43112;

/// Block gas limit of the geth dev chain: room for ~2,800 plain transfers per
/// block, so the traffic generator is limited by geth, not by block space.
pub const GETH_DEV_GAS_LIMIT: u64 = 60_000_000;

/// How long a node may take to answer its first RPC before start fails.
/// avalanchego bootstraps its P-, X- and C-chains first; on a loaded 2-core
/// machine that has been seen to take tens of seconds. Default is 120 s.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a node could not be started.
#[derive(Debug, thiserror::Error)]
pub enum DevnetError {
    /// A pinned binary is not installed.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// A filesystem or process-spawn step failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// A setup step of the node itself failed (init, import, engine call).
    #[error("{step} failed: {detail}")]
    Setup {
        /// The step.
        step: String,
        /// What the node said.
        detail: String,
    },
    /// The node exited or did not answer in time.
    #[error("{name} did not become ready: {reason}\n--- last log lines ---\n{log_tail}")]
    NotReady {
        /// Which node.
        name: String,
        /// Exit status or timeout.
        reason: String,
        /// The end of its log.
        log_tail: String,
    },
}

pub(crate) fn io_error(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> DevnetError {
    let context = context.into();
    move |source| DevnetError::Io { context, source }
}

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
    node: NodeProcess,
    http_url: String,
    ws_url: String,
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
        let node = NodeProcess::spawn("geth-dev", &geth, &args, data)?;
        let http_url = format!("http://127.0.0.1:{http}");
        wait_ready(&node, &http_url, STARTUP_TIMEOUT).await?;
        Ok(GethDev {
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

    /// Kills geth (SIGKILL) and starts it again on the same chain and
    /// ports; returns once its HTTP RPC answers.
    pub async fn kill_and_restart(&self) -> Result<(), DevnetError> {
        self.node.kill_and_restart()?;
        wait_ready(&self.node, &self.http_url, STARTUP_TIMEOUT).await
    }
}

/// geth on the execution-apis conformance chain: `init genesis.json`,
/// `import chain.rlp`, started with an engine port, and `headfcu.json` sent so
/// that `safe` and `finalized` resolve.
#[derive(Debug)]
pub struct GethConformance {
    node: NodeProcess,
    http_url: String,
    ws_url: String,
}

impl GethConformance {
    /// Imports the chain in `fixtures` (see [`conformance::fixtures_dir`]),
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
        let node = NodeProcess::spawn("geth-conformance", &geth, &args, data)?;
        let http_url = format!("http://127.0.0.1:{http}");
        wait_ready(&node, &http_url, STARTUP_TIMEOUT).await?;

        let fcu = std::fs::read(fixtures.join("headfcu.json"))
            .map_err(io_error("reading headfcu.json"))?;
        engine::send_forkchoice(&format!("http://127.0.0.1:{auth}"), &secret, fcu).await?;
        Ok(GethConformance {
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

/// A single-node avalanchego `local` network; its C-chain makes a block only
/// when transactions arrive.
#[derive(Debug)]
pub struct Avalanchego {
    node: NodeProcess,
    base_url: String,
}

/// The C-chain config neve needs: every read API, archive state, and queries
/// on blocks not yet finalized.
const AVALANCHEGO_C_CHAIN_CONFIG: &str = r#"{"eth-apis":["eth","eth-filter","net","web3","internal-eth","internal-blockchain","internal-transaction","internal-debug","debug-tracer","internal-tx-pool"],"pruning-enabled":false,"allow-unfinalized-queries":true}"#;

impl Avalanchego {
    /// Starts avalanchego and waits until the C-chain RPC answers.
    pub async fn start() -> Result<Self, DevnetError> {
        with_fresh_ports(Self::start_once).await
    }

    async fn start_once() -> Result<Self, DevnetError> {
        let binary = tool_path("avalanchego")?;
        let data = tempfile::Builder::new()
            .prefix("neve-avalanchego-")
            .tempdir()
            .map_err(io_error("creating avalanchego data dir"))?;
        let chains = data.path().join("configs/chains");
        std::fs::create_dir_all(chains.join("C")).map_err(io_error("creating chain config dir"))?;
        std::fs::write(chains.join("C/config.json"), AVALANCHEGO_C_CHAIN_CONFIG)
            .map_err(io_error("writing C-chain config"))?;
        let [http, staking] = free_ports();
        let args: Vec<String> = vec![
            "--network-id=local".into(),
            "--sybil-protection-enabled=false".into(),
            "--snow-sample-size=1".into(),
            "--snow-quorum-size=1".into(),
            "--staking-ephemeral-cert-enabled".into(),
            "--staking-ephemeral-signer-enabled".into(),
            "--public-ip=127.0.0.1".into(),
            "--staking-host=127.0.0.1".into(),
            format!("--staking-port={staking}"),
            "--http-host=127.0.0.1".into(),
            format!("--http-port={http}"),
            // Required here: the default asks for more descriptors than the
            // sandbox grants and avalanchego refuses to start.
            "--fd-limit=16384".into(),
            format!("--data-dir={}", data.path().display()),
            format!("--chain-config-dir={}", chains.display()),
            "--log-level=info".into(),
            "--log-display-level=warn".into(),
        ];
        let node = NodeProcess::spawn("avalanchego", &binary, &args, data)?;
        let base_url = format!("http://127.0.0.1:{http}");
        let avalanchego = Avalanchego { node, base_url };
        wait_ready(
            &avalanchego.node,
            &avalanchego.c_chain_rpc_url(),
            STARTUP_TIMEOUT,
        )
        .await?;
        Ok(avalanchego)
    }

    /// `http://127.0.0.1:P`: the node's HTTP base.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The C-chain JSON-RPC URL (`/ext/bc/C/rpc`).
    pub fn c_chain_rpc_url(&self) -> String {
        format!("{}/ext/bc/C/rpc", self.base_url)
    }

    /// The C-chain WebSocket URL (`/ext/bc/C/ws`).
    pub fn c_chain_ws_url(&self) -> String {
        format!(
            "{}/ext/bc/C/ws",
            self.base_url.replacen("http://", "ws://", 1)
        )
    }

    /// The running process (pid, data dir, log).
    pub fn process(&self) -> &NodeProcess {
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

/// `N` distinct free TCP ports on 127.0.0.1. The listeners are held until
/// all are chosen so one call never returns the same port twice; another
/// process can still take one before the node binds it, so the nodes'
/// `start` tries again on new ports when that happens.
pub fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<_> = (0..N)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port"))
        .collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("local addr").port())
}

/// Polls `eth_blockNumber` until it answers, the process exits, or `timeout`.
async fn wait_ready(node: &NodeProcess, url: &str, timeout: Duration) -> Result<(), DevnetError> {
    let client = RpcClient::new(url)
        .map_err(|e| not_ready(node, e.to_string()))?
        .with_timeout(Duration::from_secs(2));
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = node.exit_status() {
            return Err(not_ready(node, format!("exited early with {status}")));
        }
        if client.call::<String>("eth_blockNumber", ()).await.is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(not_ready(
                node,
                format!("no answer at {url} within {timeout:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Attempts at starting a node whose port was taken between
/// [`free_ports`] choosing it and the node binding it (an outgoing
/// connection of a busy test can get that ephemeral port). Default is 3.
const PORT_CLASH_ATTEMPTS: u32 = 3;

/// Runs `start` again, on new ports, when the node failed because a port
/// chosen for it was already in use.
async fn with_fresh_ports<T, F, Fut>(mut start: F) -> Result<T, DevnetError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, DevnetError>>,
{
    let mut attempt = 1;
    loop {
        match start().await {
            Err(DevnetError::NotReady { ref log_tail, .. })
                if attempt < PORT_CLASH_ATTEMPTS && log_tail.contains("address already in use") =>
            {
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

fn not_ready(node: &NodeProcess, reason: String) -> DevnetError {
    DevnetError::NotReady {
        name: node.name().to_owned(),
        reason,
        log_tail: node.log_tail(40),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (CI): geth once failed its start because a port chosen
    /// for it was taken first; a start on new ports now follows.
    #[tokio::test]
    async fn a_port_taken_before_the_node_binds_it_means_a_start_on_new_ports() {
        let mut attempts = 0;
        let started = with_fresh_ports(|| {
            attempts += 1;
            let attempt = attempts;
            async move {
                if attempt == 1 {
                    Err(DevnetError::NotReady {
                        name: "geth-dev".into(),
                        reason: "exited early".into(),
                        log_tail: "Fatal: listen tcp 127.0.0.1:40503: bind: address already in use"
                            .into(),
                    })
                } else {
                    Ok(attempt)
                }
            }
        })
        .await;
        assert_eq!(started.unwrap(), 2);
        let other = with_fresh_ports(|| async {
            Err::<(), _>(DevnetError::NotReady {
                name: "geth-dev".into(),
                reason: "exited early".into(),
                log_tail: "Fatal: bad flag".into(),
            })
        })
        .await;
        assert!(other.is_err(), "other failures are not retried");
    }
}
