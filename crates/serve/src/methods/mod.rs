//! The method table: every family of served methods, one line each, and
//! the one entry that answers a call by name ([`Context::call`]). A family
//! is a file that lists its [`Method`]s; a new family is a new file and a
//! line in [`FAMILIES`]. No family imports this table: each knows only the
//! call's vocabulary (`rpc`).
//!
//! The table's order is the order the metrics count methods in; anything
//! not in it is "other" there and unsupported here (421 with -32601).

mod blocks;
mod capabilities;
mod chain;
pub(crate) mod logs;
mod raw;
mod receipts;
mod state;
mod uncles;

use serde_json::value::RawValue;

use crate::params::Params;
use crate::rpc::{Context, Method, Reads, Reply, Stop};

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
];

/// Every served method, in the table's order.
fn methods() -> impl Iterator<Item = &'static Method> {
    FAMILIES.iter().flat_map(|family| family.iter())
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

impl Context {
    /// Answers one call; with [`Reads::InMemory`], [`Reply::Cold`] when
    /// that needs a page that is not in memory.
    pub(crate) fn call(&self, method: &str, params: Option<&RawValue>, reads: Reads) -> Reply {
        let params = match Params::new(params) {
            Ok(params) => params,
            Err(error) => return error.into(),
        };
        // A method neve does not serve is the node's to judge (421).
        let Some(method) = methods().find(|m| m.name == method) else {
            return Reply::Unsupported;
        };
        if method.state_read && self.state.is_none() {
            return Reply::Unsupported;
        }
        let (required, max) = method.arity;
        if let Err(error) = params.arity(required, max) {
            return error.into();
        }
        match (method.answer)(self, &params, reads) {
            Ok(reply) => reply,
            Err(Stop::Param(error)) => error.into(),
            Err(Stop::Cold) => Reply::Cold,
            Err(Stop::Damaged) => Reply::Miss,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name in two families would be answered by the first alone.
    #[test]
    fn every_served_method_is_in_one_family() {
        let mut names: Vec<&str> = served().collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SERVED_COUNT);
    }
}
