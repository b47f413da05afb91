//! Fees: geth v1.17's gas price oracle (`eth_gasPrice`,
//! `eth_maxPriorityFeePerGas`) and fee history (`eth_feeHistory`), plus the
//! EIP-1559 / EIP-4844 / EIP-7918 fee formulas they lean on
//! (`eth_baseFee`-style next base fee, `eth_blobBaseFee`).
//!
//! Why a module of its own: these answers are pure arithmetic over blocks
//! and receipts neve already holds verified, and the judge is geth's
//! `eth/gasprice` package, quirks included. Keeping the arithmetic here, free
//! of I/O and of the JSON-RPC server, lets it be tested number by number;
//! the server fetches, caches and encodes.
//!
//! What is reproduced, and where we knowingly differ:
//!
//! - Effective tips use geth's 256-bit wrapping arithmetic: when a fee cap
//!   is below the base fee (never in a mined block) the tip is the tip cap,
//!   as `EffectiveGasTip` yields before its ignored `ErrGasFeeCapTooLow`.
//! - [`suggest_tip_cap`] keeps no memory between heads. geth seeds an empty
//!   block's sample with its *previous* answer (`lastPrice`, initially the
//!   miner's gas price, 1,000,000 wei); we seed it with
//!   [`OracleConfig::default_price`]. Passing the previous head's answer as
//!   `default_price` reproduces geth exactly.
//! - geth samples blocks concurrently; when the "one more block" rule is in
//!   play its outcome can depend on goroutine arrival order. We process
//!   blocks in launch order (newest first, extra blocks last), the order a
//!   quiet node sees.
//! - In fee history geth writes entry `i + 1` of `baseFeePerGas` and
//!   `baseFeePerBlobGas` twice (block `i`'s "next" value and block `i + 1`'s
//!   own), last writer wins. On a canonical chain both agree except for the
//!   blob fee at a fork boundary; we always take the block's own value.
//! - Where geth would panic (division by a zero gas target, blob update
//!   fraction or blob maximum) we return a value instead; documented per
//!   function.

mod block;
mod cache;
mod constants;
mod formulas;
mod history;
mod oracle;
#[cfg(test)]
mod tests;

pub use block::*;
pub use cache::*;
pub use constants::*;
pub use formulas::*;
pub use history::*;
pub use oracle::*;
