//! SIGKILL a writer process at random instants, over and over: every reopen
//! must find a consistent chain that holds every acknowledged block.
//!
//! The test binary re-runs itself as the writer (`crash_writer_child`, a
//! no-op unless `NEVE_STORE_CRASH_DIR` is set). The writer appends batches
//! and rolls back now and then, writing `ack H F` (height H of fork F is
//! stored) and `rollback K` lines after each call returns, and `rolling K`
//! before a rollback starts. The lines go to a file of their own, one
//! write each: on stdout the harness's own `test ... ` prefix, printed
//! without a newline, would swallow the first of them. The parent kills the
//! writer, replays the lines into a model, reopens the store and compares.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use neve_store::testing::{SyntheticBlock, block_hash};
use neve_store::{Durability, Identity, Reader, Store, StoreConfig};

const DIR_ENV: &str = "NEVE_STORE_CRASH_DIR";
const FORK_ENV: &str = "NEVE_STORE_CRASH_FORK";
const LINES_ENV: &str = "NEVE_STORE_CRASH_LINES";
const CHAIN: Identity = Identity {
    chain_id: 9,
    genesis_hash: [9; 32],
};
const ROUNDS: u64 = 120;
/// Transactions per synthetic block: enough that a record spans pages.
const TXS: u32 = 12;

