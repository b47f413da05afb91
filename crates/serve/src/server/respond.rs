//! A JSON-RPC body answered: a single call (its miss forwarded to the
//! fallback, or answered 421), or a batch (`batch.rs`). Over a WebSocket
//! the same, with misses as errors.

use std::time::Instant;

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::value::RawValue;

use crate::body::Chunks;
use crate::errors::ErrorCode;
use crate::rpc::{Call, Outcome, error_element};

use super::call::FirstPass;
use super::{Server, json_response, response};

impl Server {
    /// Answers a JSON-RPC body (single or batch).
    pub(crate) async fn respond(&self, body: &Bytes) -> Response<Chunks> {
        self.respond_over(body, false).await
    }

    /// Answers a JSON-RPC body; over a WebSocket, misses are errors.
    pub(crate) async fn respond_over(&self, body: &Bytes, over_ws: bool) -> Response<Chunks> {
        if body.trim_ascii_start().first() == Some(&b'[') {
            self.batch(body, over_ws).await
        } else {
            self.single(body, over_ws).await
        }
    }

    async fn single(&self, body: &Bytes, over_ws: bool) -> Response<Chunks> {
        let Ok(raw) = serde_json::from_slice::<&RawValue>(body) else {
            return self.failed(error_element(ErrorCode::ParseError, "parse error"), 1);
        };
        let (chunks, outcome) = self.element(raw, over_ws).await;
        if chunks.is_empty() {
            // A notification: geth answers 200 with an empty body.
            return response(StatusCode::OK, "application/json", Chunks::empty());
        }
        if outcome == Outcome::Miss {
            let forwarded = match &self.fallback {
                Some(fallback) if fallback.allows_request(raw) => {
                    fallback.forward(body.clone()).await
                }
                _ => None,
            };
            match forwarded {
                Some((status, answer)) => json_response(status, vec![answer]),
                None => json_response(StatusCode::MISDIRECTED_REQUEST, chunks),
            }
        } else if outcome == Outcome::Error {
            self.failed(chunks, 1)
        } else {
            json_response(StatusCode::OK, chunks)
        }
    }

    /// Answers one element; returns its chunks and its outcome.
    async fn element(&self, raw: &RawValue, over_ws: bool) -> (Vec<Bytes>, Outcome) {
        let mut budget = self.ctx.logs_budget();
        let latest = self.ctx.latest();
        let (chunks, outcome) = match self.first_pass(raw, over_ws, &mut budget, latest) {
            FirstPass::Done(chunks, outcome) => (chunks, outcome),
            FirstPass::Silent => (Vec::new(), Outcome::Ok),
            FirstPass::Scan(call, plan, started) => {
                let reply = self
                    .scan_off_workers(vec![*plan], budget)
                    .await
                    .pop()
                    .expect("one reply per plan");
                self.finish(&call, reply, started, over_ws, false)
            }
            FirstPass::Fetch(call, requests, started) => {
                self.fetch_through(call, requests, started, over_ws, latest)
                    .await
            }
            FirstPass::Execute(call, started) => {
                let reply = self
                    .execute_calls(vec![(call.to_owned_call(), 0)], usize::MAX, latest)
                    .await
                    .pop()
                    .expect("one reply per call");
                self.finish(&call, reply, started, over_ws, false)
            }
            FirstPass::Cold(call, started) => {
                let reply = self
                    .read_cold(vec![(call.to_owned_call(), 0)], usize::MAX, latest)
                    .await
                    .pop();
                let reply = reply.expect("one reply per call");
                self.finish(&call, reply, started, over_ws, false)
            }
        };
        (chunks, outcome)
    }

    /// Fetches what a state read needs (waiting up to the deadline, or not
    /// at all with fetching in the background only), then reads again.
    async fn fetch_through(
        &self,
        call: Call<'_>,
        requests: Vec<neve_state::FetchRequest>,
        started: Instant,
        over_ws: bool,
        latest: Option<u64>,
    ) -> (Vec<Bytes>, Outcome) {
        self.await_fetches(requests).await;
        let reply = self.fetched_reply(&call, latest);
        self.finish(&call, reply, started, over_ws, true)
    }
}
