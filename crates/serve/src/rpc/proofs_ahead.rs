//! Proofs fetched ahead of an indexer's next block ([`ProofsAhead`]): a
//! client tracing the chain block by block asks for block N+1 right after
//! N, and N+1's replay, over N's post-state, misses what N's state does
//! not hold. Most of that is named by N+1's own transactions (senders,
//! recipients, the accounts they create, the block's beneficiary and
//! withdrawals): those not held are proved at N's root while N is
//! replayed and traced, so N+1's first run finds them held instead of
//! asking for them on its critical path. What a block's execution alone
//! names (storage slots, accounts a contract calls) is still fetched by
//! its own run, as before.
//!
//! Offered by a whole block's first run, once per block
//! ([`ProofsAhead::claim`]: however often, and in whatever order, its
//! traces are asked), taken and fetched by the server in the background,
//! off every request's answer and never in the way of a read's fetch
//! (`neve_state::Fetch::prefetch_proofs`); at most
//! [`MAX_AHEAD_IN_FLIGHT`] blocks' proofs under way,
//! [`MAX_AHEAD_BATCHES`] batches each, the newest offer kept while they
//! are (for [`OFFER_KEPT`]), older ones dropped.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use neve_state::ProofRequest;

/// Most accounts proved ahead for one block: as many as a replay fetches
/// as proofs rather than its block's witness (`MAX_KEYS_WITHOUT_WITNESS`
/// in `execute.rs`); past them the block's own run asks. Default is
/// 512.
pub(crate) const MAX_KEYS_AHEAD: usize = 512;

/// Blocks whose proofs are fetched ahead at once; an offer made while
/// they are is kept (the newest only) and taken once one ends. Default
/// is 1.
pub(crate) const MAX_AHEAD_IN_FLIGHT: usize = 1;

/// Batches of proofs (`neve_state::MAX_PROOFS_PER_BATCH` accounts each)
/// one block's offer has under way at once. Default is 2.
pub(crate) const MAX_AHEAD_BATCHES: usize = 2;

/// How long an offer not yet taken is kept: past it, the child it was
/// for has been traced already, or nobody follows the chain here. Default
/// is 2 s.
const OFFER_KEPT: Duration = Duration::from_secs(2);

/// Blocks remembered as offered for, by height (direct-mapped). Default
/// is 256.
const CLAIMS: usize = 256;

/// Where block `height`'s claim is remembered.
fn claim_slot(height: u64) -> usize {
    (height % CLAIMS as u64) as usize
}

/// A block offered for: its height and hash.
type Claimed = Option<(u64, [u8; 32])>;

/// An offer not yet taken, and when it was made.
type Offer = Option<(Vec<ProofRequest>, Instant)>;

/// The proofs offered ahead of the block indexers trace next.
pub(crate) struct ProofsAhead {
    /// The blocks proofs were offered for, by height modulo [`CLAIMS`].
    claimed: Mutex<Vec<Claimed>>,
    /// The newest offer not yet taken, and when it was made.
    offered: Mutex<Offer>,
    /// Offers being fetched.
    in_flight: std::sync::Arc<AtomicUsize>,
    /// Accounts taken to fetch ahead, in all.
    accounts: AtomicU64,
}

/// One offer being fetched: its place freed when dropped.
pub(crate) struct AheadSlot(std::sync::Arc<AtomicUsize>);

impl Drop for AheadSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Default for ProofsAhead {
    fn default() -> Self {
        ProofsAhead {
            claimed: Mutex::new(vec![None; CLAIMS]),
            offered: Mutex::default(),
            in_flight: Default::default(),
            accounts: AtomicU64::new(0),
        }
    }
}

impl ProofsAhead {
    /// Whether block `height` of `hash` is first to be offered for: true
    /// once per block, whatever traces of it are asked (a block
    /// `CLAIMS` heights away may take its place again).
    pub(crate) fn claim(&self, height: u64, hash: &[u8; 32]) -> bool {
        let mut claimed = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        let slot = &mut claimed[claim_slot(height)];
        if *slot == Some((height, *hash)) {
            return false;
        }
        *slot = Some((height, *hash));
        true
    }

