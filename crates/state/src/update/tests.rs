use super::*;
use crate::trie::{Walked, walk};
use alloy_primitives::hex;
use alloy_trie::{HashBuilder, Nibbles};
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::{BTreeMap, HashMap, HashSet};

type Store = HashMap<Hash, Bytes>;
type Updates = Vec<(Hash, Option<Bytes>)>;

/// The root alloy-trie computes for `entries`: the oracle.
fn oracle(entries: &BTreeMap<Hash, Bytes>) -> Hash {
    let mut builder = HashBuilder::default();
    for (key, value) in entries {
        builder.add_leaf(Nibbles::unpack(key), value);
    }
    builder.root().0
}

/// Applies with every node held, storing what is put.
fn apply_held(root: &Hash, updates: &[(Hash, Option<Bytes>)], store: &mut Store) -> Hash {
    let mut fresh = Vec::new();
    let updated = apply(
        root,
        updates,
        |h| store.get(h).cloned(),
        |h, b| fresh.push((h, b)),
    )
    .unwrap();
    store.extend(fresh);
    match updated {
        Updated::Root(root) => root,
        Updated::Unheld(unheld) => panic!("all held, yet {unheld:?}"),
    }
}

fn sets(entries: &BTreeMap<Hash, Bytes>) -> Updates {
    entries.iter().map(|(k, v)| (*k, Some(v.clone()))).collect()
}

fn assert_reads(root: &Hash, store: &Store, entries: &BTreeMap<Hash, Bytes>, gone: &[Hash]) {
    let get = |h: &Hash| store.get(h).cloned();
    for (key, value) in entries {
        assert_eq!(
            walk(root, key, get, None).unwrap(),
            Walked::Found(value.clone())
        );
    }
    for key in gone.iter().filter(|k| !entries.contains_key(*k)) {
        assert_eq!(walk(root, key, get, None).unwrap(), Walked::Absent);
    }
}

/// Keys sharing 30 of 32 bytes half of the time: short leaf paths, so with
/// short values nodes go inline.
fn key() -> impl Strategy<Value = Hash> {
    (any::<bool>(), any::<[u8; 32]>()).prop_map(|(near, mut key)| {
        if near {
            key[..30].copy_from_slice(&[0x5a; 30]);
        }
        key
    })
}

fn value() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 1..40).prop_map(Bytes::from)
}

fn changes() -> impl Strategy<Value = Vec<(Index, bool, Hash, Option<Bytes>)>> {
    prop::collection::vec(
        (
            any::<Index>(),
            any::<bool>(),
            key(),
            prop::option::of(value()),
        ),
        0..30,
    )
}

/// The updates `changes` describe (an existing key or a new one, set or
/// deleted) and the entries they leave.
fn changed(
    entries: &BTreeMap<Hash, Bytes>,
    changes: &[(Index, bool, Hash, Option<Bytes>)],
) -> (Updates, BTreeMap<Hash, Bytes>) {
    let keys: Vec<Hash> = entries.keys().copied().collect();
    let mut after = entries.clone();
    let mut updates = Vec::new();
    for (index, existing, new, value) in changes {
        let key = if *existing && !keys.is_empty() {
            keys[index.index(keys.len())]
        } else {
            *new
        };
        match value {
            Some(value) => after.insert(key, value.clone()),
            None => after.remove(&key),
        };
        updates.push((key, value.clone()));
    }
    (updates, after)
}

/// A key whose nibbles start with `path`.
fn key_under(path: &[u8]) -> Hash {
    let mut key = [0; 32];
    for (i, n) in path.iter().enumerate() {
        set_nibble(&mut key, i, *n);
    }
    key
}

