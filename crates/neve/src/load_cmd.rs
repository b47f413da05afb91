//! `neve load`: fund accounts on a node and send it a realistic mix of
//! signed transactions; its progress lines, which `neve demo` and `neve
//! bench` print too.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

#[derive(Args)]
pub(crate) struct LoadArgs {
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

/// Runs `neve load`.
pub(crate) async fn load(args: LoadArgs) -> Result<()> {
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

/// One line of a load run's progress, on stderr.
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
