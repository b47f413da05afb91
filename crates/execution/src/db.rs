//! The EVM's database over verified state at one pinned block
//! ([`VerifiedDb`]): accounts and slots from trie nodes reached from the
//! block's verified `stateRoot`, code by its verified hash, `BLOCKHASH`
//! from the stored verified headers.
//!
//! A read that needs a node neve does not hold does not stop the run: it
//! answers as if empty and is noted ([`Needs`]), so one run finds every key
//! it reaches before the first miss and most of those after it. A run with
//! needs is never an answer: its result is thrown away, the needs are
//! fetched in one batch of proofs, and the call runs again.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use alloy_primitives::{Address, B256, U256};
use neve_state::{HotKey, Read, State, StorageKeys};
use revm::bytecode::Bytecode;
use revm::database_interface::{DBErrorMarker, DatabaseRef};
use revm::state::AccountInfo;

/// Bytes of analysed code kept across calls (two generations of half this
/// each): revm analyses a contract's jump destinations before running it,
/// which for a large contract costs more than the call; a popular
/// contract is analysed once. Default is 64 MiB.
pub const CODE_CACHE_BYTES: usize = 64 << 20;

/// Analysed code by its hash, bounded in bytes: new entries go to the young
/// generation, a full young generation replaces the old one whole.
#[derive(Default)]
pub struct CodeCache {
    generations: std::sync::Mutex<CodeGenerations>,
}

#[derive(Default)]
struct CodeGenerations {
    young: HashMap<B256, Bytecode>,
    old: HashMap<B256, Bytecode>,
    young_bytes: usize,
}

impl CodeCache {
    fn get(&self, hash: &B256) -> Option<Bytecode> {
        let mut generations = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(code) = generations.young.get(hash) {
            return Some(code.clone());
        }
        let code = generations.old.remove(hash)?;
        Self::insert_young(&mut generations, *hash, code.clone());
        Some(code)
    }

    fn insert(&self, hash: B256, code: Bytecode) {
        let mut generations = self.generations.lock().unwrap_or_else(|e| e.into_inner());
        Self::insert_young(&mut generations, hash, code);
    }

    fn insert_young(generations: &mut CodeGenerations, hash: B256, code: Bytecode) {
        let len = code.len();
        if generations.young_bytes + len > CODE_CACHE_BYTES / 2 {
            generations.old = std::mem::take(&mut generations.young);
            generations.young_bytes = 0;
        }
        generations.young_bytes += len;
        generations.young.insert(hash, code);
    }
}

/// What a run read that neve does not hold, by account: the account
/// itself, some of its slots (as the trie keys them, before keccak), and
/// whether its code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Accounts, each with its missing slots and whether its code is.
    pub accounts: BTreeMap<Address, (BTreeSet<B256>, bool)>,
}

impl Needs {
    /// Nothing is missing.
    pub fn is_empty(&self) -> bool {
        self.accounts.is_empty()
    }

    /// How many accounts and slots it names.
    pub fn keys(&self) -> usize {
        self.accounts
            .values()
            .map(|(slots, _)| 1 + slots.len())
            .sum()
    }
}

/// The database a run never gets an error from: reads that miss are
/// noted, not failed (see the module's doc).
#[derive(Clone, Debug, thiserror::Error)]
#[error("unreachable")]
pub enum Never {}

impl DBErrorMarker for Never {}

/// Reads of verified state at one block, and what they missed.
pub struct VerifiedDb<'a> {
    state: &'a State,
    /// Analysed code shared by every call.
    codes: Option<&'a CodeCache>,
    root: [u8; 32],
    /// A verified root read where `root` reaches nothing (see
    /// [`VerifiedDb::with_below`]).
    below: Option<[u8; 32]>,
    keys: StorageKeys,
    /// Hashes of stored verified blocks, for `BLOCKHASH`.
    block_hash: &'a (dyn Fn(u64) -> Option<B256> + Sync),
    /// The pinned block's height: `BLOCKHASH` of it or later (a block
    /// override's number) is zero, as geth answers.
    height: u64,
    /// Storage roots of the accounts read so far (slots are read under them).
    storage_roots: RefCell<HashMap<Address, Option<[u8; 32]>>>,
    /// Which account a code hash was read from (a code fetch names it).
    code_owners: RefCell<HashMap<B256, Address>>,
    needs: RefCell<Needs>,
    /// `BLOCKHASH` asked for a block outside the stored tail: the run can
    /// never be answered here.
    outside_tail: Cell<bool>,
    /// Every key read, for the hot set at `latest`.
    read: RefCell<Vec<HotKey>>,
    /// The run read an account coreth counts as not empty and revm as
    /// empty (`coreth.rs`): its result is not an answer.
    unsure: Cell<bool>,
}

