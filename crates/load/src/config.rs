//! What a run is asked to do: [`LoadConfig`] and its defaults.

use std::time::Duration;

/// Transactions per `eth_sendRawTransaction` batch: large enough that HTTP
/// overhead is small next to geth's work per transaction, small enough that
/// one refused batch costs little. Default is 200.
pub const DEFAULT_BATCH_SIZE: usize = 200;

/// Sent-but-not-included transactions above which sending pauses. Keeps the
/// txpool well inside its limits (avalanchego's default pool holds 5,120
/// executable transactions). Default is 4,096.
pub const DEFAULT_MAX_IN_FLIGHT: u64 = 4096;

/// Batches on the wire at once; two keep geth busy while the next batch is
/// signed. Default is 2.
pub const DEFAULT_CONCURRENT_BATCHES: usize = 2;

/// Sender accounts. Enough that per-account nonce chains stay short. Default is 64.
pub const DEFAULT_ACCOUNTS: usize = 64;

/// How long after the sending phase the generator waits for the transactions
/// in flight to be included. Default is 30 s.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// What to run.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    /// The node's HTTP JSON-RPC URL.
    pub rpc_url: String,
    /// How long to send for.
    pub duration: Duration,
    /// Transactions per second to send, or `None` for as fast as the node takes them.
    pub tps: Option<u64>,
    /// A funded private key (hex). `None` uses the node's first unlocked
    /// account (geth `--dev`) through `eth_sendTransaction`.
    pub funder_key: Option<String>,
    /// Sender accounts to fund and rotate through.
    pub accounts: usize,
    /// Transactions per batch.
    pub batch_size: usize,
    /// Pause sending above this many unincluded transactions.
    pub max_in_flight: u64,
    /// Seed for the accounts and the mix; different seeds never share senders.
    pub seed: u64,
    /// Stop sending after this many transactions (then drain), even before
    /// `duration` is over.
    pub max_transactions: Option<u64>,
    /// Send only ETH transfers (legacy, access-list, dynamic-fee): the TPS
    /// runs' workload.
    pub transfers_only: bool,
}

impl LoadConfig {
    /// Defaults for everything but the URL and duration.
    pub fn new(rpc_url: impl Into<String>, duration: Duration) -> Self {
        LoadConfig {
            rpc_url: rpc_url.into(),
            duration,
            tps: None,
            funder_key: None,
            accounts: DEFAULT_ACCOUNTS,
            batch_size: DEFAULT_BATCH_SIZE,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            seed: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
            max_transactions: None,
            transfers_only: false,
        }
    }
}
