//! A connection whose peer stops reading is closed. hyper bounds the wait
//! for a request's headers but not for the peer to take an answer: a
//! client that asks for a large batch, a wide log query or `/blocks` and
//! never reads would hold its task and its `--max-connections` slot for as
//! long as it keeps the socket open. Every connection's socket is wrapped
//! so that a write making no progress for the idle timeout fails, and
//! hyper closes the connection.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A stream whose writes fail once they have waited `limit` without
/// progress.
pub(crate) struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Armed when a write first waits, disarmed by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> WriteDeadline<S> {
    pub(crate) fn new(inner: S, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// After the inner stream answered `poll`: progress disarms the
    /// deadline; waiting arms it, and past it the wait is an error.
    fn watch<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let limit = self.limit;
        let deadline = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer read nothing for {} s", limit.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteDeadline<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    const LIMIT: Duration = Duration::from_millis(300);

    #[tokio::test]
    async fn a_write_the_peer_never_takes_fails_after_the_limit() {
        let (ours, _theirs) = tokio::io::duplex(1024);
        let mut stream = WriteDeadline::new(ours, LIMIT);
        let started = std::time::Instant::now();
        // Fills the pipe, then waits for a reader that never reads.
        let error = stream.write_all(&[7u8; 4096]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= LIMIT);
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_is_never_cut_off() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut stream = WriteDeadline::new(ours, LIMIT);
        let reader = tokio::spawn(async move {
            let mut total = 0;
            let mut buf = [0u8; 512];
            while total < 8 * 1024 {
                // Each read a third of the limit after the last.
                tokio::time::sleep(LIMIT / 3).await;
                total += theirs.read(&mut buf).await.unwrap();
            }
            total
        });
        // Sixteen reads, five limits' worth of time in all.
        stream.write_all(&[1u8; 8 * 1024]).await.unwrap();
        drop(stream);
        assert_eq!(reader.await.unwrap(), 8 * 1024);
    }
}