impl<'a> VerifiedDb<'a> {
    /// A database at `root`, a verified `stateRoot`.
    pub fn new(
        state: &'a State,
        root: B256,
        height: u64,
        block_hash: &'a (dyn Fn(u64) -> Option<B256> + Sync),
    ) -> Self {
        VerifiedDb {
            state,
            codes: None,
            root: root.0,
            below: None,
            keys: state.storage_keys(),
            block_hash,
            height,
            storage_roots: RefCell::default(),
            code_owners: RefCell::default(),
            needs: RefCell::default(),
            outside_tail: Cell::new(false),
            read: RefCell::default(),
            unsure: Cell::new(false),
        }
    }

    /// Reads analysed code through `codes`.
    pub fn with_codes(mut self, codes: &'a CodeCache) -> Self {
        self.codes = Some(codes);
        self
    }

    /// Reads what `root` does not reach at `below` too: a block's parent's
    /// verified root, beneath the block's post-state while that is being
    /// proved (`trace/replay.rs`). What the block did not change reads
    /// there as it does at its own root; what it did comes from its
    /// replay, over this. Only for a run that learns what to fetch, never
    /// for an answer.
    pub(crate) fn with_below(mut self, below: B256) -> Self {
        self.below = Some(below.0);
        self
    }

    /// Notes that code `hash` is `owner`'s: a run that reads it, not
    /// held, names `owner` (an account a run has from elsewhere than this
    /// database, as a post-state being proved hands it over).
    pub(crate) fn note_code_owner(&self, hash: B256, owner: Address) {
        self.code_owners.borrow_mut().insert(hash, owner);
    }

    /// `address` at the pinned root, else below it.
    fn account_at(&self, address: &Address) -> Read<neve_state::AccountRead> {
        match (
            self.state.account(&self.root, &address.0.0, false),
            self.below,
        ) {
            (Read::Missing, Some(below)) => self.state.account(&below, &address.0.0, false),
            (read, _) => read,
        }
    }

    /// The storage roots of the accounts the run read at the pinned root
    /// (`None`: not there, or not held), when it read nowhere else.
    pub(crate) fn storage_roots_read(
        &self,
    ) -> Option<std::cell::Ref<'_, HashMap<Address, Option<[u8; 32]>>>> {
        self.below.is_none().then(|| self.storage_roots.borrow())
    }

    /// What the run missed (taken: asked once, after the run).
    pub fn take_needs(&self) -> Needs {
        self.needs.take()
    }

    /// Whether the run has read anything not held so far (its result is
    /// then no answer, whatever else comes of it).
    pub fn has_needs(&self) -> bool {
        !self.needs.borrow().is_empty()
    }

    /// How many accounts and slots the run has missed so far.
    pub fn needed_keys(&self) -> usize {
        self.needs.borrow().keys()
    }

    /// Whether the run asked `BLOCKHASH` of a block not stored.
    pub fn outside_tail(&self) -> bool {
        self.outside_tail.get()
    }

    /// Whether the run read an account whose emptiness coreth judges
    /// otherwise than revm.
    pub fn unsure(&self) -> bool {
        self.unsure.get()
    }

    /// Every account and slot the run read (taken, as [`Self::take_needs`]).
    pub fn take_read_keys(&self) -> Vec<HotKey> {
        self.read.take()
    }

    fn need(&self, address: Address, slot: Option<B256>, code: bool) {
        let mut needs = self.needs.borrow_mut();
        let entry = needs.accounts.entry(address).or_default();
        if let Some(slot) = slot {
            entry.0.insert(slot);
        }
        entry.1 |= code;
    }
}

