//! Answers of calls already executed, by the block they ran at and the
//! call itself. A call's answer is a function of the verified state and
//! headers at its pinned block and of its own arguments and overrides, so
//! the same call at the same block hash has the same answer, byte for
//! byte. Clients send the same calls over and over (a token's balance of
//! a popular holder, a pool's reserves, a price feed, each at `latest`);
//! an answer found here is served on the async worker like any stored
//! read, and the call threads are not woken.
//!
//! Only answers are kept: results, reverts and errors of the call. A miss
//! is never kept, nor a call that needed state fetched before its run
//! (its answer is kept once it has it). A new block's calls have new keys,
//! so nothing here is ever stale; old blocks' answers age out.
//!
//! Bounded in bytes, keys and answers together: two generations of half
//! the budget each; when the young one fills, the old one is dropped
//! whole, and an answer asked again from the old one moves back to the
//! young. A flood of distinct calls costs the budget at most.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use crate::errors::ErrorCode;

use super::Reply;

/// What a memo entry costs beyond its key's and answer's bytes: the
/// map's slot and the allocations' headers, about.
const ENTRY_OVERHEAD: usize = 96;

/// What an entry counts against the budget.
fn cost(key: &[u8], answer: &Answer) -> usize {
    key.len() + answer.bytes() + ENTRY_OVERHEAD
}

/// One answer as it is served again.
#[derive(Clone)]
enum Answer {
    Result(Bytes),
    Error(ErrorCode, Box<str>),
    ErrorData(ErrorCode, Box<str>, Box<str>),
}

impl Answer {
    /// The answer a reply is, if it is one to keep.
    fn of(reply: &Reply) -> Option<Answer> {
        match reply {
            Reply::Result(chunks) if chunks.len() == 1 => Some(Answer::Result(chunks[0].clone())),
            // A server fault is not the call's answer.
            Reply::Error(ErrorCode::Internal, _) => None,
            Reply::Error(code, message) => Some(Answer::Error(*code, message.as_str().into())),
            Reply::ErrorData(code, message, data) => Some(Answer::ErrorData(
                *code,
                message.as_str().into(),
                data.as_str().into(),
            )),
            _ => None,
        }
    }

    fn bytes(&self) -> usize {
        match self {
            Answer::Result(bytes) => bytes.len(),
            Answer::Error(_, message) => message.len(),
            Answer::ErrorData(_, message, data) => message.len() + data.len(),
        }
    }

    fn reply(&self) -> Reply {
        match self {
            Answer::Result(bytes) => Reply::bytes(bytes.clone()),
            Answer::Error(code, message) => Reply::Error(*code, message.to_string()),
            Answer::ErrorData(code, message, data) => {
                Reply::ErrorData(*code, message.to_string(), data.to_string())
            }
        }
    }
}

/// Calls' answers by (method, block hash, call); see the module's text.
pub(crate) struct CallMemo {
    /// Bytes each generation may hold: half the budget.
    generation_bytes: usize,
    generations: Mutex<Generations>,
    hits: AtomicU64,
    stored: AtomicU64,
}

#[derive(Default)]
struct Generations {
    young: HashMap<Box<[u8]>, Answer>,
    old: HashMap<Box<[u8]>, Answer>,
    young_bytes: usize,
    /// What the old generation's answers cost.
    old_bytes: usize,
}

/// The memo's counters, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct MemoCounts {
    /// Calls answered from the memo.
    pub(crate) hits: u64,
    /// Answers stored.
    pub(crate) stored: u64,
    /// Bytes held, as the budget counts them (at most the budget).
    pub(crate) bytes: u64,
}

impl Default for CallMemo {
    fn default() -> Self {
        CallMemo::new(crate::config::DEFAULT_CALL_MEMO_BYTES)
    }
}

impl CallMemo {
    /// A memo of at most `budget` bytes; 0 keeps nothing.
    pub(crate) fn new(budget: u64) -> CallMemo {
        CallMemo {
            generation_bytes: usize::try_from(budget / 2).unwrap_or(usize::MAX),
            generations: Mutex::default(),
            hits: AtomicU64::new(0),
            stored: AtomicU64::new(0),
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.generation_bytes > 0
    }

    /// The kept answer to the call `key` names, as a reply.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Reply> {
        if !self.enabled() {
            return None;
        }
        let mut generations = self.lock();
        let mut dropped = None;
        let answer = match generations.young.get(key) {
            Some(answer) => answer.clone(),
            None => {
                let (key, answer) = generations.old.remove_entry(key)?;
                generations.old_bytes = generations.old_bytes.saturating_sub(cost(&key, &answer));
                dropped = self.insert_young(&mut generations, key, answer.clone());
                answer
            }
        };
        drop(generations);
        drop(dropped);
        self.hits.fetch_add(1, Ordering::Relaxed);
        Some(answer.reply())
    }

    /// Whether an answer to the call `key` names is kept (not counted as
    /// a hit, nor moved).
    pub(crate) fn contains(&self, key: &[u8]) -> bool {
        let generations = self.lock();
        generations.young.contains_key(key) || generations.old.contains_key(key)
    }

