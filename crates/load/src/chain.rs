//! What the run asks of the node: fees, heights, nonces, balances, and
//! waiting for a receipt or a nonce.

use std::time::{Duration, Instant};

use alloy_primitives::{Address, B256, U256};
use neve_upstream::{RpcClient, RpcError, parse_quantity};
use serde_json::Value;

use crate::error::{LoadError, rpc};
use crate::vocabulary::Fees;

/// How long a funding or deployment transaction may take to be included.
pub(crate) const SETUP_TIMEOUT: Duration = Duration::from_secs(120);

/// How often the inclusion watcher asks for the head.
pub(crate) const HEAD_POLL: Duration = Duration::from_millis(100);

/// The chain id the node reports.
pub(crate) async fn chain_id(client: &RpcClient) -> Result<u64, LoadError> {
    let chain_id: String = client
        .call("eth_chainId", ())
        .await
        .map_err(rpc("eth_chainId"))?;
    let chain_id = parse_quantity(&chain_id)
        .ok_or_else(|| LoadError::Setup(format!("eth_chainId returned {chain_id:?}")))?;
    Ok(chain_id)
}

pub(crate) async fn current_fees(client: &RpcClient) -> Result<Fees, LoadError> {
    let price: String = client
        .call("eth_gasPrice", ())
        .await
        .map_err(rpc("eth_gasPrice"))?;
    let price = parse_quantity(&price).unwrap_or(1_000_000_000) as u128;
    // Three times the quote rides out base-fee rises between refreshes.
    let max_fee = (price * 3).max(2_000_000_000);
    Ok(Fees {
        max_fee,
        tip: (price / 2).clamp(1, 1_000_000_000),
    })
}

pub(crate) async fn block_number(client: &RpcClient) -> Result<u64, LoadError> {
    let head: String = client
        .call("eth_blockNumber", ())
        .await
        .map_err(rpc("eth_blockNumber"))?;
    parse_quantity(&head)
        .ok_or_else(|| LoadError::Setup(format!("eth_blockNumber returned {head:?}")))
}

pub(crate) async fn pending_nonce(client: &RpcClient, address: Address) -> Result<u64, LoadError> {
    let nonce: String = client
        .call("eth_getTransactionCount", (address, "pending"))
        .await
        .map_err(rpc("eth_getTransactionCount"))?;
    parse_quantity(&nonce).ok_or_else(|| LoadError::Setup(format!("bad nonce {nonce:?}")))
}

pub(crate) async fn balance(client: &RpcClient, address: Address) -> Result<U256, LoadError> {
    client
        .call("eth_getBalance", (address, "latest"))
        .await
        .map_err(rpc("eth_getBalance"))
}

pub(crate) async fn wait_receipt(client: &RpcClient, hash: B256) -> Result<Value, LoadError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        let receipt: Value = match client.call("eth_getTransactionReceipt", [hash]).await {
            Ok(receipt) => receipt,
            // A freshly started geth indexes transactions in the background
            // and says so instead of answering; that is a "not yet".
            Err(RpcError::Rpc { message, .. }) if message.contains("indexing") => Value::Null,
            Err(error) if error.is_transient() => Value::Null,
            Err(error) => return Err(rpc("eth_getTransactionReceipt")(error)),
        };
        if !receipt.is_null() {
            if receipt.get("status").and_then(Value::as_str) != Some("0x1") {
                return Err(LoadError::Setup(format!(
                    "setup transaction {hash} failed: {receipt}"
                )));
            }
            return Ok(receipt);
        }
        if Instant::now() > deadline {
            return Err(LoadError::Setup(format!(
                "{hash} not included within {SETUP_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(HEAD_POLL).await;
    }
}

pub(crate) async fn wait_nonce(
    client: &RpcClient,
    address: Address,
    nonce: u64,
) -> Result<(), LoadError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        let mined: String = client
            .call("eth_getTransactionCount", (address, "latest"))
            .await
            .map_err(rpc("eth_getTransactionCount"))?;
        if parse_quantity(&mined).unwrap_or(0) >= nonce {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(LoadError::Setup(format!(
                "funding of {address} not included within {SETUP_TIMEOUT:?} (at nonce {mined}, want {nonce})"
            )));
        }
        tokio::time::sleep(HEAD_POLL).await;
    }
}
