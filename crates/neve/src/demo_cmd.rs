//! `neve demo`: the main job on a fresh machine. A local geth dev chain is
//! fed traffic; neve follows it on a printed address; a few calls are made
//! with curl's command line shown beside their answers; neve and geth are
//! measured head to head on the same blocks; then the chain keeps growing
//! and neve keeps following until Ctrl-C.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Args;
use neve_upstream::{RpcClient, Value, quantity};
use serde_json::json;

/// How far back from the head the examples look for a block with a
/// transaction to ask about (the newest blocks may be empty).
const EXAMPLE_SEARCH_BLOCKS: u64 = 256;
/// Seconds of more traffic sent when none of those blocks has one.
const EXAMPLE_TRAFFIC_SECONDS: u64 = 5;
/// Rounds of that traffic before the demo gives up rather than show an
/// example with nothing to ask about.
const EXAMPLE_TRAFFIC_ROUNDS: u32 = 3;

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
    let report = neve_load::run(config, crate::load_cmd::print_progress).await?;
    eprintln!("{}", report.render());
    let geth_client = RpcClient::new(geth.http_url())?;
    let example = example_transaction(geth.http_url(), &geth_client).await?;

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

    examples(&url, &neve_client, &example).await?;

    println!("\nneve against geth on the same blocks, same requests, same load generator:\n");
    bench_against_geth(&exe, &url, geth.http_url(), &args)?;

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

/// `neve bench` of the mirror at `url` against geth at `geth_url`, on the
/// same blocks with the same requests.
fn bench_against_geth(exe: &Path, url: &str, geth_url: &str, args: &DemoArgs) -> Result<()> {
    let neve_target = format!("neve={url}");
    let geth_target = format!("geth={geth_url}");
    let status = Command::new(exe)
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
        // A flagged cell is shown loudly in the table; the demo goes on to
        // leave the mirror to query.
        .arg("--allow-flagged")
        .arg("--duration")
        .arg(args.duration.to_string())
        .arg("--out")
        .arg(&args.out)
        .status()
        .context("running neve bench")?;
    if !status.success() {
        bail!("neve bench failed: {status}");
    }
    Ok(())
}

/// A transaction the examples ask about.
struct Example {
    /// The block it is in.
    block: u64,
    /// Its hash.
    hash: String,
    /// Its sender.
    from: String,
}

/// A transaction of the newest block that has one, sending `geth` more
/// traffic when none of the last [`EXAMPLE_SEARCH_BLOCKS`] has: an example
/// with an empty parameter shows an error, not neve.
async fn example_transaction(geth_url: &str, geth: &RpcClient) -> Result<Example> {
    let mut rounds = 0;
    loop {
        if let Some(example) = newest_transaction(geth).await? {
            return Ok(example);
        }
        if rounds == EXAMPLE_TRAFFIC_ROUNDS {
            bail!(
                "no transaction in the newest {EXAMPLE_SEARCH_BLOCKS} blocks after {rounds} more rounds of traffic"
            );
        }
        rounds += 1;
        eprintln!(
            "no transaction in the newest {EXAMPLE_SEARCH_BLOCKS} blocks; {EXAMPLE_TRAFFIC_SECONDS} s more traffic …"
        );
        let config =
            neve_load::LoadConfig::new(geth_url, Duration::from_secs(EXAMPLE_TRAFFIC_SECONDS));
        neve_load::run(config, crate::load_cmd::print_progress).await?;
    }
}

/// The first transaction of the newest block with one, walking back at
/// most [`EXAMPLE_SEARCH_BLOCKS`] from the head.
async fn newest_transaction(geth: &RpcClient) -> Result<Option<Example>> {
    let head: String = geth.call("eth_blockNumber", ()).await?;
    let head = neve_upstream::parse_quantity(&head)
        .with_context(|| format!("eth_blockNumber said {head:?}"))?;
    for block in (head.saturating_sub(EXAMPLE_SEARCH_BLOCKS - 1)..=head).rev() {
        let found: Value = geth
            .call("eth_getBlockByNumber", json!([quantity(block), false]))
            .await?;
        let Some(hash) = found["transactions"][0].as_str() else {
            continue;
        };
        let tx: Value = geth.call("eth_getTransactionByHash", json!([hash])).await?;
        if let Some(from) = tx["from"].as_str() {
            return Ok(Some(Example {
                block,
                hash: hash.to_owned(),
                from: from.to_owned(),
            }));
        }
    }
    Ok(None)
}

/// The calls the demo shows, about `example`: each answered by neve with a
/// result (`eth_call` and `eth_simulateV1` executed locally, over state
/// verified against the block's root) but `eth_sendRawTransaction`, which
/// is not neve's to answer (421, for a front end to send to the node). The
/// demo's test sends them again as printed.
fn example_calls(example: &Example) -> [(&'static str, Value); 7] {
    let (hash, from) = (&example.hash, &example.from);
    [
        ("eth_blockNumber", json!([])),
        ("eth_getBlockByNumber", json!(["latest", false])),
        ("eth_getTransactionReceipt", json!([hash])),
        ("eth_getBalance", json!([from, "latest"])),
        (
            "eth_call",
            json!([{"from": from, "to": from, "value": "0x1"}, "latest"]),
        ),
        (
            "eth_simulateV1",
            json!([{"blockStateCalls": [{"calls": [{"from": from, "to": from}]}]}, "latest"]),
        ),
        // Not a transaction anyone could send: the node refuses it too.
        ("eth_sendRawTransaction", json!(["0x00"])),
    ]
}

/// A few calls to neve, each shown as the curl command that makes it and
/// the answer it got (shortened).
async fn examples(url: &str, neve: &RpcClient, example: &Example) -> Result<()> {
    println!(
        "examples about transaction {} of block {}, the newest block with one:\n",
        example.hash, example.block
    );
    for (method, params) in example_calls(example) {
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
