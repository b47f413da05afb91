//! How every executed method runs (`Runs::Executed`), below the families:
//! on an async worker only its kept answer is looked up (else
//! [`Reply::Execute`]); on the call threads its parameters are parsed, the
//! block pinned (its verified facts, the chain's rules at it, its
//! ancestors' hashes), its [`Job`] run over verified state, and what the
//! run came to made an answer: a miss, the state to fetch
//! ([`Reply::Fetch`]), or geth's answer, kept in the memo. The gas of every
//! run is counted for the caller, who charges it.

use std::cell::Cell;

use alloy_primitives::{B256, hex};
use neve_execution::{BlockFacts, CallError, Dialect, Ended, Needs, Outcome, Pinned};
use neve_state::{FetchRequest, HotKey, ProofRequest, WitnessRequest};

use crate::errors::ErrorCode;
use crate::params::{BlockRef, BlockTag, ParamError, Params};

use super::context::{Context, Reads, Waits};
use super::reply::{NoReply, Reply};

/// Most accounts and slots a replay fetches as proofs rather than its
/// block's witness: a replay over a parent's state kept from its own
/// replay ([`neve_execution::trace`]) misses only what the chain had not
/// touched lately, and proofs asked in batches
/// ([`neve_state::MAX_PROOFS_PER_BATCH`] accounts each) cost the node a
/// walk of each key, where a witness costs it the block's execution
/// (measured on geth, `scripts/bench-proofs-vs-witness.sh`: a block's
/// witness 180–260 ms of its CPU, 300 proofs in one batch, cold,
/// 20–50 ms). Past a few hundred keys the two cost the node alike, and
/// the witness comes in one round where proofs take two (the slots of
/// accounts first fetched are named by the next run): a child of a
/// block traced over its witness missed 780 keys, fetched as 737 proofs
/// in 111 ms and 86 more in 17 ms, where its witness took 57 ms (the
/// twenty-third round in BENCHMARKS). One wave of
/// `MAX_FETCHES_PER_REQUEST` batches at most, within `WITNESS_WAIT`. A
/// replay past it stops there ([`Pinned::enough_needs`]): the rest of
/// its run would only name more of what the witness brings. Default is
/// 512.
const MAX_KEYS_WITHOUT_WITNESS: usize = 512;

/// Most keys the first run of a replay over a parent whose root is not
/// held fetches as proofs rather than its block's witness
/// ([`Job::replays_part`]): over nothing held every transaction is refused
/// (its sender reads as empty), so that run names little more than the
/// senders; recipients, their code and slots come in the rounds after
/// it. A cold trace of a transaction half-way into a block of 900 named
/// 439 keys, then 239 and 123 more, 85 ms in three rounds of proofs
/// where the block's witness took 50–70 ms (2026-12-05, on geth). Early
/// transactions, a few keys each, stay proofs. Default is 128.
const MAX_KEYS_LEARNT_OVER_NOTHING: usize = MAX_KEYS_WITHOUT_WITNESS / 4;

