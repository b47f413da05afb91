//! A block's `stateRoot` from its parent's: the parent's verified trie
//! with the block's changes applied, as geth's `IntermediateRoot` (empty
//! accounts an execution touched deleted). A simulated block's root
//! (each block of a simulation applies only its own changes: the nodes
//! earlier blocks made are kept for the request), and a replayed block's
//! post-state, kept as state once its root is the block's verified one.
//!
//! Only verified nodes and nodes made here from them are read. A node on
//! a changed key's path that is not held is fetched with a proof of that
//! key; a node a deletion collapses into is fetched with a proof of a key
//! found under its path (a preimage whose hash starts with the path: about
//! 16^depth tries, so only for shallow paths, where such nodes are, and
//! for a bounded number of them; deeper, or more, is the node's). A
//! replay searches for none: its post-state is kept when what it holds
//! allows, and not otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use alloy_primitives::map::AddressMap;
use alloy_primitives::{Address, B256, U256, keccak256};
use alloy_rlp::Encodable;
use bytes::Bytes;
use neve_state::{Read, State, Updated};
use revm::database::{AccountState, DbAccount};
use revm::state::EvmState;

use crate::db::Needs;
use crate::error::CallError;

/// Most candidate preimages tried for one node a deletion collapses into:
/// 16 times what a path of [`MAX_SIBLING_DEPTH`] nibbles needs on average
/// (16^4), so a search fails about once in e^16. Default is 1,048,576.
const MAX_PREIMAGE_TRIES: u64 = 1 << 20;

/// Deepest path a collapsed-into node is fetched for. Default is 4.
const MAX_SIBLING_DEPTH: usize = 4;

/// Most collapsed-into nodes searched for in one run: with
/// [`MAX_PREIMAGE_TRIES`], at most 16 M hashes (a few seconds), about
/// 1 M (a quarter of a second) at the average. Default is 16.
const MAX_SIBLINGS: usize = 16;

/// Most trie updates (an account or a slot changed in a block, counted
/// once a block) one request may make: each is work for its block's root,
/// and a proof to fetch if its path is not held. A larger change (a state
/// override of a whole contract's storage) is the node's. Default is
/// 20,000.
pub(crate) const MAX_CHANGED_KEYS: usize = 20_000;

/// The simulated chain's state as tries: what changed since the last
/// root, and the nodes made so far.
#[derive(Default)]
pub(crate) struct Changes {
    /// Changed since the last root computed.
    dirty: BTreeMap<Address, Changed>,
    /// Keys changed in the whole request.
    changed_keys: usize,
    /// The last root computed, and each account's storage root in it
    /// (where its storage changed).
    root: Option<B256>,
    storage_roots: HashMap<Address, [u8; 32]>,
    /// Nodes of the simulated tries, by hash.
    nodes: neve_state::Made,
    /// Preimages of keys under paths, to fetch the nodes deletions
    /// collapse into.
    preimages: Preimages,
}

/// Keys found under a path, for proofs that bring the node there.
#[derive(Default)]
struct Preimages {
    /// Found, by (length, path).
    found: HashMap<(usize, Vec<u8>), Vec<u8>>,
    /// Searched for in this root's computation.
    searched: usize,
    /// None is searched for: a node a deletion collapses into that is not
    /// held ends the computation.
    off: bool,
}

#[derive(Default)]
struct Changed {
    /// Slots written.
    slots: BTreeSet<U256>,
    /// Its storage starts empty (created, destroyed, or replaced by a
    /// `state` override): the trie holds only what the overlay does.
    fresh_storage: bool,
    /// An execution touched it after its last override: empty, it is
    /// deleted (EIP-161), as geth's `Finalise(true)` deletes it; an
    /// account only overridden stays, as geth keeps it.
    executed: bool,
}

