//! The second half of `eth_getLogs`: a planned query scanned block by
//! block, each block's emitter runs matched whole where the filter allows,
//! and the matching logs answered as slices of the stored log sections,
//! within `--logs-max-results` and the request's bytes of logs.

use alloy_primitives::Bloom;
use bytes::Bytes;

use crate::errors::ErrorCode;
use crate::rpc::{Context, Reply};

use super::filter::{Filter, RunMatch};
use super::plan::{Budget, Plan};

/// Scans a planned query, spending from `budget`'s bytes. Matching reads
/// a block's emitter runs (format 3 records) and touches the log table only
/// for runs the filter cannot decide whole; matching logs that lie back to
/// back are one slice of the block's log section, so a block whose logs all
/// match is one chunk of the answer.
pub(crate) fn scan(ctx: &Context, plan: &Plan, budget: &mut Budget) -> Reply {
    let (filter, from, to) = (&plan.filter, plan.from, plan.to);
    let mut answer = Answer {
        // Every piece starts with the comma that separates it from what
        // came before; the first one's is cut below.
        chunks: {
            // A piece or two a block is usual; more grows the vector.
            let mut chunks = Vec::with_capacity(plan.blocks().min(1024) as usize + 2);
            chunks.push(Bytes::from_static(b"["));
            chunks
        },
        found: 0,
        bytes: 0,
        max_results: ctx.config.logs_max_results,
        max_bytes: budget.bytes,
    };
    for height in from..=to {
        let Some(block) = plan.by_hash.clone().or_else(|| ctx.reader.block(height)) else {
            return Reply::Miss;
        };
        if block.log_count() == 0 || !filter.may_match(&Bloom::from_slice(block.logs_bloom())) {
            continue;
        }
        let scanned = match block.emitter_runs() {
            Ok(runs) => answer.by_runs(filter, &block, runs.iter()),
            Err(_) => Err(Overrun::Damaged),
        };
        match scanned {
            Ok(()) => {}
            // Counted and logged by the store; not ours to answer.
            Err(Overrun::Damaged) => return Reply::Miss,
            Err(Overrun::Results) => {
                let hint = if height > from {
                    format!("; try [0x{from:x}, 0x{:x}]", height - 1)
                } else {
                    String::new()
                };
                return Reply::Error(
                    ErrorCode::LimitExceeded,
                    format!(
                        "query returned more than {} results{hint}",
                        ctx.config.logs_max_results
                    ),
                );
            }
            Err(Overrun::Bytes) => {
                // Nothing of this query is kept: the rest of the request
                // finds the budget spent.
                budget.bytes = 0;
                return budget
                    .exhausted(&format!("{} bytes of logs", ctx.config.logs_budget_bytes));
            }
        }
    }
    budget.bytes -= answer.bytes;
    let mut chunks = answer.chunks;
    if let Some(first) = chunks.get_mut(1) {
        *first = first.slice(1..);
    }
    chunks.push(Bytes::from_static(b"]"));
    Reply::Result(chunks)
}

/// Byte ranges of one block's log section that go into an answer, joined
/// while each starts where the last ended.
#[derive(Default)]
struct Pieces {
    open: Option<(u32, u32)>,
}

impl Pieces {
    fn add(
        &mut self,
        chunks: &mut Vec<Bytes>,
        block: &neve_store::Block,
        start: u32,
        end: u32,
    ) -> Result<(), Overrun> {
        match &mut self.open {
            Some((_, open_end)) if *open_end == start => *open_end = end,
            open => {
                if let Some((s, e)) = open.replace((start, end)) {
                    chunks.push(block.log_slice(s, e).map_err(|_| Overrun::Damaged)?);
                }
            }
        }
        Ok(())
    }

    fn finish(self, chunks: &mut Vec<Bytes>, block: &neve_store::Block) -> Result<(), Overrun> {
        if let Some((start, end)) = self.open {
            chunks.push(block.log_slice(start, end).map_err(|_| Overrun::Damaged)?);
        }
        Ok(())
    }
}

/// Which limit a query ran past.
#[derive(Debug, PartialEq, Eq)]
enum Overrun {
    /// `--logs-max-results`.
    Results,
    /// The request's bytes of logs.
    Bytes,
    /// A part of the block failed its check.
    Damaged,
}