impl DatabaseRef for VerifiedDb<'_> {
    type Error = Never;

    fn basic_ref(&self, address: Address) -> Result<Option<AccountInfo>, Never> {
        self.read.borrow_mut().push(HotKey {
            address: address.0.0,
            slot: None,
        });
        match self.account_at(&address) {
            Read::Found(read) => {
                let account = read.account;
                self.storage_roots
                    .borrow_mut()
                    .insert(address, account.map(|a| a.storage_root));
                Ok(account.map(|a| {
                    let code_hash = B256::from(a.code_hash);
                    if a.multi_coin
                        && a.nonce == 0
                        && a.balance.is_zero()
                        && a.code_hash == neve_state::EMPTY_CODE_HASH
                    {
                        self.unsure.set(true);
                    }
                    self.code_owners.borrow_mut().insert(code_hash, address);
                    AccountInfo {
                        balance: a.balance,
                        nonce: a.nonce,
                        code_hash,
                        account_id: None,
                        // Read by hash when the run needs it.
                        code: (a.code_hash == neve_state::EMPTY_CODE_HASH).then(Bytecode::default),
                    }
                }))
            }
            Read::Missing => {
                // Its code with it (nothing for an account without): most
                // accounts a call reaches it runs, and a round is saved.
                self.need(address, None, true);
                self.storage_roots.borrow_mut().insert(address, None);
                Ok(None)
            }
        }
    }

    fn code_by_hash_ref(&self, code_hash: B256) -> Result<Bytecode, Never> {
        if let Some(code) = self.codes.and_then(|codes| codes.get(&code_hash)) {
            return Ok(code);
        }
        match self.state.code(&code_hash.0) {
            Read::Found(code) => {
                let code = bytecode(code.into());
                if let Some(codes) = self.codes {
                    codes.insert(code_hash, code.clone());
                }
                Ok(code)
            }
            Read::Missing => {
                if let Some(owner) = self.code_owners.borrow().get(&code_hash) {
                    self.need(*owner, None, true);
                }
                Ok(Bytecode::default())
            }
        }
    }

    fn storage_ref(&self, address: Address, index: U256) -> Result<U256, Never> {
        let slot = B256::from(index.to_be_bytes());
        self.read.borrow_mut().push(HotKey {
            address: address.0.0,
            slot: Some(slot.0),
        });
        let known = self.storage_roots.borrow().get(&address).copied();
        let root = match known {
            Some(root) => root,
            // Over a post-state being proved, the accounts the block
            // changed are its replay's, never read here: their other
            // slots are read under their root below.
            None if self.below.is_some() => match self.account_at(&address) {
                Read::Found(read) => {
                    let root = read.account.map(|a| a.storage_root);
                    self.storage_roots.borrow_mut().insert(address, root);
                    root
                }
                Read::Missing => {
                    self.need(address, Some(slot), false);
                    return Ok(U256::ZERO);
                }
            },
            // revm reads an account before its storage; a slot of an
            // account not read is one more thing to fetch.
            None => None,
        };
        let Some(root) = root else {
            if self.needs.borrow().accounts.contains_key(&address) {
                self.need(address, Some(slot), false);
            }
            return Ok(U256::ZERO);
        };
        if root == neve_state::EMPTY_ROOT {
            return Ok(U256::ZERO);
        }
        let value_slot = self.keys.value_slot(&slot.0);
        match self.state.slot(&root, &value_slot, false) {
            Read::Found(read) => Ok(read.value),
            Read::Missing => {
                self.need(address, Some(B256::from(value_slot)), false);
                Ok(U256::ZERO)
            }
        }
    }

    fn block_hash_ref(&self, number: u64) -> Result<B256, Never> {
        if number >= self.height {
            return Ok(B256::ZERO);
        }
        match (self.block_hash)(number) {
            Some(hash) => Ok(hash),
            None => {
                self.outside_tail.set(true);
                Ok(B256::ZERO)
            }
        }
    }
}

