//! Batches: many calls in one request, cut to what the endpoint accepts,
//! and their answers decoded on demand.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::client::RpcClient;
use crate::endpoint::Endpoint;
use crate::error::{RpcError, snippet};
use crate::wire::{RequestObject, ResponseObject, decode, into_result, refuses_batch};

/// One element of a batch answer: the raw result, or the error the node gave
/// for that element.
pub type BatchItem = Result<Box<RawValue>, RpcError>;

/// A batch's answer as received, decoded on demand: one body per batch sent
/// (a batch larger than the endpoint accepts goes out in parts).
#[derive(Debug)]
pub struct BatchAnswer {
    parts: Vec<Part>,
    /// Whose secrets the errors decoded from it are scrubbed of.
    endpoint: Endpoint,
}

/// One exchange's answer: `count` calls with ids from `first`, as an array,
/// or as one object when a single call was sent alone.
#[derive(Debug)]
struct Part {
    bytes: Bytes,
    first: u64,
    count: usize,
    single: bool,
}

impl BatchAnswer {
    /// Each call's answer, in the order the calls were given, borrowed from
    /// the body: the result's raw bytes, or the node's error for that call.
    pub fn items(&self) -> Result<Vec<Result<&RawValue, RpcError>>, RpcError> {
        let mut out = Vec::with_capacity(self.parts.iter().map(|p| p.count).sum());
        for part in &self.parts {
            part.items(&mut out)
                .map_err(|e| self.endpoint.scrub_error(e))?;
        }
        Ok(out
            .into_iter()
            .map(|item| item.map_err(|e| self.endpoint.scrub_error(e)))
            .collect())
    }
}

impl Part {
    fn items<'a>(&'a self, out: &mut Vec<Result<&'a RawValue, RpcError>>) -> Result<(), RpcError> {
        let bytes = &self.bytes;
        if self.single {
            let response: ResponseObject<'_> = decode(bytes)?;
            out.push(into_result(response));
            return Ok(());
        }
        let responses: Vec<ResponseObject<'_>> = match decode(bytes) {
            Ok(responses) => responses,
            // A node answers a whole batch with one error object when it
            // refuses the batch itself (too large, rate limited).
            Err(malformed) => match decode::<ResponseObject<'_>>(bytes) {
                Ok(single) => return Err(into_result(single).err().unwrap_or(malformed)),
                Err(_) => return Err(malformed),
            },
        };
        let mut by_id: HashMap<u64, ResponseObject<'_>> = HashMap::with_capacity(responses.len());
        for response in responses {
            if let Some(id) = response.id {
                by_id.insert(id, response);
            }
        }
        for i in 0..self.count as u64 {
            out.push(
                by_id
                    .remove(&(self.first + i))
                    .map(into_result)
                    .ok_or_else(|| RpcError::Malformed {
                        reason: format!("batch answer lacks id {}", self.first + i),
                        snippet: snippet(bytes),
                    })?,
            );
        }
        Ok(())
    }
}

impl RpcClient {
    /// Sends `calls` as one JSON-RPC batch and returns one item per call, in
    /// the order given (the node may answer in any order). Fails as a whole
    /// only when the exchange itself fails or the answer is not a batch
    /// answering every call.
    pub async fn batch<P: Serialize>(
        &self,
        calls: &[(&str, P)],
    ) -> Result<Vec<BatchItem>, RpcError> {
        let answer = self.send_batch(calls).await?;
        Ok(answer
            .items()?
            .into_iter()
            .map(|item| item.map(ToOwned::to_owned))
            .collect())
    }

    /// Sends a batch and returns its answer undecoded: decoding a large
    /// answer is CPU work a caller may want done off its async workers
    /// (see [`BatchAnswer::items`]).
    pub async fn send_batch<P: Serialize>(
        &self,
        calls: &[(&str, P)],
    ) -> Result<BatchAnswer, RpcError> {
        'again: loop {
            let cap = self.max_batch();
            let mut parts = Vec::with_capacity(calls.len().div_ceil(cap));
            for chunk in calls.chunks(cap) {
                let first = self
                    .next_id
                    .fetch_add(chunk.len() as u64, Ordering::Relaxed);
                let single = chunk.len() == 1 && cap == 1;
                let requests: Vec<_> = chunk
                    .iter()
                    .enumerate()
                    .map(|(i, (method, params))| RequestObject {
                        jsonrpc: "2.0",
                        id: first + i as u64,
                        method,
                        params,
                    })
                    .collect();
                let body = if single {
                    serde_json::to_vec(&requests[0])
                } else {
                    serde_json::to_vec(&requests)
                }
                .expect("request serialises");
                let (status, bytes) = self.post(Bytes::from(body)).await?;
                if chunk.len() > 1 && refuses_batch(status, &bytes, chunk.len()) {
                    let fewer = (chunk.len() / 2).max(1);
                    let before = self.max_batch.fetch_min(fewer, Ordering::Relaxed);
                    if before > fewer {
                        tracing::warn!(
                            url = %self.endpoint,
                            calls = chunk.len(),
                            now = fewer,
                            answer = %self.endpoint.scrub(&snippet(&bytes)),
                            "the upstream refused a batch; sending smaller batches"
                        );
                    }
                    continue 'again;
                }
                parts.push(Part {
                    bytes,
                    first,
                    count: chunk.len(),
                    single,
                });
            }
            return Ok(BatchAnswer {
                parts,
                endpoint: self.endpoint.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use hyper::StatusCode;

    use super::*;

    /// Fuzz target: an upstream's answer to a batch of three calls (or to a
    /// call sent alone): decoded into three items, refused as a whole, or
    /// judged a refusal of the batch itself, never a panic.
    #[test]
    fn fuzz_batch_answers() {
        let seeds: Vec<Vec<u8>> = [
            r#"[{"jsonrpc":"2.0","id":7,"result":"0x1"},{"jsonrpc":"2.0","id":9,"result":{"a":[1]}},{"jsonrpc":"2.0","id":8,"error":{"code":-32601,"message":"no"}}]"#,
            r#"[{"jsonrpc":"2.0","id":7,"error":{"code":-32600,"message":"batch too large"}}]"#,
            r#"{"jsonrpc":"2.0","id":7,"result":null}"#,
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let dictionary: [&[u8]; 7] = [
            b"\"id\":",
            b"18446744073709551615",
            b"\"error\":",
            b"\"result\":",
            b"null",
            b"[",
            b"batch",
        ];
        let report =
            neve_devnet::fuzz::run("batch answers", &seeds, &dictionary, 64 << 10, |input| {
                let _ = refuses_batch(StatusCode::OK, input, 3);
                for single in [false, true] {
                    let answer = BatchAnswer {
                        parts: vec![Part {
                            bytes: Bytes::copy_from_slice(input),
                            first: 7,
                            count: if single { 1 } else { 3 },
                            single,
                        }],
                        endpoint: Endpoint::parse("http://127.0.0.1:8545").unwrap(),
                    };
                    if let Ok(items) = answer.items() {
                        assert_eq!(items.len(), if single { 1 } else { 3 });
                    }
                }
            });
        eprintln!("batch answers: {report}");
    }
}
