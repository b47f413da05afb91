//! The answer to one call: what a handler replies ([`Reply`]), why it
//! stopped short of one ([`NoReply`]), how the call ended for the status and
//! the metrics ([`Outcome`]), and the one place a reply becomes its
//! envelope on the wire ([`envelope`]). The 421 decision is a handler's
//! `Reply::Miss`, made where its lookup fails; a miss becomes a status
//! above this, where the body is answered. Nothing here looks anything up.

use bytes::{Bytes, BytesMut};
use neve_store::{Block, Cold, Unread};

use crate::errors::{self, ErrorCode};
use crate::params::ParamError;

/// How a call ended, for the HTTP status and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Answered from the store.
    Ok,
    /// Not answerable with authority: HTTP 421.
    Miss,
    /// A JSON-RPC error (bad request or parameters).
    Error,
}

/// The answer to one call, before the envelope.
#[derive(Clone)]
pub(crate) enum Reply {
    /// A result, as chunks of JSON.
    Result(Vec<Bytes>),
    /// Cannot answer with authority.
    Miss,
    /// A method neve does not serve: 421 with -32601.
    Unsupported,
    /// A JSON-RPC error.
    Error(ErrorCode, String),
    /// A JSON-RPC error worded by a Go node (its message escaped as Go
    /// escapes it), with `data` (JSON text; none when empty): a call's
    /// revert, or any call error on coreth's chain.
    ErrorData(ErrorCode, String, String),
    /// A call to execute with revm: answered again on the call threads,
    /// never on an async worker.
    Execute,
    /// Answering reads long (many blocks' headers): answered again on the
    /// call threads, charged for what it read.
    LongRead,
    /// A state read that needs nodes neve does not hold: fetch these, then
    /// read again (a miss if that cannot be done in time).
    Fetch(Vec<neve_state::FetchRequest>),
    /// Answering needs stored pages that are not in memory: answer again
    /// where waiting for the disk is allowed
    /// ([`Reads::from_disk`](super::context::Reads::from_disk)).
    Cold,
}

/// Why a handler stopped short of a reply.
pub(crate) enum NoReply {
    Param(ParamError),
    Cold,
    /// A stored part failed its check (counted and logged by the store).
    Damaged,
}

impl From<Unread> for NoReply {
    fn from(unread: Unread) -> Self {
        match unread {
            Unread::Cold => NoReply::Cold,
            Unread::Damaged => NoReply::Damaged,
        }
    }
}

impl From<ParamError> for NoReply {
    fn from(error: ParamError) -> Self {
        NoReply::Param(error)
    }
}

impl From<Cold> for NoReply {
    fn from(_: Cold) -> Self {
        NoReply::Cold
    }
}

impl Reply {
    pub(crate) fn json(text: impl Into<String>) -> Reply {
        Reply::Result(vec![Bytes::from(text.into())])
    }

    pub(crate) fn bytes(bytes: Bytes) -> Reply {
        Reply::Result(vec![bytes])
    }

    pub(crate) fn outcome(&self) -> Outcome {
        match self {
            Reply::Result(_) => Outcome::Ok,
            Reply::Miss
            | Reply::Unsupported
            | Reply::Fetch(_)
            | Reply::Cold
            | Reply::Execute
            | Reply::LongRead => Outcome::Miss,
            Reply::Error(..) | Reply::ErrorData(..) => Outcome::Error,
        }
    }
}

impl From<ParamError> for Reply {
    fn from(error: ParamError) -> Self {
        Reply::Error(ErrorCode::InvalidParams, error.0)
    }
}

pub(crate) fn hex_quantity(value: u64) -> String {
    format!("\"0x{value:x}\"")
}

/// A count of a stored block's parts, or a miss when it is not stored.
pub(crate) fn count(block: Option<Block>, f: impl Fn(&Block) -> u32) -> Reply {
    block.map_or(Reply::Miss, |b| Reply::json(hex_quantity(f(&b) as u64)))
}

const PREFIX: &[u8] = b"{\"jsonrpc\":\"2.0\",\"id\":";

/// The end of every "method not served" answer, made once.
static UNSUPPORTED: std::sync::LazyLock<Vec<u8>> = std::sync::LazyLock::new(|| {
    let message = "the method does not exist/is not available";
    format!(
        ",{}}}",
        errors::error_member(ErrorCode::MethodNotFound, message)
    )
    .into_bytes()
});

/// An error element with a null id (the request could not be read).
pub(crate) fn error_element(code: ErrorCode, message: &str) -> Vec<Bytes> {
    envelope(b"null", Reply::Error(code, message.into()))
}

/// The envelope around one reply.
pub(crate) fn envelope(id: &[u8], reply: Reply) -> Vec<Bytes> {
    let mut head = BytesMut::with_capacity(PREFIX.len() + id.len() + 12);
    head.extend_from_slice(PREFIX);
    head.extend_from_slice(id);
    match reply {
        Reply::Result(mut chunks) => {
            head.extend_from_slice(b",\"result\":");
            chunks.insert(0, head.freeze());
            chunks.push(Bytes::from_static(b"}"));
            chunks
        }
        // A fetch not done in time is a miss like any other (and a cold
        // read never gets here: it is answered on the I/O threads).
        Reply::Miss | Reply::Fetch(_) | Reply::Cold | Reply::Execute | Reply::LongRead => {
            head.extend_from_slice(b",\"result\":null}");
            vec![head.freeze()]
        }
        Reply::Unsupported => {
            head.extend_from_slice(&UNSUPPORTED);
            vec![head.freeze()]
        }
        Reply::Error(code, message) => {
            head.extend_from_slice(b",");
            head.extend_from_slice(errors::error_member(code, &message).as_bytes());
            head.extend_from_slice(b"}");
            vec![head.freeze()]
        }
        Reply::ErrorData(code, message, data) => {
            head.extend_from_slice(b",");
            let member = errors::error_member_with_data(code, &message, &data);
            head.extend_from_slice(member.as_bytes());
            head.extend_from_slice(b"}");
            vec![head.freeze()]
        }
    }
}
