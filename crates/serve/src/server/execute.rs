//! Calls executed off the async workers: on the call threads, a pool of
//! one thread per core with a bounded queue. A call that read state not
//! held comes back naming it ([`Reply::Fetch`]); the fetches run, and the
//! call runs again, at most [`MAX_CALL_ROUNDS`] times and within
//! `--state-fetch-timeout` from the request's first fetch (a replay's
//! fetches, its block's witness among them, within [`WITNESS_WAIT`] of it,
//! and what a witness left within the timeout again, never past the two
//! together); then it is a miss (421). While a witness is fetched, what
//! the run after it reads besides state is made ready
//! ([`crate::rpc::Job::prepare`]). With fetching off, a call that misses
//! is a miss at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures_util::StreamExt as _;

use crate::errors::ErrorCode;
use crate::metrics::CallEnd;
use crate::rpc::{OwnedCall, Reads, Reply};

use super::Server;
use super::flights::{Flight, FlightWaits, Leader};
use super::offload::OffWorkers;

/// Calls waiting for or running on the call threads; past this a call is
/// a miss (421) at once, counted, so a flood of heavy calls queues
/// nowhere unbounded and the node answers what neve cannot take. Each
/// call is bounded by the gas cap, so the queue is at most this many
/// capped calls of work. Default is 256.
pub(crate) const MAX_QUEUED_CALLS: u64 = 256;

/// Most runs of one call: a run that misses notes every key it reached,
/// so a call needs one fetch per level of contracts it calls into that
/// neve does not hold yet (a router, its pool, the pool's tokens), all
/// within `--state-fetch-timeout`. Default is 8.
pub(crate) const MAX_CALL_ROUNDS: usize = 8;

/// Most rounds in a row one call asks exactly the same fetches: a run
/// that names again what its last round failed to bring (the upstream
/// erred, or its answer was refused) gets a second ask, for a failure
/// that passes (a 429, a reset); a third would ask the node again what it
/// failed twice, and the call is a miss instead. Default is 2.
const MAX_SAME_ASKS: u8 = 2;

/// Least time left worth a round of fetches: with less, the fetches that
/// got a slot would ask the node and be dropped before an answer could
/// come, so none is asked and the calls are misses. Default is 10 ms.
const LEAST_ROUND_WAIT: std::time::Duration = std::time::Duration::from_millis(10);

/// The call threads: one per core, since a call is CPU work; at the
/// priority of the threads that answer.
pub(super) fn call_pool() -> neve_pool::Pool {
    neve_pool::Pool::serving("neve-call", call_threads())
}

/// How many call threads there are: one per core (read once: it reads
/// the cgroup's files).
fn call_threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Clears a round's `waiting` however the round ends (its request
/// dropped included): a prepare not yet begun is then not begun.
struct ClearOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Gas one request's executed calls may spend together (a batch's, the
/// runs of its estimates and access lists, every round included): ten
/// calls at the gas cap, some seconds of a call thread. Past it the rest
/// of the request's calls are not run but answered 421, so the node, not
/// a call thread of neve, answers a batch of a thousand capped calls.
/// Default is 500,000,000.
pub(crate) const MAX_REQUEST_CALL_GAS: u64 = 500_000_000;

/// Fetches one request keeps under way at once: a replay's round can name
/// hundreds of accounts, and the fetcher's slots
/// (`MAX_FETCHES_IN_FLIGHT`, 64) are every request's. The rest wait
/// their turn, within the request's deadline, rather than being shed and
/// run for again. Default is 16.
pub(crate) const MAX_FETCHES_PER_REQUEST: usize = 16;

/// What a call's round fetches: a replay's block witness alone the first
/// time it asks for one (one upstream call for all the block reads), the
/// proofs of what it still misses after.
fn this_round(
    requests: Vec<neve_state::FetchRequest>,
    witnessed: &mut bool,
) -> Vec<neve_state::FetchRequest> {
    use neve_state::FetchRequest::Witness;
    let asks_witness = requests.iter().any(|r| matches!(r, Witness(_)));
    let witness_round = asks_witness && !std::mem::replace(witnessed, true);
    requests
        .into_iter()
        .filter(|r| matches!(r, Witness(_)) == witness_round)
        .collect()
}