/// Applies with `withheld` nodes missing, fetching what is reported (as
/// proofs would: every node on the walk to a key) until a root comes.
fn apply_fetching(
    root: &Hash,
    updates: &[(Hash, Option<Bytes>)],
    store: &mut Store,
    withheld: &mut HashSet<Hash>,
) -> Hash {
    for _ in 0..=store.len() {
        let mut fresh = Vec::new();
        let held = |h: &Hash| {
            if withheld.contains(h) {
                None
            } else {
                store.get(h).cloned()
            }
        };
        let updated = apply(root, updates, held, |h, b| fresh.push((h, b))).unwrap();
        let unheld = match updated {
            Updated::Root(new) => {
                store.extend(fresh);
                return new;
            }
            Updated::Unheld(unheld) => unheld,
        };
        assert!(fresh.is_empty(), "nothing is put without a root");
        assert!(unheld.keys.len() + unheld.siblings.len() > 0);
        let wanted: Vec<Hash> = unheld
            .keys
            .iter()
            .copied()
            .chain(unheld.siblings.iter().map(|p| key_under(p)))
            .collect();
        for key in &wanted {
            let held = |h: &Hash| {
                if withheld.contains(h) {
                    None
                } else {
                    store.get(h).cloned()
                }
            };
            // Every report is real: the walk to it meets a node not held.
            assert!(
                matches!(walk(root, key, held, None).unwrap(), Walked::Missing(_)),
                "{key:?}"
            );
        }
        for key in wanted {
            let mut proof = Vec::new();
            walk(root, &key, |h| store.get(h).cloned(), Some(&mut proof)).unwrap();
            for node in proof {
                withheld.remove(&keccak256(&node).0);
            }
        }
    }
    panic!("no progress")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn roots_match_the_oracle(
        entries in prop::collection::btree_map(key(), value(), 0..40),
        changes in changes(),
    ) {
        let mut store = Store::new();
        let root = apply_held(&EMPTY_ROOT, &sets(&entries), &mut store);
        prop_assert_eq!(root, oracle(&entries));
        assert_reads(&root, &store, &entries, &[]);

        let (updates, after) = changed(&entries, &changes);
        let new = apply_held(&root, &updates, &mut store);
        prop_assert_eq!(new, oracle(&after));
        let touched: Vec<Hash> = updates.iter().map(|(k, _)| *k).collect();
        assert_reads(&new, &store, &after, &touched);
    }

    #[test]
    fn withheld_nodes_are_reported_then_used(
        entries in prop::collection::btree_map(key(), value(), 1..40),
        changes in changes(),
        withhold in prop::collection::vec(any::<bool>(), 200),
    ) {
        let mut store = Store::new();
        let root = apply_held(&EMPTY_ROOT, &sets(&entries), &mut store);
        let mut withheld: HashSet<Hash> = store
            .keys()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .zip(withhold.iter().cycle())
            .filter_map(|(h, w)| w.then_some(*h))
            .collect();
        let (updates, after) = changed(&entries, &changes);
        let new = apply_fetching(&root, &updates, &mut store, &mut withheld);
        prop_assert_eq!(new, oracle(&after));
    }

    #[test]
    fn any_node_bytes_update_without_panicking(
        node in prop::collection::vec(any::<u8>(), 0..200),
        key in any::<[u8; 32]>(),
        delete in any::<bool>(),
    ) {
        let bytes = Bytes::from(node);
        let value = (!delete).then(|| Bytes::from_static(b"v"));
        let _ = apply(&[1; 32], &[(key, value)], |_| Some(bytes.clone()), |_, _| {});
    }
}

/// Values 40 bytes long, so every leaf is stored by hash.
fn long(byte: u8) -> Bytes {
    Bytes::from(vec![byte; 40])
}

fn keyed(first: u8) -> Hash {
    let mut key = [0x77; 32];
    key[0] = first;
    key
}

/// A, B under root slot 1 (a branch of their own), C in slot 2, D in 3.
fn four_leaves() -> (Hash, Store, [Hash; 4]) {
    let keys = [keyed(0x10), keyed(0x11), keyed(0x20), keyed(0x30)];
    let entries: BTreeMap<Hash, Bytes> = keys.iter().map(|k| (*k, long(k[0]))).collect();
    let mut store = Store::new();
    let root = apply_held(&EMPTY_ROOT, &sets(&entries), &mut store);
    (root, store, keys)
}

/// The hash of the node a walk to `key` fetches at step `at`.
fn on_path(root: &Hash, store: &Store, key: &Hash, at: usize) -> Hash {
    let mut proof = Vec::new();
    walk(root, key, |h| store.get(h).cloned(), Some(&mut proof)).unwrap();
    keccak256(&proof[at]).0
}

fn unheld(
    root: &Hash,
    updates: &[(Hash, Option<Bytes>)],
    store: &Store,
    withheld: &[Hash],
) -> Unheld {
    let held = |h: &Hash| {
        if withheld.contains(h) {
            None
        } else {
            store.get(h).cloned()
        }
    };
    match apply(root, updates, held, |_, _| panic!("put without a root")).unwrap() {
        Updated::Unheld(unheld) => unheld,
        Updated::Root(_) => panic!("root without the withheld nodes"),
    }
}

