//! `neve demo`: the main job on a fresh machine. A local geth dev chain is
//! fed traffic; neve follows it on a printed address; a few calls are made
//! with curl's command line shown beside their answers; neve and geth are
//! measured head to head on the same blocks; then the chain keeps growing
//! and neve keeps following until Ctrl-C.

use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use neve_upstream::{RpcClient, Value};
use serde_json::json;

#[derive(Args)]
pub struct DemoArgs {
    /// Seconds of traffic that grow the chain before neve starts following.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Where neve serves.
    #[arg(long, default_value = "127.0.0.1:8645")]
    listen: String,
    /// Measured seconds per cell of the head-to-head table.
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    /// Where the tables, results.json and plots go.
    #[arg(long, default_value = "bench-results/demo")]
    out: PathBuf,
}

/// A child `neve` stopped (SIGTERM, so it drains) when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM);
        }
        let _ = self.0.wait();
    }
}

pub async fn demo(args: DemoArgs) -> Result<()> {
    eprintln!("starting a geth dev chain on 127.0.0.1 …");
    let geth = neve_devnet::GethDev::start(neve_devnet::GethDevOptions::default())
        .await
        .context("starting geth (install it with scripts/install-tools.sh)")?;
    eprintln!(
        "geth is up at {}; feeding it traffic for {} s …",
        geth.http_url(),
        args.seconds
    );
    let config = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(args.seconds));
    let report = neve_load::run(config, crate::print_progress).await?;
    eprintln!("{}", report.render());

    let exe = std::env::current_exe().context("finding the neve binary")?;
    let data = std::env::temp_dir().join(format!("neve-demo-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let log = std::env::temp_dir().join("neve-demo.log");
    let neve = Running(
        Command::new(&exe)
            .args([
                "serve",
                "--upstream",
                geth.http_url(),
                "--ws-url",
                geth.ws_url(),
            ])
            .args([
                "--floor",
                "0",
                "--retain-blocks",
                "0",
                "--listen",
                &args.listen,
            ])
            .arg("--data-dir")
            .arg(&data)
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("starting neve serve")?,
    );
    let url = format!("http://{}", args.listen);
    let neve_client = RpcClient::new(&url)?;
    let geth_client = RpcClient::new(geth.http_url())?;
    let height = |hex: &str| neve_upstream::parse_quantity(hex).unwrap_or(0);
    let head = height(&geth_client.call::<String>("eth_blockNumber", ()).await?);
    let deadline = Instant::now() + Duration::from_secs(120);
    // `latest` is a 421 until neve holds the head.
    while neve_client
        .call::<String>("eth_blockNumber", ())
        .await
        .map_or(true, |h| height(&h) < head)
    {
        if Instant::now() > deadline {
            bail!(
                "neve did not catch up with geth (its log: {})",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "\nneve follows geth and serves at {url} (geth: {})\n",
        geth.http_url()
    );

    examples(&url, &neve_client, &geth_client).await?;

    println!("\nneve against geth on the same blocks, same requests, same load generator:\n");
    let neve_target = format!("neve={url}");
    let geth_target = format!("geth={}", geth.http_url());
    let status = Command::new(&exe)
        .args(["bench", "--target", &neve_target, "--target", &geth_target])
        .args([
            "--workload",
            "randblock",
            "--workload",
            "receipt",
            "--workload",
            "mix:seeds-read",
        ])
        .args(["--conns", "1,4,16", "--warmup", "0.5"])
        .arg("--duration")
        .arg(args.duration.to_string())
        .arg("--out")
        .arg(&args.out)
        .status()
        .context("running neve bench")?;
    if !status.success() {
        bail!("neve bench failed: {status}");
    }

    println!("\nThe chain keeps growing and neve keeps following at {url}. Ctrl-C to stop.");
    let mut traffic = neve_load::LoadConfig::new(geth.http_url(), Duration::from_secs(86_400));
    traffic.tps = Some(5);
    let traffic = tokio::spawn(neve_load::run(traffic, |_| {}));
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    traffic.abort();
    drop(neve);
    let _ = std::fs::remove_dir_all(&data);
    eprintln!("stopped");
    Ok(())
}

/// A few calls to neve, each shown as the curl command that makes it and
/// the answer it got (shortened).
async fn examples(url: &str, neve: &RpcClient, geth: &RpcClient) -> Result<()> {
    let latest: Value = geth
        .call("eth_getBlockByNumber", json!(["latest", true]))
        .await?;
    let tx = &latest["transactions"][0];
    let hash = tx["hash"].as_str().unwrap_or_default().to_owned();
    let from = tx["from"].as_str().unwrap_or_default().to_owned();
    let calls = [
        ("eth_blockNumber", json!([])),
        ("eth_getBlockByNumber", json!(["latest", false])),
        ("eth_getTransactionReceipt", json!([hash])),
        ("eth_getBalance", json!([from, "latest"])),
        // Not neve's to answer: 421, for a front end to send to the node.
        ("eth_call", json!([{"to": from, "data": "0x"}, "latest"])),
    ];
    for (method, params) in calls {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
        let (status, answer) = neve.post(body.clone().into()).await?;
        let mut answer = String::from_utf8_lossy(&answer).into_owned();
        if answer.len() > 240 {
            answer.truncate(240);
            answer.push_str(" …");
        }
        println!("$ curl -s {url} -H 'content-type: application/json' -d '{body}'");
        println!("HTTP {} {answer}\n", status.as_u16());
    }
    Ok(())
}
