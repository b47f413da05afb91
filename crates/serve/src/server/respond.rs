//! A JSON-RPC body answered: a single call (a batch of one: its miss
//! forwarded to the fallback, or answered 421), or a batch (`batch.rs`).
//! Over a WebSocket the same, with misses as errors.

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::value::RawValue;

use crate::body::Chunks;
use crate::errors::ErrorCode;
use crate::rpc::{Outcome, error_element};

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
        // A batch of one, with no cap on its answer.
        let (mut answers, _) = self.answer_elements(&[raw], over_ws, usize::MAX).await;
        let (chunks, outcome) = answers.pop().expect("one answer per element");
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
}
