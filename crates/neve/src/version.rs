//! What this binary is: version, commit and build date (set by
//! `build.rs`), for `neve --version`, `neve_build_info` in `/metrics`,
//! `web3_clientVersion` and `neve bench`'s `results.json`.

/// The crate version, `0.1.0`.
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit built, short, `-modified` when the tree had changes; or
/// `NEVE_BUILD_COMMIT`; `unknown` outside a checkout.
pub(crate) const COMMIT: &str = env!("NEVE_COMMIT");
/// The build date, UTC, `YYYY-MM-DD` (`SOURCE_DATE_EPOCH` when set).
pub(crate) const DATE: &str = env!("NEVE_BUILD_DATE");
/// `0.1.0 (commit 1a2b3c4d5e6f, built 2026-11-25)`: what `--version` prints after the name.
pub(crate) const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("NEVE_COMMIT"),
    ", built ",
    env!("NEVE_BUILD_DATE"),
    ")"
);
