//! `eth_getLogs` over the stored tail: blooms skip blocks, the log table
//! matches address and topics without parsing, and matching logs are the
//! stored bytes joined into an array. A query is planned ([`plan()`]), then
//! scanned ([`scan()`]); the server scans a short one where it was parsed
//! and a long one on the scan threads, both within the request's
//! [`Budget`]. The filter ([`filter`]) also serves `logs` subscriptions.

pub(crate) mod filter;
mod plan;
mod scan;

use serde_json::value::RawValue;

use crate::params::Params;
use crate::rpc::{Context, Method, NoReply, Reads, Reply};

pub use plan::SCAN_INLINE_BLOCKS;
pub(crate) use plan::{Budget, Plan, plan};
pub(crate) use scan::scan;

/// Most requests whose log scans may wait for (or run on) the scan threads
/// at once. Past it a request's off-worker queries are refused at once with
/// -32005 instead of queueing behind scans the client would time out on:
/// the threads are few (half the background cores) and a scan may take
/// seconds. Default is 64.
pub const MAX_QUEUED_SCANS: u64 = 64;

pub(crate) const METHODS: &[Method] = &[Method::new("eth_getLogs", (1, 1), get_logs)];

fn get_logs(ctx: &Context, p: &Params<'_>, reads: Reads) -> Result<Reply, NoReply> {
    Ok(match plan(ctx, p.object(0)?, reads) {
        Ok(plan) => scan(ctx, &plan, &mut ctx.logs_budget()),
        Err(reply) => reply,
    })
}

impl Context {
    /// A fresh `eth_getLogs` budget for one request.
    pub(crate) fn logs_budget(&self) -> Budget {
        Budget::new(
            self.config.logs_budget_blocks,
            self.config.logs_budget_bytes,
        )
    }

    /// The first half of `eth_getLogs`: parameters checked as for any call,
    /// the query resolved and its range checked, nothing scanned yet.
    pub(crate) fn logs_plan(&self, params: Option<&RawValue>, reads: Reads) -> Result<Plan, Reply> {
        let params = Params::new(params)?;
        params.arity(1, 1)?;
        plan(self, params.object(0)?, reads)
    }
}