/// A round's fetches, told apart from another round's (a run's needs
/// come in a fixed order: the same needs are the same requests).
fn digest_of(round: &[neve_state::FetchRequest]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::hash::DefaultHasher::new();
    round.hash(&mut hasher);
    hasher.finish()
}

/// One fetch of a round: a witness alone, or a batch of proofs.
enum Ask {
    One(neve_state::FetchRequest),
    Proofs(Vec<neve_state::ProofRequest>),
}

/// A round's fetches as the fetcher takes them: each witness alone, the
/// proofs (once each, however many calls of a batch name them) in
/// batches ([`neve_state::proof_batches`]), each batch one of the
/// request's [`MAX_FETCHES_PER_REQUEST`] and one of the fetcher's slots.
fn in_batches(fetches: Vec<neve_state::FetchRequest>) -> Vec<Ask> {
    use neve_state::FetchRequest::Proof;
    let mut seen = std::collections::HashSet::new();
    let mut proofs = Vec::new();
    let mut asks = Vec::new();
    for request in fetches {
        match request {
            Proof(proof) => {
                if seen.insert(proof.clone()) {
                    proofs.push(proof);
                }
            }
            other => asks.push(Ask::One(other)),
        }
    }
    asks.extend(
        neve_state::proof_batches(proofs)
            .into_iter()
            .map(Ask::Proofs),
    );
    asks
}

/// How long a replay waits for its block's witness (and its proofs that
/// stand for one), from its request's first fetch, past
/// `--state-fetch-timeout`: the node executes the block to make it, as
/// long as one of its own traces takes, and longer when it is busy. Past
/// it the trace is a miss (the witness still warms the next). Default is
/// 5 s (geth's trace timeout).
pub(crate) const WITNESS_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A call handed to the call threads.
pub(super) struct DeferredCall {
    pub(super) call: OwnedCall,
    /// Bytes of the answers before it in its batch already made.
    pub(super) before: usize,
    /// It runs the EVM ([`Reply::Execute`]), not long reads
    /// ([`Reply::LongRead`]): counted in the calls' metrics.
    pub(super) evm: bool,
}

