//! `neve bench`: the command line of the `neve-bench` crate.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use neve_bench::target::{Target, TargetKind};
use neve_bench::{BenchConfig, report, suite, tps};

/// The exit status of a run that measured something other than the work
/// asked for (a flagged cell), once every output is written: a script
/// that records figures stops there instead of publishing them. Apart
/// from 1, a run that could not be made.
const FLAGGED_EXIT: i32 = 3;

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// A JSON-RPC target, NAME=URL (repeatable; the first is the reference
    /// the workloads are built from). An RPC path such as /ext/bc/C/rpc is
    /// part of the URL.
    #[arg(long = "target", value_name = "NAME=URL")]
    targets: Vec<String>,
    /// A static-file server serving --ceiling-dir, NAME=URL: the machine's
    /// ceiling for sending the same bytes.
    #[arg(long = "ceiling", value_name = "NAME=URL", requires = "ceiling_dir")]
    ceilings: Vec<String>,
    /// The directory the ceiling serves; the reference target's answers are
    /// written there as `<workload>/<i>.json`.
    #[arg(long)]
    ceiling_dir: Option<PathBuf>,
    /// Workloads: randblock, randblock-full, tx, receipt, block-receipts,
    /// logs, balance, storage, call, estimate, mix:seeds-read,
    /// mix:block-tail, mix:eth-mainnet or mix:FILE.toml (repeatable).
    #[arg(long = "workload", default_value = "randblock")]
    workloads: Vec<String>,
    /// Closed-loop connection sweep [default: 1,2,4,8,16,32,64,128,256,
    /// or none when --rates is given].
    #[arg(long, value_delimiter = ',')]
    conns: Option<Vec<usize>>,
    /// Open-loop rates in requests per second (latency from each request's
    /// due time).
    #[arg(long, value_delimiter = ',')]
    rates: Vec<f64>,
    /// Connections an open loop spreads its schedule over.
    #[arg(long, default_value_t = 64)]
    open_conns: usize,
    /// Unmeasured seconds before each cell.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Measured seconds per cell.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Distinct requests per workload.
    #[arg(long, default_value_t = 1000)]
    pool: usize,
    /// Seed for sampling keys and request order.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// TARGET:BASELINE pairs for the verdict (default: the first target
    /// against each other one).
    #[arg(long = "compare", value_name = "TARGET:BASELINE")]
    compare: Vec<String>,
    /// Sample CPU and RSS of this process for a target, NAME=PID (default:
    /// found by the port of a loopback target).
    #[arg(long = "pid", value_name = "NAME=PID")]
    pids: Vec<String>,
    /// Where tables, results.json and plots go.
    #[arg(long, default_value = "bench-results")]
    out: PathBuf,
    /// Also write a wrk Lua script that sends the first workload's requests.
    #[arg(long)]
    wrk_script: Option<PathBuf>,
    /// Exit 0 even when a run is flagged (it measured the reject path), to
    /// record such runs on purpose; without it a flagged run exits 3 once
    /// its outputs are written.
    #[arg(long)]
    allow_flagged: bool,
    /// Build a whole comparison on this machine instead of measuring given targets.
    #[arg(long)]
    suite: Option<Suite>,
    /// Suite: grow the geth chain to this many blocks.
    #[arg(long, default_value_t = 2000)]
    blocks: u64,
    /// Suite: transactions per block to grow it with.
    #[arg(long, default_value_t = 50)]
    block_txs: u64,
    /// Suite: seconds of traffic into avalanchego (0 skips it).
    #[arg(long, default_value_t = 60)]
    avalanchego_seconds: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum Suite {
    /// geth and avalanchego each against a neve mirroring it, plus nginx.
    Headline,
}

#[derive(Clone, Copy, ValueEnum)]
enum LocalNode {
    Geth,
    Avalanchego,
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Push N signed transfers from M accounts into a node and report TPS
    /// per block, average TPS and block times, read from the chain.
    Tps(TpsArgs),
}

#[derive(Args)]
struct TpsArgs {
    /// The node's HTTP JSON-RPC URL.
    #[arg(
        long,
        required_unless_present = "local_node",
        conflicts_with = "local_node"
    )]
    rpc: Option<String>,
    /// Start this node on 127.0.0.1 for the run instead: geth (a dev chain
    /// sealing every second) or avalanchego (a local C-chain, funded by its
    /// prefunded key).
    #[arg(long)]
    local_node: Option<LocalNode>,
    /// Transfers to send.
    #[arg(long, default_value_t = 10_000)]
    transactions: u64,
    /// Sender accounts.
    #[arg(long, default_value_t = 64)]
    accounts: usize,
    /// A funded private key in hex (default: geth --dev's unlocked account).
    #[arg(long, env = "NEVE_FUNDER_KEY", hide_env_values = true)]
    funder_key: Option<String>,
    /// Give up sending after this many seconds.
    #[arg(long, default_value_t = 600)]
    max_seconds: u64,
    /// Write the per-block results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

