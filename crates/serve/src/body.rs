//! A response body made of shared byte chunks: the envelope's few static
//! bytes and the store's `Bytes` go to the socket as they are, with an exact
//! length so hyper writes `content-length`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::fmt::Write;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use neve_store::Reader;

/// The body of every response neve writes.
pub struct Chunks(Inner);

enum Inner {
    /// Known chunks, known length.
    Fixed { chunks: VecDeque<Bytes>, len: u64 },
    /// NDJSON export of stored blocks, produced as it is sent.
    Blocks(Box<Export>),
}

/// Charges a client for `bytes` of export sent; `Some(wait)` while the
/// client is in debt, which holds the next frame that long.
pub(crate) type Meter = Arc<dyn Fn(usize) -> Option<Duration> + Send + Sync>;

/// Longest hold between two frames of an export whose client is in debt
/// (then it is looked at again). Default is 1 s.
pub(crate) const EXPORT_HOLD: Duration = Duration::from_secs(1);

/// An export in flight: the next frame is read from the store (records'
/// CRCs checked, bytes copied) on the blocking pool, never on an async
/// worker, while the frame before it is being sent.
pub(crate) struct Export {
    reader: Reader,
    next: u64,
    to: u64,
    job: Option<tokio::task::JoinHandle<(Bytes, u64)>>,
    meter: Option<Meter>,
    hold: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The export's place among those allowed at once.
    _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Export {
    fn start_next(&mut self) {
        let (reader, next, to) = (self.reader.clone(), self.next, self.to);
        self.job = Some(tokio::task::spawn_blocking(move || {
            export_frame(&reader, next, to)
        }));
    }
}

/// The lines of `next..=to` that fit one frame, and the height after them
/// (past `to` when the export is over).
fn export_frame(reader: &Reader, mut next: u64, to: u64) -> (Bytes, u64) {
    let mut frame = BytesMut::new();
    while next <= to && frame.len() < EXPORT_FRAME_BYTES {
        // A pruned or damaged height ends the export early; the client
        // sees where it stopped from the last line.
        let Some(Ok(fields)) = reader.block(next).map(|block| record_fields(&block)) else {
            return (frame.freeze(), to + 1);
        };
        frame.reserve(fields.iter().map(Bytes::len).sum::<usize>() + 32);
        write!(frame, "{{\"number\":\"0x{next:x}\",").expect("BytesMut grows");
        for field in fields {
            frame.extend_from_slice(&field);
        }
        frame.extend_from_slice(b"}\n");
        next += 1;
    }
    (frame.freeze(), next)
}

/// The export's frames gather whole lines up to about this size: one
/// chunk-encoded write per few blocks instead of ten per block, which is
/// what a bootstrap of small blocks otherwise waits on.
const EXPORT_FRAME_BYTES: usize = 256 * 1024;

/// In a body of more chunks than hyper writes per `writev` (16, less the
/// head's), chunks shorter than this that follow each other (separators,
/// short logs, an envelope's pieces) are copied into one frame, up to
/// [`GATHER_BYTES`]: an answer of many small pieces would otherwise cost a
/// system call per 16. Longer chunks, and every chunk of a body that fits
/// one `writev`, go to the socket as they are.
const GATHER_BELOW: usize = 1024;
/// Bodies of at most this many chunks are never gathered.
const GATHER_ABOVE_CHUNKS: usize = 15;
/// Most bytes gathered into one frame.
const GATHER_BYTES: usize = 16 * 1024;

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

