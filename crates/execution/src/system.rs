//! The system contracts a block's processing calls outside its
//! transactions, by the forks that brought them: what a simulated block
//! runs and what a replayed block runs before its transactions.

use alloy_primitives::{Address, B256, address, b256};

/// EIP-4788's contract: the parent beacon block root, from Cancun.
pub(crate) const BEACON_ROOTS: Address = address!("0x000F3df6D732807Ef1319fB7B8bB8522d0Beac02");
/// EIP-2935's contract: the parent's hash, from Prague.
pub(crate) const HISTORY_STORAGE: Address = address!("0x0000F90827F1C53a10cb7A02335B175320002935");
/// EIP-7002's and EIP-7251's queues, with their request types.
pub(crate) const REQUEST_QUEUES: [(u8, Address); 2] = [
    (0x01, address!("0x00000961Ef480Eb55e80D19ad83579A64c007002")),
    (0x02, address!("0x0000BBdDc7CE488642fb579F8B00f3a590007251")),
];
/// Every contract a block's system calls run.
pub(crate) const SYSTEM_CONTRACTS: [Address; 4] = [
    BEACON_ROOTS,
    HISTORY_STORAGE,
    REQUEST_QUEUES[0].1,
    REQUEST_QUEUES[1].1,
];
/// EIP-6110's deposit event: a block with one carries a deposit request,
/// which neve does not parse (the node's).
pub(crate) const DEPOSIT_TOPIC: B256 =
    b256!("0x649bbc62d0e31342afea4e5cd82d4049e7e1ee912fc0889aa790803be39038c5");
