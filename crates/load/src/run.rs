//! [`run`]: set up, send for the configured time, drain, report.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use alloy_primitives::Address;
use neve_upstream::RpcClient;
use tokio::sync::Semaphore;

use crate::chain::{HEAD_POLL, block_number, chain_id, current_fees, pending_nonce};
use crate::config::{DEFAULT_CONCURRENT_BATCHES, DRAIN_TIMEOUT, LoadConfig};
use crate::deploy::deploy_token;
use crate::error::{LoadError, rpc};
use crate::funding::{fund_senders, funder};
use crate::mix::{self, TxKind};
use crate::report::{LoadReport, Progress};
use crate::sending::{Shared, send_batch, watch_inclusions};
use crate::signing::{derive_senders, sign};
use crate::vocabulary::{Fees, Sender};

/// Runs the generator; `on_progress` is called about once a second.
pub async fn run(
    config: LoadConfig,
    mut on_progress: impl FnMut(&Progress),
) -> Result<LoadReport, LoadError> {
    let client = RpcClient::new(&config.rpc_url).map_err(rpc("connecting"))?;
    let SetUp {
        chain_id,
        mut fees,
        token,
        mut senders,
        setup_time,
    } = set_up(&client, &config).await?;

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
    let addresses: Vec<_> = senders.iter().map(|s| s.signer.address()).collect();
    let mut mix = mix::Mix::new(config.seed, &addresses, token, config.transfers_only);
    let mut sent_by_kind = vec![0u64; TxKind::ALL.len()];
    let mut next_sender = 0usize;
    let mut last_report = Instant::now();
    let mut last_fee_refresh = Instant::now();
    let mut tasks = Vec::new();

    while start.elapsed() < config.duration {
        report_each_second(&shared, start, &mut last_report, &mut on_progress);
        refresh_fees(&client, &mut fees, &mut last_fee_refresh).await;
        let batch_len = match allowance(&config, &shared, start) {
            Allowance::Done => break,
            Allowance::Wait(pause) => {
                tokio::time::sleep(pause).await;
                continue;
            }
            Allowance::Send(batch_len) => batch_len,
        };
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
    drain(&shared, start, &mut last_report, &mut on_progress).await;
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
        sent_by_kind: by_kind(&sent_by_kind),
        setup_time,
    })
}

/// What setting up left for the run: the chain, the fees, the token and
/// the funded senders.
struct SetUp {
    chain_id: u64,
    fees: Fees,
    token: Address,
    senders: Vec<Sender>,
    setup_time: Duration,
}

/// Funds the senders and deploys the token.
async fn set_up(client: &RpcClient, config: &LoadConfig) -> Result<SetUp, LoadError> {
    let chain_id = chain_id(client).await?;
    let setup_start = Instant::now();
    let fees = current_fees(client).await?;
    let funder = funder(client, config, fees).await?;
    let mut funder = Sender {
        nonce: pending_nonce(client, funder.address()).await?,
        signer: funder,
    };
    let mut senders = derive_senders(config.seed, config.accounts);
    fund_senders(client, chain_id, fees, &mut funder, &senders).await?;
    let token = deploy_token(client, chain_id, fees, &mut funder).await?;
    for sender in &mut senders {
        sender.nonce = pending_nonce(client, sender.signer.address()).await?;
    }
    let setup_time = setup_start.elapsed();
    Ok(SetUp {
        chain_id,
        fees,
        token,
        senders,
        setup_time,
    })
}

/// Whether the next batch may go now, and how large.
enum Allowance {
    /// The transaction cap is reached: stop sending.
    Done,
    /// Backing off, too much in flight or ahead of the rate: pause.
    Wait(Duration),
    /// Send a batch of this many.
    Send(usize),
}

/// How large the next batch may be now, within the backoff, the in-flight
/// cap, the transaction cap and the rate.
fn allowance(config: &LoadConfig, shared: &Shared, start: Instant) -> Allowance {
    let backoff_until = Duration::from_nanos(shared.backoff_until_nanos.load(Ordering::Relaxed));
    if start.elapsed() < backoff_until || shared.in_flight() >= config.max_in_flight {
        return Allowance::Wait(Duration::from_millis(10));
    }
    let mut batch_len = config.batch_size;
    if let Some(max) = config.max_transactions {
        let sent = shared.sent.load(Ordering::Relaxed);
        if sent >= max {
            return Allowance::Done;
        }
        batch_len = batch_len.min((max - sent) as usize);
    }
    if let Some(tps) = config.tps {
        let allowed = (tps as f64 * start.elapsed().as_secs_f64()) as u64;
        let sent = shared.sent.load(Ordering::Relaxed);
        if sent >= allowed {
            return Allowance::Wait(Duration::from_millis(5));
        }
        batch_len = batch_len.min((allowed - sent) as usize);
    }
    Allowance::Send(batch_len)
}

/// Waits, up to [`DRAIN_TIMEOUT`], for what the pool accepted to be
/// included, reporting progress about once a second.
async fn drain(
    shared: &Shared,
    start: Instant,
    last_report: &mut Instant,
    on_progress: &mut impl FnMut(&Progress),
) {
    let drain_start = Instant::now();
    while shared.in_flight() > 0 && drain_start.elapsed() < DRAIN_TIMEOUT {
        report_each_second(shared, start, last_report, on_progress);
        tokio::time::sleep(HEAD_POLL).await;
    }
}

/// Calls `on_progress` when a second has passed since it was last called.
fn report_each_second(
    shared: &Shared,
    start: Instant,
    last_report: &mut Instant,
    on_progress: &mut impl FnMut(&Progress),
) {
    if last_report.elapsed() >= Duration::from_secs(1) {
        on_progress(&shared.progress(start.elapsed()));
        *last_report = Instant::now();
    }
}

/// Asks the node for fees again when two seconds have passed since the
/// last time (keeping the old ones if it does not answer).
async fn refresh_fees(client: &RpcClient, fees: &mut Fees, last_fee_refresh: &mut Instant) {
    if last_fee_refresh.elapsed() >= Duration::from_secs(2) {
        if let Ok(fresh) = current_fees(client).await {
            *fees = fresh;
        }
        *last_fee_refresh = Instant::now();
    }
}

/// Counts indexed by kind, paired with their kinds in [`TxKind::ALL`] order.
fn by_kind(counts: &[u64]) -> Vec<(TxKind, u64)> {
    TxKind::ALL
        .iter()
        .map(|k| (*k, counts[*k as usize]))
        .collect()
}