/// Code as the EVM runs it: a well-formed EIP-7702 delegation designator
/// as a delegation, anything else (a malformed `0xef01…` included, which
/// revm's `Bytecode::new_raw` panics on) as legacy code, as geth runs it
/// (`invalid opcode: opcode 0xef not defined`).
pub(crate) fn bytecode(code: alloy_primitives::Bytes) -> Bytecode {
    Bytecode::new_raw_checked(code.clone()).unwrap_or_else(|_| Bytecode::new_legacy(code))
}

#[cfg(test)]
mod tests {
    use alloy_primitives::{Address, B256, U256, keccak256};
    use alloy_rlp::Encodable;
    use bytes::Bytes;
    use neve_state::{EMPTY_CODE_HASH, EMPTY_ROOT, State, Updated};
    use revm::database_interface::DatabaseRef;

    use super::VerifiedDb;

    /// A trie of `entries` (trie keys before keccak, leaf values): its
    /// root, and its nodes.
    fn trie(entries: &[(&[u8], Vec<u8>)]) -> ([u8; 32], Vec<Bytes>) {
        let updates: Vec<([u8; 32], Option<Bytes>)> = entries
            .iter()
            .map(|(key, value)| (keccak256(key).0, Some(Bytes::from(value.clone()))))
            .collect();
        let mut made = Vec::new();
        match neve_state::apply_updates(&EMPTY_ROOT, &updates, |_| None, |_, node| made.push(node))
        {
            Ok(Updated::Root(root)) => (root, made),
            other => panic!("{other:?}"),
        }
    }

    fn account_leaf(balance: u64, storage_root: [u8; 32]) -> Vec<u8> {
        let mut leaf = Vec::new();
        let (nonce, balance) = (1u64, U256::from(balance));
        let (storage_root, code_hash) = (B256::from(storage_root), B256::from(EMPTY_CODE_HASH));
        let fields: [&dyn Encodable; 4] = [&nonce, &balance, &storage_root, &code_hash];
        alloy_rlp::encode_list::<_, dyn Encodable>(&fields, &mut leaf);
        leaf
    }

    fn no_hashes(_: u64) -> Option<B256> {
        None
    }

    /// Over a post-state still being proved, what the pinned root does not
    /// reach reads at the root below it, storage included (under the
    /// account's root there, even when the run never read the account
    /// through this database); what the pinned root reaches is read there;
    /// what neither reaches is a need, and without a root below, every
    /// read of an unheld root is.
    #[test]
    fn reads_fall_to_the_root_below_and_name_what_neither_holds() {
        let state = State::new(1 << 20, 16);
        let (holder, other) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let slot = B256::with_last_byte(1);
        let mut seven = Vec::new();
        U256::from(7).encode(&mut seven);
        let (storage, mut nodes) = trie(&[(slot.as_slice(), seven)]);
        let (below, accounts) = trie(&[(holder.as_slice(), account_leaf(5, storage))]);
        nodes.extend(accounts);
        let witnessed = neve_state::verify_witness(&below, &nodes, &[]).unwrap();
        assert_eq!(witnessed.nodes, 2);
        state.insert(witnessed.verified);
        // The pinned block's root: not held (its post-state is being proved).
        let pinned = B256::repeat_byte(9);

        let db = VerifiedDb::new(&state, pinned, 10, &no_hashes).with_below(B256::from(below));
        assert_eq!(
            db.storage_ref(holder, U256::from(1)).unwrap(),
            U256::from(7),
            "a slot of an account the run has from its overlay"
        );
        assert_eq!(
            db.basic_ref(holder).unwrap().unwrap().balance,
            U256::from(5)
        );
        assert_eq!(db.basic_ref(other).unwrap(), None, "absent below");
        assert!(!db.has_needs());

        let neither = VerifiedDb::new(&state, pinned, 10, &no_hashes).with_below(pinned);
        assert_eq!(
            neither.storage_ref(holder, U256::from(1)).unwrap(),
            U256::ZERO
        );
        assert_eq!(neither.basic_ref(other).unwrap(), None);
        let needs = neither.take_needs();
        assert_eq!(needs.accounts[&holder].0.len(), 1, "{needs:?}");
        assert!(needs.accounts.contains_key(&other), "{needs:?}");

        // What the pinned root reaches is read there, not below.
        let (held, accounts) = trie(&[(holder.as_slice(), account_leaf(6, storage))]);
        let witnessed = neve_state::verify_witness(&held, &accounts, &[]).unwrap();
        state.insert(witnessed.verified);
        let db =
            VerifiedDb::new(&state, B256::from(held), 10, &no_hashes).with_below(B256::from(below));
        assert_eq!(
            db.basic_ref(holder).unwrap().unwrap().balance,
            U256::from(6)
        );
        assert_eq!(
            db.storage_ref(holder, U256::from(1)).unwrap(),
            U256::from(7)
        );
        assert!(!db.has_needs());

        let alone = VerifiedDb::new(&state, pinned, 10, &no_hashes);
        assert_eq!(alone.basic_ref(holder).unwrap(), None);
        assert!(alone.take_needs().accounts.contains_key(&holder));
    }