impl Server {
    /// Executes `calls` in order on the call threads, with the rounds of
    /// fetches their misses need; one reply per call. Every run's gas
    /// (however it ended: a call's, every probe of an estimate's search,
    /// every run of an access list's making) is charged to the request's
    /// client and counted as it is spent, on the call threads.
    ///
    /// Each call comes with the bytes of the answers before it in its
    /// batch that are made already; with the answers of the calls before
    /// it here, once they pass `cap` it is not run but answered "response
    /// too large", as the batch's cut will answer it: a batch of calls
    /// whose answers are large holds at most its cap (and one answer),
    /// however many it asks. Past [`MAX_REQUEST_CALL_GAS`] the calls left
    /// are misses.
    pub(super) async fn execute_calls(
        &self,
        calls: Vec<DeferredCall>,
        cap: usize,
        latest: Option<u64>,
    ) -> Vec<Reply> {
        let started = Instant::now();
        let mut gas = 0u64;
        // Bytes of each call's answer once made, in the calls' order.
        let mut made = vec![0usize; calls.len()];
        // Each call's reply, whether it fetched before it; whether it ran,
        // and whether that was a run of the EVM (what the calls' metrics
        // count).
        let mut replies: Vec<Option<(Reply, bool)>> = (0..calls.len()).map(|_| None).collect();
        let mut ran = vec![false; calls.len()];
        let executed: Vec<bool> = calls.iter().map(|call| call.evm).collect();
        let mut pending: Vec<usize> = (0..calls.len()).collect();
        // When each call first ran: its rounds after fetches count from
        // there (a trace's time bound is the request's, not a round's).
        let mut since: Vec<Option<Instant>> = vec![None; calls.len()];
        // Whether each call's witness round is behind it.
        let mut witnessed = vec![self.witnesses_unavailable(); calls.len()];
        // What each call's last round asked (its digest), and how many
        // rounds in a row asked it ([`MAX_SAME_ASKS`]).
        let mut asked_before: Vec<Option<(u64, u8)>> = vec![None; calls.len()];
        // The traces this request runs for identical ones waiting.
        let mut leading: Vec<Option<Leader>> = (0..calls.len()).map(|_| None).collect();
        // What its traces may still wait for identical ones in flight.
        let mut flight_waits = FlightWaits::new();
        // The request's fetches end by `deadline_at`: `--state-fetch-timeout`
        // from its first. Rounds that carry a replay (their proofs stand
        // for its block's witness, or wait for it) end by `witness_by`,
        // [`WITNESS_WAIT`] from the request's first fetch, or by
        // `deadline_at` if later. A witness that came gives what it left
        // the timeout again, up to `witness_by` and the timeout. Both are
        // the request's, not a round's: a peer that answers each round
        // just in time holds the request no longer, batches included.
        let mut deadline_at: Option<Instant> = None;
        let mut witness_by: Option<Instant> = None;
        for round in 0..MAX_CALL_ROUNDS {
            let mut fetches = Vec::new();
            let mut again = Vec::new();
            // The calls whose round is their block's witness.
            let mut witnessing = Vec::new();
            for i in pending {
                let DeferredCall {
                    call: (method, params),
                    before,
                    ..
                } = &calls[i];
                let earlier: usize = made[..i].iter().sum();
                // This request's own bounds: no answer to share.
                let own_bound = if before.saturating_add(earlier) > cap {
                    Some(Reply::Error(
                        ErrorCode::ResponseTooLarge,
                        "response too large".into(),
                    ))
                } else if gas >= MAX_REQUEST_CALL_GAS {
                    Some(Reply::Miss)
                } else {
                    None
                };
                let reply = if let Some(reply) = own_bound {
                    // The identical traces waiting run themselves.
                    drop(leading[i].take());
                    reply
                } else if since[i].is_none()
                    && let Some(reply) = self
                        .share_flight(
                            method,
                            params.as_deref(),
                            latest,
                            (&mut leading, &mut flight_waits),
                            i,
                        )
                        .await
                {
                    made[i] = reply_len(&reply);
                    reply
                } else {
                    since[i].get_or_insert_with(Instant::now);
                    let (reply, used) = self
                        .run_call(
                            method,
                            params.clone(),
                            latest,
                            since[i],
                            (witnessed[i], round > 0),
                        )
                        .await;
                    self.fetch_ahead();
                    gas = gas.saturating_add(used);
                    ran[i] = true;
                    made[i] = reply_len(&reply);
                    reply
                };
                match reply {
                    Reply::Fetch(requests)
                        if self.fetch.is_some()
                            && self.ctx.config.state_fetch_timeout.is_some()
                            && round + 1 < MAX_CALL_ROUNDS =>
                    {
                        let round = this_round(requests, &mut witnessed[i]);
                        if round
                            .iter()
                            .any(|r| matches!(r, neve_state::FetchRequest::Witness(_)))
                        {
                            witnessing.push(i);
                        }
                        let digest = digest_of(&round);
                        let asks = match asked_before[i] {
                            Some((last, asks)) if last == digest => asks + 1,
                            _ => 1,
                        };
                        if round.is_empty() || asks > MAX_SAME_ASKS {
                            // Nothing to fetch, or what rounds before
                            // failed to bring: another run would miss
                            // alike.
                            replies[i] = Some((Reply::Miss, true));
                        } else {
                            asked_before[i] = Some((digest, asks));
                            fetches.extend(round);
                            again.push(i);
                        }
                    }
                    Reply::Fetch(requests) => {
                        // Fetching off: warm in the background, answer 421.
                        if let Some(fetch) = &self.fetch {
                            for request in this_round(requests, &mut witnessed[i]) {
                                drop(fetch.fetch(request));
                            }
                        }
                        replies[i] = Some((Reply::Miss, round > 0));
                    }
                    reply => replies[i] = Some((reply, round > 0)),
                }
                // Once it has its answer (not before: a round of fetches
                // keeps the flight), the identical traces waiting take it.
                if let Some((reply, _)) = &replies[i]
                    && let Some(leader) = leading[i].take()
                {
                    leader.finish(reply);
                }
            }
            if again.is_empty() {
                break;
            }
            let timeout = self.ctx.config.state_fetch_timeout.expect("checked above");
            let now = Instant::now();
            let deadline = *deadline_at.get_or_insert_with(|| now + timeout);
            let fetch = self.fetch.as_ref().expect("checked above");
            // A witness is slow in coming (the node executes the block to
            // make it): it is waited for up to [`WITNESS_WAIT`] from the
            // request's first fetch. Proofs of what a whole block reads
            // instead would be thousands of calls.
            let witness_round = fetches
                .iter()
                .any(|r| matches!(r, neve_state::FetchRequest::Witness(_)));
            // A replay's proofs stand for its witness (a few hundred keys,
            // `MAX_FETCHES_PER_REQUEST` at a time): they get its wait, from
            // the same first fetch.
            let replay_round = again
                .iter()
                .any(|i| calls[*i].call.0.starts_with("debug_trace"));
            // At most [`MAX_FETCHES_PER_REQUEST`] under way, each waiting
            // for a slot of the fetcher's rather than shed; the rest start
            // as those end, and none once the deadline passed.
            let fetches_len = fetches.len();
            let waits = futures_util::stream::iter(in_batches(fetches))
                .map(|ask| match ask {
                    Ask::One(request) => fetch.fetch_in_turn(request),
                    Ask::Proofs(batch) => fetch.fetch_proofs_in_turn(batch),
                })
                .buffer_unordered(MAX_FETCHES_PER_REQUEST)
                .collect::<()>();
            let until = if witness_round || replay_round {
                let witness_by = *witness_by.get_or_insert_with(|| now + WITNESS_WAIT);
                witness_by.max(deadline)
            } else {
                deadline
            };
            let wait = until.saturating_duration_since(now);
            if wait < LEAST_ROUND_WAIT {
                // Its time is spent: nothing more is asked of the node.
                for i in &again {
                    replies[*i] = Some((Reply::Miss, true));
                }
                break;
            }
            let fetching = Instant::now();
            let fetched = std::pin::pin!(tokio::time::timeout(wait, waits));
            // Beside a witness round, what the runs after it read besides
            // state made ready: one call at a time as the runs go, no more
            // blocks than the parsed are kept, none begun once the fetches
            // ended; waited for no longer than the fetches.
            let waiting = ClearOnDrop(Arc::new(std::sync::atomic::AtomicBool::new(true)));
            let to_prepare = witnessing
                .iter()
                .filter(|i| again.contains(i) && self.ctx.prepares(&calls[**i].call.0))
                .take(neve_execution::trace::REPLAY_BLOCKS_KEPT);
            let prepared = std::pin::pin!(
                futures_util::stream::iter(to_prepare).for_each(|&i| self.prepare_call(
                    &calls[i].call,
                    latest,
                    waiting.0.clone()
                ))
            );
            let timed_out = match futures_util::future::select(fetched, prepared).await {
                futures_util::future::Either::Left((fetched, _)) => fetched.is_err(),
                futures_util::future::Either::Right((_, fetched)) => fetched.await.is_err(),
            };
            drop(waiting);
            tracing::debug!(
                round,
                asked = fetches_len,
                witness = witness_round,
                waited_ms = fetching.elapsed().as_millis() as u64,
                timed_out,
                "a round of state fetches"
            );
            if witness_round && !timed_out {
                // What the witness left to fetch gets the read's own time,
                // within `witness_by` and the timeout: staggered witnesses
                // of a batch's traces add no time of their own.
                let witness_by = witness_by.expect("set by a witness round");
                deadline_at = Some((Instant::now() + timeout).min(witness_by + timeout));
            }
            if timed_out {
                for i in &again {
                    replies[*i] = Some((Reply::Miss, true));
                }
                break;
            }
            pending = again;
        }
        let elapsed = started.elapsed();
        replies
            .into_iter()
            .zip(ran.into_iter().zip(executed))
            .map(|(reply, (ran, executed))| {
                let (reply, fetched) = reply.unwrap_or((Reply::Miss, true));
                // Counted as executed only if it ran.
                if ran && executed {
                    let end = match (&reply, fetched) {
                        (Reply::Miss, _) => CallEnd::Miss,
                        (_, true) => CallEnd::Fetched,
                        (_, false) => CallEnd::Local,
                    };
                    self.metrics.record_call(end, elapsed);
                }
                reply
            })
            .collect()
    }

