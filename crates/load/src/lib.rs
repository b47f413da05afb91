//! load: the traffic generator behind `neve load`.
//!
//! Funds a set of sender accounts (from geth's unlocked dev account, or from
//! a funder key elsewhere), deploys a small token, then signs and sends a
//! realistic mix of transactions in batched `eth_sendRawTransaction` calls:
//! ETH transfers of every pre-blob type (legacy, access-list, dynamic-fee),
//! token transfers that emit `Transfer` logs, transfers to fresh addresses
//! and contract creations. It backs off when the node pushes back, keeps a
//! bounded number of transactions in flight, can cap the rate, and counts
//! what the chain actually included.
//!
//! Start at [`run`] with a [`LoadConfig`]; it returns a [`LoadReport`].
//! Knows nothing of neve's store or server: it only needs a node's RPC.

mod mix;
pub mod token;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use alloy_consensus::{SignableTransaction, TxEip1559, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, B256, Bytes, U256, hex, keccak256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;
use neve_upstream::{RpcClient, RpcError, parse_quantity, quantity};
use serde_json::{Value, json};
use tokio::sync::Semaphore;

pub use mix::TxKind;

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

/// How long a funding or deployment transaction may take to be included.
const SETUP_TIMEOUT: Duration = Duration::from_secs(120);

/// Longest pause after the node pushes back (txpool full, 429, 5xx).
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How often the inclusion watcher asks for the head.
const HEAD_POLL: Duration = Duration::from_millis(100);

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

/// Why a load run could not go on.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// An RPC call the run depends on failed.
    #[error("{step}: {source}")]
    Rpc {
        /// What was being done.
        step: &'static str,
        /// The error.
        source: RpcError,
    },
    /// The funder key is not a secp256k1 private key in hex.
    #[error("invalid funder key: {0}")]
    InvalidKey(String),
    /// No funder: no key was given and the node has no unlocked account.
    #[error(
        "no funder: pass a funded key (--funder-key) or use a node with an unlocked dev account"
    )]
    NoFunder,
    /// Setup did not complete: funding or deployment not included in time.
    #[error("{0}")]
    Setup(String),
}

fn rpc(step: &'static str) -> impl FnOnce(RpcError) -> LoadError {
    move |source| LoadError::Rpc { step, source }
}

/// A snapshot while the run goes on.
#[derive(Clone, Debug, Default)]
pub struct Progress {
    /// Time since sending started.
    pub elapsed: Duration,
    /// Transactions signed and sent.
    pub sent: u64,
    /// Transactions the node accepted into its pool.
    pub accepted: u64,
    /// Transactions the node refused.
    pub rejected: u64,
    /// Transactions included in blocks since sending started.
    pub included: u64,
    /// Blocks since sending started.
    pub blocks: u64,
    /// The node's head.
    pub head: u64,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// The chain id the node reported.
    pub chain_id: u64,
    /// The deployed token (its `Transfer` logs are part of the traffic).
    pub token: Address,
    /// The first block produced while sending.
    pub first_block: u64,
    /// The head at the end.
    pub last_block: u64,
    /// Final counters.
    pub progress: Progress,
    /// Sent transactions per kind, in [`TxKind::ALL`] order.
    pub sent_by_kind: Vec<(TxKind, u64)>,
    /// From the start of sending to the last block that included something.
    pub inclusion_window: Duration,
    /// Wall time of setup (funding and token deployment).
    pub setup_time: Duration,
}

impl LoadReport {
    /// Included transactions per second over the inclusion window.
    pub fn included_per_second(&self) -> f64 {
        let seconds = self.inclusion_window.as_secs_f64();
        if seconds > 0.0 {
            self.progress.included as f64 / seconds
        } else {
            0.0
        }
    }

    /// Mean transactions per block.
    pub fn tx_per_block(&self) -> f64 {
        if self.progress.blocks == 0 {
            0.0
        } else {
            self.progress.included as f64 / self.progress.blocks as f64
        }
    }