#[test]
fn keys_and_siblings_are_reported_in_one_pass() {
    let (root, store, [a, b, c, d]) = four_leaves();
    let sub_branch = on_path(&root, &store, &a, 1);
    let leaf_b = on_path(&root, &store, &b, 2);
    let leaf_c = on_path(&root, &store, &c, 1);

    // Keys through a missing node, all of them.
    let ups = [(a, Some(long(1))), (b, None), (d, Some(long(2)))];
    assert_eq!(
        unheld(&root, &ups, &store, &[sub_branch]),
        Unheld {
            keys: vec![a, b],
            siblings: vec![]
        }
    );

    // C, D deleted: the root folds into slot 1, a branch not held.
    let ups = [(c, None), (d, None)];
    assert_eq!(
        unheld(&root, &ups, &store, &[sub_branch]),
        Unheld {
            keys: vec![],
            siblings: vec![vec![1]]
        }
    );

    // A deleted leaves B's leaf to fold up, and C's own leaf is missing.
    let ups = [(a, None), (c, Some(long(3)))];
    let reported = unheld(&root, &ups, &store, &[leaf_b, leaf_c]);
    assert_eq!(
        reported,
        Unheld {
            keys: vec![c],
            siblings: vec![vec![1, 1]]
        }
    );
}

#[test]
fn folding_into_a_branch_keeps_it_by_hash() {
    let (root, mut store, [a, b, c, d]) = four_leaves();
    let ups = [(c, None), (d, None)];
    let mut put = Vec::new();
    let Updated::Root(new) = apply(
        &root,
        &ups,
        |h| store.get(h).cloned(),
        |h, b| put.push((h, b)),
    )
    .unwrap() else {
        panic!("all held");
    };
    // Only the new root (an extension to the kept branch) is new.
    assert_eq!(put.len(), 1);
    store.extend(put);
    let after: BTreeMap<Hash, Bytes> = [(a, long(0x10)), (b, long(0x11))].into();
    assert_eq!(new, oracle(&after));
    assert_reads(&new, &store, &after, &[c, d]);
}

#[test]
fn inline_children_fold_and_split() {
    // Keys differing in the last nibble, short values: inline leaves.
    let mut keys = [[0x42; 32]; 3];
    keys[1][31] = 0x43;
    keys[2][0] = 0x90;
    let entries: BTreeMap<Hash, Bytes> = keys
        .iter()
        .map(|k| (*k, Bytes::from_static(&[1])))
        .collect();
    let mut store = Store::new();
    let root = apply_held(&EMPTY_ROOT, &sets(&entries), &mut store);
    assert_eq!(root, oracle(&entries));

    // Deleting one leaves an inline sibling to fold up.
    let new = apply_held(&root, &[(keys[0], None)], &mut store);
    let mut after = entries.clone();
    after.remove(&keys[0]);
    assert_eq!(new, oracle(&after));
    assert_reads(&new, &store, &after, &keys[..1]);

    // A key beside an inline leaf splits it.
    let mut near = keys[1];
    near[31] = 0x44;
    let newer = apply_held(&new, &[(near, Some(Bytes::from_static(&[2])))], &mut store);
    after.insert(near, Bytes::from_static(&[2]));
    assert_eq!(newer, oracle(&after));
    assert_reads(&newer, &store, &after, &[]);
}

#[test]
fn no_ops_keep_the_root() {
    let (root, store, [a, ..]) = four_leaves();
    let ups = [
        (a, Some(long(0x10))),
        (keyed(0x12), None),
        (keyed(0x99), None),
    ];
    let updated = apply(
        &root,
        &ups,
        |h| store.get(h).cloned(),
        |_, _| panic!("nothing is new"),
    );
    assert_eq!(updated, Ok(Updated::Root(root)));
    assert_eq!(
        apply(&EMPTY_ROOT, &[(a, None)], |_| None, |_, _| {}),
        Ok(Updated::Root(EMPTY_ROOT))
    );
}

/// ethereum/tests TrieTests/trietest_secureTrie.json: each step applied on
/// its own, then all in one call (where later updates win).
fn secure_vector(steps: &[(&[u8], Option<&[u8]>)], root: &str) {
    let expected: Hash = hex::decode(root).unwrap().try_into().unwrap();
    let updates: Vec<(Hash, Option<Bytes>)> = steps
        .iter()
        .map(|(k, v)| (keccak256(k).0, v.map(Bytes::copy_from_slice)))
        .collect();
    let mut store = Store::new();
    let mut root = EMPTY_ROOT;
    for update in &updates {
        root = apply_held(&root, std::slice::from_ref(update), &mut store);
    }
    assert_eq!(root, expected);
    assert_eq!(
        apply_held(&EMPTY_ROOT, &updates, &mut Store::new()),
        expected
    );
}

