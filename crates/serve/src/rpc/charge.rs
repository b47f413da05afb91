//! Work a method answered on the call threads charges its client beyond
//! its runs' gas (a fee history's blocks read), in gas: counted on the
//! thread that answers, and taken by whoever ran it there
//! (`Context::execute`), for `--client-rate` and `neve_call_gas_total`.

use std::cell::Cell;

thread_local! {
    /// Gas charged on this thread since [`charged`] began.
    static CHARGED: Cell<u64> = const { Cell::new(0) };
}

/// Runs `answer` and returns it with the gas it [`charge`]d.
pub(crate) fn charged<R>(answer: impl FnOnce() -> R) -> (R, u64) {
    CHARGED.with(|charged| charged.set(0));
    let answered = answer();
    (answered, CHARGED.with(|charged| charged.replace(0)))
}

/// Charges `gas` to the answer being made on this thread (nothing, where
/// no [`charged`] runs it).
pub(crate) fn charge(gas: u64) {
    CHARGED.with(|charged| charged.set(charged.get().saturating_add(gas)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_answer_charged_is_taken_with_it() {
        let ((), gas) = charged(|| {
            charge(300);
            charge(200);
        });
        assert_eq!(gas, 500);
        assert_eq!(charged(|| ()).1, 0, "taken, not left for the next");
    }
}
