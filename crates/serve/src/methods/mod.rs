//! The method table: every family of served methods, one line each, and
//! the one entry that answers a call by name ([`Context::call`]). A family
//! is a file that lists its [`Method`]s; a new family is a new file and a
//! line in [`FAMILIES`]. No family imports this table: each knows only the
//! call's vocabulary (`rpc`).
//!
//! The table's order is the order the metrics count methods in; anything
//! not in it is "other" there and unsupported here (421 with -32601).

mod blocks;
mod calls;
mod capabilities;
mod chain;
mod fees;
pub(crate) mod logs;
mod raw;
mod receipts;
mod simulate;
mod state;
mod trace;
mod uncles;
mod witness;

use std::cell::Cell;

use serde_json::value::RawValue;

use crate::params::Params;
use crate::rpc::{Context, Method, NoReply, PinnedRun, Reads, Reply, Runs};

/// Every family, in the order the metrics count their methods.
const FAMILIES: &[&[Method]] = &[
    chain::METHODS,
    capabilities::METHODS,
    blocks::METHODS,
    receipts::METHODS,
    logs::METHODS,
    uncles::METHODS,
    raw::METHODS,
    state::METHODS,
    calls::METHODS,
    fees::METHODS,
    simulate::METHODS,
    trace::METHODS,
    witness::METHODS,
];

/// Every served method, in the table's order.
fn methods() -> impl Iterator<Item = &'static Method> {
    FAMILIES.iter().flat_map(|family| family.iter())
}

/// `method` and how it runs, when [`Context::prepare`] does something for
/// it: a method run with others along (a whole block's trace).
fn preparing(method: &str) -> Option<(&'static Method, &'static PinnedRun)> {
    let method = methods().find(|m| m.name == method)?;
    match &method.runs {
        Runs::Executed(executed) if executed.along.is_some() => Some((method, executed)),
        _ => None,
    }
}

/// How many methods are counted by name in the metrics.
pub(crate) const SERVED_COUNT: usize = {
    let mut count = 0;
    let mut i = 0;
    while i < FAMILIES.len() {
        count += FAMILIES[i].len();
        i += 1;
    }
    count
};

/// Every method counted by name in the metrics, in the table's order.
/// Anything else is "other", at index [`SERVED_COUNT`].
pub(crate) fn served() -> impl Iterator<Item = &'static str> {
    methods().map(|method| method.name)
}

/// `method`'s index in [`served`], or [`SERVED_COUNT`] for any other.
pub(crate) fn method_index(method: &str) -> usize {
    served().position(|m| m == method).unwrap_or(SERVED_COUNT)
}

/// Whether the method at `index` (of [`method_index`]) is a state read.
pub(crate) fn is_state_method(index: usize) -> bool {
    methods().nth(index).is_some_and(|method| method.state_read)
}

/// A call answered on the call threads.
pub(crate) struct Execution {
    pub(crate) reply: Reply,
    /// Gas of its runs, and of what it read (charged to its client).
    pub(crate) gas: u64,
}

impl Context {
    /// Answers one call; with [`Reads::in_memory`], [`Reply::Cold`] when
    /// that needs a page that is not in memory, and [`Reply::Execute`] or
    /// [`Reply::LongRead`] when it is answered on the call threads
    /// ([`Context::execute`]).
    pub(crate) fn call(&self, method: &str, params: Option<&RawValue>, reads: Reads) -> Reply {
        reply_of(self.answer(method, params, reads, &Cell::new(0)))
    }

    /// Answers a call the worker answered [`Reply::Execute`] or
    /// [`Reply::LongRead`], on the call threads: an executed method run at
    /// its pinned block, or a held one answered where it may take its
    /// time; with the gas of its runs and of what it read.
    pub(crate) fn execute(
        &self,
        method: &str,
        params: Option<&RawValue>,
        reads: Reads,
    ) -> Execution {
        let ran = Cell::new(0);
        let (answered, read) =
            crate::rpc::charge::charged(|| self.answer(method, params, reads, &ran));
        let reply = match answered {
            Err(NoReply::Cold | NoReply::Damaged) => Reply::Miss,
            other => reply_of(other),
        };
        Execution {
            reply,
            gas: ran.get().saturating_add(read),
        }
    }

