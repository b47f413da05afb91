//! Connections that stall are closed, so they give back their
//! `--max-connections` slot.
//!
//! - A peer that stops reading: hyper bounds the wait for a request's
//!   headers but not for the peer to take an answer, so a client that asks
//!   for a large batch, a wide log query or `/blocks` and never reads would
//!   hold its task and its slot for as long as it keeps the socket open.
//!   Every connection's socket is wrapped ([`WriteDeadline`]) so that a
//!   write making no progress for the idle timeout fails, and hyper closes
//!   the connection.
//! - A peer that sends no whole request: idle between requests, or sending
//!   its headers a byte at a time. [`idle`] ends the connection once it has
//!   had no request in hand and written nothing for the idle timeout (to
//!   within a quarter more). It runs in a task of its own and wakes four
//!   times a timeout, in place of hyper's header-read timeout, which arms
//!   and drops a timer in the connection's task for every request (about
//!   4 % of neve's CPU per call answered from the memo).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// What a connection is doing, for [`idle`]: requests in hand, and
/// whether it finished one or wrote since [`idle`] last looked. Touched a
/// few times a request with plain atomic stores: no clock, no timer.
pub(crate) struct Activity {
    active: AtomicBool,
    in_hand: AtomicU32,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity {
            active: AtomicBool::new(false),
            in_hand: AtomicU32::new(0),
        })
    }

    fn touch(&self) {
        self.active.store(true, Ordering::Relaxed);
    }

    /// A request is in hand until the returned guard is dropped.
    pub(crate) fn request(self: &Arc<Self>) -> InHand {
        self.in_hand.fetch_add(1, Ordering::Relaxed);
        InHand(self.clone())
    }
}

/// A request being answered (see [`Activity::request`]).
pub(crate) struct InHand(Arc<Activity>);

impl Drop for InHand {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_hand.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Looks at a connection's [`Activity`] this many times per `limit`.
const LOOKS_PER_LIMIT: u32 = 4;

/// Returns once the connection has had no request in hand and written
/// nothing for `limit` (to within a quarter more): since it was accepted,
/// or since it last finished a request or wrote. It wakes four times a
/// `limit`, whatever the connection does in between.
pub(crate) async fn idle(activity: &Activity, limit: Duration) {
    let look = limit / LOOKS_PER_LIMIT;
    let mut quiet = 0;
    let mut next = tokio::time::Instant::now() + look;
    while quiet < LOOKS_PER_LIMIT {
        tokio::time::sleep_until(next).await;
        next += look;
        let busy = activity.in_hand.load(Ordering::Relaxed) > 0;
        if activity.active.swap(false, Ordering::Relaxed) || busy {
            quiet = 0;
        } else {
            quiet += 1;
        }
    }
}

/// A stream whose writes fail once they have waited `limit` without
/// progress; its progress is the connection's [`Activity`].
pub(crate) struct WriteDeadline<S> {
    inner: S,
    limit: Duration,
    /// Armed when a write first waits, disarmed by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
    activity: Arc<Activity>,
}

impl<S> WriteDeadline<S> {
    pub(crate) fn new(inner: S, limit: Duration, activity: Arc<Activity>) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
            activity,
        }
    }

    /// After the inner stream answered `poll`: progress disarms the
    /// deadline; waiting arms it, and past it the wait is an error. Only
    /// bytes written are activity (`wrote`): hyper flushes on every
    /// wake-up, so a peer sending its headers a byte at a time would make
    /// every ready flush look like progress and hold the connection for
    /// ever.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<T>>,
        wrote: impl FnOnce(&T) -> bool,
    ) -> Poll<io::Result<T>> {
        if let Poll::Ready(done) = &poll {
            self.stalled = None;
            if done.as_ref().is_ok_and(wrote) {
                self.activity.touch();
            }
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
        this.watch(cx, poll, |n| *n > 0)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, poll, |n| *n > 0)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, poll, |_| false)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.watch(cx, poll, |_| false)
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
        let mut stream = WriteDeadline::new(ours, LIMIT, Activity::new());
        let started = std::time::Instant::now();
        // Fills the pipe, then waits for a reader that never reads.
        let error = stream.write_all(&[7u8; 4096]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= LIMIT);
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_reading_is_never_cut_off() {
        let (ours, mut theirs) = tokio::io::duplex(1024);
        let mut stream = WriteDeadline::new(ours, LIMIT, Activity::new());
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

    /// Issue 42.1: hyper flushes on every wake-up, and a peer sending a
    /// header byte at a time wakes it every byte: flushes that write
    /// nothing are not activity, bytes written are.
    #[tokio::test]
    async fn flushes_are_not_activity_and_writes_are() {
        let (ours, _theirs) = tokio::io::duplex(1024);
        let activity = Activity::new();
        let mut stream = WriteDeadline::new(ours, LIMIT, activity.clone());
        stream.flush().await.unwrap();
        assert!(
            !activity.active.load(Ordering::Relaxed),
            "a flush is not activity"
        );
        stream.write_all(b"x").await.unwrap();
        assert!(activity.active.load(Ordering::Relaxed), "a write is");
    }

    #[tokio::test]
    async fn a_connection_with_no_request_ends_after_the_limit() {
        let activity = Activity::new();
        let started = std::time::Instant::now();
        idle(&activity, LIMIT).await;
        assert!(started.elapsed() >= LIMIT);
        assert!(started.elapsed() < LIMIT * 2);
    }

    #[tokio::test]
    async fn a_request_in_hand_or_writes_keep_a_connection_and_the_limit_counts_from_the_last() {
        let activity = Activity::new();
        let started = std::time::Instant::now();
        // A request answered for twice the limit, then writes a third of
        // the limit apart for another limit: the connection lives on, and
        // ends a limit (to within a quarter more) after the last write.
        let busy = activity.request();
        let watcher = {
            let activity = activity.clone();
            tokio::spawn(async move { idle(&activity, LIMIT).await })
        };
        tokio::time::sleep(LIMIT * 2).await;
        drop(busy);
        for _ in 0..3 {
            tokio::time::sleep(LIMIT / 3).await;
            activity.touch();
        }
        let last = std::time::Instant::now();
        assert!(!watcher.is_finished(), "ended while in use");
        watcher.await.unwrap();
        assert!(last.elapsed() >= LIMIT - LIMIT / LOOKS_PER_LIMIT);
        assert!(last.elapsed() < LIMIT * 2);
        assert!(started.elapsed() >= LIMIT * 3);
    }
}