fn config() -> StoreConfig {
    StoreConfig {
        retain_blocks: Some(48),
        // Killed processes keep their page-cache writes, so OS-buffered
        // durability must already hold every acknowledged block.
        durability: Durability::OsBuffered,
        segment_blocks: 8,
        ..StoreConfig::default()
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[test]
fn crash_writer_child() {
    let Some(dir) = std::env::var_os(DIR_ENV) else {
        return;
    };
    let mut fork: u64 = std::env::var(FORK_ENV).unwrap().parse().unwrap();
    let mut store = Store::open(dir.as_ref(), CHAIN, config()).unwrap();
    let lines = std::env::var_os(LINES_ENV).unwrap();
    let mut out = std::fs::OpenOptions::new()
        .append(true)
        .open(lines)
        .unwrap();
    // One write per line: a kill never leaves half of one.
    let mut say = |line: String| out.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut rng = fork;
    let deadline = Instant::now() + Duration::from_secs(10); // never outlive a lost parent
    while Instant::now() < deadline {
        let tip = store.stats().max_contiguous_height;
        if let Some(top) = tip
            && splitmix(&mut rng).is_multiple_of(8)
        {
            let keep = top.saturating_sub(splitmix(&mut rng) % 10);
            say(format!("rolling {keep}"));
            store.rollback(keep).unwrap();
            say(format!("rollback {keep}"));
            fork += 1;
            continue;
        }
        let next = tip.map_or(0, |h| h + 1);
        let parent = tip.and_then(|h| store.reader().block(h)).map(|b| b.hash());
        let count = 1 + splitmix(&mut rng) % 4;
        let blocks: Vec<_> = (next..next + count)
            .map(|h| {
                let mut b = SyntheticBlock::new(fork, h, TXS, 300);
                if h == next
                    && let Some(p) = parent
                {
                    b.parent_hash = p;
                }
                b
            })
            .collect();
        store
            .append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>())
            .unwrap();
        for h in next..next + count {
            say(format!("ack {h} {fork}"));
        }
    }
}

/// Which fork wrote `height`, judged from its hash: the model's guess, then
/// this round's forks, then every earlier one.
fn fork_of(reader: &Reader, height: u64, hint: Option<u64>, fork_base: u64) -> Option<u64> {
    let hash = reader.block(height)?.hash();
    hint.into_iter()
        .chain(fork_base..fork_base + 1000)
        .chain(0..fork_base)
        .find(|f| block_hash(*f, height) == hash)
}

#[test]
fn sigkill_at_random_instants_never_corrupts_or_loses_acknowledged_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let lines_dir = tempfile::tempdir().unwrap();
    let lines_path = lines_dir.path().join("lines");
    let exe = std::env::current_exe().unwrap();
    let mut rng = 0x5eed;
    let mut model: BTreeMap<u64, u64> = BTreeMap::new();
    let mut rounds_that_wrote = 0;
    for round in 0..ROUNDS {
        let fork_base = round * 1000;
        std::fs::write(&lines_path, "").unwrap();
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                "crash_writer_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_ENV, dir.path())
            .env(FORK_ENV, fork_base.to_string())
            .env(LINES_ENV, &lines_path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(5 + splitmix(&mut rng) % 60));
        child.kill().unwrap();
        child.wait().unwrap();

        // While `rolling K`, blocks above K may be gone or still there, but
        // every acknowledged block at or below K must be there, unchanged.
        let mut rolling: Option<u64> = None;
        let mut wrote = false;
        let text = std::fs::read_to_string(&lines_path).unwrap();
        // Only whole lines count: what follows the last newline was cut.
        let whole = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
        for line in whole.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                ["ack", h, f] => {
                    wrote = true;
                    model.insert(h.parse().unwrap(), f.parse().unwrap());
                }
                ["rolling", k] => rolling = Some(k.parse().unwrap()),
                ["rollback", k] => {
                    let keep: u64 = k.parse().unwrap();
                    model.retain(|h, _| *h <= keep);
                    rolling = None;
                }
                _ => panic!("round {round}: unexpected line {line:?}"),
            }
        }

        rounds_that_wrote += wrote as u64;
        let store = Store::open(dir.path(), CHAIN, config())
            .unwrap_or_else(|e| panic!("round {round}: open failed: {e}"));
        let reader = store.reader();
        let stats = reader.stats();
        let must_keep = match rolling {
            Some(keep) => model.range(..=keep).next_back().map(|(h, _)| *h),
            None => model.keys().next_back().copied(),
        };
        let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) else {
            assert!(
                must_keep.is_none(),
                "round {round}: store empty but blocks through {must_keep:?} acknowledged (rolling {rolling:?})",
            );
            continue;
        };
        if let Some(acked) = must_keep {
            assert!(
                max >= acked,
                "round {round}: acknowledged {acked} lost (store ends at {max}, rolling {rolling:?})"
            );
        }
        // Every stored height is intact and chains to the one below.
        let mut below = None;
        for height in min..=max {
            let block = reader
                .block(height)
                .unwrap_or_else(|| panic!("round {round}: height {height} unreadable"));
            if let Some(parent) = below {
                assert_eq!(
                    block.parent_hash(),
                    parent,
                    "round {round}: {height} does not chain"
                );
            }
            below = Some(block.hash());
            let fork = fork_of(&reader, height, model.get(&height).copied(), fork_base)
                .unwrap_or_else(|| {
                    panic!("round {round}: {height} holds no block any writer wrote")
                });
            assert_eq!(
                &block.full().unwrap()[..],
                &SyntheticBlock::new(fork, height, TXS, 300).full[..]
            );
            if rolling.is_none_or(|keep| height <= keep)
                && let Some(acked_fork) = model.get(&height)
            {
                assert_eq!(
                    fork, *acked_fork,
                    "round {round}: height {height} changed fork"
                );
            }
            let tx = SyntheticBlock::new(fork, height, TXS, 300).txs[TXS as usize - 1].hash;
            assert_eq!(
                reader.transaction(&tx).map(|(b, i)| (b.height(), i)),
                Some((height, TXS - 1))
            );
        }
        // What the store holds now is the truth the next round builds on.
        model = (min..=max)
            .map(|h| {
                (
                    h,
                    fork_of(&reader, h, model.get(&h).copied(), fork_base).unwrap(),
                )
            })
            .collect();
    }
    // Not vacuous: most kills landed while the writer was writing.
    assert!(
        rounds_that_wrote > ROUNDS / 2,
        "only {rounds_that_wrote} of {ROUNDS} rounds wrote anything"
    );
}
