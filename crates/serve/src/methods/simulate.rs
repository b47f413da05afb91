//! `eth_simulateV1`: simulated blocks on top of a stored block, executed
//! with revm over verified state (`neve_execution::simulate`), as geth
//! answers them. An executed method like the calls: pinned, fetched in
//! rounds, charged by gas, kept in the memo; a miss (421) where neve
//! cannot answer with authority (a fork it cannot name, coreth's chains,
//! a precompile's or an opcode's words it does not give, a trie node a
//! deletion collapses into too deep to find).

use neve_execution::simulate::{CallCodes, SimError, SimulateRequest, Simulated};
use neve_execution::{CallError, Pinned};

use crate::errors::ErrorCode;
use crate::params::{ParamError, Params};
use crate::rpc::{Context, Job, Method, Pin, PinnedRun, Ran, Reads, Reply};

pub(crate) const METHODS: &[Method] = &[
    // (options, block), as geth.
    Method::executed(
        "eth_simulateV1",
        (1, 2),
        PinnedRun {
            pin: Pin::At(1),
            parse,
            memo: true,
            along: None,
        },
    ),
];

/// The codes of a simulated call's own failure, from the one enum.
const CODES: CallCodes = CallCodes {
    reverted: ErrorCode::ExecutionReverted.code(),
    vm_error: ErrorCode::VmError.code(),
};

struct Simulate(SimulateRequest);

fn parse(p: &Params<'_>) -> Result<Box<dyn Job>, ParamError> {
    let request = match p.optional(0) {
        Some(raw) => serde_json::from_str(raw.get())
            .map_err(|e| ParamError(format!("invalid argument 0: {e}")))?,
        None => {
            p.object(0)?;
            SimulateRequest::default()
        }
    };
    Ok(Box::new(Simulate(request)))
}

impl Job for Simulate {
    fn run(&self, _: &Context, _: Reads, pinned: &Pinned<'_>) -> Result<Ran, CallError> {
        match neve_execution::simulate::simulate(pinned, &self.0, CODES) {
            Ok(Simulated::Done(json, read)) => Ok(Ran::Answered(Reply::json(json), read)),
            Ok(Simulated::Needs(needs)) => Ok(Ran::Needs(needs)),
            Ok(Simulated::OutsideTail) => Ok(Ran::Miss),
            Err(SimError::Refused(refusal, message)) => Ok(Ran::Answered(
                Reply::ErrorData(ErrorCode::Simulation(refusal), message, String::new()),
                Vec::new(),
            )),
            Err(SimError::Call(error)) => Err(error),
        }
    }
}
