//! A response body made of shared byte chunks: the envelope's few static
//! bytes and the store's `Bytes` go to the socket as they are, with an exact
//! length so hyper writes `content-length`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use neve_store::Reader;

/// The body of every response neve writes.
pub struct Chunks(Inner);

enum Inner {
    /// Known chunks, known length.
    Fixed { chunks: VecDeque<Bytes>, len: u64 },
    /// NDJSON export of stored blocks `next..=to`, produced as it is sent.
    Blocks {
        reader: Reader,
        next: u64,
        to: u64,
        pending: VecDeque<Bytes>,
    },
}

impl Chunks {
    /// A body of these chunks.
    pub fn new(chunks: Vec<Bytes>) -> Self {
        let len = chunks.iter().map(|c| c.len() as u64).sum();
        Chunks(Inner::Fixed {
            chunks: chunks.into(),
            len,
        })
    }

    /// An empty body.
    pub fn empty() -> Self {
        Chunks::new(Vec::new())
    }

    /// The NDJSON export of stored blocks `from..=to`.
    pub(crate) fn blocks(reader: Reader, from: u64, to: u64) -> Self {
        Chunks(Inner::Blocks {
            reader,
            next: from,
            to,
            pending: VecDeque::new(),
        })
    }
}

/// `"block":…,"receipts":…` and, when stored, `"rawHeader"`, `"rawBlock"`,
/// `"rawReceipts"`: a whole record as JSON members, for the NDJSON export and
/// the `newBlocks` subscription that mirrors read.
pub(crate) fn record_fields(block: &neve_store::Block) -> Vec<Bytes> {
    let mut parts = vec![
        Bytes::from_static(b"\"block\":"),
        block.full(),
        Bytes::from_static(b",\"receipts\":"),
        block.receipts(),
    ];
    for (name, value) in [
        (&b",\"rawHeader\":"[..], block.raw_header()),
        (&b",\"rawBlock\":"[..], block.raw_block()),
        (&b",\"rawReceipts\":"[..], block.raw_receipts()),
    ] {
        if !value.is_empty() {
            parts.push(Bytes::from_static(name));
            parts.push(value);
        }
    }
    parts
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.get_mut().0 {
            Inner::Fixed { chunks, len } => Poll::Ready(chunks.pop_front().map(|chunk| {
                *len -= chunk.len() as u64;
                Ok(Frame::data(chunk))
            })),
            Inner::Blocks {
                reader,
                next,
                to,
                pending,
            } => {
                if pending.is_empty() && *next <= *to {
                    // A pruned or damaged height ends the export early; the
                    // client sees where it stopped from the last line.
                    if let Some(block) = reader.block(*next) {
                        pending.push_back(Bytes::from(format!("{{\"number\":\"0x{:x}\",", *next)));
                        pending.extend(record_fields(&block));
                        pending.push_back(Bytes::from_static(b"}\n"));
                        *next += 1;
                    } else {
                        *next = *to + 1;
                    }
                }
                Poll::Ready(pending.pop_front().map(|chunk| Ok(Frame::data(chunk))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Fixed { chunks, .. } => chunks.is_empty(),
            Inner::Blocks {
                next, to, pending, ..
            } => pending.is_empty() && next > to,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Fixed { len, .. } => SizeHint::with_exact(*len),
            Inner::Blocks { .. } => SizeHint::default(),
        }
    }
}