impl Changes {
    /// Changes whose root is computed from what is held, without
    /// searching for keys to fetch (a replay's post-state).
    pub(crate) fn without_searches() -> Self {
        Changes {
            preimages: Preimages {
                off: true,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Whether `address` changed since the last root computed.
    pub(crate) fn is_dirty(&self, address: &Address) -> bool {
        self.dirty.contains_key(address)
    }

    /// The nodes made for the roots computed so far (each referenced by
    /// hash from the last root, or from a node made before it).
    pub(crate) fn into_made(self) -> neve_state::Made {
        self.nodes
    }

    /// An execution's changes (a call's, a system call's).
    pub(crate) fn record(&mut self, state: &EvmState) -> Result<(), CallError> {
        for (address, account) in state {
            if !account.is_touched() {
                continue;
            }
            let changed = self.changed(*address);
            changed.executed = true;
            if account.is_created() || account.is_selfdestructed() {
                changed.fresh_storage = true;
                changed.slots.clear();
            }
            let slots = account
                .storage
                .iter()
                .filter(|(_, slot)| slot.is_changed())
                .map(|(key, _)| *key);
            self.add_slots(*address, slots);
        }
        self.within_bound()
    }

    /// An account a state override set: `replaced` when its whole
    /// storage was.
    pub(crate) fn overridden(
        &mut self,
        address: Address,
        replaced: bool,
        slots: impl Iterator<Item = U256>,
    ) -> Result<(), CallError> {
        let changed = self.changed(address);
        changed.executed = false;
        if replaced {
            changed.fresh_storage = true;
            changed.slots.clear();
        }
        self.add_slots(address, slots);
        self.within_bound()
    }

    /// The storage roots the base root holds for accounts a run read
    /// there (`None`: not there), so the root's computing walks to none of
    /// the changed ones again. Only before a root is computed: after, the
    /// base is another.
    pub(crate) fn read_at_base<'a>(
        &mut self,
        roots: impl Iterator<Item = (&'a Address, &'a Option<[u8; 32]>)>,
    ) {
        if self.root.is_some() {
            return;
        }
        for (address, root) in roots {
            if self.dirty.contains_key(address) {
                self.storage_roots
                    .entry(*address)
                    .or_insert(root.unwrap_or(neve_state::EMPTY_ROOT));
            }
        }
    }

    /// An account credited outside the calls (a withdrawal).
    pub(crate) fn touched(&mut self, address: Address) -> Result<(), CallError> {
        self.changed(address).executed = true;
        self.within_bound()
    }

    /// `address`'s entry among this block's changes; a new one counts as a
    /// key to update (the bound counts updates to the roots, not touches:
    /// a thousand calls from one sender change one account).
    fn changed(&mut self, address: Address) -> &mut Changed {
        if !self.dirty.contains_key(&address) {
            self.changed_keys += 1;
        }
        self.dirty.entry(address).or_default()
    }

    fn add_slots(&mut self, address: Address, slots: impl Iterator<Item = U256>) {
        let changed = self.dirty.entry(address).or_default();
        for slot in slots {
            if changed.slots.insert(slot) {
                self.changed_keys += 1;
            }
        }
    }

    fn within_bound(&self) -> Result<(), CallError> {
        if self.changed_keys > MAX_CHANGED_KEYS {
            return Err(CallError::Unsupported);
        }
        Ok(())
    }
}

/// The state root, or what to fetch first.
pub(crate) enum Root {
    Hash(B256),
    Needs(Needs),
}

/// The verified trie a run's changes apply to: the state, and the root of
/// the block the run is pinned to (its parent's, for a replay).
#[derive(Clone, Copy)]
pub(crate) struct Base<'a> {
    pub(crate) state: &'a State,
    pub(crate) root: B256,
}

/// The root after the block just executed, its accounts as the run's
/// overlay holds them (`accounts`). On [`Root::Needs`] its changes stay
/// pending, so the next block's root is computed with them (and names
/// what they need too).
pub(crate) fn state_root(
    base: Base<'_>,
    accounts: &AddressMap<DbAccount>,
    changes: &mut Changes,
) -> Result<Root, CallError> {
    let base_root = changes.root.unwrap_or(base.root);
    let mut needs = Needs::default();
    changes.preimages.searched = 0;
    let mut account_updates = Vec::with_capacity(changes.dirty.len());
    let mut by_key = BTreeMap::new();
    let mut storage_roots = Vec::new();
    for (address, changed) in &changes.dirty {
        let key = keccak256(address).0;
        by_key.insert(key, *address);
        let Some(now) = accounts.get(address) else {
            continue;
        };
        let gone = matches!(now.account_state, AccountState::NotExisting)
            || (changed.executed && now.info.is_empty());
        if gone {
            account_updates.push((key, None));
            storage_roots.push((*address, neve_state::EMPTY_ROOT));
            continue;
        }
        let start = if changed.fresh_storage {
            neve_state::EMPTY_ROOT
        } else if let Some(root) = changes.storage_roots.get(address) {
            *root
        } else {
            match base.state.account(&base.root.0, &address.0.0, false) {
                Read::Found(read) => read
                    .account
                    .map_or(neve_state::EMPTY_ROOT, |a| a.storage_root),
                Read::Missing => {
                    needs.accounts.entry(*address).or_default();
                    continue;
                }
            }
        };
        let slots: Vec<U256> = if changed.fresh_storage {
            now.storage.keys().copied().collect()
        } else {
            changed.slots.iter().copied().collect()
        };
        let mut slot_keys = BTreeMap::new();
        let updates: Vec<([u8; 32], Option<Bytes>)> = slots
            .iter()
            .map(|slot| {
                let value = now.storage.get(slot).copied().unwrap_or_default();
                let key = keccak256(B256::from(*slot)).0;
                slot_keys.insert(key, *slot);
                (key, (!value.is_zero()).then(|| rlp(&value)))
            })
            .collect();
        let storage_root = match apply(base.state, &mut changes.nodes, &start, &updates)? {
            Updated::Root(root) => root,
            Updated::Unheld(unheld) => {
                let entry = needs.accounts.entry(*address).or_default();
                for key in unheld.keys {
                    if let Some(slot) = slot_keys.get(&key) {
                        entry.0.insert(B256::from(*slot));
                    }
                }
                for path in unheld.siblings {
                    let preimage = changes.preimages.under(&path, 32)?;
                    entry.0.insert(B256::from_slice(&preimage));
                }
                continue;
            }
        };
        storage_roots.push((*address, storage_root));
        let mut leaf = Vec::with_capacity(110);
        let storage_root = B256::from(storage_root);
        let fields: [&dyn Encodable; 4] = [
            &now.info.nonce,
            &now.info.balance,
            &storage_root,
            &now.info.code_hash,
        ];
        alloy_rlp::encode_list::<_, dyn Encodable>(&fields, &mut leaf);
        account_updates.push((key, Some(leaf.into())));
    }
    if !needs.is_empty() {
        return Ok(Root::Needs(needs));
    }
    match apply(
        base.state,
        &mut changes.nodes,
        &base_root.0,
        &account_updates,
    )? {
        Updated::Root(root) => {
            let root = B256::from(root);
            changes.root = Some(root);
            changes.storage_roots.extend(storage_roots);
            changes.dirty.clear();
            Ok(Root::Hash(root))
        }
        Updated::Unheld(unheld) => {
            for key in unheld.keys {
                if let Some(address) = by_key.get(&key) {
                    needs.accounts.entry(*address).or_default();
                }
            }
            for path in unheld.siblings {
                let preimage = changes.preimages.under(&path, 20)?;
                needs
                    .accounts
                    .entry(Address::from_slice(&preimage))
                    .or_default();
            }
            if needs.is_empty() {
                return Err(CallError::Unsupported);
            }
            Ok(Root::Needs(needs))
        }
    }
}

/// `updates` applied to the trie at `root`, reading the simulation's own
/// nodes first, then the verified store; the new nodes kept.
fn apply(
    state: &State,
    nodes: &mut neve_state::Made,
    root: &[u8; 32],
    updates: &[([u8; 32], Option<Bytes>)],
) -> Result<Updated, CallError> {
    neve_state::apply_into(root, updates, |hash| state.node(hash), nodes)
        .map_err(|_| CallError::Unsupported)
}

impl Preimages {
    /// A preimage of `len` bytes whose hash lies under `path` (found once
    /// per request), or the node's.
    fn under(&mut self, path: &[u8], len: usize) -> Result<Vec<u8>, CallError> {
        if let Some(preimage) = self.found.get(&(len, path.to_vec())) {
            return Ok(preimage.clone());
        }
        self.searched += 1;
        if self.off || path.len() > MAX_SIBLING_DEPTH || self.searched > MAX_SIBLINGS {
            return Err(CallError::Unsupported);
        }
        let preimage = neve_state::preimage_under(path, len, MAX_PREIMAGE_TRIES)
            .ok_or(CallError::Unsupported)?;
        self.found.insert((len, path.to_vec()), preimage.clone());
        Ok(preimage)
    }
}

fn rlp(value: &U256) -> Bytes {
    let mut out = Vec::with_capacity(33);
    value.encode(&mut out);
    out.into()
}
