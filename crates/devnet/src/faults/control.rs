//! [`Control`]: the switches a test flips on a running proxy, and what it
//! counted.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::kinds::{Fault, FieldLie, StateTamper};

/// The proxy's switches.
#[derive(Debug, Default)]
pub struct Control {
    pub(crate) fail_matching: std::sync::Mutex<Option<&'static str>>,
    pub(crate) lacking_method: std::sync::Mutex<Option<&'static str>>,
    pub(crate) override_fault: std::sync::Mutex<Option<Fault>>,
    pub(crate) method_fault: std::sync::Mutex<Option<(&'static str, Fault)>>,
    pub(crate) stream_fault: std::sync::Mutex<Option<Fault>>,
    /// The lie armed, and the text a request must contain to be told it.
    pub(crate) state_tamper: std::sync::Mutex<Option<(StateTamper, Option<&'static str>)>>,
    pub(crate) state_tampered: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) down: AtomicBool,
    pub(crate) head_lag: AtomicU64,
    pub(crate) faults_served: AtomicU64,
    pub(crate) tamper_armed: AtomicBool,
    pub(crate) tampered: AtomicU64,
    pub(crate) sender_armed: AtomicBool,
    pub(crate) senders_tampered: AtomicU64,
    pub(crate) field_lie: std::sync::Mutex<Option<FieldLie>>,
    pub(crate) field_lies: AtomicU64,
    pub(crate) watched_method: std::sync::Mutex<Option<&'static str>>,
    pub(crate) watched_in_flight: AtomicU64,
    pub(crate) watched_most: AtomicU64,
    pub(crate) watched_seen: AtomicU64,
}

impl Control {
    /// Counts the requests naming `method` that are in the proxy at once
    /// (the most of them at a time: [`Control::most_at_once`]).
    pub fn watch_method(&self, method: Option<&'static str>) {
        *self.watched_method.lock().unwrap() = method;
        self.watched_most.store(0, Ordering::Relaxed);
        self.watched_seen.store(0, Ordering::Relaxed);
    }

    /// The requests naming the watched method since it was set (a batch
    /// is one).
    pub fn watched(&self) -> u64 {
        self.watched_seen.load(Ordering::Relaxed)
    }

    /// The most requests naming the watched method in the proxy at once.
    pub fn most_at_once(&self) -> u64 {
        self.watched_most.load(Ordering::Relaxed)
    }

    /// While set, every JSON-RPC request gets this fault instead of the
    /// schedule's.
    pub fn set_override(&self, fault: Option<Fault>) {
        *self.override_fault.lock().unwrap() = fault;
    }

    /// While set, every JSON-RPC request naming the method (alone or in a
    /// batch; or any text its body contains, such as a block's hash) gets
    /// the fault instead of the schedule's or the override's: one kind of
    /// answer gone wrong while the rest of the node is well.
    pub fn set_method_fault(&self, fault: Option<(&'static str, Fault)>) {
        *self.method_fault.lock().unwrap() = fault;
    }

    /// While set, every JSON-RPC request whose body contains this text gets
    /// 503 (a method the upstream fails to answer for a while).
    pub fn set_fail_matching(&self, text: Option<&'static str>) {
        *self.fail_matching.lock().unwrap() = text;
    }

    /// While set, the upstream lacks this method, as an older or a
    /// different node does: each call of it, alone or in a batch, is
    /// answered -32601 as geth answers an unknown method, and the rest of
    /// the request is forwarded.
    pub fn set_lacking_method(&self, method: Option<&'static str>) {
        *self.lacking_method.lock().unwrap() = method;
    }

    /// While set, every `GET /blocks` gets this fault.
    pub fn set_stream_fault(&self, fault: Option<Fault>) {
        *self.stream_fault.lock().unwrap() = fault;
    }

    /// Changes the `from` of the first transaction in the next answer that
    /// carries a block with full transactions: the one field of a block no
    /// hash covers.
    pub fn tamper_sender(&self) {
        self.sender_armed.store(true, Ordering::Relaxed);
    }

    /// Tells `lie` in the next answer that carries what it changes.
    pub fn tell(&self, lie: FieldLie) {
        *self.field_lie.lock().unwrap() = Some(lie);
    }

    /// Field lies told so far.
    pub fn field_lies(&self) -> u64 {
        self.field_lies.load(Ordering::Relaxed)
    }

    /// How many answers had a sender changed.
    pub fn senders_tampered(&self) -> u64 {
        self.senders_tampered.load(Ordering::Relaxed)
    }

    /// While set, every connection is closed without an answer.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::Relaxed);
    }

    /// Tells this lie in the next answer that carries what it changes.
    pub fn tamper_state(&self, tamper: StateTamper) {
        *self.state_tamper.lock().unwrap() = Some((tamper, None));
    }

    /// As [`Control::tamper_state`], in the next answer to a request whose
    /// body contains `text` (a block's hash: the state asked at it).
    pub fn tamper_state_matching(&self, tamper: StateTamper, text: &'static str) {
        assert!(
            !text.is_empty(),
            "a lie aimed at every request is tamper_state"
        );
        *self.state_tamper.lock().unwrap() = Some((tamper, Some(text)));
    }

    /// State answers tampered with so far.
    pub fn state_tampered(&self) -> u64 {
        self.state_tampered.load(Ordering::Relaxed)
    }

    /// Report `eth_blockNumber` this many blocks below the node's.
    pub fn set_head_lag(&self, blocks: u64) {
        self.head_lag.store(blocks, Ordering::Relaxed);
    }

    /// Requests seen.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Requests that got something other than [`Fault::Pass`].
    pub fn faults_served(&self) -> u64 {
        self.faults_served.load(Ordering::Relaxed)
    }

    /// Answers whose block was tampered with.
    pub fn tampered(&self) -> u64 {
        self.tampered.load(Ordering::Relaxed)
    }
}