    /// A few human-readable lines.
    pub fn render(&self) -> String {
        let p = &self.progress;
        let kinds: Vec<String> = self
            .sent_by_kind
            .iter()
            .map(|(kind, n)| format!("{}={n}", kind.name()))
            .collect();
        format!(
            "chain {} | setup {:.1}s | token {}\n\
             sent {} accepted {} rejected {} | included {} in {} blocks ({}..={}) \
             over {:.1}s: {:.0} tx/s, {:.1} tx/block\n\
             mix: {}",
            self.chain_id,
            self.setup_time.as_secs_f64(),
            self.token,
            p.sent,
            p.accepted,
            p.rejected,
            p.included,
            p.blocks,
            self.first_block,
            self.last_block,
            self.inclusion_window.as_secs_f64(),
            self.included_per_second(),
            self.tx_per_block(),
            kinds.join(" "),
        )
    }
}

/// Gas prices in use, refreshed from the node while the run goes on.
#[derive(Clone, Copy, Debug)]
struct Fees {
    /// Legacy and access-list gas price; dynamic-fee `maxFeePerGas`.
    max_fee: u128,
    /// Dynamic-fee tip.
    tip: u128,
}

/// A sender account with its locally tracked next nonce.
struct Sender {
    signer: PrivateKeySigner,
    nonce: u64,
}

/// Counters shared between the sending loop, batch tasks and the watcher.
#[derive(Default)]
struct Shared {
    sent: AtomicU64,
    accepted: AtomicU64,
    rejected: AtomicU64,
    included: AtomicU64,
    blocks: AtomicU64,
    head: AtomicU64,
    /// Nanoseconds since sending started at which the latest block that
    /// included transactions was seen.
    last_inclusion_nanos: AtomicU64,
    /// Nanoseconds since start before which no batch may be sent (backoff).
    backoff_until_nanos: AtomicU64,
}

impl Shared {
    fn in_flight(&self) -> u64 {
        self.accepted
            .load(Ordering::Relaxed)
            .saturating_sub(self.included.load(Ordering::Relaxed))
    }

    fn progress(&self, elapsed: Duration) -> Progress {
        Progress {
            elapsed,
            sent: self.sent.load(Ordering::Relaxed),
            accepted: self.accepted.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            included: self.included.load(Ordering::Relaxed),
            blocks: self.blocks.load(Ordering::Relaxed),
            head: self.head.load(Ordering::Relaxed),
        }
    }
}

