//! A stored block as a replay takes it ([`ReplayBlock`]): its verified
//! header's facts, each transaction decoded from the raw block's bytes
//! with its verified sender, and each receipt's status, cumulative gas and
//! logs, which the replay must reproduce.

use alloy_consensus::{Transaction, TxEnvelope};
use alloy_eips::eip2718::Decodable2718;
use alloy_primitives::{Address, B256, Bytes, Log, TxKind, U64};
use serde::Deserialize;

use crate::block::BlockFacts;

/// Whole blocks parsed for replay kept for the runs after (a trace's run
/// that names state to fetch, the run after it, a companion's replay):
/// parsing a block of 1,250 transactions and their receipts is some
/// milliseconds each time. Each is a few MiB for such a block (the guard's
/// serving peak is ~12 MiB higher with them); at most this many. Default
/// is 4.
pub const REPLAY_BLOCKS_KEPT: usize = 4;

/// A block to replay over its parent's state.
pub struct ReplayBlock {
    /// Its verified header's facts.
    pub facts: BlockFacts,
    /// Its transactions, from the first up to the last one traced.
    pub txs: Vec<BlockTx>,
    /// Their receipts, one each.
    pub receipts: Vec<ReceiptFacts>,
    /// Its withdrawals (address, amount in Gwei), credited after its
    /// transactions: what its post-state holds besides their changes
    /// (`None` when they did not read: its post-state is not kept).
    pub withdrawals: Option<Vec<(Address, u64)>>,
}

impl ReplayBlock {
    /// The accounts it names without running: each transaction's sender
    /// and recipient (or the contract it creates), its beneficiary, its
    /// withdrawals'. Once each, in the order first named.
    pub fn named_accounts(&self) -> Vec<Address> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut name = |address: Address| {
            if seen.insert(address) {
                out.push(address);
            }
        };
        for tx in &self.txs {
            name(tx.sender);
            name(match tx.tx.kind() {
                TxKind::Call(to) => to,
                TxKind::Create => tx.sender.create(tx.tx.nonce()),
            });
        }
        name(self.facts.beneficiary);
        for (address, _) in self.withdrawals.iter().flatten() {
            name(*address);
        }
        out
    }

    /// A block's withdrawals from its stored JSON (either form; none
    /// before Shanghai).
    pub fn withdrawals_from_json(json: &[u8]) -> Result<Vec<(Address, u64)>, Unreadable> {
        #[derive(Deserialize)]
        struct Block {
            #[serde(default)]
            withdrawals: Option<Vec<WithdrawalJson>>,
        }
        #[derive(Deserialize)]
        struct WithdrawalJson {
            address: Address,
            amount: U64,
        }
        let block: Block =
            serde_json::from_slice(json).map_err(|e| Unreadable(format!("withdrawals: {e}")))?;
        Ok(block
            .withdrawals
            .unwrap_or_default()
            .into_iter()
            .map(|w| (w.address, w.amount.to()))
            .collect())
    }
}

/// One transaction of a stored block.
pub struct BlockTx {
    /// Its hash.
    pub hash: B256,
    /// Its sender (checked against its signature at ingest).
    pub sender: Address,
    /// The signed transaction.
    pub tx: TxEnvelope,
}

/// What a replay must reproduce of a transaction's receipt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiptFacts {
    /// Whether it succeeded.
    pub success: bool,
    /// The block's gas used up to and with it.
    pub cumulative_gas: u64,
    /// Its logs.
    pub logs: Vec<Log>,
}

/// A stored transaction or receipt the replay cannot read: the block is
/// not one to replay here.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unreadable(pub String);

impl BlockTx {
    /// A transaction from the hex digits of its EIP-2718 encoding (as the
    /// raw block holds them), its stored JSON (for its verified `from`)
    /// and its hash, which the encoding must hash to.
    pub fn parse(hash: B256, raw_hex: &[u8], json: &[u8]) -> Result<BlockTx, Unreadable> {
        let raw = alloy_primitives::hex::decode(raw_hex)
            .map_err(|e| Unreadable(format!("transaction {hash}: {e}")))?;
        let tx = TxEnvelope::decode_2718(&mut raw.as_slice())
            .map_err(|e| Unreadable(format!("transaction {hash}: {e}")))?;
        if *tx.tx_hash() != hash {
            return Err(Unreadable(format!(
                "transaction {hash}: its encoding hashes to {}",
                tx.tx_hash()
            )));
        }
        #[derive(Deserialize)]
        struct From {
            from: Address,
        }
        let from: From = serde_json::from_slice(json)
            .map_err(|e| Unreadable(format!("transaction {hash}: {e}")))?;
        Ok(BlockTx {
            hash,
            sender: from.from,
            tx,
        })
    }
}

impl ReceiptFacts {
    /// A receipt's facts from its stored JSON (a receipt without a status,
    /// before Byzantium, is not one neve replays).
    pub fn from_json(json: &[u8]) -> Result<ReceiptFacts, Unreadable> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Receipt {
            status: Option<U64>,
            cumulative_gas_used: U64,
            logs: Vec<LogJson>,
        }
        #[derive(Deserialize)]
        struct LogJson {
            address: Address,
            topics: Vec<B256>,
            data: Bytes,
        }
        let receipt: Receipt =
            serde_json::from_slice(json).map_err(|e| Unreadable(format!("a receipt: {e}")))?;
        let status = receipt
            .status
            .ok_or_else(|| Unreadable("a receipt without a status".into()))?;
        Ok(ReceiptFacts {
            success: status == U64::from(1),
            cumulative_gas: receipt.cumulative_gas_used.to(),
            logs: receipt
                .logs
                .into_iter()
                .map(|log| Log::new_unchecked(log.address, log.topics, log.data))
                .collect(),
        })
    }
}
