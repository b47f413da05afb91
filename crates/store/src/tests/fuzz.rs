//! Arbitrary bytes as records and directories at open: never a panic.

use super::*;

/// Fuzz target: store records as read from disk. Any bytes as a segment
/// file are scanned (header, CRC, spans, chain continuity, tombstones), and
/// every record the scan accepts is read through every accessor; any bytes
/// as an index file are checked. Nothing panics: a record that passes is
/// safe to slice, whatever was written.
#[test]
fn fuzz_store_records_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut store = Store::open(dir.path(), CHAIN, config(4)).unwrap();
    append_range(&mut store, 0, 0..=5);
    store.rollback(4).unwrap();
    let sealed = std::fs::read(dir.path().join(directory::segment_file_name(0))).unwrap();
    let active = std::fs::read(dir.path().join(directory::segment_file_name(4))).unwrap();
    let index = std::fs::read(dir.path().join(directory::index_file_name(0))).unwrap();
    let trimmed = |bytes: &[u8]| bytes[..Segment::scan(bytes).end as usize].to_vec();
    let seeds = vec![trimmed(&sealed), trimmed(&active), index];
    let dictionary: [&[u8]; 4] = [b"NVRC", &[0xff; 4], &[0; 8], b"NEVEIDX\0"];
    let report = neve_devnet::fuzz::run("store records", &seeds, &dictionary, 64 << 10, |input| {
        let scan = Segment::scan(input);
        for offset in &scan.offsets {
            let bytes = &input[*offset as usize..];
            let Some(header) = format::read_header(bytes) else {
                continue;
            };
            let start = *offset as usize;
            let block =
                Block::from_record(header.height, &input[start..start + header.total_len()]);
            let _ = (block.hash(), block.parent_hash(), block.logs_bloom().len());
            let _ = (block.full(), block.hashes_only(), block.receipts());
            let _ = (block.raw_header(), block.raw_block(), block.raw_receipts());
            for i in 0..block.tx_count().min(4096) {
                let _ = (
                    block.tx_hash(i),
                    block.transaction(i),
                    block.receipt(i),
                    block.raw_transaction(i),
                );
            }
            for log in block.logs().unwrap_or_default().iter().take(4096) {
                let _ = log.topics().len();
            }
            let logs = block.log_count().min(4096);
            if let Ok(table) = block.log_table()
                && logs > 0
            {
                let _ = (0..logs).map(|i| table.key(i).topics.len()).sum::<usize>();
                let (start, end) = (table.piece(0).0, table.piece(logs - 1).1);
                let _ = block.log_slice(start, end);
            }
        }
        let _ = segment::check_index_header(input, 0, input.len() as u64);
    });
    eprintln!("store records: {report}");
}

/// The files of a store directory as one fuzz input: per file, its name's
/// place in `names`, its length (4 bytes, little-endian) and its bytes.
fn directory_input(dir: &std::path::Path, names: &[String]) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        if let Ok(bytes) = std::fs::read(dir.join(name)) {
            out.push(i as u8);
            out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            out.extend_from_slice(&bytes);
        }
    }
    out
}

/// Fuzz target: `Store::open` over a whole directory (META, the `HASHES`
/// table, segments and indexes, any of them missing, cut, repeated or
/// changed): it opens or refuses, and what it opens reads back by height
/// and by hash without a panic.
#[test]
fn fuzz_store_directories_on_open() {
    let names: Vec<String> = [0u64, 4, 8]
        .iter()
        .flat_map(|h| {
            [
                directory::segment_file_name(*h),
                directory::index_file_name(*h),
            ]
        })
        .chain([
            "META".to_owned(),
            hashes::HASHES_FILE.to_owned(),
            "HASHES.tmp".to_owned(),
        ])
        .collect();
    let seed_dir = tempfile::tempdir().unwrap();
    let small = StoreConfig {
        segment_bytes: 256 << 10,
        ..config(4)
    };
    {
        let mut store = Store::open(seed_dir.path(), CHAIN, small.clone()).unwrap();
        append_range(&mut store, 0, 0..=9);
        store.rollback(8).unwrap();
    }
    let seed = directory_input(seed_dir.path(), &names);
    let scratch_root = ["/dev/shm", "/tmp"]
        .into_iter()
        .find(|p| std::path::Path::new(p).is_dir())
        .unwrap();
    let dictionary: [&[u8]; 5] = [b"NVRC", &[0xff; 4], &[0; 8], b"NEVEIDX\0", &[0, 0, 1, 0]];
    // Opening a directory is file system work: a short default run.
    let report = neve_devnet::fuzz::run_defaulting_to(
        2_000,
        "store directories",
        &[seed],
        &dictionary,
        256 << 10,
        |input| {
            let dir = tempfile::tempdir_in(scratch_root).unwrap();
            let mut rest = input;
            while rest.len() >= 5 {
                let name = &names[rest[0] as usize % names.len()];
                let len = (u32::from_le_bytes(rest[1..5].try_into().unwrap()) as usize)
                    .min(rest.len() - 5);
                std::fs::write(dir.path().join(name), &rest[5..5 + len]).unwrap();
                rest = &rest[5 + len..];
            }
            let Ok(store) = Store::open(dir.path(), CHAIN, small.clone()) else {
                return;
            };
            let reader = store.reader();
            let stats = reader.stats();
            if let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) {
                for height in min..=max.min(min + 64) {
                    if let Some(block) = reader.block(height) {
                        let found = reader.block_by_hash(&block.hash());
                        let _ = (
                            found.map(|b| b.height()),
                            block.full().unwrap().len(),
                            block.tx_count(),
                        );
                    }
                }
            }
        },
    );
    eprintln!("store directories: {report}");
}
