//! Deploying contracts: the run's token, and any contract a test needs.

use alloy_primitives::{Address, B256, Bytes};
use alloy_signer_local::PrivateKeySigner;
use neve_upstream::RpcClient;

use crate::chain::{chain_id, current_fees, pending_nonce, wait_receipt};
use crate::error::{LoadError, rpc};
use crate::mix;
use crate::signing::{parse_key, sign};
use crate::vocabulary::{Fees, Sender};

/// Deploys a contract whose creation runs `init`, sent from the account of
/// `funder_key` on the node at `rpc_url`; returns the contract's address once
/// its receipt says it succeeded. For tests that need a contract of their
/// own (storage written at chosen slots, say).
pub async fn deploy(rpc_url: &str, funder_key: &str, init: &[u8]) -> Result<Address, LoadError> {
    let client = RpcClient::new(rpc_url).map_err(rpc("connecting"))?;
    let signer = parse_key(funder_key)?;
    let chain_id = chain_id(&client).await?;
    let fees = current_fees(&client).await?;
    let nonce = pending_nonce(&client, signer.address()).await?;
    let init = Bytes::copy_from_slice(init);
    let tx = mix::creation_of(chain_id, nonce, fees.max_fee, fees.tip, init);
    deploy_tx(&client, &signer, tx).await
}

/// Deploys the token from the funder and returns its address.
pub(crate) async fn deploy_token(
    client: &RpcClient,
    chain_id: u64,
    fees: Fees,
    funder: &mut Sender,
) -> Result<Address, LoadError> {
    let tx = mix::creation(chain_id, funder.nonce, fees.max_fee, fees.tip);
    funder.nonce += 1;
    deploy_tx(client, &funder.signer, tx).await
}

pub(crate) async fn deploy_tx(
    client: &RpcClient,
    signer: &PrivateKeySigner,
    tx: mix::UnsignedTx,
) -> Result<Address, LoadError> {
    let hash: B256 = client
        .call("eth_sendRawTransaction", [sign(signer, tx)])
        .await
        .map_err(rpc("deploying a contract"))?;
    let receipt = wait_receipt(client, hash).await?;
    receipt
        .get("contractAddress")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .ok_or_else(|| {
            LoadError::Setup(format!(
                "creation receipt has no contractAddress: {receipt}"
            ))
        })
}