    /// Keeps `reply` as the answer to the call `key` names, if it is an
    /// answer (not a miss, not a fault); whether it was kept.
    pub(crate) fn insert(&self, key: Vec<u8>, reply: &Reply) -> bool {
        if !self.enabled() {
            return false;
        }
        let Some(answer) = Answer::of(reply) else {
            return false;
        };
        // An answer over a quarter of a generation would push out many
        // small ones for itself: it is not kept.
        if key.len() + answer.bytes() + ENTRY_OVERHEAD > self.generation_bytes / 4 {
            return false;
        }
        let mut generations = self.lock();
        let dropped = self.insert_young(&mut generations, key.into_boxed_slice(), answer);
        drop(generations);
        drop(dropped);
        self.stored.fetch_add(1, Ordering::Relaxed);
        true
    }

    pub(crate) fn counts(&self) -> MemoCounts {
        let bytes = {
            let generations = self.lock();
            generations.young_bytes + generations.old_bytes
        };
        MemoCounts {
            hits: self.hits.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            bytes: bytes as u64,
        }
    }

    /// Keeps `answer` in the young generation; the old generation it
    /// pushed out, if it did, to be dropped once the lock is let go (a
    /// generation of traces is tens of MiB).
    #[must_use]
    fn insert_young(
        &self,
        generations: &mut Generations,
        key: Box<[u8]>,
        answer: Answer,
    ) -> Option<HashMap<Box<[u8]>, Answer>> {
        let added = cost(&key, &answer);
        let mut dropped = None;
        if generations.young_bytes + added > self.generation_bytes {
            let young = std::mem::take(&mut generations.young);
            dropped = Some(std::mem::replace(&mut generations.old, young));
            generations.old_bytes = std::mem::take(&mut generations.young_bytes);
        }
        let replaced = generations
            .young
            .get(&key)
            .map_or(0, |kept| cost(&key, kept));
        // The same call answered twice (two runs raced): counted once.
        generations.young_bytes = generations.young_bytes + added - replaced;
        generations.young.insert(key, answer);
        dropped
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.generations.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(reply: Option<Reply>) -> Option<String> {
        match reply? {
            Reply::Result(chunks) => Some(String::from_utf8(chunks.concat()).unwrap()),
            Reply::Error(code, message) => Some(format!("{code:?} {message}")),
            Reply::ErrorData(code, message, data) => Some(format!("{code:?} {message} {data}")),
            _ => Some("other".into()),
        }
    }

    #[test]
    fn answers_are_kept_and_misses_are_not() {
        let memo = CallMemo::new(1 << 20);
        memo.insert(b"a".to_vec(), &Reply::json("\"0x01\""));
        memo.insert(
            b"b".to_vec(),
            &Reply::ErrorData(
                ErrorCode::ExecutionReverted,
                "execution reverted".into(),
                "\"0x\"".into(),
            ),
        );
        memo.insert(b"c".to_vec(), &Reply::Miss);
        memo.insert(
            b"d".to_vec(),
            &Reply::Error(ErrorCode::Internal, "x".into()),
        );
        assert_eq!(text(memo.get(b"a")).as_deref(), Some("\"0x01\""));
        assert_eq!(
            text(memo.get(b"b")).as_deref(),
            Some("ExecutionReverted execution reverted \"0x\"")
        );
        assert!(memo.get(b"c").is_none());
        assert!(memo.get(b"d").is_none());
        // Each kept answer's key, answer and overhead.
        let bytes = (1 + 6 + ENTRY_OVERHEAD) + (1 + 22 + ENTRY_OVERHEAD);
        assert_eq!(
            memo.counts(),
            MemoCounts {
                hits: 2,
                stored: 2,
                bytes: bytes as u64
            }
        );
    }

    #[test]
    fn the_budget_bounds_what_is_kept_and_answers_asked_again_survive() {
        let per_entry = 8 + 8 + ENTRY_OVERHEAD;
        // Room for four entries a generation.
        let memo = CallMemo::new((per_entry * 8) as u64);
        let key = |i: u64| i.to_be_bytes().to_vec();
        for i in 0..4 {
            memo.insert(key(i), &Reply::json("\"0x0001\""));
        }
        // The fifth starts a new generation: the first four become old.
        memo.insert(key(4), &Reply::json("\"0x0001\""));
        // Asked again, 0 moves to the young generation.
        assert!(memo.get(&key(0)).is_some());
        for i in 5..8 {
            memo.insert(key(i), &Reply::json("\"0x0001\""));
        }
        // The young one filled again (4, 0, 5, 6), so 7 dropped the old
        // (1, 2, 3); 0 survived.
        assert!(memo.get(&key(0)).is_some());
        assert!(memo.get(&key(1)).is_none());
        assert!(memo.get(&key(7)).is_some());
        // Old (4, 5, 6), young (7, 0).
        assert_eq!(memo.counts().bytes, (per_entry * 5) as u64);
        let generations = memo.lock();
        assert!(generations.young_bytes <= memo.generation_bytes);
        assert!(generations.young.len() + generations.old.len() <= 8);
    }

    #[test]
    fn a_zero_budget_keeps_nothing() {
        let memo = CallMemo::new(0);
        memo.insert(b"a".to_vec(), &Reply::json("\"0x01\""));
        assert!(memo.get(b"a").is_none());
        assert_eq!(memo.counts(), MemoCounts::default());
    }
}
