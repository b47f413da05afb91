//! Pins of the byte layouts: a moved field fails here.

use super::*;
use crate::integrity::verify_record;
use crate::meta::{MetaRead, decode_meta, encode_meta};

fn sample() -> (Vec<u8>, Vec<u8>) {
    (
        b"{\"txs\":[{\"a\":1},{\"b\":2}]}".to_vec(),
        b"[{\"r\":1,\"logs\":[{\"l\":0}]},{\"r\":2}]".to_vec(),
    )
}

fn block<'a>(full: &'a [u8], receipts: &'a [u8]) -> NewBlock<'a> {
    NewBlock {
        height: 7,
        hash: [1; 32],
        parent_hash: [2; 32],
        logs_bloom: [3; 256],
        full,
        hashes_only: b"{\"txs\":[\"0x1\",\"0x2\"]}",
        receipts,
        raw_header: b"",
        raw_block: b"",
        raw_receipts: b"",
        txs: vec![
            TxEntry {
                hash: [9; 32],
                full: Span::new(8, 7),
                receipt: Span::new(1, 24),
                raw: Span::EMPTY,
            },
            TxEntry {
                hash: [8; 32],
                full: Span::new(16, 7),
                receipt: Span::new(26, 7),
                raw: Span::EMPTY,
            },
        ],
        logs: vec![LogEntry {
            tx_index: 0,
            span: Span::new(16, 7),
            address: [5; 20],
            topics: vec![[6; 32], [7; 32]],
        }],
    }
}

#[test]
fn layout_is_pinned() {
    // Moving any of these breaks every store on disk: bump FORMAT_VERSION.
    assert_eq!(RECORD_HEADER_LEN, 24);
    assert_eq!(body::FIXED_LEN, body::SECTION_LENS + 4 * SECTIONS);
    assert_eq!(TX_ENTRY_LEN, 32 + 3 * 8);
    assert_eq!(LOG_ENTRY_LEN, 4 + 8 + 20 + 4 + 4 * 32);
    assert_eq!(RUN_ENTRY_LEN, 4 * 4 + 20 + 4 + 32);
    assert_eq!(
        [run::FIRST, run::COUNT, run::START, run::END, run::ADDRESS],
        [0, 4, 8, 12, 16]
    );
    assert_eq!((run::FEWEST_TOPICS, run::TOPIC0), (36, 40));
    assert_eq!(run::TOPIC0 + 32, RUN_ENTRY_LEN);
    assert_eq!((KIND_ROLLBACK, KIND_BLOCK), (2, 5));
    assert_eq!((CHUNK_LEN, CHUNK_CRC_LEN), (4096, 4));
    assert_eq!(FORMAT_VERSION, 4);
    assert_eq!(&RECORD_MAGIC.to_le_bytes(), b"NVRC");
}

#[test]
fn encoded_block_has_fields_at_their_offsets() {
    let (full, receipts) = sample();
    let b = block(&full, &receipts);
    let mut out = Vec::new();
    encode_block(&b, &mut out).unwrap();
    let h = read_header(&out).unwrap();
    assert_eq!((h.kind, h.height), (KIND_BLOCK, 7));
    assert_eq!(h.total_len(), out.len());
    assert!(verify_record(&out, &h));
    // One chunk: its CRC follows the header, the body follows it.
    assert_eq!((h.chunks(), h.body_offset()), (1, BODY_AT));
    let body = &out[BODY_AT..];
    assert_eq!(u32_at(&out, RECORD_HEADER_LEN), crc32c::crc32c(body));
    assert_eq!(hash_at(body, body::HASH), [1; 32]);
    assert_eq!(hash_at(body, body::PARENT_HASH), [2; 32]);
    assert_eq!(body[body::LOGS_BLOOM..body::LOGS_BLOOM + 256], [3; 256]);
    assert_eq!(u32_at(body, body::TX_COUNT), 2);
    assert_eq!(u32_at(body, body::LOG_COUNT), 1);
    assert_eq!(u32_at(body, body::SECTION_LENS), full.len() as u32);
    let tx1 = body::FIXED_LEN + TX_ENTRY_LEN;
    assert_eq!(hash_at(body, tx1), [8; 32]);
    assert_eq!((u32_at(body, tx1 + 32), u32_at(body, tx1 + 36)), (16, 7));
    let log = body::FIXED_LEN + 2 * TX_ENTRY_LEN;
    assert_eq!(body[log + 12..log + 32], [5; 20]);
    assert_eq!(body[log + 32], 2);
    // The log's span is past its comma in the log section, which ends
    // the body.
    assert_eq!((u32_at(body, log + 4), u32_at(body, log + 8)), (1, 7));
    let sections = log + LOG_ENTRY_LEN;
    assert_eq!(&body[sections..sections + full.len()], &full[..]);
    // The log section, then one run and the run count end the body.
    let runs = body.len() - RUN_COUNT_LEN - RUN_ENTRY_LEN;
    assert!(body[..runs].ends_with(b",{\"l\":0}"));
    let run = &body[runs..runs + RUN_ENTRY_LEN];
    assert_eq!(
        [run::FIRST, run::COUNT, run::START, run::END].map(|at| u32_at(run, at)),
        [0, 1, 0, 8]
    );
    assert_eq!(run[run::ADDRESS..run::ADDRESS + 20], [5; 20]);
    assert_eq!(run[run::FEWEST_TOPICS], 2);
    assert_eq!(hash_at(run, run::TOPIC0), [6; 32]);
    assert_eq!(u32_at(body, body.len() - RUN_COUNT_LEN), 1);
}

