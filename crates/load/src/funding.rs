//! Funding: the funder account, and the senders funded from it.

use std::time::Instant;

use alloy_consensus::TxEip1559;
use alloy_primitives::{Address, B256, U256};
use alloy_signer_local::PrivateKeySigner;
use neve_upstream::{RpcClient, RpcError, quantity};
use serde_json::json;

use crate::chain::{HEAD_POLL, SETUP_TIMEOUT, balance, wait_nonce, wait_receipt};
use crate::config::LoadConfig;
use crate::error::{LoadError, rpc};
use crate::mix;
use crate::signing::{derive_senders, parse_key, sign};
use crate::vocabulary::{Fees, Sender};

/// The account that funds the senders. With a key, that key; without, a key
/// derived from the seed that the node's unlocked dev account funds first.
pub(crate) async fn funder(
    client: &RpcClient,
    config: &LoadConfig,
    fees: Fees,
) -> Result<PrivateKeySigner, LoadError> {
    if let Some(key) = &config.funder_key {
        return parse_key(key);
    }
    let accounts: Vec<Address> = client
        .call("eth_accounts", ())
        .await
        .map_err(rpc("eth_accounts"))?;
    let dev = *accounts.first().ok_or(LoadError::NoFunder)?;
    let funder = derive_senders(config.seed ^ 0x5eed_f00d, 1)
        .remove(0)
        .signer;
    let balance = balance(client, dev).await?;
    let hash: B256 = client
        .call(
            "eth_sendTransaction",
            [json!({
                "from": dev,
                "to": funder.address(),
                "value": balance / U256::from(2),
                "gas": "0x5208",
                "maxFeePerGas": quantity(fees.max_fee as u64),
                "maxPriorityFeePerGas": quantity(fees.tip as u64),
            })],
        )
        .await
        .map_err(rpc("funding from the dev account"))?;
    wait_receipt(client, hash).await?;
    Ok(funder)
}

/// Sends each sender its share of the funder's balance and waits for them all.
pub(crate) async fn fund_senders(
    client: &RpcClient,
    chain_id: u64,
    fees: Fees,
    funder: &mut Sender,
    senders: &[Sender],
) -> Result<(), LoadError> {
    /// Ten thousand ether: years of gas at the generator's prices.
    const MAX_GRANT: u128 = 10_000 * 10u128.pow(18);
    let available = balance(client, funder.signer.address()).await?;
    let share = available / U256::from(2 * senders.len() as u64 + 2);
    let grant = share.min(U256::from(MAX_GRANT));
    let raw: Vec<(&str, [String; 1])> = senders
        .iter()
        .map(|sender| {
            let tx = TxEip1559 {
                chain_id,
                nonce: funder.nonce,
                gas_limit: 21_000,
                max_fee_per_gas: fees.max_fee,
                max_priority_fee_per_gas: fees.tip,
                to: alloy_primitives::TxKind::Call(sender.signer.address()),
                value: grant,
                ..Default::default()
            };
            funder.nonce += 1;
            (
                "eth_sendRawTransaction",
                [sign(&funder.signer, mix::UnsignedTx::Eip1559(tx))],
            )
        })
        .collect();
    let Some(((_, first), rest)) = raw.split_first() else {
        return Ok(());
    };
    // The first grant goes alone: once the pool takes it, the pool has
    // caught up with the block that funded the funder, and the rest may go
    // as one batch.
    send_when_pool_sees_funds(client, &first[0]).await?;
    for item in client.batch(rest).await.map_err(rpc("funding senders"))? {
        item.map_err(rpc("funding a sender"))?;
    }
    wait_nonce(client, funder.signer.address(), funder.nonce).await
}

/// Sends a raw transaction, retrying while the node's pool still prices it
/// against state from before the block that funded its sender: geth answers
/// receipts for a new block before its pool has reset onto that block.
pub(crate) async fn send_when_pool_sees_funds(
    client: &RpcClient,
    raw: &str,
) -> Result<(), LoadError> {
    let deadline = Instant::now() + SETUP_TIMEOUT;
    loop {
        match client.call::<B256>("eth_sendRawTransaction", [raw]).await {
            Ok(_) => return Ok(()),
            Err(RpcError::Rpc { message, .. })
                if message.contains("insufficient funds") && Instant::now() < deadline =>
            {
                tokio::time::sleep(HEAD_POLL).await
            }
            Err(error) => return Err(rpc("funding a sender")(error)),
        }
    }
}
