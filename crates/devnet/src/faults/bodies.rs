//! The bodies a proxy answers with: whole, dripped, endless, stalling or
//! cut off, and a provider's over-quota answer.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Response, StatusCode};

use super::kinds::Fault;

/// What [`Fault::Drip`] sends at a time.
pub const DRIP_BYTES: usize = 4096;
/// How often [`Fault::Drip`] sends.
pub const DRIP_EVERY: Duration = Duration::from_millis(20);

/// An answer sent [`DRIP_BYTES`] at a time, [`DRIP_EVERY`] apart.
struct Drip {
    rest: Bytes,
    wait: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl hyper::body::Body for Drip {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        if self.rest.is_empty() {
            return std::task::Poll::Ready(None);
        }
        if let Some(wait) = self.wait.as_mut() {
            std::task::ready!(wait.as_mut().poll(cx));
        }
        self.wait = Some(Box::pin(tokio::time::sleep(DRIP_EVERY)));
        let take = self.rest.len().min(DRIP_BYTES);
        let piece = self.rest.split_to(take);
        std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(piece))))
    }
}

/// A proxy answer's body: whole, endless, stalling or cut off.
pub(crate) type ProxyBody = http_body_util::combinators::BoxBody<Bytes, std::io::Error>;

/// A provider's answer over its quota to `body`: a JSON-RPC error for
/// each call, with its id.
pub(crate) fn over_quota(body: &[u8]) -> String {
    let error = |id: &serde_json::Value| {
        serde_json::json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32005, "message": "daily request limit reached"}})
    };
    let null = serde_json::Value::Null;
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(calls)) => serde_json::Value::Array(
            calls
                .iter()
                .map(|call| error(call.get("id").unwrap_or(&null)))
                .collect(),
        )
        .to_string(),
        Ok(call) => error(call.get("id").unwrap_or(&null)).to_string(),
        Err(_) => error(&null).to_string(),
    }
}

pub(crate) fn answer(status: StatusCode, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut response = Response::new(
        Full::new(body.into())
            .map_err(|never: Infallible| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

/// A body that sends `prefix`, then `x`s for ever (`endless`), an error
/// that resets the connection (`reset`), or nothing for ever.
struct Unending {
    prefix: Option<Bytes>,
    endless: bool,
    reset: bool,
}

impl hyper::body::Body for Unending {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
        static XS: [u8; 64 << 10] = [b'x'; 64 << 10];
        if let Some(prefix) = self.prefix.take() {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(prefix))));
        }
        if self.reset {
            return std::task::Poll::Ready(Some(Err(std::io::Error::other("reset mid-body"))));
        }
        if self.endless {
            return std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(Bytes::from_static(
                &XS,
            )))));
        }
        // Never woken: the connection stays open with the body unfinished.
        std::task::Poll::Pending
    }
}

/// `fault` applied to a whole answer, if it is one that shapes the body as
/// it streams (the unending kinds, and [`Fault::Drip`]).
pub(crate) fn unending(
    fault: Fault,
    status: StatusCode,
    whole: &[u8],
) -> Option<Response<ProxyBody>> {
    if fault == Fault::Drip {
        let body = Drip {
            rest: Bytes::copy_from_slice(whole),
            wait: None,
        };
        let mut response = Response::new(body.boxed());
        *response.status_mut() = status;
        return Some(response);
    }
    let body = match fault {
        Fault::Endless => Unending {
            prefix: None,
            endless: true,
            reset: false,
        },
        Fault::Stall => Unending {
            prefix: Some(Bytes::copy_from_slice(&whole[..whole.len().min(4096)])),
            endless: false,
            reset: false,
        },
        Fault::Reset => Unending {
            prefix: Some(Bytes::copy_from_slice(&whole[..whole.len() / 2])),
            endless: false,
            reset: true,
        },
        _ => return None,
    };
    let mut response = Response::new(body.boxed());
    *response.status_mut() = status;
    Some(response)
}
