//! avalanchego: a single-node `local` network for its C-chain.

use crate::error::{DevnetError, io_error};
use crate::process::NodeProcess;
use crate::startup::{STARTUP_TIMEOUT, free_ports, wait_ready, with_fresh_ports};
use crate::tools::tool_path;

/// The private key avalanchego's `local` network prefunds on the C-chain
/// (the well-known "ewoq" key, public by design).
pub const AVALANCHEGO_PREFUNDED_KEY: &str =
    "0x56289e99c94b6912bfc12adc093c9b51124f0dc54ac7a766b2bc5ccf558d8027";

/// The C-chain id of avalanchego's `local` network.
pub const AVALANCHEGO_LOCAL_CHAIN_ID: u64 = 43112;

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
