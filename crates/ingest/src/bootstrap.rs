//! A mirror far behind another neve closes the gap from its `/blocks`
//! stream: read, cut into lines, verify in batches over the cores, hand
//! them on in order to be appended. Also reads another neve's `/health`
//! (identity, head, tags).
//!
//! It knows nothing of the follower: [`crate::follow`] decides when to
//! bootstrap and hands in how to append (checking each block links to its
//! tip), as it does with the blocks [`crate::fetch`] brings one at a time.

use std::time::Duration;

use neve_upstream::{RpcClient, parse_quantity};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::decode::{RawParts, fixed_hex};
use crate::error::{IngestError, rpc};
use crate::fetch::prepare_verified;
use crate::prepare::PreparedBlock;

/// A mirror this far behind another neve bootstraps from its `/blocks`
/// stream instead of fetching block by block. Default is 128.
pub const BOOTSTRAP_MIN_BLOCKS: u64 = 128;

/// Lines of the `/blocks` stream verified and appended together (split
/// over the cores): whichever of these comes first. Batches start at the
/// first size, so appending starts early, and double up to the last, so a
/// chain of small blocks is not one fsync per handful of blocks.
const BOOTSTRAP_BATCH_LINES: usize = 2048;
const BOOTSTRAP_BATCH_BYTES: std::ops::RangeInclusive<usize> = (256 << 10)..=(4 << 20);

/// Longest `/blocks` line (one block with its receipts and raw RLP); a
/// source that sends more without a newline is cut off rather than let
/// grow the buffer. Ten times the largest mainnet block with its receipts.
/// Default is 32 MiB.
pub const BOOTSTRAP_MAX_LINE_BYTES: usize = 32 << 20;

/// Where bootstrapped blocks go, in order: the follower, which checks that
/// they link to its tip and appends them.
pub(crate) trait Append {
    /// Stores `blocks` after the tip; returns how many it stored.
    fn append(
        &mut self,
        blocks: Vec<PreparedBlock>,
    ) -> impl Future<Output = Result<u64, IngestError>> + Send;
}

/// Streams `from..=to` from another neve's `/blocks` export, verifies
/// every block (split over the cores) and hands them to `to_store` in
/// order, a batch at a time; returns the blocks it stored.
pub(crate) async fn bootstrap(
    client: &RpcClient,
    from: u64,
    to: u64,
    to_store: &mut impl Append,
) -> Result<u64, IngestError> {
    let (status, stream) = client
        .get_stream(&format!("/blocks?from={from}&to={to}"))
        .await
        .map_err(rpc("streaming /blocks"))?;
    if !status.is_success() {
        return Err(IngestError::Refused {
            height: from,
            reason: format!("/blocks answered {status}"),
        });
    }
    let started = std::time::Instant::now();
    // Reading (and verifying, which the reader starts per batch) runs
    // in its own task, so the stream keeps flowing while this one
    // appends; the channel's bound keeps a few batches in memory at most.
    let (batches, mut verified) = tokio::sync::mpsc::channel(2);
    // A source that stalls mid-stream is dropped once no bytes came for
    // as long as any exchange with it may take, and the step retried.
    let stall = client.timeout();
    let reader = tokio::spawn(read_batches(stream, from, batches, stall));
    let mut appended = 0;
    // Where the time went, for the closing log line: waiting for the
    // next verified batch, and writing to the store.
    let (mut verifying_wait, mut storing) = (Duration::ZERO, Duration::ZERO);
    let outcome: Result<(), IngestError> = async {
        loop {
            let waited = std::time::Instant::now();
            let Some(batch) = verified.recv().await else {
                return Ok(());
            };
            let blocks = batch.await.expect("verification does not panic")?;
            verifying_wait += waited.elapsed();
            let writing = std::time::Instant::now();
            appended += to_store.append(blocks).await?;
            storing += writing.elapsed();
        }
    }
    .await;
    if outcome.is_err() {
        // Stop reading, and drop the verifications still queued rather
        // than let them compete with the retry for the cores.
        reader.abort();
        verified.close();
        while let Ok(batch) = verified.try_recv() {
            batch.abort();
        }
    }
    outcome?;
    let (bytes_read, reading) = reader.await.expect("the reader does not panic")?;
    let seconds = started.elapsed().as_secs_f64().max(1e-6);
    tracing::info!(
        blocks = appended,
        // Numbers, not text: a JSON log line keeps them numbers.
        seconds = round3(seconds),
        blocks_per_second = (appended as f64 / seconds).round(),
        mb_per_second = round3(bytes_read as f64 / seconds / 1e6),
        reading_seconds = round3(reading.as_secs_f64()),
        verify_wait_seconds = round3(verifying_wait.as_secs_f64()),
        storing_seconds = round3(storing.as_secs_f64()),
        "bootstrapped from /blocks"
    );
    Ok(appended)
}

