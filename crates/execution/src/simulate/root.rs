//! A simulated block's `stateRoot`: the pinned block's verified trie with
//! everything the simulation changed so far applied, as geth's
//! `IntermediateRoot` (empty accounts an execution touched deleted).
//!
//! Only verified nodes are read. A node on a changed key's path that is
//! not held is fetched with a proof of that key; a node a deletion
//! collapses into is fetched with a proof of a key found under its path
//! (a preimage whose hash starts with the path: about 16^depth tries, so
//! only for shallow paths, where such nodes are; deeper is the node's).

use std::collections::{BTreeMap, BTreeSet};

use alloy_primitives::{Address, B256, U256, keccak256};
use alloy_rlp::Encodable;
use neve_state::{Read, Updated};
use revm::database::AccountState;
use revm::state::EvmState;

use crate::db::Needs;
use crate::error::CallError;
use crate::run::Pinned;

use super::block::Overlay;

/// Most candidate preimages tried for one node a deletion collapses into:
/// enough for a path of 5 nibbles (16^5 ≈ 1 M keccak hashes, well under a
/// second), past which the answer is the node's. Default is 4,000,000.
const MAX_PREIMAGE_TRIES: u64 = 4_000_000;

/// Deepest path a collapsed-into node is fetched for.
const MAX_SIBLING_DEPTH: usize = 5;

/// What the simulation changed, by account, since the pinned block.
#[derive(Default)]
pub(crate) struct Changes {
    accounts: BTreeMap<Address, Changed>,
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
    /// An execution's changes (a call's, a system call's).
    pub(crate) fn record(&mut self, state: &EvmState, executed: bool) {
        for (address, account) in state {
            if !account.is_touched() {
                continue;
            }
            let changed = self.accounts.entry(*address).or_default();
            changed.executed |= executed;
            if account.is_created() || account.is_selfdestructed() {
                changed.fresh_storage = true;
                changed.slots.clear();
            }
            changed.slots.extend(
                account
                    .storage
                    .iter()
                    .filter(|(_, slot)| slot.is_changed())
                    .map(|(key, _)| *key),
            );
        }
    }

    /// An account a state override set: `replaced` when its whole
    /// storage was.
    pub(crate) fn overridden(
        &mut self,
        address: Address,
        replaced: bool,
        slots: impl Iterator<Item = U256>,
    ) {
        let changed = self.accounts.entry(address).or_default();
        changed.executed = false;
        if replaced {
            changed.fresh_storage = true;
            changed.slots.clear();
        }
        changed.slots.extend(slots);
    }

    /// An account credited outside the calls (a withdrawal).
    pub(crate) fn touched(&mut self, address: Address) {
        self.accounts.entry(address).or_default().executed = true;
    }
}

/// The state root, or what to fetch first.
pub(crate) enum Root {
    Hash(B256),
    Needs(Needs),
}

pub(crate) fn state_root(
    pinned: &Pinned<'_>,
    overlay: &Overlay<'_>,
    changes: &Changes,
) -> Result<Root, CallError> {
    let state = pinned.state;
    let base_root = pinned.block.state_root;
    let mut needs = Needs::default();
    let mut account_updates = Vec::with_capacity(changes.accounts.len());
    let mut by_key = BTreeMap::new();
    for (address, changed) in &changes.accounts {
        let key = keccak256(address).0;
        by_key.insert(key, *address);
        let Some(now) = overlay.cache.accounts.get(address) else {
            continue;
        };
        let gone = matches!(now.account_state, AccountState::NotExisting)
            || (changed.executed && now.info.is_empty());
        if gone {
            account_updates.push((key, None));
            continue;
        }
        let base_storage = if changed.fresh_storage {
            neve_state::EMPTY_ROOT
        } else {
            match state.account(&base_root.0, &address.0.0, false) {
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
        let updates: Vec<([u8; 32], Option<bytes::Bytes>)> = slots
            .iter()
            .map(|slot| {
                let value = now.storage.get(slot).copied().unwrap_or_default();
                let key = keccak256(B256::from(*slot)).0;
                slot_keys.insert(key, *slot);
                (key, (!value.is_zero()).then(|| rlp(&value)))
            })
            .collect();
        let storage_root = match state
            .updated_root(&base_storage, &updates)
            .map_err(|_| CallError::Unsupported)?
        {
            Updated::Root(root) => root,
            Updated::Unheld(unheld) => {
                let entry = needs.accounts.entry(*address).or_default();
                for key in unheld.keys {
                    if let Some(slot) = slot_keys.get(&key) {
                        entry.0.insert(B256::from(*slot));
                    }
                }
                for path in unheld.siblings {
                    entry.0.insert(B256::from_slice(&under(&path, 32)?));
                }
                continue;
            }
        };
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
    match state
        .updated_root(&base_root.0, &account_updates)
        .map_err(|_| CallError::Unsupported)?
    {
        Updated::Root(root) => Ok(Root::Hash(B256::from(root))),
        Updated::Unheld(unheld) => {
            for key in unheld.keys {
                if let Some(address) = by_key.get(&key) {
                    needs.accounts.entry(*address).or_default();
                }
            }
            for path in unheld.siblings {
                let address = Address::from_slice(&under(&path, 20)?);
                needs.accounts.entry(address).or_default();
            }
            if needs.is_empty() {
                return Err(CallError::Unsupported);
            }
            Ok(Root::Needs(needs))
        }
    }
}

/// A preimage of `len` bytes whose hash lies under `path`, or the node's.
fn under(path: &[u8], len: usize) -> Result<Vec<u8>, CallError> {
    if path.len() > MAX_SIBLING_DEPTH {
        return Err(CallError::Unsupported);
    }
    neve_state::preimage_under(path, len, MAX_PREIMAGE_TRIES).ok_or(CallError::Unsupported)
}

fn rlp(value: &U256) -> bytes::Bytes {
    let mut out = Vec::with_capacity(33);
    value.encode(&mut out);
    out.into()
}