    /// A replay's post-state root is computed with the storage roots the
    /// replay read at the parent's root (no walk to each changed account
    /// again): the same root as walking, and the trie's own; a read below
    /// a post-state being proved hands over none.
    #[test]
    fn a_post_states_root_takes_the_storage_roots_its_replay_read() {
        use alloy_primitives::map::AddressMap;
        use revm::database::DbAccount;
        use revm::state::AccountInfo;

        use crate::state_root::{Base, Changes, Root, state_root};

        let state = State::new(1 << 20, 16);
        let (holder, absent) = (Address::repeat_byte(1), Address::repeat_byte(2));
        let mut seven = Vec::new();
        U256::from(7).encode(&mut seven);
        let (storage, mut nodes) = trie(&[(B256::with_last_byte(1).as_slice(), seven)]);
        let (root, accounts) = trie(&[(holder.as_slice(), account_leaf(5, storage))]);
        nodes.extend(accounts);
        state.insert(
            neve_state::verify_witness(&root, &nodes, &[])
                .unwrap()
                .verified,
        );

        let db = VerifiedDb::new(&state, B256::from(root), 10, &no_hashes);
        assert_eq!(
            db.basic_ref(holder).unwrap().unwrap().balance,
            U256::from(5)
        );
        assert_eq!(db.basic_ref(absent).unwrap(), None);
        let read = db
            .storage_roots_read()
            .expect("read at the pinned root alone");
        assert_eq!(read[&holder], Some(storage));
        assert_eq!(read[&absent], None);

        // The block pays the holder 1 and the absent account 3.
        let info = |balance: u64| DbAccount {
            info: AccountInfo {
                balance: U256::from(balance),
                nonce: 1,
                code_hash: B256::from(EMPTY_CODE_HASH),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut after = AddressMap::default();
        after.insert(holder, info(6));
        after.insert(absent, info(3));
        let changes = || {
            let mut changes = Changes::without_searches();
            changes.touched(holder).unwrap();
            changes.touched(absent).unwrap();
            changes
        };
        let base = Base {
            state: &state,
            root: B256::from(root),
        };
        let mut walked = changes();
        let mut taken = changes();
        taken.read_at_base(read.iter());
        let (expected, _) = trie(&[
            (holder.as_slice(), account_leaf(6, storage)),
            (absent.as_slice(), account_leaf(3, EMPTY_ROOT)),
        ]);
        for changes in [&mut walked, &mut taken] {
            match state_root(base, &after, changes) {
                Ok(Root::Hash(hash)) => assert_eq!(hash, B256::from(expected)),
                _ => panic!("the root is computed from what is held"),
            }
        }

        let below = VerifiedDb::new(&state, B256::repeat_byte(9), 10, &no_hashes)
            .with_below(B256::from(root));
        assert!(below.storage_roots_read().is_none());
    }
}
