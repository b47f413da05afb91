//! Which replayed blocks' post-states are computed, or being computed:
//! each block's once (an indexer traces a block with one tracer after
//! another), and a block's child able to wait for its parent's rather
//! than ask the node for what it is about to hold.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::trie::Hash;

/// Blocks whose post-state a replay claimed, remembered per height
/// (direct-mapped, confirmed by block hash). Default is 256.
const POST_STATES_REMEMBERED: usize = 256;

/// A claimed block, and whether its computing has ended (kept or not).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Claim {
    height: u64,
    block_hash: Hash,
    ended: bool,
}

/// See the module's text.
pub(crate) struct PostStateClaims {
    claims: Mutex<Vec<Option<Claim>>>,
    ended: Condvar,
}

impl Default for PostStateClaims {
    fn default() -> Self {
        PostStateClaims {
            claims: Mutex::new(vec![None; POST_STATES_REMEMBERED]),
            ended: Condvar::new(),
        }
    }
}

impl PostStateClaims {
    /// Whether block `height` with `block_hash` was claimed.
    pub(crate) fn claimed(&self, height: u64, block_hash: &Hash) -> bool {
        self.claim_of(&self.lock(), height, block_hash).is_some()
    }

    /// Claims block `height`'s: true the first time for a block, false
    /// after.
    pub(crate) fn claim(&self, height: u64, block_hash: &Hash) -> bool {
        let mut claims = self.lock();
        if self.claim_of(&claims, height, block_hash).is_some() {
            return false;
        }
        claims[slot(height)] = Some(Claim {
            height,
            block_hash: *block_hash,
            ended: false,
        });
        true
    }

    /// Its computing ended (kept or not): whoever waits for it goes on.
    pub(crate) fn end(&self, height: u64, block_hash: &Hash) {
        let mut claims = self.lock();
        if let Some(claim) = claims[slot(height)].as_mut()
            && claim.height == height
            && claim.block_hash == *block_hash
        {
            claim.ended = true;
        }
        drop(claims);
        self.ended.notify_all();
    }

    /// Lets go of block `height`'s claim (it was not computed): it may be
    /// claimed again, and whoever waits for it goes on.
    pub(crate) fn release(&self, height: u64, block_hash: &Hash) {
        let mut claims = self.lock();
        if self.claim_of(&claims, height, block_hash).is_some() {
            claims[slot(height)] = None;
        }
        drop(claims);
        self.ended.notify_all();
    }

    /// Waits, at most `most`, while block `height`'s is being computed;
    /// whether it waited at all.
    pub(crate) fn wait(&self, height: u64, block_hash: &Hash, most: Duration) -> bool {
        let deadline = Instant::now() + most;
        let mut claims = self.lock();
        let mut waited = false;
        while self
            .claim_of(&claims, height, block_hash)
            .is_some_and(|claim| !claim.ended)
        {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            waited = true;
            claims = self
                .ended
                .wait_timeout(claims, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        waited
    }

    fn claim_of(&self, claims: &[Option<Claim>], height: u64, block_hash: &Hash) -> Option<Claim> {
        claims[slot(height)].filter(|c| c.height == height && c.block_hash == *block_hash)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Option<Claim>>> {
        self.claims.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn slot(height: u64) -> usize {
    (height % POST_STATES_REMEMBERED as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_claimed_once_and_its_waiters_go_on_when_it_ends() {
        let claims = std::sync::Arc::new(PostStateClaims::default());
        let hash = [7u8; 32];
        assert!(!claims.claimed(5, &hash));
        assert!(claims.claim(5, &hash));
        assert!(!claims.claim(5, &hash), "once");
        assert!(claims.claimed(5, &hash));
        assert!(
            !claims.claimed(5, &[8u8; 32]),
            "another block at the height"
        );
        // Not ended: a waiter waits its bound out.
        let started = Instant::now();
        assert!(claims.wait(5, &hash, Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        // Ended from another thread: the waiter goes on.
        // `then` done to the claims from another thread, 20 ms on.
        let later = |then: fn(&PostStateClaims, u64, &[u8; 32]), height: u64| {
            let claims = claims.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                then(&claims, height, &hash);
            })
        };
        let ender = later(PostStateClaims::end, 5);
        assert!(claims.wait(5, &hash, Duration::from_secs(30)));
        ender.join().unwrap();
        assert!(!claims.wait(5, &hash, Duration::from_secs(30)), "ended");
        assert!(claims.claimed(5, &hash), "still claimed: computed once");
        // A block never claimed is not waited for.
        assert!(!claims.wait(6, &hash, Duration::from_secs(30)));
        // A claim let go: its waiter goes on, and it may be claimed again.
        assert!(claims.claim(7, &hash));
        let releaser = later(PostStateClaims::release, 7);
        assert!(claims.wait(7, &hash, Duration::from_secs(30)));
        releaser.join().unwrap();
        assert!(!claims.claimed(7, &hash));
        assert!(claims.claim(7, &hash), "claimed again");
    }
}
