//! Work a request waits on, off the async workers: log scans on the scan
//! threads, reads of stored pages not in memory on the I/O threads. Each
//! pool's queue is bounded and counted; past its bound a call is refused
//! at once, and a panic there is an internal error, not a lost worker.
//! What runs there, and what it answers, is the batch's (`batch.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::errors::ErrorCode;
use crate::metrics::Metrics;
use crate::rpc::Reply;

use super::Server;

/// Threads that read stored pages not in memory for requests. Each mostly
/// waits for the disk, so there are more than cores: the device's queue,
/// not the CPU, bounds them.
pub(crate) const IO_THREADS: usize = 16;

/// Requests' cold reads waiting for or running on the I/O threads; past
/// this, a cold read is a miss (421) at once, counted, so a flood of them
/// queues nowhere unbounded.
pub(crate) const MAX_QUEUED_COLD_READS: u64 = 256;

/// Bytes of answers read from the disk (into memory of their own, not the
/// page cache) that may be held at once, from the read until the answer
/// is written out: 32 MiB, two dozen full blocks of ~1,400 transactions
/// (16 connections reading full blocks hold about half of it). Past it a
/// cold read is a miss (421) at once, counted like a full queue: clients
/// that read slowly cannot make cold answers pile up in the heap, and
/// neve's anonymous memory stays within 64 MiB plus the state budget
/// while serving a store larger than memory (the guard's cap; 64 MiB here
/// let a burst of cold reads take neve to 119 MiB). Default is 32 MiB.
pub(crate) const MAX_COLD_ANSWER_BYTES: u64 = 32 << 20;

/// A cold answer's bytes, counted in [`MAX_COLD_ANSWER_BYTES`] until they
/// are dropped (written out, or their client gone).
struct ColdBytes {
    bytes: Bytes,
    held: Arc<AtomicU64>,
}

impl AsRef<[u8]> for ColdBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for ColdBytes {
    fn drop(&mut self) {
        self.held
            .fetch_sub(self.bytes.len() as u64, Ordering::Relaxed);
    }
}

/// `reply` with its chunks counted in `held` until they are dropped.
pub(super) fn count_cold(reply: Reply, held: &Arc<AtomicU64>) -> Reply {
    let Reply::Result(chunks) = reply else {
        return reply;
    };
    Reply::Result(
        chunks
            .into_iter()
            .map(|bytes| {
                held.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                Bytes::from_owner(ColdBytes {
                    bytes,
                    held: held.clone(),
                })
            })
            .collect(),
    )
}

pub(super) fn io_pool() -> neve_pool::Pool {
    neve_pool::Pool::serving("neve-io", IO_THREADS)
}

/// Long log scans run on their own threads at a lower priority than the
/// workers that answer (and on the background CPUs when they are set), so
/// a flood of them takes only the CPU serving leaves; at most half the
/// background cores (at least one) scan at once.
pub(super) fn scan_pool() -> neve_pool::Pool {
    let cores = neve_pool::background_threads();
    neve_pool::Pool::new("neve-scan", (cores / 2).max(1))
}

/// A pool for work a request waits on off the async workers, and the
/// gauge, counter and bound of its queue.
pub(super) struct OffWorkers<'p> {
    pub(super) pool: &'p neve_pool::Pool,
    pub(super) queued: fn(&Metrics) -> &AtomicU64,
    pub(super) refused: fn(&Metrics) -> &AtomicU64,
    /// Counts the calls let in, if anything does.
    pub(super) admitted: Option<fn(&Metrics) -> &AtomicU64>,
    pub(super) max_queued: u64,
    /// What the work does, for the message of a panic.
    pub(super) what: &'static str,
}