/// What a mirror reads from another neve's `/health`.
pub(crate) struct NeveHealth {
    pub(crate) chain_id: u64,
    pub(crate) genesis_hash: [u8; 32],
    pub(crate) max: Option<u64>,
    pub(crate) safe: Option<u64>,
    pub(crate) finalized: Option<u64>,
    /// Whether that neve follows its own upstream (`follower.running`):
    /// a neve that does not serves a tip that is not the chain's.
    pub(crate) following: bool,
}

pub(crate) async fn neve_health(client: &RpcClient) -> Result<NeveHealth, IngestError> {
    let (status, body) = client
        .get("/health")
        .await
        .map_err(rpc("reading /health"))?;
    read_health(status.as_u16(), &body)
}

/// Another neve's `/health` document, as received.
fn read_health(status: u16, body: &[u8]) -> Result<NeveHealth, IngestError> {
    #[derive(Deserialize)]
    struct Blocks {
        max_contiguous_height: Option<u64>,
        safe: Option<u64>,
        finalized: Option<u64>,
    }
    #[derive(Deserialize)]
    struct Follower {
        running: bool,
    }
    #[derive(Deserialize)]
    struct Health {
        chain_id: u64,
        genesis_hash: String,
        blocks: Blocks,
        #[serde(default)]
        follower: Option<Follower>,
    }
    let health: Health = serde_json::from_slice(body).map_err(|e| IngestError::Refused {
        height: 0,
        reason: format!("/health answered {status} with no neve health document: {e}"),
    })?;
    let genesis_hash =
        fixed_hex::<32>(&health.genesis_hash).ok_or_else(|| IngestError::Refused {
            height: 0,
            reason: "/health genesis_hash malformed".into(),
        })?;
    Ok(NeveHealth {
        chain_id: health.chain_id,
        genesis_hash,
        max: health.blocks.max_contiguous_height,
        safe: health.blocks.safe,
        finalized: health.blocks.finalized,
        following: health.follower.is_none_or(|f| f.running),
    })
}

/// A batch of `/blocks` lines being verified.
type Verifying = tokio::task::JoinHandle<Result<Vec<PreparedBlock>, IngestError>>;

/// Reads the `/blocks` stream, cuts it into lines, starts verifying each
/// batch and hands it on in order. Returns the bytes read and the time
/// spent waiting for the source.
async fn read_batches(
    mut stream: neve_upstream::BodyStream,
    from: u64,
    batches: tokio::sync::mpsc::Sender<Verifying>,
    stall: Duration,
) -> Result<(u64, Duration), IngestError> {
    let mut bytes_read = 0u64;
    let mut reading = Duration::ZERO;
    let mut cutter = LineCutter::default();
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut batch_bytes = 0;
    let mut batch_budget = *BOOTSTRAP_BATCH_BYTES.start();
    let mut lines_sent = 0;
    let mut ended = false;
    while !ended {
        let waited = std::time::Instant::now();
        let chunk = tokio::time::timeout(stall, stream.next_chunk())
            .await
            .map_err(|_| IngestError::Refused {
                height: from + lines_sent,
                reason: format!("/blocks stalled: no bytes for {stall:?}"),
            })?
            .map_err(rpc("reading /blocks"))?;
        reading += waited.elapsed();
        match chunk {
            Some(chunk) => {
                bytes_read += chunk.len() as u64;
                batch_bytes += cutter.cut(&chunk, &mut lines);
                if cutter.pending_len() > BOOTSTRAP_MAX_LINE_BYTES {
                    return Err(IngestError::Refused {
                        height: from + lines_sent + lines.len() as u64,
                        reason: format!(
                            "/blocks line longer than {BOOTSTRAP_MAX_LINE_BYTES} bytes"
                        ),
                    });
                }
            }
            None => ended = true,
        }
        let full = lines.len() >= BOOTSTRAP_BATCH_LINES || batch_bytes >= batch_budget;
        if full || (ended && !lines.is_empty()) {
            batch_bytes = 0;
            batch_budget = (batch_budget * 2).min(*BOOTSTRAP_BATCH_BYTES.end());
            lines_sent += lines.len() as u64;
            let batch = tokio::spawn(verify_lines(std::mem::take(&mut lines)));
            if batches.send(batch).await.is_err() {
                break; // the appender stopped on an error of its own
            }
        }
    }
    if ended && cutter.has_partial_line() {
        return Err(IngestError::Refused {
            height: from + lines_sent,
            reason: "/blocks ended in the middle of a line".into(),
        });
    }
    Ok((bytes_read, reading))
}