/// A query's answer as it is scanned: the pieces of log sections, and what
/// it has taken of its limits.
struct Answer {
    chunks: Vec<Bytes>,
    found: usize,
    bytes: u64,
    max_results: usize,
    max_bytes: u64,
}

impl Answer {
    /// Counts `logs` matching logs of `bytes` (their commas included).
    fn take(&mut self, logs: usize, bytes: u64) -> Result<(), Overrun> {
        self.found += logs;
        if self.found > self.max_results {
            return Err(Overrun::Results);
        }
        self.bytes += bytes;
        if self.bytes > self.max_bytes {
            return Err(Overrun::Bytes);
        }
        Ok(())
    }

    /// A block with emitter runs: a run the filter decides whole costs one
    /// table entry, however many logs it holds; pieces that touch (whole
    /// runs and single logs alike) are joined into one slice.
    fn by_runs<'a>(
        &mut self,
        filter: &Filter,
        block: &'a neve_store::Block,
        runs: impl Iterator<Item = neve_store::EmitterRun<'a>>,
    ) -> Result<(), Overrun> {
        let mut pieces = Pieces::default();
        let mut table: Option<neve_store::LogTable> = None;
        for run in runs {
            let whole = match filter.match_run(&run) {
                RunMatch::None => continue,
                RunMatch::All => {
                    let bytes = (run.end - run.start) as u64;
                    // Past both limits inside this run, which comes first
                    // depends on its logs' lengths: counted log by log, the
                    // refusal is the one a log-by-log scan gives.
                    let both = self.found + run.count as usize > self.max_results
                        && self.bytes + bytes > self.max_bytes;
                    if !both {
                        self.take(run.count as usize, bytes)?;
                        pieces.add(&mut self.chunks, block, run.start, run.end)?;
                        continue;
                    }
                    true
                }
                RunMatch::Each => false,
            };
            // Read once a block, and only when a run needs its logs' keys.
            if table.is_none() {
                table = Some(block.log_table().map_err(|_| Overrun::Damaged)?);
            }
            let table = table.as_ref().expect("read above");
            for index in run.first..run.first + run.count {
                let log = table.key(index);
                if whole || filter.matches(log.address, log.topics) {
                    let (start, end) = table.piece(index);
                    self.take(1, (end - start) as u64)?;
                    pieces.add(&mut self.chunks, block, start, end)?;
                }
            }
        }
        pieces.finish(&mut self.chunks, block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Answer {
        /// Every log's table entry read, each matching log a piece: what
        /// [`Answer::by_runs`] must answer the same as.
        fn by_logs(&mut self, filter: &Filter, block: &neve_store::Block) -> Result<(), Overrun> {
            let table = block.log_table().map_err(|_| Overrun::Damaged)?;
            let mut pieces = Pieces::default();
            for index in 0..table.len() {
                let log = table.key(index);
                if filter.matches(log.address, log.topics) {
                    let (start, end) = table.piece(index);
                    self.take(1, (end - start) as u64)?;
                    pieces.add(&mut self.chunks, block, start, end)?;
                }
            }
            pieces.finish(&mut self.chunks, block)
        }
    }

    fn filter(json: &str) -> Result<Filter, String> {
        Filter::parse(&serde_json::from_str(json).unwrap())
    }

    /// `synthetic` as this build stores it, read back (the directory lives
    /// as long as the block is used).
    fn stored(
        synthetic: &neve_store::testing::SyntheticBlock,
    ) -> (tempfile::TempDir, neve_store::Block) {
        let dir = tempfile::tempdir().unwrap();
        let identity = neve_store::Identity {
            chain_id: 5,
            genesis_hash: [0; 32],
        };
        let config = neve_store::StoreConfig {
            durability: neve_store::Durability::OsBuffered,
            ..neve_store::StoreConfig::default()
        };
        let mut store = neve_store::Store::open(dir.path(), identity, config).unwrap();
        store.append(&[synthetic.as_new()]).unwrap();
        let block = store.reader().block(synthetic.height).unwrap();
        (dir, block)
    }

    fn hex_of(byte: u8, width: usize) -> String {
        format!("\"0x{}\"", format!("{byte:02x}").repeat(width))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(96))]
        /// Deciding whole emitter runs answers what matching log by log
        /// does: the same bytes, count and refusals, for any filter and
        /// limits (`by_logs` is how blocks before format 3 are scanned).
        #[test]
        fn scanning_by_runs_answers_what_scanning_log_by_log_does(
            logs in proptest::collection::vec(
                (0u8..3, proptest::collection::vec(0u8..3, 0..=4)),
                1..30,
            ),
            addresses in proptest::collection::vec(0u8..4, 0..3),
            positions in proptest::collection::vec(
                proptest::option::of(proptest::collection::vec(0u8..4, 0..3)),
                0..4,
            ),
            max_results in 1usize..40,
            max_bytes in 1u64..3000,
        ) {
            let mut synthetic = neve_store::testing::SyntheticBlock::new(0, 1, logs.len() as u32, 130);
            for (entry, (address, topics)) in synthetic.logs.iter_mut().zip(&logs) {
                entry.address = [*address; 20];
                entry.topics = topics.iter().map(|t| [*t; 32]).collect();
            }
            let (_dir, block) = stored(&synthetic);

            let list = |values: &[u8], width| {
                values.iter().map(|v| hex_of(*v, width)).collect::<Vec<_>>().join(",")
            };
            let topics: Vec<String> = positions
                .iter()
                .map(|p| p.as_ref().map_or("null".to_string(), |alts| format!("[{}]", list(alts, 32))))
                .collect();
            let json = format!(
                "{{\"address\":[{}],\"topics\":[{}]}}",
                list(&addresses, 20),
                topics.join(",")
            );
            let filter = filter(&json).unwrap();
            let scan = |by_runs: bool| {
                let mut answer = Answer { chunks: Vec::new(), found: 0, bytes: 0, max_results, max_bytes };
                let scanned = if by_runs {
                    answer.by_runs(&filter, &block, block.emitter_runs().unwrap().iter())
                } else {
                    answer.by_logs(&filter, &block)
                };
                (scanned, answer.found, answer.bytes, answer.chunks.concat())
            };
            let (runs, logs) = (scan(true), scan(false));
            proptest::prop_assert_eq!(&runs.0, &logs.0, "{}", json);
            if runs.0.is_ok() {
                proptest::prop_assert_eq!(runs, logs, "{}", json);
            }
        }
    }

    #[test]
    fn a_block_whose_logs_all_match_is_one_slice() {
        let mut synthetic = neve_store::testing::SyntheticBlock::new(0, 1, 20, 130);
        for entry in &mut synthetic.logs {
            entry.address = [7; 20];
            entry.topics = vec![[1; 32], [2; 32]];
        }
        // The last log is another event of the same contract.
        synthetic.logs[19].topics = vec![[3; 32]];
        let (_dir, block) = stored(&synthetic);
        let scan = |json: &str| {
            let mut answer = Answer {
                chunks: Vec::new(),
                found: 0,
                bytes: 0,
                max_results: 1000,
                max_bytes: 1 << 20,
            };
            answer
                .by_runs(
                    &filter(json).unwrap(),
                    &block,
                    block.emitter_runs().unwrap().iter(),
                )
                .unwrap();
            (answer.found, answer.chunks.len())
        };
        let address = hex_of(7, 20);
        assert_eq!(scan(&format!("{{\"address\":{address}}}")), (20, 1));
        assert_eq!(
            scan(&format!(
                "{{\"address\":{address},\"topics\":[{}]}}",
                hex_of(1, 32)
            )),
            (19, 1)
        );
        // A second position: the run is matched log by log, still one slice.
        assert_eq!(
            scan(&format!("{{\"topics\":[null,{}]}}", hex_of(2, 32))),
            (19, 1)
        );
        // More positions than the other event's logs have topics.
        assert_eq!(scan("{\"topics\":[null,null]}"), (19, 1));
        assert_eq!(scan(&format!("{{\"topics\":[{}]}}", hex_of(3, 32))), (1, 1));
        assert_eq!(scan(&format!("{{\"address\":{}}}", hex_of(8, 20))), (0, 0));
    }
}