    /// What a whole block's trace about to run again after its block's
    /// witness comes will read besides state, made ready beside the fetch
    /// ([`Job::prepare`]): the node takes as long to make a witness as to
    /// trace the block, and the block's parse need not wait behind it.
    /// Nothing for any other call (its parameters not even parsed), or
    /// one whose parameters do not parse.
    ///
    /// [`Job::prepare`]: crate::rpc::Job::prepare
    pub(crate) fn prepare(&self, method: &str, params: Option<&RawValue>, reads: Reads) {
        let Some((method, executed)) = preparing(method) else {
            return;
        };
        let Ok(params) = Params::new(params) else {
            return;
        };
        let (required, max) = method.arity;
        if params.arity(required, max).is_ok()
            && let Ok(job) = (executed.parse)(&params)
        {
            job.prepare(self, reads);
        }
    }

    /// Whether [`Context::prepare`] does anything for `method`: a whole
    /// block's trace.
    pub(crate) fn prepares(&self, method: &str) -> bool {
        preparing(method).is_some()
    }

    /// The key identical traces in flight share one run by (see
    /// [`Context::trace_key`]); `None` for any other call.
    pub(crate) fn trace_key_of(
        &self,
        method: &str,
        params: Option<&RawValue>,
        reads: Reads,
    ) -> Option<crate::rpc::TraceKeys> {
        let params = Params::new(params).ok()?;
        let (row, method) = methods().enumerate().find(|(_, m)| m.name == method)?;
        let Runs::Executed(executed) = &method.runs else {
            return None;
        };
        let (required, max) = method.arity;
        params.arity(required, max).ok()?;
        self.trace_key(memo_tag(row), max, executed, &params, reads)
    }

    /// One call by the table's row for its method: parameters and arity
    /// checked, then answered as the method runs; the gas of runs added
    /// to `gas`.
    fn answer(
        &self,
        method: &str,
        params: Option<&RawValue>,
        reads: Reads,
        gas: &Cell<u64>,
    ) -> Result<Reply, NoReply> {
        let params = Params::new(params)?;
        // A method neve does not serve is the node's to judge (421).
        let Some((row, method)) = methods().enumerate().find(|(_, m)| m.name == method) else {
            return Ok(Reply::Unsupported);
        };
        if method.state_read && self.state.is_none() {
            return Ok(Reply::Unsupported);
        }
        let (required, max) = method.arity;
        params.arity(required, max)?;
        match &method.runs {
            Runs::Held(answer) => answer(self, &params, reads),
            Runs::Executed(executed) => {
                self.run_pinned(memo_tag(row), max, executed, &params, reads, gas)
            }
        }
    }
}

/// The memo's byte for the method at `row` of the table.
fn memo_tag(row: usize) -> u8 {
    const { assert!(SERVED_COUNT < 256, "a method's row fits a byte") };
    row as u8
}

/// A handler's result as a reply.
fn reply_of(answered: Result<Reply, NoReply>) -> Reply {
    match answered {
        Ok(reply) => reply,
        Err(NoReply::Param(error)) => error.into(),
        Err(NoReply::Cold) => Reply::Cold,
        Err(NoReply::Damaged) => Reply::Miss,
    }
}

#[cfg(test)]
mod tests {
    use neve_store::testing::SyntheticBlock;

    use super::*;
    use crate::server::tests::server;

