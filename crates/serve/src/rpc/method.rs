//! How a family declares a method: its name, its parameters and its
//! handler ([`Method`]). The families (`methods/`) list theirs; the table
//! there finds one by name. Nothing here knows a method.

use crate::params::Params;

use super::context::{Context, Reads};
use super::reply::{Reply, Stop};

/// A method's handler: answers from `Context` as [`Reads`] allows, or says
/// why it stopped ([`Stop`]: a bad parameter, a page not in memory, a
/// damaged record).
pub(crate) type Answer = fn(&Context, &Params<'_>, Reads) -> Result<Reply, Stop>;

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
    pub(crate) answer: Answer,
}

impl Method {
    /// A method answered from the stored tail.
    pub(crate) const fn new(name: &'static str, arity: (usize, usize), answer: Answer) -> Self {
        Method {
            name,
            arity,
            state_read: false,
            answer,
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
            answer,
        }
    }
}
