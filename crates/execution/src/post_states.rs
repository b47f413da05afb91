//! Replayed blocks' post-states computed off the answers' path
//! ([`PostStates`]): the root of a block's changes over its parent's
//! verified trie, and the nodes made kept when it is the block's own
//! `stateRoot` (see `trace/post_state.rs` for what a replay hands over).

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use alloy_primitives::B256;
use alloy_primitives::map::AddressMap;
use bytes::Bytes;
use neve_state::State;
use revm::bytecode::Bytecode;
use revm::database::DbAccount;

use crate::state_root::{Base, Changes, Root, state_root};

/// Post-states waiting for their thread: each holds its block's changed
/// accounts (within `MAX_CHANGED_KEYS` accounts and slots) and the codes
/// it read that are not held (within the block's gas). One past them is
/// not kept by this replay: its claim is let go, so a later replay of the
/// block may keep it, and its child fetches as it would have meanwhile.
/// Default is 2.
const POST_STATES_QUEUED: usize = 2;

/// Post-states as their replays left them, kept while they are proved
/// (queued or computing): one computing, the queued ones, and one listed
/// just before its queueing is refused. Past them the oldest is let go
/// (its child fetches as it would have without). Default is 4.
const MAX_UNPROVED: usize = POST_STATES_QUEUED + 2;

/// Replayed blocks' post-states computed on a thread of their own, off
/// the answers' path: the trace that replayed a block is sent as soon as
/// its receipts are proved, and the block's child, traced next, waits for
/// the post-state ([`neve_state::State::wait_post_state`]) rather than ask
/// the node for it.
pub struct PostStates {
    queue: SyncSender<(Pending, Ending)>,
    state: Arc<State>,
    /// The post-states queued or computing, as their replays left them.
    unproved: Arc<Mutex<VecDeque<Arc<Unproved>>>>,
}

/// A replayed block's post-state as its replay left it, while it is being
/// proved (its root computed and compared with the block's): what the
/// block's child's first run reads to learn what to fetch, rather than
/// wait for the proof ([`crate::Pinned::unproved`]). Never an answer's
/// state.
pub struct Unproved {
    pub(crate) height: u64,
    pub(crate) block_hash: [u8; 32],
    /// The block's parent's verified root: what the block did not change
    /// reads there as at the block's own.
    pub(crate) below: B256,
    /// The accounts the block changed, as its replay left them.
    pub(crate) accounts: AddressMap<DbAccount>,
    /// Codes it read or made that are not held, by hash.
    pub(crate) codes: Vec<(B256, Bytecode)>,
}

impl Unproved {
    /// Whether the block changed `address` (its replay holds it).
    pub fn changed(&self, address: &alloy_primitives::Address) -> bool {
        self.accounts.contains_key(address)
    }

    /// The block's parent's verified root, what it did not change reads
    /// at.
    pub fn below(&self) -> B256 {
        self.below
    }
}

impl PostStates {
    /// Its thread started, keeping post-states in `state`.
    pub fn start(state: Arc<State>) -> std::io::Result<PostStates> {
        let (queue, queued) = sync_channel::<(Pending, Ending)>(POST_STATES_QUEUED);
        let unproved: Arc<Mutex<VecDeque<Arc<Unproved>>>> = Arc::default();
        std::thread::Builder::new()
            .name("neve-post-state".into())
            .spawn(move || {
                for (pending, ending) in queued {
                    // A fault in one (its claim ended as it unwinds) stops
                    // only that one.
                    let computed = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        pending.compute(ending);
                    }));
                    if computed.is_err() {
                        tracing::error!("computing a replayed block's post-state panicked");
                    }
                }
            })?;
        Ok(PostStates {
            queue,
            state,
            unproved,
        })
    }

    /// Block `height`'s post-state as its replay left it, while it is
    /// being proved.
    pub fn unproved(&self, height: u64, block_hash: &[u8; 32]) -> Option<Arc<Unproved>> {
        let unproved = self.unproved.lock().unwrap_or_else(|e| e.into_inner());
        unproved
            .iter()
            .find(|u| u.height == height && u.block_hash == *block_hash)
            .cloned()
    }

    /// Claims the computing of block `height`'s post-state: `None` when
    /// another replay of the block (under another tracer) claimed it.
    pub(crate) fn claim(&self, height: u64, block_hash: [u8; 32]) -> Option<Ending> {
        self.state
            .claim_post_state(height, &block_hash)
            .then(|| Ending {
                state: self.state.clone(),
                height,
                block_hash,
                release: false,
                unproved: self.unproved.clone(),
            })
    }

    /// `pending` computed on the thread, or not kept when its queue is
    /// full (its claim let go).
    pub(crate) fn queue(&self, pending: Pending, ending: Ending) {
        {
            let mut unproved = self.unproved.lock().unwrap_or_else(|e| e.into_inner());
            if unproved.len() >= MAX_UNPROVED {
                unproved.pop_front();
            }
            unproved.push_back(pending.unproved.clone());
        }
        match self.queue.try_send((pending, ending)) {
            Ok(()) => {}
            Err(TrySendError::Full((_, mut ending))) => {
                ending.release = true;
                ending.unkept(None);
            }
            // Never while neve runs: the thread outlives every fault.
            Err(TrySendError::Disconnected((_, ending))) => {
                ending.unkept(Some("the post-state thread is gone"));
            }
        }
    }
}