impl Server {
    /// Runs `work` (the replies to `count` calls) on `queue`'s pool. It is
    /// counted as queued from here until it ends on its thread, so a client
    /// that leaves does not free a place its work still takes; past the
    /// queue's bound every call gets `refused()` at once, counted (and the
    /// calls let in are counted in `admitted`). A panic
    /// answers each call with an internal error.
    pub(super) async fn off_workers(
        &self,
        queue: OffWorkers<'_>,
        count: usize,
        refused: impl Fn() -> Reply,
        work: impl FnOnce() -> Vec<Reply> + Send + 'static,
    ) -> Vec<Reply> {
        let queued = (queue.queued)(&self.metrics);
        if queued.fetch_add(1, Ordering::Relaxed) >= queue.max_queued {
            queued.fetch_sub(1, Ordering::Relaxed);
            (queue.refused)(&self.metrics).fetch_add(count as u64, Ordering::Relaxed);
            return (0..count).map(|_| refused()).collect();
        }
        if let Some(admitted) = queue.admitted {
            admitted(&self.metrics).fetch_add(count as u64, Ordering::Relaxed);
        }
        let metrics = self.metrics.clone();
        let gauge = queue.queued;
        let done = queue
            .pool
            .run(move || {
                let done = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
                gauge(&metrics).fetch_sub(1, Ordering::Relaxed);
                done
            })
            .await;
        done.unwrap_or_else(|_| {
            let message = format!("internal error while {}", queue.what);
            (0..count)
                .map(|_| Reply::Error(ErrorCode::Internal, message.clone()))
                .collect()
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use bytes::Bytes;
    use http_body_util::BodyExt;

    use super::{IO_THREADS, MAX_COLD_ANSWER_BYTES};
    use crate::methods::logs;
    use crate::server::tests::{FixedChain, answer, paged_out, runtime, server, server_configured};

    #[test]
    fn log_scans_past_the_queue_bound_are_refused_at_once_and_change_nothing() {
        let (server, _dir) = server_configured(Arc::new(FixedChain), |config| {
            config.logs_max_range = 10;
            config.logs_max_results = 10_000;
        });
        let runtime = runtime();
        // Three 10-block queries use the request's inline blocks; the fourth
        // goes to the scan threads.
        let query = r#"{"jsonrpc":"2.0","id":1,"method":"eth_getLogs","params":[{"fromBlock":"0x0","toBlock":"0x9"}]}"#;
        let batch = format!("[{}]", [query; 4].join(","));
        let parse = |body: &str| serde_json::from_str::<Vec<serde_json::Value>>(body).unwrap();
        let queued = &server.metrics.scans_queued;

        queued.store(logs::MAX_QUEUED_SCANS, Ordering::Relaxed);
        let (status, body) = answer(&server, &runtime, &batch);
        let busy = parse(&body);
        assert_eq!(status, 200);
        assert!(busy[..3].iter().all(|a| a["result"].is_array()), "{body}");
        assert_eq!(busy[3]["error"]["code"], -32005, "{body}");
        assert!(
            busy[3]["error"]["message"]
                .as_str()
                .unwrap()
                .contains("log scans queued")
        );
        assert_eq!(queued.load(Ordering::Relaxed), logs::MAX_QUEUED_SCANS);
        assert_eq!(server.metrics.scans_refused.load(Ordering::Relaxed), 1);

        queued.store(0, Ordering::Relaxed);
        let (_, body) = answer(&server, &runtime, &batch);
        let answered = parse(&body);
        assert_eq!(answered[3]["result"], answered[0]["result"], "{body}");
        assert!(!answered[3]["result"].as_array().unwrap().is_empty());
        assert_eq!(
            queued.load(Ordering::Relaxed),
            0,
            "the scan's place is freed"
        );
    }

    /// Polls `future` once.
    async fn poll_once<F: std::future::Future>(
        mut future: std::pin::Pin<&mut F>,
    ) -> std::task::Poll<F::Output> {
        std::future::poll_fn(move |cx| std::task::Poll::Ready(future.as_mut().poll(cx))).await
    }

    /// Issue 23: a call whose records are not in memory is answered on the I/O
    /// threads, never on an async worker, and a call that needs no disk is
    /// answered while it waits there.
    #[test]
    fn cold_reads_go_to_the_io_threads_and_others_are_answered_meanwhile() {
        let (server, _dir) = server();
        let runtime = runtime();
        let expected = server.ctx.reader.block(3).unwrap().full().unwrap();
        if !neve_store::testing::page_out(&server.ctx.reader) {
            eprintln!("MADV_PAGEOUT unsupported here: nothing to show");
            return;
        }
        if !paged_out(&server) {
            eprintln!("the kernel kept some of the store in memory: nothing to show");
            return;
        }
        // Every I/O thread held until the gate opens: cold reads stay in flight.
        let gate = Arc::new(std::sync::RwLock::new(()));
        let closed = gate.write().unwrap();
        runtime.block_on(async {
            let holds = futures_util::future::join_all((0..IO_THREADS).map(|_| {
                let gate = gate.clone();
                server.io.run(move || drop(gate.read()))
            }));
            tokio::pin!(holds);
            assert!(poll_once(holds.as_mut()).await.is_pending());
            let body = Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x3",true]}"#,
            );
            let cold = server.respond(&body);
            tokio::pin!(cold);
            assert!(
                poll_once(cold.as_mut()).await.is_pending(),
                "waits for an I/O thread"
            );
            assert_eq!(server.metrics.cold_reads.load(Ordering::Relaxed), 1);

            let chain_id = Bytes::from_static(br#"{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}"#);
            let answer = server.respond(&chain_id).await;
            assert_eq!(answer.status(), 200, "answered while the cold read waits");

            drop(closed);
            let answer = cold.await;
            assert_eq!(answer.status(), 200);
            let bytes = answer.into_body().collect().await.unwrap().to_bytes();
            let text = String::from_utf8_lossy(&bytes).into_owned();
            assert!(
                text.contains(std::str::from_utf8(&expected).unwrap()),
                "{text}"
            );
            holds.await;
        });
        assert_eq!(server.metrics.cold_reads_queued.load(Ordering::Relaxed), 0);
        // The answer read from the disk was counted until it was written out.
        assert_eq!(
            server.metrics.cold_answer_bytes.load(Ordering::Relaxed),
            0,
            "written and dropped"
        );
    }

    /// Issue 31: cold answers held in the heap have a bound in bytes
    /// ([`MAX_COLD_ANSWER_BYTES`]): past it a cold read is a miss at
    /// once, counted, while reads that need no disk are answered.
    #[test]
    fn cold_answers_past_their_byte_bound_are_misses_at_once() {
        let (server, _dir) = server();
        let runtime = runtime();
        if !neve_store::testing::page_out(&server.ctx.reader) {
            eprintln!("MADV_PAGEOUT unsupported here: nothing to show");
            return;
        }
        if !paged_out(&server) {
            eprintln!("the kernel kept some of the store in memory: nothing to show");
            return;
        }
        server
            .metrics
            .cold_answer_bytes
            .store(MAX_COLD_ANSWER_BYTES + 1, Ordering::Relaxed);
        let (status, _) = answer(
            &server,
            &runtime,
            r#"{"jsonrpc":"2.0","id":1,"method":"eth_getBlockByNumber","params":["0x3",true]}"#,
        );
        assert_eq!(status, 421);
        assert_eq!(server.metrics.cold_reads_refused.load(Ordering::Relaxed), 1);
        let (status, _) = answer(
            &server,
            &runtime,
            r#"{"jsonrpc":"2.0","id":2,"method":"eth_chainId"}"#,
        );
        assert_eq!(status, 200);
    }
}