/// Runs the generator; `on_progress` is called about once a second.
pub async fn run(
    config: LoadConfig,
    mut on_progress: impl FnMut(&Progress),
) -> Result<LoadReport, LoadError> {
    let client = RpcClient::new(&config.rpc_url).map_err(rpc("connecting"))?;
    let chain_id: String = client
        .call("eth_chainId", ())
        .await
        .map_err(rpc("eth_chainId"))?;
    let chain_id = parse_quantity(&chain_id)
        .ok_or_else(|| LoadError::Setup(format!("eth_chainId returned {chain_id:?}")))?;

    let setup_start = Instant::now();
    let mut fees = current_fees(&client).await?;
    let funder = funder(&client, &config, fees).await?;
    let mut funder = Sender {
        nonce: pending_nonce(&client, funder.address()).await?,
        signer: funder,
    };
    let mut senders = derive_senders(config.seed, config.accounts);
    fund_senders(&client, chain_id, fees, &mut funder, &senders).await?;
    let token = deploy_token(&client, chain_id, fees, &mut funder).await?;
    for sender in &mut senders {
        sender.nonce = pending_nonce(&client, sender.signer.address()).await?;
    }
    let setup_time = setup_start.elapsed();

    let shared = Arc::new(Shared::default());
    let start = Instant::now();
    let first_block = block_number(&client).await?;
    shared.head.store(first_block, Ordering::Relaxed);
    let stop_watch = Arc::new(AtomicBool::new(false));
    let watcher = tokio::spawn(watch_inclusions(
        client.clone(),
        first_block,
        start,
        shared.clone(),
        stop_watch.clone(),
    ));

    let needs_resync: Arc<Vec<AtomicBool>> =
        Arc::new((0..senders.len()).map(|_| AtomicBool::new(false)).collect());
    let on_wire = Arc::new(Semaphore::new(DEFAULT_CONCURRENT_BATCHES));
    let mut mix = mix::Mix::new(
        config.seed,
        &senders
            .iter()
            .map(|s| s.signer.address())
            .collect::<Vec<_>>(),
        token,
        config.transfers_only,
    );
    let mut sent_by_kind = vec![0u64; TxKind::ALL.len()];
    let mut next_sender = 0usize;
    let mut last_report = Instant::now();
    let mut last_fee_refresh = Instant::now();
    let mut tasks = Vec::new();

    while start.elapsed() < config.duration {
        if last_report.elapsed() >= Duration::from_secs(1) {
            on_progress(&shared.progress(start.elapsed()));
            last_report = Instant::now();
        }
        if last_fee_refresh.elapsed() >= Duration::from_secs(2) {
            if let Ok(fresh) = current_fees(&client).await {
                fees = fresh;
            }
            last_fee_refresh = Instant::now();
        }
        let backoff_until =
            Duration::from_nanos(shared.backoff_until_nanos.load(Ordering::Relaxed));
        if start.elapsed() < backoff_until || shared.in_flight() >= config.max_in_flight {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let mut batch_len = config.batch_size;
        if let Some(max) = config.max_transactions {
            let sent = shared.sent.load(Ordering::Relaxed);
            if sent >= max {
                break;
            }
            batch_len = batch_len.min((max - sent) as usize);
        }
        if let Some(tps) = config.tps {
            let allowed = (tps as f64 * start.elapsed().as_secs_f64()) as u64;
            let sent = shared.sent.load(Ordering::Relaxed);
            if sent >= allowed {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            batch_len = batch_len.min((allowed - sent) as usize);
        }

        let mut raw = Vec::with_capacity(batch_len);
        let mut owners = Vec::with_capacity(batch_len);
        for _ in 0..batch_len {
            let index = next_sender % senders.len();
            next_sender += 1;
            if needs_resync[index].swap(false, Ordering::Relaxed) {
                senders[index].nonce =
                    pending_nonce(&client, senders[index].signer.address()).await?;
            }
            let sender = &mut senders[index];
            let (kind, tx) = mix.next(chain_id, sender.nonce, fees);
            sender.nonce += 1;
            sent_by_kind[kind as usize] += 1;
            raw.push(sign(&sender.signer, tx));
            owners.push(index);
        }
        shared.sent.fetch_add(raw.len() as u64, Ordering::Relaxed);
        let permit = on_wire
            .clone()
            .acquire_owned()
            .await
            .expect("semaphore open");
        let (client, shared, needs_resync) = (client.clone(), shared.clone(), needs_resync.clone());
        tasks.push(tokio::spawn(async move {
            send_batch(&client, raw, &owners, &shared, &needs_resync, start).await;
            drop(permit);
        }));
        tasks.retain(|t| !t.is_finished());
    }
    for task in tasks {
        let _ = task.await;
    }

    // Drain: wait for what the pool accepted to be included.
    let drain_start = Instant::now();
    while shared.in_flight() > 0 && drain_start.elapsed() < DRAIN_TIMEOUT {
        if last_report.elapsed() >= Duration::from_secs(1) {
            on_progress(&shared.progress(start.elapsed()));
            last_report = Instant::now();
        }
        tokio::time::sleep(HEAD_POLL).await;
    }
    stop_watch.store(true, Ordering::Relaxed);
    let _ = watcher.await;
    let progress = shared.progress(start.elapsed());
    on_progress(&progress);

    Ok(LoadReport {
        chain_id,
        token,
        first_block: first_block + 1,
        last_block: progress.head,
        inclusion_window: Duration::from_nanos(shared.last_inclusion_nanos.load(Ordering::Relaxed)),
        progress,
        sent_by_kind: TxKind::ALL
            .iter()
            .map(|k| (*k, sent_by_kind[*k as usize]))
            .collect(),
        setup_time,
    })
}

/// Sends one batch and books its outcome.
async fn send_batch(
    client: &RpcClient,
    raw: Vec<String>,
    owners: &[usize],
    shared: &Shared,
    needs_resync: &[AtomicBool],
    start: Instant,
) {
    let calls: Vec<(&str, [String; 1])> = raw
        .into_iter()
        .map(|tx| ("eth_sendRawTransaction", [tx]))
        .collect();
    let backoff = |pause: Duration| {
        let until = (start.elapsed() + pause).as_nanos() as u64;
        shared
            .backoff_until_nanos
            .fetch_max(until, Ordering::Relaxed);
    };
    match client.batch(&calls).await {
        Ok(items) => {
            let mut pool_pressure = false;
            for (item, owner) in items.iter().zip(owners) {
                match item {
                    Ok(_) => {
                        shared.accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    // The pool already holds it: as good as accepted.
                    Err(RpcError::Rpc { message, .. }) if message.contains("already known") => {
                        shared.accepted.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        shared.rejected.fetch_add(1, Ordering::Relaxed);
                        // A refused nonce leaves a gap; re-read it before
                        // this sender signs again.
                        needs_resync[*owner].store(true, Ordering::Relaxed);
                        pool_pressure |= is_pool_pressure(error);
                    }
                }
            }
            if pool_pressure {
                backoff(Duration::from_millis(200));
            }
        }
        Err(error) => {
            shared
                .rejected
                .fetch_add(owners.len() as u64, Ordering::Relaxed);
            for owner in owners {
                needs_resync[*owner].store(true, Ordering::Relaxed);
            }
            let pause = match &error {
                RpcError::Http {
                    retry_after: Some(seconds),
                    ..
                } => Duration::from_secs(*seconds),
                _ => Duration::from_millis(500),
            };
            backoff(pause.min(MAX_BACKOFF));
        }
    }
}

/// Whether a refusal says the node is overloaded rather than the transaction wrong.
fn is_pool_pressure(error: &RpcError) -> bool {
    match error {
        RpcError::Rpc { message, .. } => {
            let message = message.to_ascii_lowercase();
            [
                "txpool is full",
                "underpriced",
                "too many",
                "rate limit",
                "busy",
            ]
            .iter()
            .any(|needle| message.contains(needle))
        }
        other => other.is_transient(),
    }
}

/// Counts transactions in blocks produced after `first_block`.
async fn watch_inclusions(
    client: RpcClient,
    first_block: u64,
    start: Instant,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) {
    let mut seen = first_block;
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if let Ok(head) = block_number(&client).await {
            shared.head.store(head, Ordering::Relaxed);
            while seen < head {
                let upto = head.min(seen + 500);
                let calls: Vec<(&str, [String; 1])> = (seen + 1..=upto)
                    .map(|n| ("eth_getBlockTransactionCountByNumber", [quantity(n)]))
                    .collect();
                let Ok(items) = client.batch(&calls).await else {
                    break;
                };
                let mut included = 0;
                for item in &items {
                    let count = item
                        .as_ref()
                        .ok()
                        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
                        .and_then(|q| parse_quantity(&q))
                        .unwrap_or(0);
                    included += count;
                }
                shared.included.fetch_add(included, Ordering::Relaxed);
                shared.blocks.fetch_add(upto - seen, Ordering::Relaxed);
                if included > 0 {
                    shared
                        .last_inclusion_nanos
                        .store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                }
                seen = upto;
            }
        }
        if stopping {
            return;
        }
        tokio::time::sleep(HEAD_POLL).await;
    }
}

/// Signs `tx` and returns its EIP-2718 encoding as `0x…` hex.
fn sign(signer: &PrivateKeySigner, tx: mix::UnsignedTx) -> String {
    let envelope: TxEnvelope = match tx {
        mix::UnsignedTx::Legacy(tx) => {
            let signature = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing never fails for a local key");
            tx.into_signed(signature).into()
        }
        mix::UnsignedTx::Eip2930(tx) => {
            let signature = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing never fails for a local key");
            tx.into_signed(signature).into()
        }
        mix::UnsignedTx::Eip1559(tx) => {
            let signature = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing never fails for a local key");
            tx.into_signed(signature).into()
        }
    };
    hex::encode_prefixed(envelope.encoded_2718())
}

/// The sender keys for a seed: keccak256("neve-load" ‖ seed ‖ index).
fn derive_senders(seed: u64, count: usize) -> Vec<Sender> {
    (0..count as u64)
        .map(|i| {
            let mut material = b"neve-load".to_vec();
            material.extend_from_slice(&seed.to_be_bytes());
            material.extend_from_slice(&i.to_be_bytes());
            let key = keccak256(&material);
            Sender {
                signer: PrivateKeySigner::from_bytes(&key).expect("a keccak digest is a valid key"),
                nonce: 0,
            }
        })
        .collect()
}

/// The account that funds the senders. With a key, that key; without, a key
/// derived from the seed that the node's unlocked dev account funds first.
async fn funder(
    client: &RpcClient,
    config: &LoadConfig,
    fees: Fees,
) -> Result<PrivateKeySigner, LoadError> {
    if let Some(key) = &config.funder_key {
        return parse_key(key);
    }
    let accounts: Vec<Address> = client
        .call("eth_accounts", ())
        .await
        .map_err(rpc("eth_accounts"))?;
    let dev = *accounts.first().ok_or(LoadError::NoFunder)?;
    let funder = derive_senders(config.seed ^ 0x5eed_f00d, 1)
        .remove(0)
        .signer;
    let balance = balance(client, dev).await?;
    let hash: B256 = client
        .call(
            "eth_sendTransaction",
            [json!({
                "from": dev,
                "to": funder.address(),
                "value": balance / U256::from(2),
                "gas": "0x5208",
                "maxFeePerGas": quantity(fees.max_fee as u64),
                "maxPriorityFeePerGas": quantity(fees.tip as u64),
            })],
        )
        .await
        .map_err(rpc("funding from the dev account"))?;
    wait_receipt(client, hash).await?;
    Ok(funder)
}

/// A secp256k1 private key from 64 hex digits, with or without `0x`.
fn parse_key(key: &str) -> Result<PrivateKeySigner, LoadError> {
    let digits = key.trim().trim_start_matches("0x");
    if digits.len() != 64 {
        return Err(LoadError::InvalidKey(format!(
            "expected 64 hex digits, got {}",
            digits.len()
        )));
    }
    digits
        .parse()
        .map_err(|e: alloy_signer_local::LocalSignerError| LoadError::InvalidKey(e.to_string()))
}

/// Sends each sender its share of the funder's balance and waits for them all.
async fn fund_senders(
    client: &RpcClient,
    chain_id: u64,
    fees: Fees,
    funder: &mut Sender,
    senders: &[Sender],
) -> Result<(), LoadError> {
    /// Ten thousand ether: years of gas at the generator's prices.
    const MAX_GRANT: u128 = 10_000 * 10u128.pow(18);
    let available = balance(client, funder.signer.address()).await?;
    let share = available / U256::from(2 * senders.len() as u64 + 2);
    let grant = share.min(U256::from(MAX_GRANT));
    let raw: Vec<(&str, [String; 1])> = senders
        .iter()
        .map(|sender| {
            let tx = TxEip1559 {
                chain_id,
                nonce: funder.nonce,
                gas_limit: 21_000,
                max_fee_per_gas: fees.max_fee,
                max_priority_fee_per_gas: fees.tip,
                to: alloy_primitives::TxKind::Call(sender.signer.address()),
                value: grant,
                ..Default::default()
            };
            funder.nonce += 1;
            (
                "eth_sendRawTransaction",
                [sign(&funder.signer, mix::UnsignedTx::Eip1559(tx))],
            )
        })
        .collect();
    let Some(((_, first), rest)) = raw.split_first() else {
        return Ok(());
    };
    // The first grant goes alone: once the pool takes it, the pool has
    // caught up with the block that funded the funder, and the rest may go
    // as one batch.
    send_when_pool_sees_funds(client, &first[0]).await?;
    for item in client.batch(rest).await.map_err(rpc("funding senders"))? {
        item.map_err(rpc("funding a sender"))?;
    }
    wait_nonce(client, funder.signer.address(), funder.nonce).await
}

/// Sends a raw transaction, retrying while the node's pool still prices it
/// against state from before the block that funded its sender: geth answers
/// receipts for a new block before its pool has reset onto that block.
async fn send_when_pool_sees_funds(client: &RpcClient, raw: &str) -> Result<(), LoadError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        match client.call::<B256>("eth_sendRawTransaction", [raw]).await {
            Ok(_) => return Ok(()),
            Err(RpcError::Rpc { message, .. })
                if message.contains("insufficient funds") && Instant::now() < deadline =>
            {
                tokio::time::sleep(HEAD_POLL).await
            }
            Err(error) => return Err(rpc("funding a sender")(error)),
        }
    }
}

