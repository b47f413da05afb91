//! Account leaves as geth and coreth encode them.
//!
//! geth's account is the RLP list `[nonce, balance, storageRoot, codeHash]`.
//! coreth (avalanchego's C-chain) appends a fifth item, `isMultiCoin`, which
//! `eth_getProof`'s JSON never shows. Both are read from the leaf bytes
//! exactly as the trie holds them (the leaf hashed into its parent), so a
//! fifth item is checked by the hash like everything else and ignored here.

use alloy_primitives::U256;

use crate::trie::{Hash, Malformed, rlp_list};

/// keccak256 of no bytes: the code hash of an account without code.
pub const EMPTY_CODE_HASH: Hash = [
    0xc5, 0xd2, 0x46, 0x01, 0x86, 0xf7, 0x23, 0x3c, 0x92, 0x7e, 0x7d, 0xb2, 0xdc, 0xc7, 0x03, 0xc0,
    0xe5, 0x00, 0xb6, 0x53, 0xca, 0x82, 0x27, 0x3b, 0x7b, 0xfa, 0xd8, 0x04, 0x5d, 0x85, 0xa4, 0x70,
];

/// An account as its leaf states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Account {
    /// Transactions sent (or, for a contract, contracts created).
    pub nonce: u64,
    /// Balance in wei.
    pub balance: U256,
    /// Root of its storage trie.
    pub storage_root: Hash,
    /// keccak256 of its code.
    pub code_hash: Hash,
    /// coreth's fifth item: the account holds (or held) a multicoin
    /// balance. coreth counts such an account as not empty even with no
    /// nonce, balance or code, which Ethereum's rules (and revm) do not.
    pub multi_coin: bool,
}

impl Account {
    /// Decodes a leaf value: four items (geth) or more (coreth's fifth).
    pub fn decode(leaf: &[u8]) -> Result<Account, Malformed> {
        let items = rlp_list(leaf)?;
        if items.len() < 4 || items[0].len() > 8 || items[1].len() > 32 {
            return Err(Malformed);
        }
        let nonce = items[0].iter().fold(0u64, |n, b| n << 8 | *b as u64);
        let balance = U256::from_be_slice(items[1]);
        let storage_root = items[2].try_into().map_err(|_| Malformed)?;
        let code_hash = items[3].try_into().map_err(|_| Malformed)?;
        // An RLP boolean: empty for false, 0x01 for true.
        let multi_coin = items
            .get(4)
            .is_some_and(|flag| flag.iter().any(|b| *b != 0));
        Ok(Account {
            nonce,
            balance,
            storage_root,
            code_hash,
            multi_coin,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trie::EMPTY_ROOT;

    fn encode(items: &[&[u8]]) -> Vec<u8> {
        let mut payload = Vec::new();
        for item in items {
            match item.len() {
                0 => payload.push(0x80),
                1 if item[0] < 0x80 => payload.push(item[0]),
                n => {
                    payload.push(0x80 + n as u8);
                    payload.extend_from_slice(item);
                }
            }
        }
        let mut out = vec![0xf8, payload.len() as u8];
        out.extend(payload);
        out
    }

    #[test]
    fn decodes_geths_four_items() {
        let leaf = encode(&[&[0x05], &[0x01, 0x00], &EMPTY_ROOT, &EMPTY_CODE_HASH]);
        let account = Account::decode(&leaf).unwrap();
        assert_eq!(account.nonce, 5);
        assert_eq!(account.balance, U256::from(256));
        assert_eq!(account.storage_root, EMPTY_ROOT);
        assert_eq!(account.code_hash, EMPTY_CODE_HASH);
        assert!(!account.multi_coin);
    }

    #[test]
    fn decodes_coreths_fifth_item() {
        let leaf = encode(&[&[], &[0x76], &EMPTY_ROOT, &EMPTY_CODE_HASH, &[0x01]]);
        let account = Account::decode(&leaf).unwrap();
        assert_eq!(account.nonce, 0);
        assert_eq!(account.balance, U256::from(0x76));
        assert!(account.multi_coin);
        let leaf = encode(&[&[], &[0x76], &EMPTY_ROOT, &EMPTY_CODE_HASH, &[]]);
        assert!(!Account::decode(&leaf).unwrap().multi_coin);
    }

    #[test]
    fn refuses_short_or_oversized_accounts() {
        assert!(Account::decode(&encode(&[&[1], &[1], &EMPTY_ROOT])).is_err());
        assert!(Account::decode(&encode(&[&[1; 9], &[1], &EMPTY_ROOT, &EMPTY_CODE_HASH])).is_err());
        assert!(Account::decode(&encode(&[&[1], &[1], &[1; 31], &EMPTY_CODE_HASH])).is_err());
    }
}
