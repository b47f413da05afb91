//! A batch: its elements answered in one pass over what neve holds, then
//! the deferred ones (log scans on the scan threads, cold reads on the I/O
//! threads, state reads after their fetches) and their finishing, then
//! the misses the fallback may fill. The one account of
//! `--max-batch-answer-bytes` is kept here: every element's answer is
//! counted as it is built, deferred or not, and once the count passes the
//! cap nothing more is built; what was deferred is counted again, in
//! order, as geth cuts a batch. A lone call's deferred work goes the same
//! way: it is a batch of one, with no cap (`answer_elements`).

use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::value::RawValue;

use crate::body::Chunks;
use crate::errors::ErrorCode;
use crate::methods::logs::{self, Budget, Plan};
use crate::rpc::{Call, Outcome, OwnedCall, Reads, Reply, envelope, error_element};

use super::call::FirstPass;
use super::execute::DeferredCall;
use super::offload::{MAX_COLD_ANSWER_BYTES, MAX_QUEUED_COLD_READS, OffWorkers, count_cold};
use super::{Server, json_response, response};

/// Bytes of an answer.
fn answer_len(chunks: &[Bytes]) -> usize {
    chunks.iter().map(Bytes::len).sum()
}

/// The answer to a batch element after the batch's answers passed
/// [`ServeConfig::max_batch_answer_bytes`](crate::config::ServeConfig::max_batch_answer_bytes): -32003 for a call, nothing for a
/// notification.
fn response_too_large(raw: &RawValue) -> (Vec<Bytes>, Outcome) {
    let id = match serde_json::from_str::<Call<'_>>(raw.get()) {
        Ok(call) => match call.id {
            Some(id) => id.get().as_bytes(),
            None => return (Vec::new(), Outcome::Ok),
        },
        Err(_) => b"null",
    };
    let reply = Reply::Error(ErrorCode::ResponseTooLarge, "response too large".into());
    (envelope(id, reply), Outcome::Error)
}