/// Where the body of a one-chunk record starts.
const BODY_AT: usize = RECORD_HEADER_LEN + CHUNK_CRC_LEN;

/// Seals a record whose body a test changed: its chunk CRCs and its
/// header CRC, as the writer would have.
fn reseal(record: &mut [u8]) {
    let h = read_header(record).unwrap();
    let (head, body) = record.split_at_mut(h.body_offset());
    for (chunk, entry) in body
        .chunks(CHUNK_LEN)
        .zip(head[RECORD_HEADER_LEN..].chunks_mut(CHUNK_CRC_LEN))
    {
        entry.copy_from_slice(&crc32c::crc32c(chunk).to_le_bytes());
    }
    seal_crc(record);
}

#[test]
fn a_blocks_logs_read_from_its_tables_and_log_section() {
    let (full, receipts) = sample();
    let mut b = block(&full, &receipts);
    // A second log in the same receipt, and one in the next.
    let receipts =
        b"[{\"r\":1,\"logs\":[{\"l\":0},{\"l\":1}]},{\"r\":2,\"logs\":[{\"l\":2}]}]".to_vec();
    b.receipts = &receipts;
    b.txs[0].receipt = Span::new(1, 32);
    b.txs[1].receipt = Span::new(34, 24);
    let log = |tx_index, offset| LogEntry {
        tx_index,
        span: Span::new(offset, 7),
        address: [5; 20],
        topics: vec![],
    };
    b.logs = vec![log(0, 16), log(0, 24), log(1, 49)];
    let mut record = Vec::new();
    encode_block(&b, &mut record).unwrap();
    let h = read_header(&record).unwrap();
    assert!(verify_record(&record, &h));
    let block = crate::block::Block::from_record(7, &record);
    let logs: Vec<_> = block.logs().unwrap().into_iter().map(|l| l.bytes).collect();
    assert_eq!(logs, [&b"{\"l\":0}"[..], b"{\"l\":1}", b"{\"l\":2}"]);
    let table = block.log_table().unwrap();
    let keys: Vec<_> = (0..table.len())
        .map(|i| table.key(i))
        .map(|k| (k.index, *k.address))
        .collect();
    assert_eq!(keys, [(0, [5; 20]), (1, [5; 20]), (2, [5; 20])]);
    assert_eq!(table.piece(1), (8, 16));
    assert_eq!(&block.log_slice(8, 16).unwrap()[..], b",{\"l\":1}");
    // One run, of all three: one slice of the log section.
    let runs = block.emitter_runs().unwrap();
    let runs: Vec<_> = runs.iter().collect();
    assert_eq!(runs.len(), 1);
    let (first, count) = (runs[0].first, runs[0].count);
    assert_eq!((first, count, runs[0].topic0), (0, 3, None));
    assert_eq!(
        &block.log_slice(runs[0].start, runs[0].end).unwrap()[..],
        b",{\"l\":0},{\"l\":1},{\"l\":2}"
    );
    // A slice past the log section is refused, not a panic.
    assert_eq!(block.log_slice(0, 1_000), Err(crate::miss::Unread::Damaged));
}

/// Logs of a few addresses and first topics, with 0 to 4 topics each,
/// back to back in one receipt: `(address byte, topics)` per log.
fn block_of_logs(receipts: &mut Vec<u8>, logs: &[(u8, Vec<u8>)]) -> Vec<LogEntry> {
    receipts.clear();
    receipts.extend_from_slice(b"[{\"logs\":[");
    let mut entries = Vec::new();
    for (i, (address, topics)) in logs.iter().enumerate() {
        if i > 0 {
            receipts.push(b',');
        }
        let offset = receipts.len() as u32;
        receipts.extend_from_slice(format!("{{\"i\":{i}}}").as_bytes());
        entries.push(LogEntry {
            tx_index: 0,
            span: Span::new(offset, receipts.len() as u32 - offset),
            address: [*address; 20],
            topics: topics.iter().map(|t| [*t; 32]).collect(),
        });
    }
    receipts.extend_from_slice(b"]}]");
    entries
}

