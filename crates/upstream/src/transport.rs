//! The HTTP exchange under every call: posting a body within the pacing
//! and the timeout, reading a capped answer, judging its status, and GETs
//! on the same host.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Body as _;
use hyper::{Method, Request, StatusCode, Uri, header};

use crate::client::RpcClient;
use crate::error::{RpcError, error_chain, snippet};
use crate::pacing::retry_after_of;
use crate::redacted::RedactedUrl;
use crate::tls;

/// How pacing lets a request go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Within the budget, after any refusal's pause ([`Pacing::admit_by`]).
    Paced,
    /// At once, past a pause ([`RpcClient::probe`]).
    Probe,
}

impl RpcClient {
    /// Posts a prepared body and returns the status and body as received.
    /// Non-2xx statuses other than those a JSON-RPC server uses for request
    /// errors (400, 421 and friends carry JSON-RPC bodies) are errors.
    pub async fn post(&self, body: Bytes) -> Result<(StatusCode, Bytes), RpcError> {
        self.post_unscrubbed(body, Admission::Paced)
            .await
            .map_err(|e| self.endpoint.scrub_error(e))
    }

    pub(crate) async fn post_unscrubbed(
        &self,
        body: Bytes,
        admission: Admission,
    ) -> Result<(StatusCode, Bytes), RpcError> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(self.endpoint.uri().clone())
            .header(header::CONTENT_TYPE, "application/json");
        for (name, value) in self.endpoint.headers() {
            request = request.header(name, value.clone());
        }
        let request = request.body(Full::new(body)).expect("request builds");
        let deadline = match admission {
            Admission::Paced => self.admitted().await?,
            Admission::Probe => {
                self.pacing.admit_probe();
                tokio::time::Instant::now() + self.timeout
            }
        };
        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| self.transport(&e))?;
            let status = response.status();
            let retry_after = retry_after_of(response.headers());
            let bytes = self.read_capped(response.into_body()).await?;
            match self.judge(status, retry_after) {
                Ok(()) => Ok((status, bytes)),
                Err(code) => Err(self.refusal(code, retry_after, &bytes)),
            }
        };
        tokio::time::timeout_at(deadline, exchange)
            .await
            .map_err(|_| self.timed_out())?
    }

    /// Waits for pacing to let a request go, within the request's timeout
    /// (the pause is inside the request's time: one that cannot start in
    /// time is a miss now, not a wait); the deadline the request then has.
    async fn admitted(&self) -> Result<tokio::time::Instant, RpcError> {
        let deadline = tokio::time::Instant::now() + self.timeout;
        self.pacing
            .admit_by(deadline)
            .await
            .map_err(|_| self.timed_out())?;
        Ok(deadline)
    }

    fn timed_out(&self) -> RpcError {
        RpcError::Timeout {
            url: self.endpoint.shown().clone(),
            timeout: self.timeout,
        }
    }

    /// [`RpcError::Http`] for a status [`RpcClient::judge`] refused.
    fn refusal(&self, status: u16, retry_after: Option<Duration>, body: &[u8]) -> RpcError {
        RpcError::Http {
            status,
            retry_after: retry_after.map(|d| d.as_secs_f64().ceil() as u64),
            url: self.endpoint.shown().clone(),
            snippet: self.endpoint.scrub(&snippet(body)),
        }
    }

    /// Whether an answer's status is one a JSON-RPC server answers with
    /// (2xx, and 400 or 421 with a JSON-RPC body), telling the pacing of
    /// refusals and answers. `Err` carries a status that is an error.
    fn judge(&self, status: StatusCode, retry_after: Option<Duration>) -> Result<(), u16> {
        let code = status.as_u16();
        if code == 429 || code == 503 {
            self.pacing.refused(retry_after);
            return Err(code);
        }
        if matches!(code, 401 | 403 | 407) || status.is_server_error() {
            return Err(code);
        }
        self.pacing.answered();
        Ok(())
    }

    /// `GET path` on the same host (for another neve's `/health` and
    /// `/blocks`), returning the status and a stream of body chunks. Only
    /// the response headers are bounded by the client's timeout; the stream
    /// is read at the caller's pace.
    pub async fn get_stream(
        &self,
        path_and_query: &str,
    ) -> Result<(StatusCode, BodyStream), RpcError> {
        let mut parts = self.endpoint.uri().clone().into_parts();
        parts.path_and_query = Some(path_and_query.parse().map_err(
            |e: hyper::http::uri::InvalidUri| RpcError::InvalidUrl {
                url: RedactedUrl::of(path_and_query),
                reason: e.to_string(),
            },
        )?);
        let uri = Uri::from_parts(parts).map_err(|e| RpcError::InvalidUrl {
            url: self.endpoint.shown().clone(),
            reason: e.to_string(),
        })?;
        let mut request = Request::builder().method(Method::GET).uri(uri);
        for (name, value) in self.endpoint.headers() {
            request = request.header(name, value.clone());
        }
        let request = request
            .body(Full::new(Bytes::new()))
            .expect("request builds");
        let deadline = self.admitted().await?;
        let response = tokio::time::timeout_at(deadline, self.http.request(request))
            .await
            .map_err(|_| self.timed_out())?
            .map_err(|e| self.transport(&e))?;
        let status = response.status();
        let retry_after = retry_after_of(response.headers());
        // A 5xx is the caller's to judge (another neve's /health answers
        // 503 with a body worth reading); a refused key or 429 is not.
        if let Err(code @ (401 | 403 | 407 | 429)) = self.judge(status, retry_after) {
            return Err(self.refusal(code, retry_after, b""));
        }
        Ok((
            status,
            BodyStream {
                body: response.into_body(),
                url: self.endpoint.shown().clone(),
            },
        ))
    }

    /// `GET path`, whole body (for small documents such as `/health`).
    pub async fn get(&self, path_and_query: &str) -> Result<(StatusCode, Bytes), RpcError> {
        let (status, stream) = self.get_stream(path_and_query).await?;
        let body = tokio::time::timeout(self.timeout, self.read_capped(stream.body))
            .await
            .map_err(|_| self.timed_out())??;
        Ok((status, body))
    }

    /// Reads a whole body, refusing one over the client's limit as soon as
    /// its `Content-Length` or its bytes so far pass it: an endless or huge
    /// answer costs at most the limit.
    async fn read_capped(&self, body: hyper::body::Incoming) -> Result<Bytes, RpcError> {
        let too_large = || RpcError::TooLarge {
            url: self.endpoint.shown().clone(),
            limit: self.max_response_bytes,
        };
        if body
            .size_hint()
            .exact()
            .is_some_and(|n| n > self.max_response_bytes as u64)
        {
            return Err(too_large());
        }
        match http_body_util::Limited::new(body, self.max_response_bytes)
            .collect()
            .await
        {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Err(error) => Err(self.transport(&*error)),
        }
    }

    fn transport(&self, e: &dyn std::error::Error) -> RpcError {
        let reason = self.endpoint.scrub(&error_chain(e));
        let reason = match tls::hint(&reason) {
            Some(hint) => format!("{reason}; {hint}"),
            None => reason,
        };
        RpcError::Transport {
            url: self.endpoint.shown().clone(),
            reason,
        }
    }
}

/// The body of a streamed GET, chunk by chunk.
pub struct BodyStream {
    body: hyper::body::Incoming,
    url: RedactedUrl,
}

impl BodyStream {
    /// The next chunk, or `None` at the end.
    pub async fn next_chunk(&mut self) -> Result<Option<Bytes>, RpcError> {
        loop {
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => {
                    return Err(RpcError::Transport {
                        url: self.url.clone(),
                        reason: error_chain(&e),
                    });
                }
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}