/// The elements of a request the pass over what neve holds handed on, by
/// where they are answered, each with its place among the answers.
struct Deferred<'a> {
    scans: Vec<(usize, Call<'a>, Plan, Instant)>,
    /// State reads, with the fetches each needs: every fetch runs before
    /// any of them is answered.
    fetched: Vec<(usize, Call<'a>, Instant, Vec<neve_state::FetchRequest>)>,
    /// With the bytes of the answers built before each.
    colds: Vec<(usize, Call<'a>, Instant, usize)>,
    /// Whether each runs the EVM.
    executes: Vec<(usize, Call<'a>, Instant, bool)>,
    budget: Budget,
    latest: Option<u64>,
}

impl Deferred<'_> {
    fn is_empty(&self) -> bool {
        self.scans.is_empty()
            && self.fetched.is_empty()
            && self.colds.is_empty()
            && self.executes.is_empty()
    }
}

impl Server {
    pub(super) async fn batch(&self, body: &Bytes, over_ws: bool) -> Response<Chunks> {
        let Ok(elements) = serde_json::from_slice::<Vec<&RawValue>>(body) else {
            return self.failed(error_element(ErrorCode::ParseError, "parse error"), 1);
        };
        if elements.is_empty() {
            return self.failed(error_element(ErrorCode::InvalidRequest, "empty batch"), 1);
        }
        if elements.len() > self.ctx.config.max_batch {
            self.metrics.batch_too_large.fetch_add(1, Ordering::Relaxed);
            let message = format!(
                "batch of {} exceeds the limit of {}",
                elements.len(),
                self.ctx.config.max_batch
            );
            return self.failed(error_element(ErrorCode::InvalidRequest, &message), 1);
        }
        let cap = self.ctx.config.max_batch_answer_bytes;
        let (mut answers, mut deferred) = self.answer_elements(&elements, over_ws, cap).await;
        let misses: Vec<usize> = (0..answers.len())
            .filter(|i| answers[*i].1 == Outcome::Miss)
            .filter(|i| {
                self.fallback
                    .as_ref()
                    .is_some_and(|f| f.allows_request(elements[*i]))
            })
            .collect();
        if let Some(fallback) = &self.fallback
            && !misses.is_empty()
            && let Some(filled) = fallback.forward_misses(&elements, &misses).await
        {
            for (index, answer) in misses.iter().zip(filled) {
                answers[*index] = (vec![answer], Outcome::Ok);
            }
            deferred = true; // the node's answers are not counted yet
        }
        if deferred {
            let mut bytes = 0;
            for (raw, answer) in elements.iter().zip(answers.iter_mut()) {
                if bytes > self.ctx.config.max_batch_answer_bytes {
                    *answer = response_too_large(raw);
                } else {
                    bytes += answer_len(&answer.0);
                }
            }
        }
        let any_miss = answers.iter().any(|(_, outcome)| *outcome == Outcome::Miss);
        let errors = answers
            .iter()
            .filter(|(_, outcome)| *outcome == Outcome::Error)
            .count();
        // Notifications have no place in the answer; a batch of nothing
        // but notifications is answered with an empty body, as geth does.
        answers.retain(|(answer, _)| !answer.is_empty());
        if answers.is_empty() {
            return response(StatusCode::OK, "application/json", Chunks::empty());
        }
        let mut chunks = Vec::with_capacity(answers.len() * 3 + 2);
        chunks.push(Bytes::from_static(b"["));
        for (i, (answer, _)) in answers.into_iter().enumerate() {
            if i > 0 {
                chunks.push(Bytes::from_static(b","));
            }
            chunks.extend(answer);
        }
        chunks.push(Bytes::from_static(b"]"));
        let status = if any_miss {
            StatusCode::MISDIRECTED_REQUEST
        } else {
            StatusCode::OK
        };
        let mut answer = json_response(status, chunks);
        self.mark_errors(&mut answer, errors);
        answer
    }

    /// Answers `elements` in order: everything held in one pass on this
    /// worker ([`Server::answer_held`]), then the deferred ones
    /// ([`Server::answer_deferred`]). Returns the answers and whether any
    /// was deferred (then counted again in order by the batch's cut). A
    /// single call is a batch of one, with no cap: this is the one
    /// dispatcher of deferred work.
    pub(super) async fn answer_elements(
        &self,
        elements: &[&RawValue],
        over_ws: bool,
        cap: usize,
    ) -> (Vec<(Vec<Bytes>, Outcome)>, bool) {
        let (mut answers, deferred) = self.answer_held(elements, over_ws, cap);
        if deferred.is_empty() {
            return (answers, false);
        }
        self.answer_deferred(elements, &mut answers, deferred, cap, over_ws)
            .await;
        (answers, true)
    }

    /// The pass over what neve holds, on this worker: every element held
    /// answered, the rest handed on as [`Deferred`] work with a place kept
    /// for its answer. Every answer is counted against `cap` as it is
    /// built, deferred ones (a log scan, a state fetch; their sizes not
    /// known yet, each bounded by its own budget) or not, so once the count
    /// passes the cap nothing more is built; when some were deferred, the
    /// batch's cut counts them all again in order, as geth cuts a batch.
    fn answer_held<'a>(
        &self,
        elements: &[&'a RawValue],
        over_ws: bool,
        cap: usize,
    ) -> (Vec<(Vec<Bytes>, Outcome)>, Deferred<'a>) {
        let mut answers = Vec::with_capacity(elements.len());
        let mut deferred = Deferred {
            scans: Vec::new(),
            fetched: Vec::new(),
            colds: Vec::new(),
            executes: Vec::new(),
            budget: self.ctx.logs_budget(),
            // One `latest` for every element, deferred ones included.
            latest: self.ctx.latest(),
        };
        let mut answered = 0usize;
        for (i, raw) in elements.iter().enumerate() {
            if answered > cap {
                answers.push(response_too_large(raw));
                continue;
            }
            let first = self.first_pass(raw, over_ws, &mut deferred.budget, deferred.latest);
            let placeholder = (Vec::new(), Outcome::Miss);
            match first {
                FirstPass::Done(chunks, outcome) => {
                    answered += answer_len(&chunks);
                    answers.push((chunks, outcome))
                }
                FirstPass::Silent => answers.push((Vec::new(), Outcome::Ok)),
                FirstPass::Scan(call, plan, started) => {
                    answers.push(placeholder);
                    deferred.scans.push((i, call, *plan, started));
                }
                FirstPass::Fetch(call, requests, started) => {
                    answers.push(placeholder);
                    // The fetches run first; the answers are built after,
                    // in order, each counted against the cap first.
                    deferred.fetched.push((i, call, started, requests));
                }
                FirstPass::Execute(call, started, evm) => {
                    answers.push(placeholder);
                    deferred.executes.push((i, call, started, evm));
                }
                FirstPass::Cold(call, started) => {
                    answers.push(placeholder);
                    deferred.colds.push((i, call, started, answered));
                }
            }
        }
        (answers, deferred)
    }

    /// The deferred elements answered, each in its place: cold reads on
    /// the I/O threads, calls on the call threads, log scans on the scan
    /// threads, state reads after their fetches; then finished.
    async fn answer_deferred(
        &self,
        elements: &[&RawValue],
        answers: &mut [(Vec<Bytes>, Outcome)],
        deferred: Deferred<'_>,
        cap: usize,
        over_ws: bool,
    ) {
        let Deferred {
            scans,
            fetched,
            colds,
            executes,
            budget,
            latest,
        } = deferred;
        if !colds.is_empty() {
            let owned = colds
                .iter()
                .map(|(_, call, _, before)| (call.to_owned_call(), *before))
                .collect();
            let replies = self.read_cold(owned, cap, latest).await;
            for ((i, call, started, _), reply) in colds.into_iter().zip(replies) {
                answers[i] = self.finish(&call, reply, started, over_ws, false);
            }
        }
        if !executes.is_empty() {
            self.execute_deferred(executes, answers, cap, latest, over_ws)
                .await;
        }
        if !scans.is_empty() {
            let (targets, plans): (Vec<_>, Vec<_>) = scans
                .into_iter()
                .map(|(i, call, plan, started)| ((i, call, started), plan))
                .unzip();
            let replies = self.scan_off_workers(plans, budget).await;
            for ((i, call, started), reply) in targets.into_iter().zip(replies) {
                answers[i] = self.finish(&call, reply, started, over_ws, false);
            }
        }
        let (fetched, requests): (Vec<_>, Vec<_>) = fetched
            .into_iter()
            .map(|(i, call, started, requests)| ((i, call, started), requests))
            .unzip();
        let fetches = requests
            .into_iter()
            .map(|requests| self.await_fetches(requests));
        futures_util::future::join_all(fetches).await;
        if !fetched.is_empty() {
            self.answer_fetched(elements, fetched, answers, cap, latest, over_ws);
        }
    }

    /// Executes a request's deferred calls on the call threads, each with
    /// the bytes of every answer before it made so far (the cold reads'
    /// included): the executed answers are counted against `cap` after
    /// those.
    async fn execute_deferred(
        &self,
        executes: Vec<(usize, Call<'_>, Instant, bool)>,
        answers: &mut [(Vec<Bytes>, Outcome)],
        cap: usize,
        latest: Option<u64>,
        over_ws: bool,
    ) {
        let mut before = 0;
        let mut next = 0;
        let owned = executes
            .iter()
            .map(|(at, call, _, evm)| {
                for answer in &answers[next..*at] {
                    before += answer_len(&answer.0);
                }
                next = *at;
                DeferredCall {
                    call: call.to_owned_call(),
                    before,
                    evm: *evm,
                }
            })
            .collect();
        let replies = self.execute_calls(owned, cap, latest).await;
        for ((i, call, started, _), reply) in executes.into_iter().zip(replies) {
            answers[i] = self.finish(&call, reply, started, over_ws, false);
        }
    }

    /// Answers the state reads whose fetches are done, in order, each
    /// counted against `cap` with every answer before it first.
    fn answer_fetched(
        &self,
        elements: &[&RawValue],
        fetched: Vec<(usize, Call<'_>, Instant)>,
        answers: &mut [(Vec<Bytes>, Outcome)],
        cap: usize,
        latest: Option<u64>,
        over_ws: bool,
    ) {
        let mut bytes = 0;
        let mut fetched = fetched.into_iter().peekable();
        for (i, raw) in elements.iter().enumerate() {
            if let Some((_, call, started)) = fetched.next_if(|(at, ..)| *at == i) {
                answers[i] = if bytes > cap {
                    response_too_large(raw)
                } else {
                    let reply = self.fetched_reply(&call, latest);
                    self.finish(&call, reply, started, over_ws, true)
                };
            }
            if bytes <= cap {
                bytes += answer_len(&answers[i].0);
            }
        }
    }

    /// Answers calls that need stored pages not in memory on the I/O
    /// threads, in order, so no async worker waits for the disk; past
    /// [`MAX_QUEUED_COLD_READS`] they are misses at once. Each call comes
    /// with the bytes of the answers before it in its batch; once those and
    /// the cold answers read before it pass `cap`, it is not read but
    /// answered "response too large", as the batch's cut will answer it:
    /// a batch of cold elements holds at most its cap (and one answer).
    pub(super) async fn read_cold(
        &self,
        calls: Vec<(OwnedCall, usize)>,
        cap: usize,
        latest: Option<u64>,
    ) -> Vec<Reply> {
        let queue = OffWorkers {
            pool: &self.io,
            queued: |m| &m.cold_reads_queued,
            refused: |m| &m.cold_reads_refused,
            admitted: Some(|m| &m.cold_reads),
            max_queued: MAX_QUEUED_COLD_READS,
            what: "reading",
        };
        let ctx = self.ctx.clone();
        let count = calls.len();
        let metrics = self.metrics.clone();
        self.off_workers(
            queue,
            count,
            || Reply::Miss,
            move || {
                let mut read = 0usize;
                let held = &metrics.cold_answer_bytes;
                calls
                    .iter()
                    .map(|((method, params), before)| {
                        if before.saturating_add(read) > cap {
                            return Reply::Error(
                                ErrorCode::ResponseTooLarge,
                                "response too large".into(),
                            );
                        }
                        if held.load(Ordering::Relaxed) > MAX_COLD_ANSWER_BYTES {
                            metrics.cold_reads_refused.fetch_add(1, Ordering::Relaxed);
                            return Reply::Miss;
                        }
                        let reply = ctx.call(method, params.as_deref(), Reads::from_disk(latest));
                        if let Reply::Result(chunks) = &reply {
                            read += chunks.iter().map(Bytes::len).sum::<usize>();
                        }
                        count_cold(reply, held)
                    })
                    .collect()
            },
        )
        .await
    }

    /// Scans log queries in order on a scan thread, so a long scan never
    /// holds an async worker nor competes with one for the CPU; they share
    /// what is left of the request's budget.
    pub(super) async fn scan_off_workers(
        &self,
        plans: Vec<Plan>,
        mut budget: Budget,
    ) -> Vec<Reply> {
        let queue = OffWorkers {
            pool: &self.scans,
            queued: |m| &m.scans_queued,
            refused: |m| &m.scans_refused,
            admitted: None,
            max_queued: logs::MAX_QUEUED_SCANS,
            what: "scanning logs",
        };
        let busy = format!(
            "too many log scans queued (at most {}); try again",
            logs::MAX_QUEUED_SCANS
        );
        let refused = move || Reply::Error(ErrorCode::LimitExceeded, busy.clone());
        let ctx = self.ctx.clone();
        let count = plans.len();
        self.off_workers(queue, count, refused, move || {
            plans
                .iter()
                .map(|plan| logs::scan(&ctx, plan, &mut budget))
                .collect()
        })
        .await
    }

    /// Starts the fetches a state read needs and waits for them, at most
    /// `--state-fetch-timeout-ms`; each runs to its end even if nobody
    /// waits.
    pub(super) async fn await_fetches(&self, requests: Vec<neve_state::FetchRequest>) {
        let fetch = self.fetch.as_ref().expect("first_pass checked");
        let waits: Vec<_> = requests.into_iter().map(|r| fetch.fetch(r)).collect();
        if let Some(deadline) = self.ctx.config.state_fetch_timeout {
            let _ = tokio::time::timeout(deadline, futures_util::future::join_all(waits)).await;
        }
    }

    /// A state read answered once its fetches are done: from the store,
    /// or a miss when they did not bring what it needs in time.
    pub(super) fn fetched_reply(&self, call: &Call<'_>, latest: Option<u64>) -> Reply {
        if self.ctx.config.state_fetch_timeout.is_none() {
            return Reply::Miss;
        }
        match self
            .ctx
            .call(&call.method, call.params, Reads::in_memory(latest))
        {
            Reply::Fetch(_) | Reply::Cold => Reply::Miss,
            reply => reply,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::config::ServeConfig;
    use crate::server::tests::{FixedChain, answer, runtime, server_configured};

    /// Follows for its first question only: `latest` is known once, then
    /// not (the upstream went silent in between).
    struct FollowingOnce(std::sync::atomic::AtomicBool);

    impl crate::config::ChainView for FollowingOnce {
        fn upstream_head(&self) -> Option<u64> {
            Some(9)
        }
        fn safe(&self) -> Option<u64> {
            None
        }
        fn finalized(&self) -> Option<u64> {
            None
        }
        fn upstream_health(&self) -> crate::config::UpstreamHealth {
            crate::config::UpstreamHealth::default()
        }
        fn following(&self) -> bool {
            !self.0.swap(true, std::sync::atomic::Ordering::Relaxed)
        }
    }

    /// issue 32.4: a batch decides `latest` once, and every element answers
    /// at that block.
    #[test]
    fn a_batch_decides_latest_once_for_every_element() {
        let chain = Arc::new(FollowingOnce(Default::default()));
        let (server, _dir) = server_configured(chain, |_| {});
        let runtime = runtime();
        let (status, body) = answer(
            &server,
            &runtime,
            r#"[{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"},
                {"jsonrpc":"2.0","id":2,"method":"eth_getBlockByNumber","params":["latest",false]},
                {"jsonrpc":"2.0","id":3,"method":"eth_blockNumber"}]"#,
        );
        assert_eq!(status, 200, "{body}");
        let answers: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(answers[0]["result"], "0x9", "{body}");
        assert_eq!(answers[1]["result"]["number"], "0x9", "{body}");
        assert_eq!(answers[2]["result"], "0x9", "{body}");
        // The next request decides again: not following now, so a miss.
        let (status, _) = answer(
            &server,
            &runtime,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
        );
        assert_eq!(status, 421);
    }

    #[test]
    fn a_batch_past_its_answer_bytes_gets_response_too_large_for_the_rest() {
        let (server, _dir) = server_configured(Arc::new(FixedChain), |config| {
            config.max_batch_answer_bytes = 1000;
        });
        let runtime = runtime();
        let block = |id: u32| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"eth_getBlockByNumber","params":["0x1",true]}}"#
            )
        };
        let one = answer(&server, &runtime, &block(0)).1.len();
        assert!(
            one < 1000 && 2 * one > 1000,
            "a block's answer is {one} bytes"
        );
        // The second passes the limit and is kept; the rest, and not the
        // notification, get -32003.
        let body = format!(
            "[{},{},{},{},{}]",
            block(1),
            block(2),
            r#"{"jsonrpc":"2.0","method":"eth_chainId","params":[]}"#,
            block(4),
            r#"{"jsonrpc":"2.0","id":"x","method":"eth_chainId","params":[]}"#
        );
        let (status, text) = answer(&server, &runtime, &body);
        assert_eq!(status, 200);
        let answers: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
        assert_eq!(answers.len(), 4);
        assert!(answers[0]["result"].is_object() && answers[1]["result"].is_object());
        for (answer, id) in answers[2..]
            .iter()
            .zip([serde_json::json!(4), serde_json::json!("x")])
        {
            assert_eq!(answer["id"], id);
            assert_eq!(answer["error"]["code"], -32003);
            assert_eq!(answer["error"]["message"], "response too large");
        }
    }

    #[test]
    fn the_batch_answer_cap_holds_after_a_deferred_element() {
        let runtime = runtime();
        let query = r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x0","toBlock":"0x9"}]}"#;
        let block =
            r#"{"jsonrpc":"2.0","id":2,"method":"eth_getBlockByNumber","params":["0x1",true]}"#;
        let configure = |config: &mut ServeConfig| {
            config.logs_max_range = 10;
            config.logs_max_results = 10_000;
        };
        let (probe, _probe_dir) = server_configured(Arc::new(FixedChain), configure);
        let logs = answer(&probe, &runtime, query).1.len();
        let one_block = answer(&probe, &runtime, block).1.len();
        // Room for the three inline log answers and half a block.
        let (server, _dir) = server_configured(Arc::new(FixedChain), |config| {
            configure(config);
            config.max_batch_answer_bytes = 3 * logs + one_block / 2;
        });
        // The fourth log query goes to the scan threads (its size unknown
        // until it is answered); forty blocks follow it.
        let mut calls = vec![query; 4];
        calls.extend([block; 40]);
        let (status, body) = answer(&server, &runtime, &format!("[{}]", calls.join(",")));
        assert_eq!(status, 200);
        let answers: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        assert_eq!(answers.len(), 44);
        assert!(
            answers[..4].iter().all(|a| a["result"].is_array()),
            "{body}"
        );
        assert!(
            answers[5..].iter().all(|a| a["error"]["code"] == -32003),
            "{body}"
        );
        // Counted before they were built: no block past the cap was built
        // (each built answer is counted in /metrics).
        let mut metrics = String::new();
        server.metrics.render(&mut metrics);
        let built: u64 = metrics
            .lines()
            .filter(|l| l.starts_with("neve_rpc_requests_total{method=\"eth_getBlockByNumber\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        assert!(built <= 1, "{built} blocks built past the cap:\n{metrics}");
    }
}