    /// Whether block `height` of `hash` was offered for already: a peek
    /// before the child is read, so the block's later first runs (other
    /// configurations) read nothing; [`Self::claim`] decides.
    pub(crate) fn claimed(&self, height: u64, hash: &[u8; 32]) -> bool {
        let claimed = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        claimed[claim_slot(height)] == Some((height, *hash))
    }

    /// `requests` to fetch ahead, in place of an offer not yet taken.
    pub(crate) fn offer(&self, mut requests: Vec<ProofRequest>) {
        requests.truncate(MAX_KEYS_AHEAD);
        if requests.is_empty() {
            return;
        }
        *self.offered.lock().unwrap_or_else(|e| e.into_inner()) = Some((requests, Instant::now()));
    }

    /// The offer to fetch now, with its place, when one is waiting and a
    /// place is free.
    pub(crate) fn take(&self) -> Option<(Vec<ProofRequest>, AheadSlot)> {
        let mut offered = self.offered.lock().unwrap_or_else(|e| e.into_inner());
        if offered.as_ref()?.1.elapsed() > OFFER_KEPT {
            *offered = None;
            return None;
        }
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_AHEAD_IN_FLIGHT).then_some(n + 1)
            });
        if taken.is_err() {
            return None;
        }
        let (requests, _) = offered.take()?;
        self.accounts
            .fetch_add(requests.len() as u64, Ordering::Relaxed);
        Some((requests, AheadSlot(self.in_flight.clone())))
    }

    /// Accounts taken to fetch ahead since start.
    pub(crate) fn accounts(&self) -> u64 {
        self.accounts.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asking(tag: u8) -> ProofRequest {
        ProofRequest {
            block_hash: [0; 32],
            state_root: [0; 32],
            address: [tag; 20],
            slots: Vec::new(),
            code: false,
        }
    }

    #[test]
    fn a_block_is_claimed_once_whatever_is_asked_between() {
        let ahead = ProofsAhead::default();
        assert!(!ahead.claimed(7, &[1; 32]));
        assert!(ahead.claim(7, &[1; 32]));
        assert!(ahead.claimed(7, &[1; 32]), "a peek sees the claim");
        assert!(!ahead.claim(7, &[1; 32]), "the same block's other runs");
        assert!(ahead.claim(8, &[2; 32]));
        assert!(!ahead.claim(7, &[1; 32]), "asked again after another");
        assert!(ahead.claim(7, &[3; 32]), "another block at that height");
        assert!(
            ahead.claim(7 + CLAIMS as u64, &[1; 32]),
            "far enough to be forgotten"
        );
    }

    #[test]
    fn an_offer_not_taken_in_time_is_dropped() {
        let ahead = ProofsAhead::default();
        ahead.offer(vec![asking(1)]);
        ahead.offered.lock().unwrap().as_mut().unwrap().1 -= OFFER_KEPT + Duration::from_millis(1);
        assert!(ahead.take().is_none());
        assert!(ahead.offered.lock().unwrap().is_none());
        assert_eq!(ahead.accounts(), 0);
    }

    #[test]
    fn offers_wait_for_a_place_and_the_newest_is_kept() {
        let ahead = ProofsAhead::default();
        assert!(ahead.take().is_none(), "nothing offered");
        ahead.offer(Vec::new());
        assert!(ahead.take().is_none(), "an empty offer is none");
        ahead.offer(vec![asking(1)]);
        let (first, slot) = ahead.take().expect("a place is free");
        assert_eq!(first, vec![asking(1)]);
        ahead.offer(vec![asking(2)]);
        ahead.offer(vec![asking(3)]);
        assert!(ahead.take().is_none(), "every place is taken");
        drop(slot);
        let (newest, _slot) = ahead.take().expect("its place freed");
        assert_eq!(newest, vec![asking(3)], "the older offer dropped");
        assert!(ahead.take().is_none());
        assert_eq!(ahead.accounts(), 2, "what was taken");
    }

    #[test]
    fn an_offer_is_cut_at_its_bound() {
        let ahead = ProofsAhead::default();
        ahead.offer((0..MAX_KEYS_AHEAD + 10).map(|i| asking(i as u8)).collect());
        let (taken, _slot) = ahead.take().unwrap();
        assert_eq!(taken.len(), MAX_KEYS_AHEAD);
    }
}
