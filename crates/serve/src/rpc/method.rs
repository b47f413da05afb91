//! How a family declares a method: its name, its parameters, and how it
//! runs ([`Method`], [`Runs`]). The families (`methods/`) list theirs; the
//! table there finds one by name. Nothing here knows a method.

use crate::params::Params;

use super::context::{Context, Reads};
use super::execute::PinnedRun;
use super::reply::{NoReply, Reply};

/// A method's handler: answers from `Context` as [`Reads`] allows, or says
/// why it stopped short ([`NoReply`]: a bad parameter, a page not in
/// memory, a damaged record).
pub(crate) type Answer = fn(&Context, &Params<'_>, Reads) -> Result<Reply, NoReply>;

/// How a method runs.
pub(crate) enum Runs {
    /// Answered from what neve holds, on the async worker. Its handler may
    /// answer [`Reply::Cold`] (answered again on the I/O threads, where it
    /// may wait for the disk) or [`Reply::Execute`] (answered again on the
    /// call threads, charged for what it read: the fee methods' long reads).
    Held(Answer),
    /// Executed with revm at a pinned block, on the call threads only: the
    /// pinning, the chain's rules there, the rounds of fetches, the answer
    /// memo, the gas charge and the calls' metrics are the server's and
    /// `rpc/execute.rs`'s, the same for every executed method.
    Executed(PinnedRun),
}

/// A served method, as its family declares it.
pub(crate) struct Method {
    /// Its name on the wire.
    pub(crate) name: &'static str,
    /// How many positional parameters it takes: (required, most), as geth
    /// declares them. Checked before anything is looked up.
    pub(crate) arity: (usize, usize),
    /// A read of the verified state: answered only with the state layer
    /// (without it, unsupported before its parameters are checked), and
    /// counted in the layer's hits, fetches and misses.
    pub(crate) state_read: bool,
    pub(crate) runs: Runs,
}

impl Method {
    /// A method answered from the stored tail.
    pub(crate) const fn new(name: &'static str, arity: (usize, usize), answer: Answer) -> Self {
        Method {
            name,
            arity,
            state_read: false,
            runs: Runs::Held(answer),
        }
    }

    /// A read of the verified state (see [`Method::state_read`]).
    pub(crate) const fn state_read(
        name: &'static str,
        arity: (usize, usize),
        answer: Answer,
    ) -> Self {
        Method {
            name,
            arity,
            state_read: true,
            runs: Runs::Held(answer),
        }
    }

    /// A method executed at a pinned block over verified state.
    pub(crate) const fn executed(
        name: &'static str,
        arity: (usize, usize),
        executed: PinnedRun,
    ) -> Self {
        Method {
            name,
            arity,
            state_read: true,
            runs: Runs::Executed(executed),
        }
    }
}
