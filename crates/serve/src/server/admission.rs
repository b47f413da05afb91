//! What a request may cost before it is answered: under `--client-rate`,
//! whether its address is within its budget (booked as it arrives, and
//! charged with what it cost once answered); its body read within the
//! size limit and the body timeout, and refused at the first byte that
//! makes it a batch too large or nesting too deep. Connection slots
//! (`--max-connections`) are taken before this, by the listener.

use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::header::{CONTENT_LENGTH, HeaderValue};
use hyper::{Request, Response, StatusCode};

use crate::body::Chunks;
use crate::errors::ErrorCode;
use crate::rpc::error_element;
use crate::{clients, prescan};

use super::{Server, json_response};

/// Why a request body was not read whole.
enum BodyError {
    /// Past the body size limit.
    TooLarge,
    /// A batch too large or nesting too deep, seen while it streamed in.
    Refused(prescan::Refusal),
    /// The connection failed mid-body.
    Broken,
}

/// An error answered from a request's headers alone, with `Retry-After`;
/// the connection closes with it, so its body is never read.
pub(super) fn refused_unread(
    status: StatusCode,
    code: ErrorCode,
    message: &str,
    retry_after_seconds: u64,
) -> Response<Chunks> {
    let mut answer = json_response(status, error_element(code, message));
    let headers = answer.headers_mut();
    headers.insert(
        hyper::header::RETRY_AFTER,
        HeaderValue::from(retry_after_seconds),
    );
    headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    answer
}

/// A request's `Content-Length`, if it gave one.
fn declared_length(request: &Request<Incoming>) -> Option<u64> {
    request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// What a request's body turned out to be, for its client's budget.
#[derive(Default)]
struct Received {
    /// Bytes read.
    bytes: usize,
    /// A batch's elements seen (0 for a single call).
    calls: usize,
}

impl Server {
    /// Whether `client` is within its `--client-rate` budget. If so, books
    /// what `request` costs at least (a call and its declared body), so
    /// requests sent in parallel on many connections count as they
    /// arrive, and returns those units; if not, how long until it is.
    pub(super) fn admit(
        &self,
        client: IpAddr,
        request: &Request<Incoming>,
    ) -> Result<f64, Duration> {
        let Some(clients) = &self.clients else {
            return Ok(0.0);
        };
        let now = Instant::now();
        clients.admit(client, now)?;
        let declared = declared_length(request).unwrap_or(0);
        let units = clients::Spent {
            calls: 1,
            bytes: declared.min(self.ctx.config.max_body_bytes as u64),
            ..clients::Spent::default()
        }
        .units();
        clients.charge(client, units, now);
        Ok(units)
    }

    /// 429 with -32005 and `Retry-After` (`wait`, at least a second),
    /// answered before the body is read; the connection closes with it.
    pub(super) fn rate_limited(&self, wait: Duration) -> Response<Chunks> {
        self.metrics.rate_limited.fetch_add(1, Ordering::Relaxed);
        let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
        let message = format!(
            "too many requests from this address (--client-rate {}); retry after {seconds} s",
            self.ctx.config.client_rate
        );
        refused_unread(
            StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::LimitExceeded,
            &message,
            seconds,
        )
    }

    /// Answers `POST /`: the body read within its limits (or refused),
    /// answered, and, under `--client-rate`, what it cost charged to
    /// `client` beyond the `prepaid` units booked when it was admitted.
    pub(super) async fn rpc(
        &self,
        request: Request<Incoming>,
        client: IpAddr,
        new_connection: bool,
        prepaid: f64,
    ) -> Response<Chunks> {
        let limit = self.ctx.config.max_body_bytes;
        let declared_too_large = declared_length(&request).is_some_and(|len| len > limit as u64);
        let mut received = Received::default();
        let answer = if declared_too_large {
            // Refused unread.
            self.too_large()
        } else {
            let read = tokio::time::timeout(
                self.ctx.config.body_timeout,
                self.read_body(request.into_body(), limit, &mut received),
            );
            match read.await {
                Ok(Ok(body)) => super::CLIENT.scope(client, self.respond(&body)).await,
                Ok(Err(BodyError::TooLarge)) => self.too_large(),
                Ok(Err(BodyError::Refused(refusal))) => {
                    if matches!(refusal, prescan::Refusal::TooManyElements(_)) {
                        self.metrics.batch_too_large.fetch_add(1, Ordering::Relaxed);
                    }
                    // The rest of the body is never read: the connection
                    // ends with this answer.
                    let mut answer = self.failed(
                        error_element(ErrorCode::InvalidRequest, &refusal.message()),
                        1,
                    );
                    answer
                        .headers_mut()
                        .insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
                    answer
                }
                Ok(Err(BodyError::Broken)) | Err(_) => json_response(
                    StatusCode::REQUEST_TIMEOUT,
                    error_element(
                        ErrorCode::InvalidRequest,
                        "request body not received in time",
                    ),
                ),
            }
        };
        if self.clients.is_some() {
            let answer_bytes = hyper::body::Body::size_hint(answer.body())
                .exact()
                .unwrap_or(0);
            let errors = match answer.extensions().get::<clients::Errors>() {
                Some(errors) => errors.0,
                // 413 and 408 carry no mark; they are errors too (a 421
                // miss is not).
                None => usize::from(matches!(
                    answer.status(),
                    StatusCode::PAYLOAD_TOO_LARGE | StatusCode::REQUEST_TIMEOUT
                )),
            };
            let spent = clients::Spent {
                calls: received.calls,
                errors,
                bytes: received.bytes as u64 + answer_bytes,
                new_connection,
            };
            self.charge(client, spent, prepaid);
        }
        answer
    }

    /// Reads a request body of at most `limit` bytes, refusing it at the
    /// first byte that makes it a batch too large or nesting too deep
    /// ([`prescan`]); `received` counts what was read, refused or not.
    async fn read_body(
        &self,
        mut body: Incoming,
        limit: usize,
        received: &mut Received,
    ) -> Result<Bytes, BodyError> {
        let mut prescan = prescan::Prescan::new(self.ctx.config.max_batch);
        let mut frames: Vec<Bytes> = Vec::new();
        while let Some(frame) = body.frame().await {
            let Ok(data) = frame.map_err(|_| BodyError::Broken)?.into_data() else {
                continue; // trailers
            };
            received.bytes += data.len();
            if received.bytes > limit {
                return Err(BodyError::TooLarge);
            }
            let scanned = prescan.feed(&data);
            received.calls = prescan.elements();
            scanned.map_err(BodyError::Refused)?;
            frames.push(data);
        }
        // One frame, the usual case, is kept as it came.
        Ok(match frames.len() {
            1 => frames.pop().expect("one frame"),
            _ => frames.concat().into(),
        })
    }

    fn too_large(&self) -> Response<Chunks> {
        self.metrics.too_large.fetch_add(1, Ordering::Relaxed);
        let message = format!(
            "request body larger than {} bytes",
            self.ctx.config.max_body_bytes
        );
        json_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            error_element(ErrorCode::InvalidRequest, &message),
        )
    }

    /// Books what `client` made neve spend under `--client-rate`, less
    /// the `prepaid` units booked when it was admitted; returns how long
    /// until it is out of debt, if it is in debt.
    pub(super) fn charge(
        &self,
        client: IpAddr,
        spent: clients::Spent,
        prepaid: f64,
    ) -> Option<Duration> {
        let clients = self.clients.as_ref()?;
        let now = Instant::now();
        clients.charge(client, (spent.units() - prepaid).max(0.0), now);
        clients.admit(client, now).err()
    }
}