    /// The NDJSON export of stored blocks `from..=to`, charged to its
    /// client through `meter` and holding `slot` until it ends.
    pub(crate) fn blocks(
        reader: Reader,
        from: u64,
        to: u64,
        meter: Option<Meter>,
        slot: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Self {
        Chunks(Inner::Blocks(Box::new(Export {
            reader,
            next: from,
            to,
            job: None,
            meter,
            hold: None,
            _slot: slot,
        })))
    }
}

/// `"block":…,"receipts":…` and, when stored, `"rawHeader"`, `"rawBlock"`,
/// `"rawReceipts"`: a whole record as JSON members, for the NDJSON export and
/// the `newBlocks` subscription that mirrors read.
pub(crate) fn record_fields(block: &neve_store::Block) -> Result<Vec<Bytes>, neve_store::Unread> {
    let mut parts = vec![
        Bytes::from_static(b"\"block\":"),
        block.full()?,
        Bytes::from_static(b",\"receipts\":"),
        block.receipts()?,
    ];
    for (name, value) in [
        (&b",\"rawHeader\":"[..], block.raw_header()?),
        (&b",\"rawBlock\":"[..], block.raw_block()?),
        (&b",\"rawReceipts\":"[..], block.raw_receipts()?),
    ] {
        if !value.is_empty() {
            parts.push(Bytes::from_static(name));
            parts.push(value);
        }
    }
    Ok(parts)
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut self.get_mut().0 {
            Inner::Fixed { chunks, len } => {
                let Some(first) = chunks.pop_front() else {
                    return Poll::Ready(None);
                };
                let small = |c: &Bytes| c.len() < GATHER_BELOW;
                let gather = chunks.len() >= GATHER_ABOVE_CHUNKS
                    && small(&first)
                    && chunks.front().is_some_and(small);
                let frame = if gather {
                    let (mut count, mut bytes) = (0, first.len());
                    for next in chunks.iter() {
                        if !small(next) || bytes + next.len() > GATHER_BYTES {
                            break;
                        }
                        (count, bytes) = (count + 1, bytes + next.len());
                    }
                    let mut gathered = BytesMut::with_capacity(bytes);
                    gathered.extend_from_slice(&first);
                    for next in chunks.drain(..count) {
                        gathered.extend_from_slice(&next);
                    }
                    gathered.freeze()
                } else {
                    first
                };
                *len -= frame.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(frame))))
            }
            Inner::Blocks(export) => {
                if let Some(hold) = export.hold.as_mut() {
                    ready!(hold.as_mut().poll(cx));
                    export.hold = None;
                }
                if export.job.is_none() {
                    if export.next > export.to {
                        return Poll::Ready(None);
                    }
                    export.start_next();
                }
                let job = export.job.as_mut().expect("started above");
                let (frame, next) = ready!(Pin::new(job).poll(cx)).expect("an export frame");
                export.job = None;
                export.next = next;
                if frame.is_empty() {
                    return Poll::Ready(None);
                }
                let wait = export.meter.as_ref().and_then(|meter| meter(frame.len()));
                if let Some(wait) = wait.filter(|_| export.next <= export.to) {
                    export.hold = Some(Box::pin(tokio::time::sleep(wait.min(EXPORT_HOLD))));
                }
                // The next frame is read while this one is sent.
                if export.next <= export.to && export.hold.is_none() {
                    export.start_next();
                }
                Poll::Ready(Some(Ok(Frame::data(frame))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Fixed { chunks, .. } => chunks.is_empty(),
            Inner::Blocks(export) => export.job.is_none() && export.next > export.to,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Fixed { len, .. } => SizeHint::with_exact(*len),
            Inner::Blocks(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;
    use neve_store::testing::SyntheticBlock;
    use neve_store::{Durability, Identity, Store, StoreConfig};

    use super::*;

    #[tokio::test]
    async fn small_chunks_are_gathered_and_large_ones_sent_as_they_are() {
        let large = Bytes::from(vec![b'x'; GATHER_BELOW]);
        let mut chunks = vec![
            Bytes::from_static(b"{\"result\":"),
            Bytes::from_static(b"["),
        ];
        chunks.push(large.clone());
        chunks.extend((0..100).map(|_| Bytes::from(vec![b'y'; 300])));
        chunks.push(large.clone());
        chunks.push(Bytes::from_static(b"]}"));
        let expected: Vec<u8> = chunks.concat();
        let mut body = Chunks::new(chunks);
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
            assert_eq!(
                body.size_hint().exact(),
                Some((expected.len() - frames.concat().len()) as u64)
            );
        }
        assert_eq!(frames.concat(), expected);
        let lens: Vec<_> = frames.iter().map(Bytes::len).collect();
        // 100 × 300 bytes: two frames of 54 and one of 46.
        assert_eq!(lens, [11, 1024, 16_200, 13_800, 1024, 2]);
        assert_eq!(frames[1].as_ptr(), large.as_ptr(), "not copied");

        // A body hyper writes in one `writev` anyway is sent as it is.
        let few: Vec<_> = (0..GATHER_ABOVE_CHUNKS)
            .map(|_| Bytes::from_static(b"ab"))
            .collect();
        let mut body = Chunks::new(few);
        let mut frames = 0;
        while let Some(frame) = body.frame().await {
            assert_eq!(&frame.unwrap().into_data().unwrap()[..], b"ab");
            frames += 1;
        }
        assert_eq!(frames, GATHER_ABOVE_CHUNKS);
    }

    #[tokio::test]
    async fn the_export_sends_one_whole_line_per_block_gathered_into_few_frames() {
        let dir = tempfile::tempdir().unwrap();
        let identity = Identity {
            chain_id: 5,
            genesis_hash: [0; 32],
        };
        let config = StoreConfig {
            durability: Durability::OsBuffered,
            ..StoreConfig::default()
        };
        let mut store = Store::open(dir.path(), identity, config).unwrap();
        // ~40 KB blocks: the 200 of them need several frames.
        let blocks: Vec<_> = (0..200)
            .map(|h| SyntheticBlock::new(0, h, 40, 1000))
            .collect();
        store
            .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
            .unwrap();

        let mut body = Chunks::blocks(store.reader(), 3, 197, None, None);
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            frames.push(frame.unwrap().into_data().unwrap());
        }
        assert!(body.is_end_stream());
        assert!((2..50).contains(&frames.len()), "{} frames", frames.len());
        let mut next = 3;
        for frame in &frames {
            assert!(frame.ends_with(b"\n"), "frames end on a line's end");
            assert!(frame.len() < EXPORT_FRAME_BYTES + 64 * 1024);
            for line in frame.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                let value: serde_json::Value = serde_json::from_slice(line).unwrap();
                assert_eq!(value["number"], format!("0x{next:x}"));
                assert_eq!(value["block"]["number"], format!("0x{next:x}"));
                next += 1;
            }
        }
        assert_eq!(next, 198);
    }
}
