//! neve: a read-only mirror for EVM chains. This binary only wires the
//! library crates to a command line; see ARCHITECTURE.md for the data flow.

use anyhow::{Context, Result};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod bench_cmd;
mod chain_view;
mod config;
mod demo_cmd;
mod load_cmd;
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
    Load(load_cmd::LoadArgs),
    /// The main job: a local geth dev chain with traffic, neve following it on
    /// a printed address, example calls, neve against geth, until Ctrl-C.
    Demo(demo_cmd::DemoArgs),
    /// Measure targets head to head (closed-loop sweep, open loop, TPS, the headline suite).
    Bench(Box<bench_cmd::BenchArgs>),
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
        Command::Load(args) => runtime.block_on(load_cmd::load(args)),
        Command::Demo(args) => runtime.block_on(demo_cmd::demo(args)),
        Command::Bench(args) => runtime.block_on(bench_cmd::bench(*args)),
    }
}
