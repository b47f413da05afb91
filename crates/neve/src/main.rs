//! neve: a read-only mirror for EVM chains. This binary only wires the
//! library crates to a command line; see ARCHITECTURE.md for the data flow.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand};

mod bench_cmd;
mod chain_view;
mod config;
mod demo_cmd;
mod logging;
mod serve_cmd;
mod units;
mod version;

#[derive(Parser)]
#[command(
    name = "neve",
    version = version::VERSION_LINE,
    about = "A read-only mirror for EVM chains"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Follow an upstream node into a local store and serve it over JSON-RPC.
    Serve(Box<serve_cmd::ServeArgs>),
    /// Print the settings `neve serve` would run with, from flags, NEVE_*
    /// environment variables, a --config file and defaults (secrets in URLs
    /// redacted), as a settings file.
    Config(Box<serve_cmd::ServeArgs>),
    /// Fund accounts on a node and send it a realistic mix of signed transactions.
    Load(LoadArgs),
    /// The main job: a local geth dev chain with traffic, neve following it on
    /// a printed address, example calls, neve against geth, until Ctrl-C.
    Demo(demo_cmd::DemoArgs),
    /// Measure targets head to head (closed-loop sweep, open loop, TPS, the headline suite).
    Bench(Box<bench_cmd::BenchArgs>),
}

#[derive(Args)]
struct LoadArgs {
    /// The node's HTTP JSON-RPC URL (avalanchego: http://HOST:PORT/ext/bc/C/rpc).
    #[arg(long)]
    rpc: String,
    /// How long to send for.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Cap on transactions sent per second (default: as fast as the node takes them).
    #[arg(long)]
    tps: Option<u64>,
    /// A funded private key in hex; without it the node's unlocked dev account funds the run.
    #[arg(long, env = "NEVE_FUNDER_KEY", hide_env_values = true)]
    funder_key: Option<String>,
    /// Sender accounts to fund and rotate through.
    #[arg(long, default_value_t = neve_load::DEFAULT_ACCOUNTS)]
    accounts: usize,
    /// Transactions per eth_sendRawTransaction batch.
    #[arg(long, default_value_t = neve_load::DEFAULT_BATCH_SIZE)]
    batch: usize,
    /// Pause sending while this many accepted transactions are not yet included.
    #[arg(long, default_value_t = neve_load::DEFAULT_MAX_IN_FLIGHT)]
    max_in_flight: u64,
}

/// glibc gives each thread that allocates an arena of its own (up to eight
/// per core), and memory freed in one stays resident: with ingest's and
/// the blocking pool's threads that kept tens of MiB that nothing used.
/// Half the cores (at least two) is what a backfill measured best with
/// (BENCHMARKS.md); serving's small allocations come from per-thread caches
/// and rarely touch an arena lock.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        // SAFETY: called first thing in main, before any other thread exists.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, (cores / 2).max(2) as libc::c_int);
        }
    }
}

fn main() -> Result<()> {
    limit_malloc_arenas();
    let command = config::with_env(Cli::command());
    let (argv, from_file) = config::expand(std::env::args_os().collect(), &command)?;
    let matches = command.clone().get_matches_from(argv);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let (Command::Config(_), Some(settings)) =
        (&cli.command, matches.subcommand_matches("config"))
    {
        print!("{}", config::render(&command, settings, &from_file));
        return Ok(());
    }
    // Serve takes its log settings from flags, environment and file like
    // every other setting; the other commands from RUST_LOG alone.
    match &cli.command {
        Command::Serve(args) => logging::init(&args.log)?,
        _ => logging::init(&logging::LogArgs::default())?,
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Command::Serve(args) = &cli.command {
        serve_cmd::place_threads(args, &mut runtime)?;
    }
    let runtime = runtime
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve_cmd::serve(*args)),
        Command::Config(_) => Ok(()),
        Command::Load(args) => runtime.block_on(load(args)),
        Command::Demo(args) => runtime.block_on(demo_cmd::demo(args)),
        Command::Bench(args) => runtime.block_on(bench_cmd::bench(*args)),
    }
}

async fn load(args: LoadArgs) -> Result<()> {
    anyhow::ensure!(args.accounts > 0, "--accounts must be at least 1");
    anyhow::ensure!(args.batch > 0, "--batch must be at least 1");
    let mut config = neve_load::LoadConfig::new(args.rpc, Duration::from_secs(args.seconds));
    config.tps = args.tps;
    config.funder_key = args.funder_key;
    config.accounts = args.accounts;
    config.batch_size = args.batch;
    config.max_in_flight = args.max_in_flight;
    let report = neve_load::run(config, print_progress)
        .await
        .context("load run failed")?;
    println!("{}", report.render());
    Ok(())
}

pub(crate) fn print_progress(p: &neve_load::Progress) {
    eprintln!(
        "[{:>5.1}s] head {:>6} | sent {:>7} accepted {:>7} rejected {:>5} | included {:>7} in {:>5} blocks",
        p.elapsed.as_secs_f64(),
        p.head,
        p.sent,
        p.accepted,
        p.rejected,
        p.included,
        p.blocks
    );
}