/// Longest a call waits, over all its rounds, for the post-state of the
/// block its replay runs over while a replay of that block computes it
/// (on its own thread: a few tens of ms for a block of 1,250
/// transactions, at most two queued before it); past it, the replay
/// fetches what it reads as it would have. On a call thread, counted in
/// the trace's own time. Default is 1 s.
const POST_STATE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A method's request, parsed: what runs at the pinned block.
pub(crate) trait Job {
    /// Runs at `pinned`; `reads` as the call threads read.
    fn run(&self, ctx: &Context, reads: Reads, pinned: &Pinned<'_>) -> Result<Ran, CallError>;

    /// Other configurations (its parameter's texts, as other clients
    /// send them) whose answers its run may make too
    /// ([`PinnedRun::along`]); ignored by a job that makes none.
    fn offer(&mut self, _configs: Vec<Box<str>>) {}

    /// Makes ready, on a call thread, what its run will read that is not
    /// state (a whole block's transactions parsed), while the state it
    /// misses is fetched ([`Context::prepare`]); nothing by default.
    fn prepare(&self, _ctx: &Context, _reads: Reads) {}

    /// Whether neve runs it at all (a trace under a tracer neve does not
    /// know does not): one it does not is a miss before anything is
    /// fetched for it, so the node makes no witness for a trace it is
    /// about to answer itself.
    fn runs_here(&self) -> bool {
        true
    }

    /// Whether its replay runs the block only up to one transaction (a
    /// transaction's trace, a call traced at an index): over a parent
    /// whose root is not held it still learns what it reads first, since
    /// an early transaction reads a few keys, fetched as proofs, where the
    /// block's witness costs the node the whole block's execution. A run
    /// that learns it reads more asks for the witness all the same
    /// ([`MAX_KEYS_LEARNT_OVER_NOTHING`]).
    fn replays_part(&self) -> bool {
        false
    }
}

/// A method's parameters parsed into its [`Job`]; -32602 naming the
/// argument otherwise.
pub(crate) type Parse = fn(&Params<'_>) -> Result<Box<dyn Job>, ParamError>;

/// Which block an executed method runs over.
pub(crate) enum Pin {
    /// The one this parameter names (`latest` when absent): the state
    /// after it, as a call runs.
    At(usize),
    /// The parent of the block its parameters name ([`Locate`]): a trace
    /// replays that block over its parent's state.
    Parent(Locate),
}

/// Finds the block a trace replays, as [`Reads`] allows.
pub(crate) type Locate = fn(&Context, &Params<'_>, Reads) -> Result<Located, NoReply>;

/// The block a trace replays, or its answer without a replay.
pub(crate) enum Located {
    /// Its height (at least 1) and hash.
    Block(u64, [u8; 32]),
    /// None: it runs over the state after this block, as a call does.
    After(BlockRef),
    /// Answered at once: a block not stored (a miss), or the genesis
    /// block (geth's refusal).
    Reply(Reply),
}

/// How an executed method runs, as its family declares it.
pub(crate) struct PinnedRun {
    /// The block it runs over.
    pub(crate) pin: Pin,
    pub(crate) parse: Parse,
    /// Whether its answers are kept in the memo (`call_memo.rs`): only
    /// those that depend on nothing but the pinned block and the request.
    pub(crate) memo: bool,
    /// When one run can answer it for other configurations asked lately
    /// too (a whole block's trace: its replay runs the tracers indexers
    /// ask beside this one, `trace_asks.rs`).
    pub(crate) along: Option<Alongside>,
}

/// How a method's run answers other configurations alongside its own.
#[derive(Clone, Copy)]
pub(crate) struct Alongside {
    /// The parameter naming its configuration.
    pub(crate) param: usize,
    /// Whether a configuration's text names one that runs alongside
    /// others (asked once for each configuration remembered).
    pub(crate) joins: fn(&str) -> bool,
}

/// A trace's keys ([`Context::trace_key`]).
pub(crate) struct TraceKeys {
    /// Its memo's, when its block was located.
    pub(crate) memo: Option<Vec<u8>>,
    /// What identical traces in flight share one run by.
    pub(crate) flight: Vec<u8>,
}

/// What a [`Job`]'s runs came to.
pub(crate) enum Ran {
    /// An answer, with the accounts and slots its run read (made hot when
    /// it ran at `latest`, so the refresh after each block keeps them).
    Answered(Reply, Vec<HotKey>),
    /// An answer, and the answers the same run made for configurations
    /// offered to it ([`Job::offer`]), by their texts.
    AnsweredAlong(Reply, Vec<(Box<str>, Reply)>),
    /// State to fetch first.
    Needs(Needs),
    /// Not answerable here.
    Miss,
}

impl Context {
    /// Answers an executed method: on an async worker ([`Waits::Never`]) a
    /// kept answer or [`Reply::Execute`]; on the call threads, its run at
    /// the pinned block, every run's gas added to `gas`.
    pub(crate) fn run_pinned(
        &self,
        tag: u8,
        most: usize,
        executed: &PinnedRun,
        p: &Params<'_>,
        reads: Reads,
        gas: &Cell<u64>,
    ) -> Result<Reply, NoReply> {
        let memo = executed.memo.then_some(MemoKey {
            tag,
            most,
            block_param: match executed.pin {
                Pin::At(param) => param,
                // Kept under the replayed block's hash; every parameter
                // is part of the key.
                Pin::Parent(_) => usize::MAX,
            },
        });
        if reads.waits == Waits::Never {
            return Ok(self.on_the_worker(tag, memo, executed, p, reads));
        }
        let Some(state) = &self.state else {
            return Ok(Reply::Unsupported);
        };
        let mut job = (executed.parse)(p)?;
        // The block pinned, and the hash answers are kept under.
        let (at, replayed) = match executed.pin {
            Pin::At(param) => (p.block_ref_or_latest(param)?, None),
            Pin::Parent(locate) => match locate(self, p, reads)? {
                Located::Reply(reply) => return Ok(reply),
                Located::Block(height, hash) => {
                    self.note_asked(tag, executed, p, height);
                    (
                        BlockRef::Tag(BlockTag::Number(height.saturating_sub(1))),
                        Some(hash),
                    )
                }
                Located::After(at) => (at, None),
            },
        };
        // (Noted as asked all the same, above.)
        if !job.runs_here() {
            return Ok(Reply::Miss);
        }
        // A trace of a block not in memory is looked up in the memo here,
        // where its block could be read.
        if let (Some(memo), Some(hash)) = (&memo, replayed)
            && let Some(kept) = self.memo(&executed.pin).get(&memo.key(&hash, p))
        {
            return Ok(kept);
        }
        let Some(rules) = self.call_rules.get() else {
            return Ok(Reply::Miss);
        };
        let Some(facts) = self.pinned_facts(at, reads)? else {
            return Ok(Reply::Miss);
        };
        let Some(fork) = rules.at(facts.timestamp) else {
            return Ok(Reply::Miss);
        };
        if facts.contradicts(&fork) {
            rules_contradicted(&facts, &fork);
            return Ok(Reply::Miss);
        }
        let memory = Reads::in_memory(reads.latest);
        let canonical = |height: u64| -> Option<[u8; 32]> {
            let at = BlockRef::Tag(BlockTag::Number(height));
            self.block(at, memory)
                .or_else(|_| self.block(at, reads))
                .ok()
                .flatten()
                .map(|b| b.hash())
        };
        let block_hash =
            |height: u64| ancestor_hash(&canonical, (facts.number, facts.hash.0), height);
        // Past as many keys as proofs stand for, a replay whose block's
        // witness is still to ask stops: that is fetched.
        let enough_needs = |most_proofs: usize| {
            replayed
                .filter(|h| !reads.witness_asked && state.witnesses.worth_asking(h))
                .map(|_| most_proofs)
        };
        let pinned = Pinned {
            state,
            block: &facts,
            fork,
            rules: &rules,
            spent: Default::default(),
            chain_id: rules.chain_id,
            block_hash: &block_hash,
            codes: &self.call_codes,
            // (Only a whole block's replay runs before the post-state
            // wait below: as many as proofs stand for.)
            enough_needs: enough_needs(MAX_KEYS_WITHOUT_WITNESS),
            post_states: self.post_states.as_ref(),
            unproved: None,
        };
        if replayed.is_some() {
            // On a first run of a whole block's trace (what `along`
            // marks), while a replay of the parent is proving its
            // post-state: what this replay misses is learnt over that
            // post-state as the parent's replay left it, and fetched
            // beside the proving rather than after it.
            let unproved = self
                .post_states
                .as_ref()
                .filter(|_| !reads.fetched && executed.along.is_some())
                .and_then(|keeper| keeper.unproved(facts.number, &facts.hash.0));
            if let Some(unproved) = unproved {
                let over = Pinned {
                    unproved: Some(&unproved),
                    spent: Default::default(),
                    ..pinned
                };
                let running = std::time::Instant::now();
                if let Ok(Ran::Needs(needs)) = job.run(self, reads, &over) {
                    // Charged as the first run it stands for; one that
                    // names nothing is neve's own try, and the run after
                    // it is charged.
                    gas.set(gas.get() + over.spent.get());
                    tracing::debug!(
                        pinned = facts.number,
                        keys = needs.keys(),
                        ran_ms = running.elapsed().as_millis() as u64,
                        "a run over a post-state being proved needs state not held"
                    );
                    return Ok(Reply::Fetch(fetches_for(
                        &facts,
                        needs,
                        replayed,
                        state,
                        MAX_KEYS_WITHOUT_WITNESS,
                    )));
                }
            }
            // The parent's post-state, when a replay of it is computing
            // it: what this replay reads is about to be held. Within a
            // second of the call's first run, across its rounds.
            let first_ran = reads.since.unwrap_or_else(std::time::Instant::now);
            let most =
                (first_ran + POST_STATE_WAIT).saturating_duration_since(std::time::Instant::now());
            if state.wait_post_state(facts.number, &facts.hash.0, most) {
                tracing::debug!(pinned = facts.number, "waited for a post-state");
            }
        }
        // Whether the parent's root is held, once any post-state waited
        // for is (its nodes held with it).
        let root_held = state.node(&facts.state_root.0).is_some();
        // A whole block's replay over a parent whose root is not even held
        // would only learn that it needs everything: the block's witness
        // first.
        if let Some(hash) = replayed.filter(|h| state.witnesses.worth_asking(h))
            && !reads.witness_asked
            && !job.replays_part()
            && !root_held
        {
            return Ok(Reply::Fetch(vec![witness_request(hash, &facts)]));
        }
        let most_proofs = if root_held || !job.replays_part() {
            MAX_KEYS_WITHOUT_WITNESS
        } else {
            MAX_KEYS_LEARNT_OVER_NOTHING
        };
        let pinned = Pinned {
            enough_needs: enough_needs(most_proofs),
            ..pinned
        };

        // What clients trace blocks with lately, besides this request's
        // configuration, when not answered already.
        let along = executed.along.zip(memo).zip(replayed);
        if let Some(((Alongside { param: index, .. }, memo), hash)) = along
            && self.memo(&executed.pin).enabled()
        {
            let config = p.optional(index).map_or("", |raw| raw.get());
            let offered: Vec<Box<str>> = self
                .trace_asks
                .offered(tag, config)
                .into_iter()
                .filter(|other| {
                    let key = memo.key_along(&hash, p, index, other);
                    !self.memo(&executed.pin).contains(&key)
                })
                .collect();
            if !offered.is_empty() {
                job.offer(offered);
            }
        }
        let running = std::time::Instant::now();
        let ran = job.run(self, reads, &pinned);
        if replayed.is_some() && matches!(ran, Ok(Ran::AnsweredAlong(..) | Ran::Answered(..))) {
            tracing::debug!(
                pinned = facts.number,
                ran_ms = running.elapsed().as_millis() as u64,
                "a replay answered"
            );
        }
        // Every run's gas, whatever came of it.
        gas.set(gas.get() + pinned.spent.get());
        let mut made_along = Vec::new();
        let reply = match ran {
            Ok(Ran::Answered(reply, read)) => {
                if at == BlockRef::Tag(BlockTag::Latest) {
                    state.record_hot_all(&read);
                }
                reply
            }
            Ok(Ran::AnsweredAlong(reply, along)) => {
                made_along = along;
                reply
            }
            Ok(Ran::Needs(needs)) => {
                tracing::debug!(
                    pinned = facts.number,
                    keys = needs.keys(),
                    ran_ms = running.elapsed().as_millis() as u64,
                    "a run needs state not held"
                );
                return Ok(Reply::Fetch(fetches_for(
                    &facts,
                    needs,
                    replayed,
                    state,
                    most_proofs,
                )));
            }
            Ok(Ran::Miss) => return Ok(Reply::Miss),
            Err(error) => refused(error),
        };
        let reply = match pinned.fork.dialect {
            Dialect::Ethereum => reply,
            Dialect::Coreth => in_coreths_words(reply),
        };
        // Kept only while the block the job replayed is still the one its
        // parameters name: a reorg in between would key one block's trace
        // by another's hash.
        let still = match (replayed, &executed.pin) {
            (Some(hash), Pin::Parent(locate)) => {
                matches!(locate(self, p, reads), Ok(Located::Block(_, now)) if now == hash)
            }
            _ => true,
        };
        if let Some(memo) = memo.filter(|_| still) {
            let block = replayed.unwrap_or(facts.hash.0);
            self.memo(&executed.pin).insert(memo.key(&block, p), &reply);
            if let Some(Alongside { param: index, .. }) = executed.along {
                for (config, answer) in made_along {
                    let key = memo.key_along(&block, p, index, &config);
                    if self.memo(&executed.pin).insert(key, &answer) {
                        self.answers_along
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(reply)
    }

    /// The verified facts of the block `at` names: its table entry and
    /// header read from memory when they are there (they are, for recent
    /// blocks), from the disk otherwise; kept for the next call.
    fn pinned_facts(
        &self,
        at: BlockRef,
        reads: Reads,
    ) -> Result<Option<std::sync::Arc<BlockFacts>>, NoReply> {
        let memory = Reads::in_memory(reads.latest);
        let Some(block) = self.block(at, memory).or_else(|_| self.block(at, reads))? else {
            return Ok(None);
        };
        let hash = block.hash();
        Ok(self.call_blocks.get_or_read(block.height(), &hash, || {
            let json = match block.hashes_only() {
                Ok(json) => json,
                // Not in memory: read from the disk (here waiting is allowed).
                Err(_) => self
                    .block(BlockRef::Hash(hash), reads)
                    .ok()??
                    .hashes_only()
                    .ok()?,
            };
            BlockFacts::from_json(&json)
                .ok()
                .filter(|facts| facts.number == block.height() && facts.hash.0 == hash)
        }))
    }

    /// What an async worker answers for an executed method: a trace's
    /// answer that needs no replay (genesis, a block not stored), a kept
    /// answer (the block from memory only), or [`Reply::Execute`] for
    /// anything else. The block is looked up once.
    fn on_the_worker(
        &self,
        tag: u8,
        memo: Option<MemoKey>,
        executed: &PinnedRun,
        p: &Params<'_>,
        reads: Reads,
    ) -> Reply {
        let pin = &executed.pin;
        let memo = memo.filter(|_| self.memo(pin).enabled());
        let block_hash = |at: BlockRef| Some(self.block(at, reads).ok()??.hash());
        let hash = match pin {
            Pin::At(_) if memo.is_none() => None,
            Pin::At(param) => p.block_ref_or_latest(*param).ok().and_then(block_hash),
            Pin::Parent(locate) => match locate(self, p, reads) {
                // Told only of parameters that parse, as geth tells a
                // bad one first: else the call thread answers it.
                Ok(Located::Reply(reply)) if (executed.parse)(p).is_ok() => return reply,
                Ok(Located::Reply(_)) => return Reply::Execute,
                Ok(Located::Block(height, hash)) => {
                    self.note_asked(tag, executed, p, height);
                    Some(hash)
                }
                Ok(Located::After(at)) => block_hash(at),
                Err(_) => None,
            },
        };
        memo.zip(hash)
            .and_then(|(memo, hash)| self.memo(pin).get(&memo.key(&hash, p)))
            .unwrap_or(Reply::Execute)
    }

    /// The keys of a trace (a method pinned to the parent of the block it
    /// replays, its answers kept): its memo's, when its block is located
    /// as `reads` allows, and what identical traces in flight share one
    /// run by: the memo's key, or the request itself when its block is
    /// not in memory (ten indexers asking one block's trace by number
    /// share a run wherever the block is).
    pub(crate) fn trace_key(
        &self,
        tag: u8,
        most: usize,
        executed: &PinnedRun,
        p: &Params<'_>,
        reads: Reads,
    ) -> Option<TraceKeys> {
        let Pin::Parent(locate) = executed.pin else {
            return None;
        };
        if !executed.memo || !self.trace_answers.enabled() {
            return None;
        }
        let hash = match locate(self, p, reads) {
            Ok(Located::Block(_, hash)) => Some(hash),
            Ok(Located::After(at)) => self.block(at, reads).ok().flatten().map(|b| b.hash()),
            Ok(Located::Reply(_)) => return None,
            Err(_) => None,
        };
        let memo = MemoKey {
            tag,
            most,
            block_param: usize::MAX,
        };
        let memo_key = hash.map(|hash| memo.key(&hash, p));
        let flight = match memo_key.clone() {
            Some(key) => key,
            // By the request only when it names its block by number or
            // hash: a tag (`latest`) may name another block by the time
            // the leader runs.
            None if p
                .optional(0)
                .is_some_and(|raw| raw.get().starts_with("\"0x")) =>
            {
                // Apart from every memo key (a method's byte, then a hash).
                memo.with_params(&[u8::MAX, tag], p)
            }
            None => return None,
        };
        Some(TraceKeys {
            memo: memo_key,
            flight,
        })
    }

    /// Notes the configuration a method that answers others alongside
    /// (`executed.along`) was asked with, of the stored block at `height`.
    fn note_asked(&self, tag: u8, executed: &PinnedRun, p: &Params<'_>, height: u64) {
        if let Some(along) = executed.along {
            let config = p.optional(along.param).map_or("", |raw| raw.get());
            self.trace_asks.asked(tag, height, config, along.joins);
        }
    }

    /// Where answers of a method pinned so are kept: traces apart.
    fn memo(&self, pin: &Pin) -> &super::CallMemo {
        match pin {
            Pin::At(_) => &self.call_answers,
            Pin::Parent(_) => &self.trace_answers,
        }
    }
}

/// What a method's answers are kept under in the memo.
#[derive(Clone, Copy)]
struct MemoKey {
    /// The method's own byte (its row in the table).
    tag: u8,
    most: usize,
    block_param: usize,
}

impl MemoKey {
    /// The memo's key of a call: the method's byte, the pinned block's
    /// hash, and every parameter but the block's as sent (the block
    /// parameter is the hash: `latest` and its number share answers).
    fn key(&self, block_hash: &[u8; 32], p: &Params<'_>) -> Vec<u8> {
        self.key_with(block_hash, p, None)
    }

    /// The memo's key of the same call with `config` for its parameter
    /// `index`, as another client sends it.
    fn key_along(
        &self,
        block_hash: &[u8; 32],
        p: &Params<'_>,
        index: usize,
        config: &str,
    ) -> Vec<u8> {
        self.key_with(block_hash, p, Some((index, config)))
    }

    /// The method's byte, the block's hash, then the parameters as
    /// [`Self::with_parts`] writes them.
    fn key_with(
        &self,
        block_hash: &[u8; 32],
        p: &Params<'_>,
        instead: Option<(usize, &str)>,
    ) -> Vec<u8> {
        let mut prefix = [self.tag; 33];
        prefix[1..].copy_from_slice(block_hash);
        self.with_parts(&prefix, p, instead)
    }

    /// `prefix`, then every parameter but the block's as sent.
    fn with_params(&self, prefix: &[u8], p: &Params<'_>) -> Vec<u8> {
        self.with_parts(prefix, p, None)
    }

    /// `prefix`, then every parameter but the block's as sent, the one at
    /// `instead`'s index as its text.
    fn with_parts(&self, prefix: &[u8], p: &Params<'_>, instead: Option<(usize, &str)>) -> Vec<u8> {
        let parts: Vec<&str> = (0..self.most)
            .filter(|index| *index != self.block_param)
            .map(|index| match instead {
                Some((at, text)) if at == index => text,
                _ => p.optional(index).map_or("", |raw| raw.get()),
            })
            .collect();
        let mut key = Vec::with_capacity(
            prefix.len() + parts.iter().map(|part| part.len() + 1).sum::<usize>(),
        );
        key.extend_from_slice(prefix);
        for part in parts {
            key.extend_from_slice(part.as_bytes());
            // Not in any JSON text: parts cannot run into each other.
            key.push(0);
        }
        key
    }
}

/// `BLOCKHASH(height)` in a run pinned to `pinned` (its height and hash):
/// the pinned block's ancestor's hash, read as the stored chain's hash at
/// that height so long as the pinned block is still on that chain once it
/// is read. A reorg since pinning would otherwise mix forks in one run
/// (and its answer is kept under the pinned block's hash); then it is
/// `None`, and the run a miss.
fn ancestor_hash(
    canonical: &dyn Fn(u64) -> Option<[u8; 32]>,
    pinned: (u64, [u8; 32]),
    height: u64,
) -> Option<B256> {
    let ancestor = canonical(height)?;
    (canonical(pinned.0)? == pinned.1).then_some(B256::from(ancestor))
}

/// Rules that the block's own header contradicts (a fork's field there,
/// or missing): logged once, and every call at such a block is a miss.
fn rules_contradicted(facts: &BlockFacts, fork: &neve_execution::Fork) {
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            block = facts.number,
            claimed = ?fork.spec,
            header = ?facts.shows,
            "the upstream's rules contradict a verified header; calls at such blocks are 421"
        );
    }
}

/// A run's outcome as geth answers a call: its return data, or how it
/// failed ([`failure`]).
pub(crate) fn answered(outcome: Outcome) -> Ran {
    let reply = match outcome.ended {
        Ended::Success => Reply::json(format!("\"0x{}\"", hex::encode(&outcome.output))),
        _ => failure(&outcome),
    };
    Ran::Answered(reply, outcome.read)
}

/// A run that did not succeed, as geth answers it.
pub(crate) fn failure(outcome: &Outcome) -> Reply {
    match &outcome.ended {
        Ended::Revert | Ended::Success => Reply::ErrorData(
            ErrorCode::ExecutionReverted,
            neve_execution::revert_message(&outcome.output),
            format!("\"0x{}\"", hex::encode(&outcome.output)),
        ),
        Ended::Halt(message) => Reply::Error(ErrorCode::ExecutionFailed, message.clone()),
    }
}

/// An answer as coreth words it (geth 1.13's way): a revert without data
/// is a plain error, and every error's message is escaped as Go's
/// `encoding/json` escapes it.
fn in_coreths_words(reply: Reply) -> Reply {
    match reply {
        Reply::ErrorData(ErrorCode::ExecutionReverted, message, data) if data == "\"0x\"" => {
            Reply::ErrorData(ErrorCode::ExecutionFailed, message, String::new())
        }
        Reply::Error(code, message) if code != ErrorCode::Internal => {
            Reply::ErrorData(code, message, String::new())
        }
        other => other,
    }
}

/// An error of the call itself, as geth answers it.
fn refused(error: CallError) -> Reply {
    match error {
        CallError::Unsupported => Reply::Miss,
        CallError::Internal(message) => Reply::Error(ErrorCode::Internal, message),
        other => Reply::Error(ErrorCode::ExecutionFailed, other.to_string()),
    }
}

/// The witness of the block of this hash, replayed over `parent`.
fn witness_request(block_hash: [u8; 32], parent: &BlockFacts) -> FetchRequest {
    FetchRequest::Witness(WitnessRequest {
        block_hash,
        number: parent.number + 1,
        parent_hash: parent.hash.0,
        parent_state_root: parent.state_root.0,
    })
}

/// What a run that needs state not held fetches, at the pinned block: a
/// replay (of block `replayed`) that needs more than a few keys asks for
/// its block's witness first, one call for all it reads (the proofs if
/// that does not do). A few are proofs: a witness costs the node the
/// block's execution.
fn fetches_for(
    facts: &BlockFacts,
    needs: Needs,
    replayed: Option<[u8; 32]>,
    state: &neve_state::State,
    most_proofs: usize,
) -> Vec<FetchRequest> {
    let few = needs.keys() <= most_proofs;
    let mut fetches = requests(facts, needs);
    if let Some(hash) = replayed.filter(|h| state.witnesses.worth_asking(h))
        && !few
    {
        fetches.insert(0, witness_request(hash, facts));
    }
    fetches
}

/// The fetches a run's needs ask for, at the pinned block.
fn requests(facts: &BlockFacts, needs: Needs) -> Vec<FetchRequest> {
    needs
        .accounts
        .into_iter()
        .map(|(address, (slots, code))| {
            FetchRequest::Proof(ProofRequest {
                block_hash: facts.hash.0,
                state_root: facts.state_root.0,
                address: address.0.0,
                slots: slots.into_iter().map(|slot| slot.0).collect(),
                code,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 42.12: after a reorg replaced the pinned block, `BLOCKHASH`
    /// reads nothing of the new fork (the run is a miss).
    #[test]
    fn blockhash_reads_the_pinned_blocks_ancestors_only() {
        let old_fork = |height: u64| Some([height as u8; 32]);
        let new_fork = |height: u64| Some([height as u8 + if height >= 5 { 100 } else { 0 }; 32]);
        let pinned = (7, [7u8; 32]);
        assert_eq!(
            ancestor_hash(&old_fork, pinned, 6),
            Some(B256::repeat_byte(6))
        );
        assert_eq!(
            ancestor_hash(&new_fork, pinned, 6),
            None,
            "the new fork's block 6"
        );
        assert_eq!(
            ancestor_hash(&new_fork, pinned, 3),
            None,
            "pinned block no longer stored"
        );
    }
}