#[test]
fn ethereum_secure_trie_vectors() {
    secure_vector(
        &[
            (b"do", Some(b"verb")),
            (b"ether", Some(b"wookiedoo")),
            (b"horse", Some(b"stallion")),
            (b"shaman", Some(b"horse")),
            (b"doge", Some(b"coin")),
            (b"ether", None),
            (b"dog", Some(b"puppy")),
            (b"shaman", None),
        ],
        "29b235a58c3c25ab83010c327d5932bcf05324b7d6b1185e650798034783ca9d",
    );
    let jeff: Vec<(Vec<u8>, Option<Vec<u8>>)> = [
        (
            "0000000000000000000000000000000000000000000000000000000000000045",
            Some("22b224a1420a802ab51d326e29fa98e34c4f24ea"),
        ),
        (
            "0000000000000000000000000000000000000000000000000000000000000046",
            Some("67706c2076330000000000000000000000000000000000000000000000000000"),
        ),
        (
            "0000000000000000000000000000000000000000000000000000001234567890",
            Some("697c7b8c961b56f675d570498424ac8de1a918f6"),
        ),
        (
            "000000000000000000000000697c7b8c961b56f675d570498424ac8de1a918f6",
            Some("1234567890"),
        ),
        (
            "0000000000000000000000007ef9e639e2733cb34e4dfc576d4b23f72db776b2",
            Some("4655474156000000000000000000000000000000000000000000000000000000"),
        ),
        (
            "000000000000000000000000ec4f34c97e43fbb2816cfd95e388353c7181dab1",
            Some("4e616d6552656700000000000000000000000000000000000000000000000000"),
        ),
        (
            "4655474156000000000000000000000000000000000000000000000000000000",
            Some("7ef9e639e2733cb34e4dfc576d4b23f72db776b2"),
        ),
        (
            "4e616d6552656700000000000000000000000000000000000000000000000000",
            Some("ec4f34c97e43fbb2816cfd95e388353c7181dab1"),
        ),
        (
            "0000000000000000000000000000000000000000000000000000001234567890",
            None,
        ),
        (
            "000000000000000000000000697c7b8c961b56f675d570498424ac8de1a918f6",
            Some("6f6f6f6820736f2067726561742c207265616c6c6c793f000000000000000000"),
        ),
        (
            "6f6f6f6820736f2067726561742c207265616c6c6c793f000000000000000000",
            Some("697c7b8c961b56f675d570498424ac8de1a918f6"),
        ),
    ]
    .iter()
    .map(|(k, v)| (hex::decode(k).unwrap(), v.map(|v| hex::decode(v).unwrap())))
    .collect();
    let steps: Vec<(&[u8], Option<&[u8]>)> =
        jeff.iter().map(|(k, v)| (&k[..], v.as_deref())).collect();
    secure_vector(
        &steps,
        "72adb52e9d9428f808e3e8045be18d3baa77881d0cfab89a17a2bcbacee2f320",
    );

    // As branchingTests: addresses set, then all deleted, leave the empty root.
    let addresses: Vec<[u8; 20]> = (0u8..25).map(|i| [i.wrapping_mul(37); 20]).collect();
    let mut steps: Vec<(&[u8], Option<&[u8]>)> = addresses
        .iter()
        .map(|a| (&a[..], Some(&b"something"[..])))
        .collect();
    steps.extend(addresses.iter().map(|a| (&a[..], None)));
    secure_vector(
        &steps,
        "56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421",
    );
}

#[test]
fn a_single_account_trie() {
    // One leaf, encoded by hand: the root is keccak of
    // [hex-prefix(all 64 nibbles), value], short as it is.
    let key = keccak256([0xaa; 20]).0;
    let account = Bytes::from_static(&[0xc4, 0x01, 0x80, 0x80, 0x80]);
    let mut leaf = vec![0xe3 + account.len() as u8, 0xa1, 0x20];
    leaf.extend_from_slice(&key);
    leaf.push(0x80 + account.len() as u8);
    leaf.extend_from_slice(&account);
    let root = apply_held(&EMPTY_ROOT, &[(key, Some(account))], &mut Store::new());
    assert_eq!(root, keccak256(&leaf).0);
}

#[test]
fn preimages_land_under_their_prefix() {
    for prefix in [&[][..], &[0xa], &[1, 2], &[0xf, 0, 3], &[4, 0xd, 2, 9]] {
        for len in [20, 32] {
            let found = preimage_under(prefix, len, 1 << 22).expect("within the bound");
            assert_eq!(found.len(), len);
            let hash = keccak256(&found).0;
            assert!(
                prefix
                    .iter()
                    .enumerate()
                    .all(|(i, n)| nibble(&hash, i) == *n),
                "{prefix:?}"
            );
        }
    }
    assert_eq!(preimage_under(&[0x10], 32, 100), None);
    assert_eq!(preimage_under(&[1, 2, 3, 4, 5, 6, 7, 8], 20, 10), None);
}