proptest::proptest! {
    /// The run table covers every log once, in order; each run is
    /// maximal, its logs share its address and first topic, its fewest
    /// topics is theirs, and its slice is its logs, each after a comma.
    #[test]
    fn emitter_runs_describe_the_log_table(
        logs in proptest::collection::vec(
            (0u8..3, proptest::collection::vec(0u8..3, 0..=4)),
            0..40,
        )
    ) {
        let (full, _) = sample();
        let mut receipts = Vec::new();
        let entries = block_of_logs(&mut receipts, &logs);
        let mut b = block(&full, &receipts);
        b.txs[0].receipt = Span::new(0, receipts.len() as u32);
        b.txs[1].receipt = Span::EMPTY;
        b.logs = entries;
        let mut record = Vec::new();
        encode_block(&b, &mut record).unwrap();
        let h = read_header(&record).unwrap();
        proptest::prop_assert!(verify_record(&record, &h));
        let block = crate::block::Block::from_record(7, &record);
        let runs = block.emitter_runs().unwrap();
        let runs: Vec<_> = runs.iter().collect();
        let mut next = 0;
        for (r, run) in runs.iter().enumerate() {
            proptest::prop_assert_eq!(run.first, next);
            proptest::prop_assert!(run.count >= 1);
            next += run.count;
            let members = &b.logs[run.first as usize..next as usize];
            let mut expected = Vec::new();
            for log in members {
                proptest::prop_assert_eq!(&log.address, run.address);
                proptest::prop_assert_eq!(log.topics.first(), run.topic0);
                expected.push(b',');
                expected.extend_from_slice(&receipts[log.span.offset as usize..][..log.span.len as usize]);
            }
            let fewest = members.iter().map(|l| l.topics.len()).min().unwrap();
            proptest::prop_assert_eq!(run.fewest_topics as usize, fewest);
            proptest::prop_assert_eq!(&block.log_slice(run.start, run.end).unwrap()[..], &expected[..]);
            if let Some(following) = runs.get(r + 1) {
                proptest::prop_assert!(
                    (following.address, following.topic0) != (run.address, run.topic0),
                    "runs are maximal"
                );
            }
        }
        proptest::prop_assert_eq!(next as usize, b.logs.len());
    }
}

/// A run table that disagrees with the log table (a bug, or a file
/// crafted by hand) fails verification like a span outside its
/// section: a filter deciding whole runs would otherwise serve logs
/// the log table says do not match.
#[test]
fn a_run_table_that_disagrees_with_the_log_table_fails_verification() {
    let (full, _) = sample();
    let mut receipts = Vec::new();
    let entries = block_of_logs(&mut receipts, &[(1, vec![7, 8]), (1, vec![7]), (2, vec![])]);
    let mut b = block(&full, &receipts);
    b.txs[0].receipt = Span::new(0, receipts.len() as u32);
    b.txs[1].receipt = Span::EMPTY;
    b.logs = entries;
    let mut out = Vec::new();
    encode_block(&b, &mut out).unwrap();
    let header = read_header(&out).unwrap();
    assert!(verify_record(&out, &header));
    assert_eq!(header.chunks(), 1);
    let count_at = out.len() - RUN_COUNT_LEN;
    assert_eq!(u32_at(&out, count_at), 2);
    let first_run = count_at - 2 * RUN_ENTRY_LEN;
    let second_run = first_run + RUN_ENTRY_LEN;
    let mut crafts: Vec<(usize, Vec<u8>)> = vec![
        (first_run + run::COUNT, 1u32.to_le_bytes().to_vec()),
        (first_run + run::COUNT, 3u32.to_le_bytes().to_vec()),
        (second_run + run::FIRST, 1u32.to_le_bytes().to_vec()),
        (first_run + run::START, 1u32.to_le_bytes().to_vec()),
        (second_run + run::END, 1u32.to_le_bytes().to_vec()),
        (first_run + run::ADDRESS, vec![2]),
        (first_run + run::TOPIC0, vec![8]),
        (first_run + run::FEWEST_TOPICS, vec![2]),
        (first_run + run::FEWEST_TOPICS, vec![0]),
        (second_run + run::FEWEST_TOPICS, vec![1]),
        (first_run + run::FEWEST_TOPICS + 1, vec![9]),
        (second_run + run::TOPIC0, vec![5]),
        (count_at, 3u32.to_le_bytes().to_vec()),
        (count_at, 1u32.to_le_bytes().to_vec()),
        (count_at, u32::MAX.to_le_bytes().to_vec()),
    ];
    for (at, value) in crafts.drain(..) {
        let mut crafted = out.clone();
        crafted[at..at + value.len()].copy_from_slice(&value);
        reseal(&mut crafted);
        let header = read_header(&crafted).unwrap();
        assert!(
            !verify_record(&crafted, &header),
            "crafted at {at}: {value:?}"
        );
    }
}

