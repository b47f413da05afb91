//! One call, alone or in a batch: parsed, validated as geth validates it,
//! and answered on the async worker from what neve holds, or handed on as
//! work to do off it ([`FirstPass`]: a long log scan, a state fetch, a
//! cold read); then finished: its envelope and its metrics. Nothing here
//! waits: what waits is the batch's (`batch.rs`).

use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use serde_json::value::RawValue;

use crate::errors::ErrorCode;
use crate::methods::logs::{self, Budget, Plan};
use crate::methods::{is_state_method, method_index};
use crate::rpc::{Call, Outcome, Reads, Reply, Validity, envelope, error_element};

use super::Server;

/// An element after the pass over what neve holds.
pub(super) enum FirstPass<'a> {
    /// Answered (or refused).
    Done(Vec<Bytes>, Outcome),
    /// A notification: valid, and answered with nothing.
    Silent,
    /// A log query too long to scan on an async worker.
    Scan(Call<'a>, Box<Plan>, Instant),
    /// A state read that needs fetching first.
    Fetch(Call<'a>, Vec<neve_state::FetchRequest>, Instant),
    /// A read of stored pages that are not in memory: answered on the I/O
    /// threads.
    Cold(Call<'a>, Instant),
    /// A call to answer on the call threads: executed with revm (`true`),
    /// or long reads.
    Execute(Call<'a>, Instant, bool),
}

impl Server {
    /// Answers one element from what neve holds, or names what a state read
    /// needs fetched; `latest` is the block its request decided on
    /// ([`Context::latest`](crate::rpc::Context::latest)), for this pass and
    /// for the work handed on.
    pub(super) fn first_pass<'a>(
        &self,
        raw: &'a RawValue,
        over_ws: bool,
        budget: &mut Budget,
        latest: Option<u64>,
    ) -> FirstPass<'a> {
        let call: Call<'_> = match serde_json::from_str(raw.get()) {
            Ok(call) => call,
            Err(_) => {
                return FirstPass::Done(
                    error_element(ErrorCode::InvalidRequest, "invalid request"),
                    Outcome::Error,
                );
            }
        };
        match call.validate() {
            Validity::Call => {}
            // Nothing to answer, and a read has no effect to perform.
            Validity::Notification => return FirstPass::Silent,
            Validity::Invalid { echo_id } => {
                let id = match call.id {
                    Some(id) if echo_id => id.get().as_bytes(),
                    _ => b"null",
                };
                let reply = Reply::Error(ErrorCode::InvalidRequest, "invalid request".into());
                return FirstPass::Done(envelope(id, reply), Outcome::Error);
            }
        }
        let started = Instant::now();
        if call.method == "eth_getLogs" {
            let reply = match self.ctx.logs_plan(call.params, Reads::in_memory(latest)) {
                // The block a hash names is not in memory: planned again,
                // and scanned, on the I/O threads.
                Err(Reply::Cold) => return FirstPass::Cold(call, started),
                Err(reply) => reply,
                Ok(plan) => {
                    match budget.charge_blocks(plan.blocks(), self.ctx.config.logs_budget_blocks) {
                        Err(reply) => reply,
                        // Only a short range is checked for being in memory.
                        Ok(())
                            if budget.fits_inline(plan.blocks())
                                && plan.in_memory(&self.ctx)
                                && budget.take_inline(plan.blocks()) =>
                        {
                            logs::scan(&self.ctx, &plan, budget)
                        }
                        Ok(()) => return FirstPass::Scan(call, Box::new(plan), started),
                    }
                }
            };
            let (chunks, outcome) = self.finish(&call, reply, started, over_ws, false);
            return FirstPass::Done(chunks, outcome);
        }
        match self
            .ctx
            .call(&call.method, call.params, Reads::in_memory(latest))
        {
            Reply::Fetch(requests) if self.fetch.is_some() => {
                FirstPass::Fetch(call, requests, started)
            }
            Reply::Cold => FirstPass::Cold(call, started),
            Reply::Execute => FirstPass::Execute(call, started, true),
            Reply::LongRead => FirstPass::Execute(call, started, false),
            reply => {
                let (chunks, outcome) = self.finish(&call, reply, started, over_ws, false);
                FirstPass::Done(chunks, outcome)
            }
        }
    }

    /// The envelope of a reply, and the metrics: per method, and for a
    /// state read whether it was a hit, an answer after `fetched`, or a miss.
    pub(super) fn finish(
        &self,
        call: &Call<'_>,
        reply: Reply,
        started: Instant,
        over_ws: bool,
        fetched: bool,
    ) -> (Vec<Bytes>, Outcome) {
        let id = call.id.map_or(&b"null"[..], |id| id.get().as_bytes());
        let outcome = reply.outcome();
        let index = method_index(&call.method);
        if let Some(state) = &self.ctx.state
            && is_state_method(index)
        {
            let counter = match (outcome, fetched) {
                (Outcome::Ok, false) => Some(&state.counters.hits),
                (Outcome::Ok, true) => Some(&state.counters.fetched),
                (Outcome::Miss, _) => Some(&state.counters.misses),
                (Outcome::Error, _) => None,
            };
            if let Some(counter) = counter {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
        // A WebSocket has no HTTP status to carry 421: say it in the answer.
        let reply = match reply {
            Reply::Miss | Reply::Fetch(_) if over_ws => Reply::Error(
                ErrorCode::Unavailable,
                "not available from this mirror; ask a full node".into(),
            ),
            other => other,
        };
        self.metrics.record(index, outcome, started.elapsed());
        (envelope(id, reply), outcome)
    }
}

#[cfg(test)]
mod tests {
    use crate::server::tests::{answer, runtime, server};

    /// Requests geth refuses are refused here the same way (code, message and
    /// id), and what geth accepts is accepted: the table was read off geth
    /// 1.17 and is checked against a live geth in the binary's tests.
    #[test]
    fn request_validation_matches_geth() {
        let (server, _dir) = server();
        let runtime = runtime();
        let invalid = |id: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":-32600,"message":"invalid request"}}}}"#
            )
        };
        let params = |message: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":-32602,"message":"{message}"}}}}"#)
        };
        let cases: Vec<(&str, String)> = vec![
            (
                r#"{"id":1,"method":"eth_chainId","params":[]}"#,
                invalid("1"),
            ),
            (
                r#"{"jsonrpc":"1.0","id":1,"method":"eth_chainId","params":[]}"#,
                invalid("1"),
            ),
            (
                r#"{"jsonrpc":2,"id":1,"method":"eth_chainId","params":[]}"#,
                invalid("1"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":{"a":1},"method":"eth_chainId"}"#,
                invalid("null"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":[1],"method":"eth_chainId"}"#,
                invalid("null"),
            ),
            (r#"{"jsonrpc":"2.0","id":1,"params":[]}"#, invalid("1")),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"","params":[]}"#,
                invalid("1"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[1]}"#,
                params("too many arguments, want at most 0"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0"]}"#,
                params("missing value for required argument 1"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByHash","params":["0x0000000000000000000000000000000000000000000000000000000000000000"]}"#,
                params("missing value for required argument 1"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x0",false,1]}"#,
                params("too many arguments, want at most 2"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[]}"#,
                params("missing value for required argument 0"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_getTransactionByBlockNumberAndIndex","params":["0x0"]}"#,
                params("missing value for required argument 1"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBalance","params":["0x0000000000000000000000000000000000000001","latest",1]}"#,
                params("too many arguments, want at most 2"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":{}}"#,
                params("non-array args"),
            ),
            // Accepted: no params, null params, null and odd ids, 0X prefixes.
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId"}"#,
                r#"{"jsonrpc":"2.0","id":1,"result":"0x5"}"#.into(),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":null}"#,
                r#"{"jsonrpc":"2.0","id":1,"result":"0x5"}"#.into(),
            ),
            (
                r#"{"jsonrpc":"2.0","id":null,"method":"eth_chainId"}"#,
                r#"{"jsonrpc":"2.0","id":null,"result":"0x5"}"#.into(),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1.5,"method":"eth_chainId"}"#,
                r#"{"jsonrpc":"2.0","id":1.5,"result":"0x5"}"#.into(),
            ),
            (
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockTransactionCountByNumber","params":["0X3"]}"#,
                r#"{"jsonrpc":"2.0","id":1,"result":"0x3"}"#.into(),
            ),
            // Notifications are not answered, alone or in a batch.
            (r#"{"jsonrpc":"2.0","method":"eth_chainId"}"#, String::new()),
            (
                r#"[{"jsonrpc":"2.0","method":"eth_chainId"}]"#,
                String::new(),
            ),
            (
                r#"[{"jsonrpc":"2.0","method":"eth_chainId"},{"jsonrpc":"2.0","id":3,"method":"eth_chainId"}]"#,
                r#"[{"jsonrpc":"2.0","id":3,"result":"0x5"}]"#.into(),
            ),
        ];
        for (request, expected) in cases {
            let (status, body) = answer(&server, &runtime, request);
            assert_eq!(status, 200, "{request}");
            assert_eq!(body, expected, "{request}");
        }
    }
}