    /// Fetches in the background what a block's trace offered ahead of
    /// the block its client traces next ([`crate::rpc::ProofsAhead`]):
    /// off every answer, within [`WITNESS_WAIT`], `MAX_AHEAD_BATCHES` at
    /// a time, each only in a slot of the fetcher's no read waits for
    /// (shed otherwise: it asks the node nothing).
    fn fetch_ahead(&self) {
        let (Some(fetch), Some(_)) = (&self.fetch, self.ctx.config.state_fetch_timeout) else {
            return;
        };
        let Some((requests, slot)) = self.ctx.proofs_ahead.take() else {
            return;
        };
        let fetch = fetch.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let asks = futures_util::stream::iter(neve_state::proof_batches(requests))
                .map(|batch| fetch.prefetch_proofs(batch))
                .buffer_unordered(crate::rpc::MAX_AHEAD_BATCHES)
                .collect::<()>();
            let _ = tokio::time::timeout(WITNESS_WAIT, asks).await;
        });
    }

    /// For a trace before its first run here: its kept answer, or that
    /// of an identical trace in flight once it ran; else `None`, and this
    /// one runs, leading the identical ones that come meanwhile
    /// (`leading[i]` holds its flight until its answer is made). A request
    /// that leads a flight waits on none (two batches asking the same
    /// traces in opposite orders would wait on each other), and nothing
    /// waits on its own request's flight. The request's traces wait
    /// for flights within one bound together (`flight_waits`).
    async fn share_flight(
        &self,
        method: &str,
        params: Option<&serde_json::value::RawValue>,
        latest: Option<u64>,
        (leading, flight_waits): (&mut [Option<Leader>], &mut FlightWaits),
        i: usize,
    ) -> Option<Reply> {
        let keys = self
            .ctx
            .trace_key_of(method, params, Reads::in_memory(latest))?;
        // The memo looked up by the key already made, not the block again.
        let kept = || {
            let memo = keys.memo.as_ref()?;
            self.ctx.trace_answers.get(memo)
        };
        // Leading a flight (this trace's own among them), it waits on none.
        let waits = leading.iter().all(Option::is_none);
        match self.flights.join(keys.flight.clone(), waits) {
            Flight::Lead(lead) => {
                // Answered since the worker looked: no run.
                let reply = kept();
                if reply.is_none() {
                    leading[i] = Some(lead);
                }
                reply
            }
            Flight::Follow(mut done) => {
                let waited = Instant::now();
                let shared = flight_waits.outcome(&mut done).await;
                let counted = |counter: &AtomicU64| counter.fetch_add(1, Ordering::Relaxed);
                match shared {
                    Some(Some(reply)) => {
                        counted(&self.flights.shared);
                        Some(reply)
                    }
                    // The leader gone without an answer: the memo, else a
                    // run here.
                    outcome => {
                        counted(&self.flights.waited_out);
                        tracing::debug!(
                            waited_ms = waited.elapsed().as_millis() as u64,
                            leader_gone = outcome.is_some(),
                            "a trace waited for an identical one in flight and got no answer"
                        );
                        kept()
                    }
                }
            }
            Flight::Alone => kept(),
        }
    }

    /// Whether the upstream was found to serve no execution witnesses.
    fn witnesses_unavailable(&self) -> bool {
        self.ctx
            .state
            .as_ref()
            .is_none_or(|state| state.witnesses.unavailable())
    }

    /// The call threads' queue, `max_queued` places of it open to the
    /// work of `what`.
    fn call_queue(&self, max_queued: u64, what: &'static str) -> OffWorkers<'_> {
        OffWorkers {
            pool: &self.calls,
            queued: |m| &m.calls_queued,
            refused: |m| &m.calls_refused,
            admitted: None,
            max_queued,
            what,
        }
    }

    /// Makes ready on the call threads what `call`'s next run reads
    /// besides state ([`crate::rpc::Job::prepare`]), if its round is still
    /// `waiting` when a thread takes it. Only on a call thread no other
    /// work waits for: with as many calls queued as there are threads it
    /// is not done (the run does it), so it never queues a run out; a run
    /// that comes while it parses waits its milliseconds.
    async fn prepare_call(
        &self,
        (method, params): &OwnedCall,
        latest: Option<u64>,
        waiting: Arc<std::sync::atomic::AtomicBool>,
    ) {
        let threads = call_threads() as u64;
        // Looked at first: a refusal's brief count could refuse a run.
        if self.metrics.calls_queued.load(Ordering::Relaxed) >= threads {
            return;
        }
        // With a count of 0: nothing counted as refused.
        let queue = self.call_queue(threads, "preparing a call");
        let (ctx, method, params) = (self.ctx.clone(), method.clone(), params.clone());
        let work = move || {
            if waiting.load(Ordering::Relaxed) {
                ctx.prepare(&method, params.as_deref(), Reads::from_disk(latest));
            }
            Vec::new()
        };
        self.off_workers(queue, 0, || Reply::Miss, work).await;
    }

    /// One run of one call on the call threads, and the gas it used: a
    /// place in the queue is one call's work (one run of a call, the
    /// probes of one estimate, the runs of one access list), never a
    /// batch's. Its gas is charged to the request's client ([`CLIENT`])
    /// and counted on the call thread as soon as it ran, so a client that
    /// leaves before its answer has paid for it all the same.
    ///
    /// [`CLIENT`]: super::CLIENT
    async fn run_call(
        &self,
        method: &str,
        params: Option<Box<serde_json::value::RawValue>>,
        latest: Option<u64>,
        since: Option<Instant>,
        (witness_asked, fetched): (bool, bool),
    ) -> (Reply, u64) {
        let queue = self.call_queue(MAX_QUEUED_CALLS, "executing a call");
        let ctx = self.ctx.clone();
        let method = method.to_owned();
        let charge = self
            .clients
            .clone()
            .zip(super::CLIENT.try_with(|client| *client).ok());
        let metrics = self.metrics.clone();
        let gas = Arc::new(AtomicU64::new(0));
        let used = gas.clone();

        let reply = self
            .off_workers(
                queue,
                1,
                || Reply::Miss,
                move || {
                    let reads = Reads {
                        since,
                        witness_asked,
                        fetched,
                        ..Reads::from_disk(latest)
                    };
                    let execution = ctx.execute(&method, params.as_deref(), reads);
                    metrics.record_call_gas(execution.gas);
                    if let Some((clients, client)) = &charge {
                        clients.charge_gas(*client, execution.gas, std::time::Instant::now());
                    }
                    used.store(execution.gas, Ordering::Relaxed);
                    vec![execution.reply]
                },
            )
            .await
            .pop()
            .expect("one reply per call");
        (reply, gas.load(Ordering::Relaxed))
    }
}

/// Bytes a reply will take in its answer (its envelope aside): what a
/// batch's cap counts as calls are executed.
fn reply_len(reply: &Reply) -> usize {
    match reply {
        Reply::Result(chunks) => chunks.iter().map(bytes::Bytes::len).sum(),
        Reply::Error(_, message) => message.len(),
        Reply::ErrorData(_, message, data) => message.len() + data.len(),
        _ => 0,
    }
}
