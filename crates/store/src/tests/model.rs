//! The store against a simple model of heights and forks.

use super::*;

/// One step of the model test.
#[derive(Clone, Debug)]
enum Op {
    Append(u64),
    Rollback(u64),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1u64..9).prop_map(Op::Append),
        2 => (0u64..12).prop_map(Op::Rollback),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Against a map of height → fork: appends, rollbacks (by depth), retention and
    /// reopens leave exactly the model's newest heights, each with its content.
    #[test]
    fn store_matches_a_simple_model(ops in proptest::collection::vec(op(), 1..30), retain in 6u64..20) {
        let dir = tempfile::tempdir().unwrap();
        let config = StoreConfig { retain_blocks: Some(retain), ..config(4) };
        let mut store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        let mut fork = 0u64;
        for op in ops {
            match op {
                Op::Append(n) => {
                    let next = model.keys().next_back().map_or(1000, |h| h + 1);
                    let parent = model.iter().next_back().map(|(h, f)| block_hash(*f, *h));
                    let blocks: Vec<_> = (next..next + n).map(|h| {
                        let mut b = SyntheticBlock::new(fork, h, TXS, 200);
                        if h == next && let Some(p) = parent { b.parent_hash = p; }
                        b
                    }).collect();
                    store.append(&blocks.iter().map(|b| b.as_new()).collect::<Vec<_>>()).unwrap();
                    for h in next..next + n { model.insert(h, fork); }
                }
                Op::Rollback(depth) => {
                    if let Some(max) = model.keys().next_back().copied() {
                        let keep = max.saturating_sub(depth);
                        store.rollback(keep).unwrap();
                        model.retain(|h, _| *h <= keep);
                        fork += 1;
                    }
                }
                Op::Reopen => {
                    drop(store);
                    store = Store::open(dir.path(), CHAIN, config.clone()).unwrap();
                }
            }
            // Retention: the store may keep more than `retain` (whole
            // segments), never fewer; the model follows what it kept.
            let stats = store.stats();
            if let (Some(min), Some(max)) = (stats.min_height, stats.max_contiguous_height) {
                prop_assert!(max - min + 1 >= retain.min(model.len() as u64));
                prop_assert!(max - min < retain + 4, "kept {} for retain {retain}", max - min + 1);
                model.retain(|h, _| *h >= min);
            }
            prop_assert_eq!(stats.min_height, model.keys().next().copied());
            prop_assert_eq!(stats.max_contiguous_height, model.keys().next_back().copied());
            let reader = store.reader();
            for (height, fork) in &model {
                let block = reader.block(*height).expect("modelled height stored");
                prop_assert_eq!(block.hash(), block_hash(*fork, *height));
                prop_assert_eq!(&block.full().unwrap()[..], &SyntheticBlock::new(*fork, *height, TXS, 200).full[..]);
                prop_assert_eq!(reader.block_by_hash(&block_hash(*fork, *height)).map(|b| b.height()), Some(*height));
            }
        }
    }
}
