//! Keys and signatures: the senders derived from a seed, a funder key
//! parsed, a transaction signed.

use alloy_consensus::{SignableTransaction, TxEnvelope};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{hex, keccak256};
use alloy_signer::SignerSync;
use alloy_signer_local::PrivateKeySigner;

use crate::error::LoadError;
use crate::mix;
use crate::vocabulary::Sender;

/// Signs `tx` and returns its EIP-2718 encoding as `0x…` hex.
pub(crate) fn sign(signer: &PrivateKeySigner, tx: mix::UnsignedTx) -> String {
    let envelope: TxEnvelope = match tx {
        mix::UnsignedTx::Legacy(tx) => {
            let signature = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing never fails for a local key");
            tx.into_signed(signature).into()
        }
        mix::UnsignedTx::Eip2930(tx) => {
            let signature = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing never fails for a local key");
            tx.into_signed(signature).into()
        }
        mix::UnsignedTx::Eip1559(tx) => {
            let signature = signer
                .sign_hash_sync(&tx.signature_hash())
                .expect("signing never fails for a local key");
            tx.into_signed(signature).into()
        }
    };
    hex::encode_prefixed(envelope.encoded_2718())
}

/// The sender keys for a seed: keccak256("neve-load" ‖ seed ‖ index).
pub(crate) fn derive_senders(seed: u64, count: usize) -> Vec<Sender> {
    (0..count as u64)
        .map(|i| {
            let mut material = b"neve-load".to_vec();
            material.extend_from_slice(&seed.to_be_bytes());
            material.extend_from_slice(&i.to_be_bytes());
            let key = keccak256(&material);
            Sender {
                signer: PrivateKeySigner::from_bytes(&key).expect("a keccak digest is a valid key"),
                nonce: 0,
            }
        })
        .collect()
}

/// A secp256k1 private key from 64 hex digits, with or without `0x`.
pub(crate) fn parse_key(key: &str) -> Result<PrivateKeySigner, LoadError> {
    let digits = key.trim().trim_start_matches("0x");
    if digits.len() != 64 {
        return Err(LoadError::InvalidKey(format!(
            "expected 64 hex digits, got {}",
            digits.len()
        )));
    }
    digits
        .parse()
        .map_err(|e: alloy_signer_local::LocalSignerError| LoadError::InvalidKey(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn senders_differ_by_seed_and_index() {
        let a = derive_senders(1, 3);
        let b = derive_senders(2, 3);
        let addresses: std::collections::HashSet<_> =
            a.iter().chain(&b).map(|s| s.signer.address()).collect();
        assert_eq!(addresses.len(), 6);
        assert_eq!(
            derive_senders(1, 1)[0].signer.address(),
            a[0].signer.address()
        );
    }

    #[test]
    fn funder_keys_parse_with_or_without_prefix_and_bad_ones_are_refused() {
        let key = "56289e99c94b6912bfc12adc093c9b51124f0dc54ac7a766b2bc5ccf558d8027";
        let address = parse_key(key).unwrap().address();
        assert_eq!(parse_key(&format!("0x{key}")).unwrap().address(), address);
        // avalanchego's well-known local funded address.
        assert_eq!(
            address.to_string(),
            "0x8db97C7cEcE249c2b98bDC0226Cc4C2A57BF52FC"
        );
        assert!(matches!(parse_key("0x1234"), Err(LoadError::InvalidKey(_))));
        assert!(matches!(
            parse_key(&format!("{key}00")),
            Err(LoadError::InvalidKey(_))
        ));
        assert!(matches!(
            parse_key(&"zz".repeat(32)),
            Err(LoadError::InvalidKey(_))
        ));
    }
}
