//! Which storage-trie key a contract's slot is stored under: the chain's
//! rule, since coreth (Avalanche's C-chain) departs from Ethereum's.
//!
//! coreth keeps multicoin balances in the storage trie beside contract
//! slots. To keep the two apart, its state database clears the low bit of
//! a slot key's first byte before every contract read and write
//! (`normalizeStateKey` in coreth's `core/extstate`, applied by libevm's
//! `GetState`, `GetCommittedState` and `SetState`), while multicoin keys
//! always have that bit set. So on the C-chain `SSTORE(0x01…00, v)` writes
//! the leaf at `keccak(0x00…00)`, and `eth_getStorageAt` of `0x01…00`
//! answers that leaf. Its `eth_getProof` proves the key as given (the raw
//! path) but states the value of the normalized one; neve answers the same.
//! The rule has no fork: it holds at every height.

use crate::trie::Hash;

/// A chain's rule for storage keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StorageKeys {
    /// Ethereum's: a slot is stored under `keccak(slot)`.
    #[default]
    Plain,
    /// coreth's: under `keccak(slot with the low bit of byte 0 cleared)`.
    Coreth,
}

impl StorageKeys {
    /// The chain ids whose rule is coreth's: the C-chain of Avalanche's
    /// mainnet (43114), Fuji (43113) and a local network (43112).
    pub const CORETH_CHAIN_IDS: [u64; 3] = [43114, 43113, 43112];

    /// The rule of the chain `chain_id`, when it is known by id.
    pub fn of_chain(chain_id: u64) -> StorageKeys {
        if Self::CORETH_CHAIN_IDS.contains(&chain_id) {
            StorageKeys::Coreth
        } else {
            StorageKeys::Plain
        }
    }

    /// The slot a contract read of `slot` finds its value under (before
    /// the trie's keccak).
    pub fn value_slot(self, slot: &Hash) -> Hash {
        let mut key = *slot;
        if self == StorageKeys::Coreth {
            key[0] &= !0x01;
        }
        key
    }

    /// `slots`, plus the value slot of each where it differs (and is not
    /// there yet): what a proof request must name for its answer's stated
    /// values to be checked.
    pub fn with_value_slots(self, slots: &[Hash]) -> Vec<Hash> {
        let mut all = slots.to_vec();
        for slot in slots {
            let value_slot = self.value_slot(slot);
            if !all.contains(&value_slot) {
                all.push(value_slot);
            }
        }
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coreth_clears_the_low_bit_of_the_first_byte_only() {
        let mut slot = [0xffu8; 32];
        assert_eq!(StorageKeys::Plain.value_slot(&slot), slot);
        let cleared = StorageKeys::Coreth.value_slot(&slot);
        assert_eq!(cleared[0], 0xfe);
        assert_eq!(cleared[1..], slot[1..]);
        slot[0] = 0x00;
        assert_eq!(StorageKeys::Coreth.value_slot(&slot), slot);
    }

    #[test]
    fn value_slots_are_added_once() {
        let mut high = [0u8; 32];
        high[0] = 1;
        let zero = [0u8; 32];
        assert_eq!(
            StorageKeys::Coreth.with_value_slots(&[high, zero, high]),
            vec![high, zero, high]
        );
        assert_eq!(
            StorageKeys::Coreth.with_value_slots(&[high]),
            vec![high, zero]
        );
        assert_eq!(StorageKeys::Plain.with_value_slots(&[high]), vec![high]);
        assert_eq!(StorageKeys::of_chain(43114), StorageKeys::Coreth);
        assert_eq!(StorageKeys::of_chain(1), StorageKeys::Plain);
    }
}