/// Deploys a contract whose creation runs `init`, sent from the account of
/// `funder_key` on the node at `rpc_url`; returns the contract's address once
/// its receipt says it succeeded. For tests that need a contract of their
/// own (storage written at chosen slots, say).
pub async fn deploy(rpc_url: &str, funder_key: &str, init: &[u8]) -> Result<Address, LoadError> {
    let client = RpcClient::new(rpc_url).map_err(rpc("connecting"))?;
    let signer = parse_key(funder_key)?;
    let chain_id: String = client
        .call("eth_chainId", ())
        .await
        .map_err(rpc("eth_chainId"))?;
    let chain_id = parse_quantity(&chain_id)
        .ok_or_else(|| LoadError::Setup(format!("eth_chainId returned {chain_id:?}")))?;
    let fees = current_fees(&client).await?;
    let nonce = pending_nonce(&client, signer.address()).await?;
    let init = Bytes::copy_from_slice(init);
    let tx = mix::creation_of(chain_id, nonce, fees.max_fee, fees.tip, init);
    deploy_tx(&client, &signer, tx).await
}

/// Deploys the token from the funder and returns its address.
async fn deploy_token(
    client: &RpcClient,
    chain_id: u64,
    fees: Fees,
    funder: &mut Sender,
) -> Result<Address, LoadError> {
    let tx = mix::creation(chain_id, funder.nonce, fees.max_fee, fees.tip);
    funder.nonce += 1;
    deploy_tx(client, &funder.signer, tx).await
}

