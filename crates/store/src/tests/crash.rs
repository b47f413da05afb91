//! Power loss and failed writes or syncs at any point: acknowledged blocks survive.

use super::*;

/// One step of the crash test.
#[derive(Clone, Debug)]
enum CrashOp {
    Append(u64),
    Rollback(u64),
}

fn crash_op() -> impl Strategy<Value = CrashOp> {
    prop_oneof![
        5 => (1u64..7).prop_map(CrashOp::Append),
        1 => (0u64..6).prop_map(CrashOp::Rollback),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Power goes at any write or sync (the journal fails it and every one
    /// after, then undoes every write no sync made durable): the reopened
    /// store holds every acknowledged block, unchanged; above them at most
    /// a prefix of what the interrupted append was writing; after an
    /// interrupted rollback, at least what it kept and at most what it was
    /// removing. Never a gap, never another block, never a failed open.
    #[test]
    fn power_loss_at_any_point_keeps_exactly_the_acknowledged_blocks(
        ops in proptest::collection::vec(crash_op(), 1..16),
        crash_at in 0u64..160,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        let config = StoreConfig {
            durability: Durability::Fsync,
            segment_bytes: 256 << 10,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
        journal.crash_after(crash_at);
        // Acknowledged: height → fork.
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        // What the interrupted call may have left beyond the model.
        let mut interrupted_append: BTreeMap<u64, u64> = BTreeMap::new();
        let mut interrupted_rollback: Option<u64> = None;
        let mut fork = 0u64;
        for op in ops {
            match op {
                CrashOp::Append(n) => {
                    let next = model.keys().next_back().map_or(1000, |h| h + 1);
                    let parent = model.iter().next_back().map(|(h, f)| block_hash(*f, *h));
                    let blocks: Vec<_> = (next..next + n).map(|h| {
                        let mut b = SyntheticBlock::new(fork, h, TXS, 200);
                        if h == next && let Some(p) = parent { b.parent_hash = p; }
                        b
                    }).collect();
                    let views: Vec<_> = blocks.iter().map(|b| b.as_new()).collect();
                    if store.append(&views).is_err() {
                        interrupted_append = (next..next + n).map(|h| (h, fork)).collect();
                        break;
                    }
                    for h in next..next + n { model.insert(h, fork); }
                }
                CrashOp::Rollback(depth) => {
                    let Some(max) = model.keys().next_back().copied() else { continue };
                    let keep = max.saturating_sub(depth).max(1000);
                    if store.rollback(keep).is_err() {
                        interrupted_rollback = Some(keep);
                        break;
                    }
                    model.retain(|h, _| *h <= keep);
                    fork += 1;
                }
            }
        }
        journal.power_loss().unwrap();
        drop(store);
        let reopened = Store::open(dir.path(), CHAIN, StoreConfig { crash_hook: None, ..config }).unwrap();
        let stats = reopened.stats();
        let reader = reopened.reader();
        let acknowledged_max = model.keys().next_back().copied();
        let lowest_kept = match interrupted_rollback {
            Some(keep) => Some(keep),
            None => acknowledged_max,
        };
        prop_assert!(stats.max_contiguous_height >= lowest_kept,
            "lost acknowledged blocks: store ends at {:?}, acknowledged through {lowest_kept:?}", stats.max_contiguous_height);
        if let Some(max) = stats.max_contiguous_height {
            prop_assert_eq!(stats.min_height, Some(1000));
            for height in 1000..=max {
                let fork = model.get(&height).or(interrupted_append.get(&height));
                prop_assert!(fork.is_some(), "height {height} was never written (store ends at {max})");
                let fork = *fork.unwrap();
                let block = reader.block(height).expect("no gap");
                prop_assert_eq!(block.hash(), block_hash(fork, height));
                prop_assert_eq!(&block.full().unwrap()[..], &SyntheticBlock::new(fork, height, TXS, 200).full[..]);
            }
            prop_assert!(reader.block(max + 1).is_none());
        }
    }
}

/// The crash test's journal does what it claims: without fsync nothing
/// survives a power loss; with it, what was appended does.
#[test]
fn the_crash_journal_undoes_exactly_what_was_never_synced() {
    for durability in [Durability::OsBuffered, Durability::Fsync] {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        let config = StoreConfig {
            durability,
            segment_bytes: 256 << 10,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
        append_range(&mut store, 0, 0..=2);
        assert!(journal.ops() > 3);
        journal.power_loss().unwrap();
        drop(store);
        let reopened = Store::open(dir.path(), CHAIN, config).unwrap();
        let expected = match durability {
            Durability::OsBuffered => None,
            Durability::Fsync => Some(2),
        };
        assert_eq!(
            reopened.stats().max_contiguous_height,
            expected,
            "{durability:?}"
        );
    }
}

/// A deep rollback killed at any write, sync, unlink or rename (power
/// lost: unsynced writes undone, unlinks and renames the directory was not
/// synced after brought back) never costs a block at or below the height it
/// keeps: the reopened store holds them all, unchanged, and above them at
/// most the old fork's blocks, still joined.
#[test]
fn a_crash_anywhere_in_a_deep_rollback_keeps_every_block_below_it() {
    const KEEP: u64 = 11;
    for crash_at in 0.. {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        let config = StoreConfig {
            durability: Durability::Fsync,
            segment_bytes: 256 << 10,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
        append_range(&mut store, 0, 0..=39);
        journal.crash_after(crash_at);
        let finished = store.rollback(KEEP).is_ok();
        journal.power_loss().unwrap();
        drop(store);
        let reopened = Store::open(
            dir.path(),
            CHAIN,
            StoreConfig {
                crash_hook: None,
                ..config
            },
        )
        .unwrap();
        let stats = reopened.stats();
        let reader = reopened.reader();
        assert_eq!(stats.min_height, Some(0), "crash at op {crash_at}");
        let max = stats.max_contiguous_height.expect("blocks kept");
        assert!(max >= KEEP, "crash at op {crash_at}: store ends at {max}");
        for height in 0..=max {
            assert_block(&reader, 0, height);
        }
        if finished {
            assert_eq!(max, KEEP);
            break;
        }
    }
}

/// One write, sync, unlink or rename failing anywhere in a run of appends,
/// segment seals and a rollback (a full disk, an I/O error): the call fails,
/// a retry or, after a failed fsync stopped the writer, a restart goes on,
/// and in the end every block is there and found by height and by hash,
/// before and after reopening.
#[test]
// Long: one scenario, run with a failure at each of its operations.
fn a_single_failure_anywhere_loses_no_block_and_no_lookup() {
    fn run(dir: &std::path::Path, journal: &std::sync::Arc<CrashJournal>) {
        let config = StoreConfig {
            durability: Durability::Fsync,
            segment_bytes: 256 << 10,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        // Opening fails on the failed operation too: it is tried again.
        let open = || {
            (0..3)
                .find_map(|_| Store::open(dir, CHAIN, config.clone()).ok())
                .expect("opens on a second try")
        };
        let mut store = Some(open());
        // Each step until it holds: a failed one is tried again, on a
        // reopened store when a failed fsync stopped the writer.
        let step = |slot: &mut Option<Store>,
                    apply: &dyn Fn(&mut Store) -> Result<(), StoreError>| {
            for _ in 0..3 {
                let store = slot.as_mut().expect("open");
                let error = match apply(store) {
                    Ok(()) => return,
                    Err(error) => error,
                };
                // Whichever fsync failed, the writer stops.
                assert!(
                    !error.is_sync_failure() || store.failed.is_some(),
                    "{error} left the writer running"
                );
                if store.failed.is_some() {
                    *slot = None;
                    *slot = Some(open());
                }
            }
            panic!("a step failed three times");
        };
        for height in 0..=13u64 {
            step(&mut store, &|s: &mut Store| {
                if s.stats().max_contiguous_height >= Some(height) {
                    return Ok(());
                }
                let block = SyntheticBlock::new(0, height, TXS, 200);
                s.append(&[block.as_new()])
            });
        }
        step(&mut store, &|s: &mut Store| s.rollback(6));
        for height in 7..=13u64 {
            step(&mut store, &|s: &mut Store| {
                if s.stats().max_contiguous_height >= Some(height) {
                    return Ok(());
                }
                let mut block = SyntheticBlock::new(1, height, TXS, 200);
                if height == 7 {
                    block.parent_hash = block_hash(0, 6);
                }
                s.append(&[block.as_new()])
            });
        }
        let store = store.expect("open");
        let check = |store: &Store| {
            let reader = store.reader();
            for height in 0..=13 {
                let fork = u64::from(height > 6);
                if height == 7 {
                    // Fork 1's first block: a child of fork 0's block 6.
                    let block = reader.block(7).expect("height 7");
                    assert_eq!(block.parent_hash(), block_hash(0, 6));
                    let expected = SyntheticBlock::new(1, 7, TXS, 200);
                    assert_eq!(&block.full().unwrap()[..], &expected.full[..]);
                } else {
                    assert_block(&reader, fork, height);
                }
                let hash = block_hash(fork, height);
                let found = reader.block_by_hash(&hash).expect("found by hash");
                assert_eq!(found.hash(), hash);
            }
        };
        check(&store);
        drop(store);
        check(
            &Store::open(
                dir,
                CHAIN,
                StoreConfig {
                    crash_hook: None,
                    ..config
                },
            )
            .unwrap(),
        );
    }
    // How many operations a run makes without failures.
    let dir = tempfile::tempdir().unwrap();
    let journal = CrashJournal::new();
    run(dir.path(), &journal);
    let total = journal.ops();
    for fail_at in 0..total {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        journal.fail_once(fail_at);
        run(dir.path(), &journal);
    }
}

/// Issue 32 (6): the sync that cuts the tail of a sealed segment a
/// rollback reopens is an fsync like any other: its failure stops the
/// writer (before, it was labelled otherwise and the writer went on).
#[test]
fn a_failed_sync_while_a_rollback_reopens_a_sealed_segment_stops_the_writer() {
    let mut seen_cut = false;
    for op in 0..24 {
        let dir = tempfile::tempdir().unwrap();
        let journal = CrashJournal::new();
        let config = StoreConfig {
            durability: Durability::Fsync,
            crash_hook: Some(journal.clone()),
            ..config(4)
        };
        let mut store = Store::open(dir.path(), CHAIN, config).unwrap();
        append_range(&mut store, 0, 0..=13);
        journal.fail_once(op);
        let Err(error) = store.rollback(6) else {
            continue;
        };
        if error.to_string().contains("cut tail") {
            seen_cut = true;
        }
        assert_eq!(
            error.is_sync_failure(),
            store.failed.is_some(),
            "op {op}: {error}"
        );
        if matches!(error, StoreError::SyncFailed { .. }) {
            assert!(
                matches!(store.append(&[]), Err(StoreError::WriterFailed(_)))
                    || store.failed.is_some()
            );
        }
    }
    assert!(seen_cut, "no failure reached the reopened segment's sync");
}