/// A claimed post-state's computing, ended (kept or not) once, whatever
/// happens: whoever waits for it goes on.
pub(crate) struct Ending {
    state: Arc<State>,
    height: u64,
    block_hash: [u8; 32],
    /// Its claim is let go rather than ended: it was not computed, and a
    /// later replay of the block may.
    release: bool,
    /// Where its post-state is listed as its replay left it: unlisted
    /// before whoever waits goes on, so none reads it once it is proved
    /// or not kept.
    unproved: Arc<Mutex<VecDeque<Arc<Unproved>>>>,
}

impl Ending {
    /// Counted as not kept: `why`, when it is neve's fault.
    pub(crate) fn unkept(self, why: Option<&'static str>) {
        let counters = &self.state.counters;
        if let Some(why) = why {
            counters.post_states_unlike.fetch_add(1, Relaxed);
            // Once: on a chain whose rules neve does not know it would be
            // every block's.
            static TOLD: AtomicBool = AtomicBool::new(false);
            if !TOLD.swap(true, Relaxed) {
                tracing::warn!(
                    block = self.height,
                    why,
                    "a replayed block's post-state is not kept (told once; counted in neve_state_post_states_unlike_total)"
                );
            }
        }
        counters.post_states_unkept.fetch_add(1, Relaxed);
    }
}

/// A replayed block's post-state to compute: its changes over its
/// parent's verified root, as the replay left its accounts.
pub(crate) struct Pending {
    /// The block's changed accounts and codes as its replay left them,
    /// over its parent's root: listed for its child while this is proved.
    pub(crate) unproved: Arc<Unproved>,
    /// The block's own, verified.
    pub(crate) state_root: B256,
    pub(crate) changes: Changes,
    /// When the replay handed it over.
    pub(crate) queued: Instant,
}

impl Pending {
    /// Its root computed from what is held, and the nodes made kept when
    /// it is the block's; counted, logged, and `ending` ended.
    fn compute(mut self, ending: Ending) {
        let started = Instant::now();
        let state: &State = &ending.state;
        let base = Base {
            state,
            root: self.unproved.below,
        };
        let root = match state_root(base, &self.unproved.accounts, &mut self.changes) {
            Ok(Root::Hash(root)) => root,
            Ok(Root::Needs(_)) | Err(_) => return ending.unkept(None),
        };
        if root != self.state_root {
            return ending.unkept(Some("its root is unlike the header's"));
        }
        let rooted = started.elapsed();
        // Made here, each under its own hash: what the header's root
        // reaches of them, walked from it, not hashed again.
        let codes: Vec<Bytes> = self
            .unproved
            .codes
            .iter()
            .map(|(_, code)| code.original_bytes().0)
            .collect();
        let made = self.changes.into_made();
        let Some(verified) = made.proving(&root.0, &codes) else {
            return ending.unkept(Some("a node made for it does not decode"));
        };
        let nodes = verified.len();
        let verified_at = started.elapsed();
        state.insert(verified);
        state.counters.post_states_kept.fetch_add(1, Relaxed);
        tracing::debug!(
            block = ending.height,
            nodes,
            waited_ms = (started - self.queued).as_millis() as u64,
            ms = started.elapsed().as_millis() as u64,
            root_ms = rooted.as_millis() as u64,
            verify_ms = (verified_at - rooted).as_millis() as u64,
            insert_ms = (started.elapsed() - verified_at).as_millis() as u64,
            "a replayed block's post-state kept"
        );
    }
}

impl Drop for Ending {
    fn drop(&mut self) {
        {
            let mut unproved = self.unproved.lock().unwrap_or_else(|e| e.into_inner());
            unproved.retain(|u| (u.height, u.block_hash) != (self.height, self.block_hash));
        }
        if self.release {
            self.state.release_post_state(self.height, &self.block_hash);
        } else {
            self.state.post_state_ended(self.height, &self.block_hash);
        }
    }
}