/// Cuts a byte stream into newline-terminated lines.
#[derive(Default)]
struct LineCutter {
    pending: Vec<u8>,
    /// Bytes of `pending` known to hold no newline: each byte is scanned
    /// once, however many chunks a ~200 KB line arrives in.
    scanned: usize,
}

impl LineCutter {
    /// Appends `chunk`, moves every whole line (newline included) to
    /// `lines`, and returns their total length. Each line is copied out at
    /// its exact size and the buffer drops them in one move: a chunk of
    /// many short lines costs one pass, not a copy of the rest per line.
    fn cut(&mut self, chunk: &[u8], lines: &mut Vec<Vec<u8>>) -> usize {
        self.pending.extend_from_slice(chunk);
        let mut start = 0;
        for offset in memchr::memchr_iter(b'\n', &self.pending[self.scanned..]) {
            let end = self.scanned + offset;
            lines.push(self.pending[start..=end].to_vec());
            start = end + 1;
        }
        self.pending.drain(..start);
        self.scanned = self.pending.len();
        start
    }

    /// Bytes held without their newline yet.
    fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Whether bytes without their newline are left.
    fn has_partial_line(&self) -> bool {
        !self.pending.is_empty()
    }
}

/// Parses, prepares and verifies one `/blocks` line.
fn verify_line(line: &[u8]) -> Result<PreparedBlock, IngestError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Line<'a> {
        #[serde(borrow)]
        number: &'a str,
        #[serde(borrow)]
        block: &'a RawValue,
        #[serde(borrow)]
        receipts: &'a RawValue,
        #[serde(borrow, default)]
        raw_header: Option<&'a RawValue>,
        #[serde(borrow, default)]
        raw_block: Option<&'a RawValue>,
        #[serde(borrow, default)]
        raw_receipts: Option<&'a RawValue>,
    }
    let refused = |reason: String| IngestError::Refused { height: 0, reason };
    let line: Line<'_> =
        serde_json::from_slice(line).map_err(|e| refused(format!("/blocks line: {e}")))?;
    let height =
        parse_quantity(line.number).ok_or_else(|| refused("/blocks line number".into()))?;
    let bytes = |raw: Option<&RawValue>| raw.map_or(Vec::new(), |r| r.get().as_bytes().to_vec());
    let raw = RawParts {
        header: bytes(line.raw_header),
        block: bytes(line.raw_block),
        receipts: bytes(line.raw_receipts),
    };
    prepare_verified(height, line.block.get(), line.receipts.get(), raw)
}

/// Prepares and verifies `/blocks` lines on ingest's threads, two halves
/// at once, and returns them in order.
async fn verify_lines(lines: Vec<Vec<u8>>) -> Result<Vec<PreparedBlock>, IngestError> {
    let middle = lines.len() / 2;
    let mut first = lines;
    let second = first.split_off(middle);
    let run = |half: Vec<Vec<u8>>| {
        crate::cpu::run(move || {
            half.iter()
                .map(|l| verify_line(l))
                .collect::<Result<Vec<_>, _>>()
        })
    };
    let (a, b) = tokio::join!(run(first), run(second));
    let mut blocks = a?;
    blocks.extend(b?);
    Ok(blocks)
}