pub async fn bench(args: BenchArgs) -> Result<()> {
    if let Some(BenchCommand::Tps(tps_args)) = args.command {
        return tps_run(tps_args).await;
    }
    let mut config = BenchConfig::new(Vec::new());
    config.workloads = args.workloads;
    config.conns = match args.conns {
        Some(conns) => conns,
        None if args.rates.is_empty() => neve_bench::DEFAULT_CONNS.to_vec(),
        None => Vec::new(),
    };
    config.rates = args.rates;
    config.open_conns = args.open_conns;
    let seconds = |flag: &str, value: f64| {
        Duration::try_from_secs_f64(value)
            .with_context(|| format!("{flag} must be a number of seconds, not {value}"))
    };
    config.warmup = seconds("--warmup", args.warmup)?;
    config.duration = seconds("--duration", args.duration)?;
    config.pool = args.pool;
    config.seed = args.seed;
    config.out = Some(args.out.clone());
    config.wrk_script = args.wrk_script;
    config.neve_version = Some(crate::version::VERSION_LINE.to_owned());
    config.command_line = Some(report::command_line(
        std::env::args_os().map(|arg| arg.to_string_lossy().into_owned()),
    ));
    anyhow::ensure!(config.pool > 0, "--pool must be at least 1");
    anyhow::ensure!(
        config.duration > Duration::ZERO,
        "--duration must be positive"
    );
    anyhow::ensure!(
        config.conns.iter().all(|c| *c > 0),
        "--conns must be positive"
    );

    if let Some(Suite::Headline) = args.suite {
        anyhow::ensure!(
            args.targets.is_empty()
                && args.ceilings.is_empty()
                && args.pids.is_empty()
                && args.compare.is_empty(),
            "--suite starts its own targets: drop --target, --ceiling, --pid and --compare"
        );
        let suite = suite::SuiteConfig {
            neve: std::env::current_exe().context("finding the neve binary")?,
            geth_blocks: args.blocks,
            block_txs: args.block_txs,
            avalanchego_seconds: args.avalanchego_seconds,
            bench: config,
            out: args.out,
        };
        let (summary, flagged) = suite::run(suite, |line| eprintln!("[bench] {line}")).await?;
        println!("{summary}");
        exit_if_flagged(&flagged, args.allow_flagged);
        return Ok(());
    }

    config.targets = args
        .targets
        .iter()
        .map(|t| Target::parse(t, TargetKind::Rpc))
        .collect::<Result<_, _>>()?;
    config.ceilings = args
        .ceilings
        .iter()
        .map(|t| Target::parse(t, TargetKind::Static))
        .collect::<Result<_, _>>()?;
    config.ceiling_dir = args.ceiling_dir;
    for spec in &args.pids {
        let (name, pid) = spec
            .split_once('=')
            .and_then(|(n, p)| Some((n, p.parse::<u32>().ok()?)))
            .with_context(|| format!("--pid is NAME=PID, not {spec:?}"))?;
        let target = config
            .targets
            .iter_mut()
            .chain(&mut config.ceilings)
            .find(|t| t.name == name)
            .with_context(|| format!("--pid names {name}, which is not a target"))?;
        target.pids.push(pid);
    }
    for pair in &args.compare {
        let (target, baseline) = pair
            .split_once(':')
            .with_context(|| format!("--compare is TARGET:BASELINE, not {pair:?}"))?;
        config
            .compare
            .push((target.to_owned(), baseline.to_owned()));
    }
    let results = neve_bench::run(&config, |line| eprintln!("[bench] {line}")).await?;
    println!("{}", results.render());
    exit_if_flagged(&results.flagged_cells(), args.allow_flagged);
    Ok(())
}

/// Ends the process with [`FLAGGED_EXIT`] and one line naming the flagged
/// cells, unless there are none or they are allowed. The outputs are
/// written by then: only the status and this line change.
fn exit_if_flagged(cells: &[String], allowed: bool) {
    if cells.is_empty() || allowed {
        return;
    }
    eprintln!(
        "neve bench: flagged (the reject path, or client-bound): {}; exit {FLAGGED_EXIT} (--allow-flagged exits 0)",
        cells.join(", ")
    );
    std::process::exit(FLAGGED_EXIT);
}

async fn tps_run(args: TpsArgs) -> Result<()> {
    anyhow::ensure!(args.accounts > 0, "--accounts must be at least 1");
    // Held for the run: the node stops when these drop.
    let (mut _geth, mut _avalanchego) = (None, None);
    let (rpc_url, funder_key) = match (args.rpc, args.local_node) {
        (Some(url), _) => (url, args.funder_key),
        (None, Some(LocalNode::Geth)) => {
            let geth = neve_devnet::GethDev::start(neve_devnet::GethDevOptions {
                period: 1,
                ..Default::default()
            })
            .await?;
            eprintln!("geth dev chain (one block a second) at {}", geth.http_url());
            let url = geth.http_url().to_owned();
            _geth = Some(geth);
            (url, args.funder_key)
        }
        (None, Some(LocalNode::Avalanchego)) => {
            let node = neve_devnet::Avalanchego::start().await?;
            eprintln!("avalanchego local C-chain at {}", node.c_chain_rpc_url());
            let url = node.c_chain_rpc_url();
            _avalanchego = Some(node);
            let key = args
                .funder_key
                .unwrap_or_else(|| neve_devnet::AVALANCHEGO_PREFUNDED_KEY.to_owned());
            (url, Some(key))
        }
        (None, None) => anyhow::bail!("give --rpc URL or --local-node"),
    };
    let config = tps::TpsConfig {
        rpc_url,
        transactions: args.transactions,
        accounts: args.accounts,
        funder_key,
        max_duration: Duration::from_secs(args.max_seconds),
    };
    let report = tps::run(&config, crate::load_cmd::print_progress).await?;
    println!("{}", report.render());
    if let Some(path) = args.json {
        std::fs::write(&path, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
