#!/usr/bin/env bash
# Runs every test of neve on a fresh machine: installs the pinned real nodes
# (idempotent), checks formatting and lints, then runs the whole cargo suite,
# which starts geth and avalanchego on 127.0.0.1.
#
# Reuses $CARGO_TARGET_DIR and $NEVE_TOOLS_DIR when set (CI points both
# outside the clone so a warm machine rebuilds nothing).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "installing pinned nodes and Debian packages"
scripts/install-tools.sh
scripts/install-deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo doc -D warnings"
# Doc links name real items: a renamed constant breaks the build here
# rather than leaving a dead link in the reference.
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

step "cargo test"
# Integration tests start real nodes and size their own load; two at a time
# is what a 2-core machine carries without starving the nodes.
# Benchmarks are compiled and linted by clippy above; running them is
# `cargo bench` (criterion's harness takes no libtest flags).
cargo test --workspace --lib --bins --tests --locked -- --test-threads=2
