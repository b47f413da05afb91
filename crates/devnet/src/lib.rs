//! devnet: real EVM nodes on loopback, for tests, the demo and benchmarks.
//!
//! Owns finding the pinned node binaries (installed by
//! `scripts/install-tools.sh`), starting geth and avalanchego on 127.0.0.1
//! with free ports in temporary directories, waiting until they answer, and
//! killing them when the handle drops — also when a test panics, and (through
//! `PR_SET_PDEATHSIG`) when the process that started them dies. It also runs
//! the execution-apis conformance cases against any URL ([`conformance`]).
//!
//! It must not be used to reach anything but loopback, and knows nothing of
//! neve's store or server. Start at [`GethDev::start`], [`GethConformance::start`]
//! and [`Avalanchego::start`].

mod avalanchego;
pub mod conformance;
mod engine;
mod error;
pub mod faults;
pub mod fuzz;
mod geth;
mod process;
mod startup;
mod tools;

pub use avalanchego::{AVALANCHEGO_LOCAL_CHAIN_ID, AVALANCHEGO_PREFUNDED_KEY, Avalanchego};
pub use error::DevnetError;
pub use geth::{
    DEV_GENESIS, GETH_DEV_ADDRESS, GETH_DEV_GAS_LIMIT, GETH_DEV_KEY, GethConformance, GethDev,
    GethDevOptions, GethNode,
};
pub use process::NodeProcess;
pub use startup::{STARTUP_TIMEOUT, free_ports};
pub use tools::{ToolError, tool_path, tools_dir, workspace_root};