async fn deploy_tx(
    client: &RpcClient,
    signer: &PrivateKeySigner,
    tx: mix::UnsignedTx,
) -> Result<Address, LoadError> {
    let hash: B256 = client
        .call("eth_sendRawTransaction", [sign(signer, tx)])
        .await
        .map_err(rpc("deploying a contract"))?;
    let receipt = wait_receipt(client, hash).await?;
    receipt
        .get("contractAddress")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .ok_or_else(|| {
            LoadError::Setup(format!(
                "creation receipt has no contractAddress: {receipt}"
            ))
        })
}

async fn current_fees(client: &RpcClient) -> Result<Fees, LoadError> {
    let price: String = client
        .call("eth_gasPrice", ())
        .await
        .map_err(rpc("eth_gasPrice"))?;
    let price = parse_quantity(&price).unwrap_or(1_000_000_000) as u128;
    // Three times the quote rides out base-fee rises between refreshes.
    let max_fee = (price * 3).max(2_000_000_000);
    Ok(Fees {
        max_fee,
        tip: (price / 2).clamp(1, 1_000_000_000),
    })
}

async fn block_number(client: &RpcClient) -> Result<u64, LoadError> {
    let head: String = client
        .call("eth_blockNumber", ())
        .await
        .map_err(rpc("eth_blockNumber"))?;
    parse_quantity(&head)
        .ok_or_else(|| LoadError::Setup(format!("eth_blockNumber returned {head:?}")))
}