/// `x` to three decimals, for log fields.
fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_whole_across_and_within_chunks() {
        let mut cutter = LineCutter::default();
        let mut lines = Vec::new();
        assert_eq!(cutter.cut(b"ab", &mut lines), 0);
        assert_eq!(cutter.cut(b"c\nd\ne", &mut lines), 6);
        assert_eq!(lines, [b"abc\n".to_vec(), b"d\n".to_vec()]);
        assert!(cutter.has_partial_line());
        // Many short lines in one chunk, then the held-over one completed.
        let many: Vec<u8> = b"x\n".repeat(1000);
        assert_eq!(
            cutter.cut(&[b"f\n".as_slice(), &many].concat(), &mut lines),
            2003
        );
        assert_eq!(lines.len(), 1003);
        assert_eq!(lines[2], b"ef\n");
        assert!(lines[3..].iter().all(|l| l == b"x\n"));
        assert!(!cutter.has_partial_line());
    }

    /// A `/blocks` line as another neve writes it, from a conformance
    /// fixture block with its receipts and raw data.
    fn fixture_line() -> Vec<u8> {
        let result = neve_devnet::conformance::fixture_result;
        let block = result("eth_getBlockByNumber/get-latest.io");
        let number: serde_json::Value = serde_json::from_str(&block).unwrap();
        format!(
            "{{\"number\":{},\"block\":{block},\"receipts\":{}}}\n",
            number["number"],
            result("eth_getBlockReceipts/get-block-receipts-latest.io"),
        )
        .into_bytes()
    }

    /// Fuzz target: the `/blocks` stream reader. Bytes arrive in chunks of
    /// any size, lines are cut, and each is parsed, prepared and verified:
    /// garbage is refused, never a panic or a hang.
    #[test]
    fn fuzz_the_blocks_stream_reader() {
        let line = fixture_line();
        assert!(verify_line(&line).is_ok(), "the seed line verifies");
        let seeds = vec![line.clone(), [line.clone(), line.clone()].concat()];
        let dictionary: [&[u8]; 10] = [
            b"\n",
            b"{",
            b"}",
            b"\"",
            b"0x",
            b"\"transactions\":[",
            b"\"rawBlock\":",
            b"\"number\":",
            b"null",
            b"\xff",
        ];
        let report =
            neve_devnet::fuzz::run("/blocks reader", &seeds, &dictionary, 256 << 10, |input| {
                let mut cutter = LineCutter::default();
                let mut lines = Vec::new();
                // Chunk sizes from the input itself, so cuts land anywhere.
                let step = 1 + input.first().copied().unwrap_or(7) as usize * 13;
                for chunk in input.chunks(step) {
                    cutter.cut(chunk, &mut lines);
                }
                for line in &lines {
                    let _ = verify_line(line);
                }
            });
        eprintln!("/blocks reader: {report}");
    }

    /// Fuzz target: a mirror source's `/health`: any body is read as the
    /// chain's identity and heights or refused, never a panic.
    #[test]
    fn fuzz_a_sources_health_document() {
        let seed = br#"{"status":"ok","chain_id":1337,"genesis_hash":"0x3c0d00000000000000000000000000000000000000000000000000000000a1b2","version":"0.1.0","uptime_seconds":3,"blocks":{"min_height":0,"max_contiguous_height":41,"high_water":41,"safe":33,"finalized":9,"behind":0},"upstream":{"url":"http://127.0.0.1:8545","connected":true}}"#;
        let health = read_health(200, seed).unwrap();
        assert_eq!(
            (health.chain_id, health.max, health.safe),
            (1337, Some(41), Some(33))
        );
        assert!(health.following, "no follower part: an older neve's");
        // Issue 42.4: a source that does not follow its upstream is read
        // so, and its tip not taken for the chain's.
        let stale = String::from_utf8_lossy(seed).replace(
            "\"upstream\"",
            "\"follower\":{\"running\":false,\"restarts\":0},\"upstream\"",
        );
        assert!(!read_health(200, stale.as_bytes()).unwrap().following);
        let dictionary: [&[u8]; 6] = [
            b"null",
            b"18446744073709551616",
            b"-1",
            b"\"0x\"",
            b"{}",
            b"1e400",
        ];
        let report = neve_devnet::fuzz::run(
            "/health",
            &[seed.to_vec()],
            &dictionary,
            16 << 10,
            |input| {
                let _ = read_health(200, input);
            },
        );
        eprintln!("/health: {report}");
    }
}