    /// A name in two families would be answered by the first alone.
    #[test]
    fn every_served_method_is_in_one_family() {
        let mut names: Vec<&str> = served().collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SERVED_COUNT);
    }

    /// Issue 31: one rule for every read. With the store paged out, every
    /// method that reads a record is answered on an async worker without
    /// faulting a page in: each is `Cold` (answered again on the I/O threads)
    /// or answered from what needs no record, and the store's pages stay out
    /// of memory.
    #[test]
    fn no_served_method_faults_a_page_in_on_an_async_worker() {
        let (server, _dir) = server();
        let block = SyntheticBlock::new(0, 4, 3, 200);
        let (hash, tx) = (
            format!("0x{}", hex(&block.hash)),
            format!("0x{}", hex(&block.txs[1].hash)),
        );
        let address = format!("0x{}", hex(&[0x11; 20]));
        let calls: Vec<(&str, String)> = vec![
            ("eth_getBlockByNumber", r#"["0x4",false]"#.into()),
            ("eth_getBlockByNumber", r#"["0x4",true]"#.into()),
            ("eth_getBlockByHash", format!(r#"["{hash}",false]"#)),
            ("eth_getBlockTransactionCountByNumber", r#"["0x4"]"#.into()),
            (
                "eth_getBlockTransactionCountByHash",
                format!(r#"["{hash}"]"#),
            ),
            ("eth_getUncleCountByBlockNumber", r#"["0x4"]"#.into()),
            (
                "eth_getUncleByBlockHashAndIndex",
                format!(r#"["{hash}","0x0"]"#),
            ),
            (
                "eth_getTransactionByBlockNumberAndIndex",
                r#"["0x4","0x1"]"#.into(),
            ),
            (
                "eth_getTransactionByBlockHashAndIndex",
                format!(r#"["{hash}","0x1"]"#),
            ),
            ("eth_getTransactionByHash", format!(r#"["{tx}"]"#)),
            ("eth_getTransactionReceipt", format!(r#"["{tx}"]"#)),
            ("eth_getBlockReceipts", r#"["0x4"]"#.into()),
            ("debug_getRawHeader", r#"["0x4"]"#.into()),
            ("debug_getRawBlock", r#"["0x4"]"#.into()),
            ("debug_getRawReceipts", r#"["0x4"]"#.into()),
            ("debug_getRawTransaction", format!(r#"["{tx}"]"#)),
            ("eth_getLogs", format!(r#"[{{"blockHash":"{hash}"}}]"#)),
            (
                "eth_getLogs",
                r#"[{"fromBlock":"0x3","toBlock":"0x4"}]"#.into(),
            ),
            ("eth_getBalance", format!(r#"["{address}","0x4"]"#)),
            (
                "eth_getStorageAt",
                format!(r#"["{address}","0x0","{hash}"]"#),
            ),
            ("eth_getProof", format!(r#"["{address}",[],"0x4"]"#)),
        ];
        if !neve_store::testing::page_out(&server.ctx.reader) {
            eprintln!("MADV_PAGEOUT unsupported here: nothing to show");
            return;
        }
        let resident = || server.ctx.reader.residency(1 << 16).resident_bytes();
        // Paging out is the kernel's best effort (a page under I/O stays):
        // asked again a few times before the test gives up showing anything.
        for _ in 0..5 {
            if resident() == 0 {
                break;
            }
            neve_store::testing::page_out(&server.ctx.reader);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if resident() != 0 {
            eprintln!("the kernel kept some of the store in memory: nothing to show");
            return;
        }
        for (method, params) in &calls {
            let params = RawValue::from_string(params.clone()).unwrap();
            let reply = if *method == "eth_getLogs" {
                match server
                    .ctx
                    .logs_plan(Some(&params), Reads::in_memory(server.ctx.latest()))
                {
                    Ok(plan) => {
                        assert!(!plan.in_memory(&server.ctx), "{method} {params}");
                        Reply::Cold
                    }
                    Err(reply) => reply,
                }
            } else {
                server
                    .ctx
                    .call(method, Some(&params), Reads::in_memory(server.ctx.latest()))
            };
            assert!(
                matches!(reply, Reply::Cold),
                "{method} {params}: answered on the worker from a cold store"
            );
            assert_eq!(resident(), 0, "{method} {params} faulted a page in");
        }
        // Answered where waiting is allowed: never cold there, and the block,
        // transaction and receipt methods get their answers.
        for (method, params) in &calls {
            let params = RawValue::from_string(params.clone()).unwrap();
            let reply =
                server
                    .ctx
                    .call(method, Some(&params), Reads::from_disk(server.ctx.latest()));
            assert!(!matches!(reply, Reply::Cold), "{method} {params} from disk");
            let answered = !method.contains("Uncle") && !method.starts_with("debug_getRaw");
            if answered
                && method.starts_with("eth_get")
                && !method.contains("Balance")
                && *method != "eth_getLogs"
            {
                assert!(
                    matches!(reply, Reply::Result(_))
                        || method.contains("Storage")
                        || method.contains("Proof"),
                    "{method} {params} from disk"
                );
            }
        }
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