async fn pending_nonce(client: &RpcClient, address: Address) -> Result<u64, LoadError> {
    let nonce: String = client
        .call("eth_getTransactionCount", (address, "pending"))
        .await
        .map_err(rpc("eth_getTransactionCount"))?;
    parse_quantity(&nonce).ok_or_else(|| LoadError::Setup(format!("bad nonce {nonce:?}")))
}

async fn balance(client: &RpcClient, address: Address) -> Result<U256, LoadError> {
    client
        .call("eth_getBalance", (address, "latest"))
        .await
        .map_err(rpc("eth_getBalance"))
}

async fn wait_receipt(client: &RpcClient, hash: B256) -> Result<Value, LoadError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        let receipt: Value = match client.call("eth_getTransactionReceipt", [hash]).await {
            Ok(receipt) => receipt,
            // A freshly started geth indexes transactions in the background
            // and says so instead of answering; that is a "not yet".
            Err(RpcError::Rpc { message, .. }) if message.contains("indexing") => Value::Null,
            Err(error) if error.is_transient() => Value::Null,
            Err(error) => return Err(rpc("eth_getTransactionReceipt")(error)),
        };
        if !receipt.is_null() {
            if receipt.get("status").and_then(Value::as_str) != Some("0x1") {
                return Err(LoadError::Setup(format!(
                    "setup transaction {hash} failed: {receipt}"
                )));
            }
            return Ok(receipt);
        }
        if Instant::now() > deadline {
            return Err(LoadError::Setup(format!(
                "{hash} not included within {SETUP_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(HEAD_POLL).await;
    }
}

async fn wait_nonce(client: &RpcClient, address: Address, nonce: u64) -> Result<(), LoadError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        let mined: String = client
            .call("eth_getTransactionCount", (address, "latest"))
            .await
            .map_err(rpc("eth_getTransactionCount"))?;
        if parse_quantity(&mined).unwrap_or(0) >= nonce {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LoadError::Setup(format!(
                "funding of {address} not included within {SETUP_TIMEOUT:?} (at nonce {mined}, want {nonce})"
            )));
        }
        tokio::time::sleep(HEAD_POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn senders_differ_by_seed_and_index() {
        let a = derive_senders(1, 3);
        let b = derive_senders(2, 3);
        let addresses: std::collections::HashSet<_> =
            a.iter().chain(&b).map(|s| s.signer.address()).collect();
        assert_eq!(addresses.len(), 6);
        assert_eq!(
            derive_senders(1, 1)[0].signer.address(),
            a[0].signer.address()
        );
    }

    #[test]
    fn funder_keys_parse_with_or_without_prefix_and_bad_ones_are_refused() {
        let key = "56289e99c94b6912bfc12adc093c9b51124f0dc54ac7a766b2bc5ccf558d8027";
        let address = parse_key(key).unwrap().address();
        assert_eq!(parse_key(&format!("0x{key}")).unwrap().address(), address);
        // avalanchego's well-known local funded address.
        assert_eq!(
            address.to_string(),
            "0x8db97C7cEcE249c2b98bDC0226Cc4C2A57BF52FC"
        );
        assert!(matches!(parse_key("0x1234"), Err(LoadError::InvalidKey(_))));
        assert!(matches!(
            parse_key(&format!("{key}00")),
            Err(LoadError::InvalidKey(_))
        ));
        assert!(matches!(
            parse_key(&"zz".repeat(32)),
            Err(LoadError::InvalidKey(_))
        ));
    }

    #[test]
    fn pool_pressure_is_told_apart_from_bad_transactions() {
        let rpc = |m: &str| RpcError::Rpc {
            code: -32000,
            message: m.into(),
        };
        assert!(is_pool_pressure(&rpc("txpool is full")));
        assert!(is_pool_pressure(&rpc("transaction underpriced")));
        assert!(!is_pool_pressure(&rpc("nonce too low")));
    }

    #[test]
    fn report_rates_follow_the_counters() {
        let report = LoadReport {
            chain_id: 1,
            token: Address::ZERO,
            first_block: 1,
            last_block: 10,
            progress: Progress {
                included: 2000,
                blocks: 10,
                ..Default::default()
            },
            sent_by_kind: vec![],
            inclusion_window: Duration::from_secs(2),
            setup_time: Duration::ZERO,
        };
        assert_eq!(report.included_per_second(), 1000.0);
        assert_eq!(report.tx_per_block(), 200.0);
    }
}