#[test]
fn any_flipped_bit_fails_verification() {
    let (full, receipts) = sample();
    let mut out = Vec::new();
    encode_block(&block(&full, &receipts), &mut out).unwrap();
    for at in (0..out.len()).step_by(7) {
        let mut copy = out.clone();
        copy[at] ^= 0x10;
        let ok = read_header(&copy)
            .is_some_and(|h| h.total_len() <= copy.len() && verify_record(&copy, &h));
        assert!(!ok, "flip at {at} went unnoticed");
    }
}

/// Regression (hardening, store spans): a record whose CRC is intact
/// but whose spans point outside their section is not a record; before,
/// it verified and a reader slicing the span panicked.
#[test]
fn a_sealed_record_with_a_span_outside_its_section_fails_verification() {
    let (full, receipts) = sample();
    let mut out = Vec::new();
    encode_block(&block(&full, &receipts), &mut out).unwrap();
    let tx_receipt_len = BODY_AT + body::FIXED_LEN + 40 + 4;
    let log_offset = BODY_AT + body::FIXED_LEN + 2 * TX_ENTRY_LEN + 4;
    let topic_count = BODY_AT + body::FIXED_LEN + 2 * TX_ENTRY_LEN + 32;
    for (at, value) in [
        (tx_receipt_len, 1_000u32.to_le_bytes()),
        (log_offset, u32::MAX.to_le_bytes()),
        // A log section's span starts past its comma.
        (log_offset, 0u32.to_le_bytes()),
        (topic_count, [9, 0, 0, 0]),
    ] {
        let mut crafted = out.clone();
        crafted[at..at + 4].copy_from_slice(&value);
        reseal(&mut crafted);
        let header = read_header(&crafted).unwrap();
        assert!(!verify_record(&crafted, &header), "crafted at {at}");
    }
    let header = read_header(&out).unwrap();
    assert!(verify_record(&out, &header));
}

#[test]
fn spans_outside_their_section_are_refused() {
    let (full, receipts) = sample();
    let mut b = block(&full, &receipts);
    b.txs[0].full = Span::new(20, 100);
    assert!(matches!(
        encode_block(&b, &mut Vec::new()),
        Err(EncodeError::SpanOutOfBounds(_))
    ));
    let mut b = block(&full, &receipts);
    b.logs[0].topics = vec![[0; 32]; 5];
    assert_eq!(
        encode_block(&b, &mut Vec::new()),
        Err(EncodeError::TooManyTopics)
    );
}

#[test]
fn truncated_or_zeroed_bytes_are_not_records() {
    let mut out = Vec::new();
    encode_rollback(5, &mut out);
    assert_eq!(read_header(&out).unwrap().kind, KIND_ROLLBACK);
    assert!(read_header(&out[..RECORD_HEADER_LEN - 1]).is_none());
    assert!(read_header(&[0; 64]).is_none());
}

#[test]
fn meta_round_trips_and_detects_other_versions() {
    let meta = crate::types::Meta {
        segment_blocks: 1024,
        segment_bytes: 1 << 30,
        identity: crate::types::Identity {
            chain_id: 43112,
            genesis_hash: [4; 32],
        },
    };
    let mut bytes = encode_meta(&meta);
    assert!(matches!(decode_meta(&bytes), MetaRead::Ok(m) if m == meta));
    // Versions 1 to 3 checked a record with one CRC: refused.
    let mut version_3 = bytes;
    version_3[8] = 3;
    let crc = crc32c::crc32c(&version_3[..68]);
    version_3[68..72].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(decode_meta(&version_3), MetaRead::Version(3)));
    bytes[8] = 9;
    let crc = crc32c::crc32c(&bytes[..68]);
    bytes[68..72].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(decode_meta(&bytes), MetaRead::Version(9)));
    bytes[20] ^= 1;
    assert!(matches!(decode_meta(&bytes), MetaRead::Corrupt));
}
