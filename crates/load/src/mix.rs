//! The transaction mix: which kinds, how often, and how each is built.

use alloy_consensus::{TxEip1559, TxEip2930, TxLegacy};
use alloy_eips::eip2930::{AccessList, AccessListItem};
use alloy_primitives::{Address, Bytes, TxKind as To, U256};

use crate::token;
use crate::vocabulary::Fees;

/// A kind of transaction the generator sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxKind {
    /// Legacy (EIP-155) ETH transfer between senders.
    LegacyTransfer = 0,
    /// EIP-2930 ETH transfer with an access list.
    AccessListTransfer = 1,
    /// EIP-1559 ETH transfer.
    DynamicFeeTransfer = 2,
    /// Token `transfer` (EIP-1559) that emits a `Transfer` log.
    TokenTransfer = 3,
    /// Token `transfer` sent as a legacy transaction.
    LegacyTokenTransfer = 4,
    /// ETH to an address that has never been seen.
    FreshAddressTransfer = 5,
    /// A contract creation (deploys another token).
    ContractCreation = 6,
}

impl TxKind {
    /// Every kind, in discriminant order.
    pub const ALL: [TxKind; 7] = [
        TxKind::LegacyTransfer,
        TxKind::AccessListTransfer,
        TxKind::DynamicFeeTransfer,
        TxKind::TokenTransfer,
        TxKind::LegacyTokenTransfer,
        TxKind::FreshAddressTransfer,
        TxKind::ContractCreation,
    ];

    /// Weight out of 100: token traffic dominates real chains, then plain
    /// transfers; creations are rare.
    const fn weight(self) -> u64 {
        match self {
            TxKind::LegacyTransfer => 15,
            TxKind::AccessListTransfer => 10,
            TxKind::DynamicFeeTransfer => 20,
            TxKind::TokenTransfer => 35,
            TxKind::LegacyTokenTransfer => 5,
            TxKind::FreshAddressTransfer => 12,
            TxKind::ContractCreation => 3,
        }
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            TxKind::LegacyTransfer => "legacy",
            TxKind::AccessListTransfer => "access-list",
            TxKind::DynamicFeeTransfer => "dynamic-fee",
            TxKind::TokenTransfer => "token",
            TxKind::LegacyTokenTransfer => "legacy-token",
            TxKind::FreshAddressTransfer => "fresh-address",
            TxKind::ContractCreation => "create",
        }
    }
}

/// Gas for a plain ETH transfer.
const TRANSFER_GAS: u64 = 21_000;
/// A transfer with a one-address access list (21,000 + 2,400, rounded up).
const ACCESS_LIST_TRANSFER_GAS: u64 = 30_000;
/// A token transfer: a new balance slot and a LOG3 on top of the base.
/// geth 1.17's dev chain prices state creation high (a transfer to a new
/// slot costs 135,526 gas there, ~48k on older schedules); unused gas is not
/// charged, so the limit carries headroom for both.
const TOKEN_TRANSFER_GAS: u64 = 250_000;
/// Deploying the 80-byte token.
const CREATION_GAS: u64 = 200_000;

/// An unsigned transaction of one of the three pre-blob envelope types.
pub(crate) enum UnsignedTx {
    Legacy(TxLegacy),
    Eip2930(TxEip2930),
    Eip1559(TxEip1559),
}

/// Chooses and builds transactions; deterministic for a seed.
pub(crate) struct Mix {
    rng: SplitMix64,
    recipients: Vec<Address>,
    token: Address,
    transfers_only: bool,
}

impl Mix {
    pub(crate) fn new(
        seed: u64,
        recipients: &[Address],
        token: Address,
        transfers_only: bool,
    ) -> Self {
        Mix {
            rng: SplitMix64(seed),
            recipients: recipients.to_vec(),
            token,
            transfers_only,
        }
    }

    fn pick_kind(&mut self) -> TxKind {
        let kinds: &[TxKind] = if self.transfers_only {
            &TxKind::ALL[..3]
        } else {
            &TxKind::ALL
        };
        let total: u64 = kinds.iter().map(|k| k.weight()).sum();
        let mut roll = self.rng.next() % total;
        for &kind in kinds {
            if roll < kind.weight() {
                return kind;
            }
            roll -= kind.weight();
        }
        unreachable!("the roll is below the total weight")
    }

    fn recipient(&mut self) -> Address {
        let index = (self.rng.next() % self.recipients.len() as u64) as usize;
        self.recipients[index]
    }

    fn fresh_address(&mut self) -> Address {
        let mut bytes = [0u8; 20];
        for chunk in bytes.chunks_mut(8) {
            chunk.copy_from_slice(&self.rng.next().to_be_bytes()[..chunk.len()]);
        }
        Address::from(bytes)
    }

    /// The next transaction for a sender at `nonce`.
    pub(crate) fn next(&mut self, chain_id: u64, nonce: u64, fees: Fees) -> (TxKind, UnsignedTx) {
        let kind = self.pick_kind();
        let value = U256::from(1 + self.rng.next() % 1_000_000);
        let tx = match kind {
            TxKind::LegacyTransfer => UnsignedTx::Legacy(TxLegacy {
                chain_id: Some(chain_id),
                nonce,
                gas_price: fees.max_fee,
                gas_limit: TRANSFER_GAS,
                to: To::Call(self.recipient()),
                value,
                input: Bytes::new(),
            }),
            TxKind::AccessListTransfer => {
                let to = self.recipient();
                UnsignedTx::Eip2930(TxEip2930 {
                    chain_id,
                    nonce,
                    gas_price: fees.max_fee,
                    gas_limit: ACCESS_LIST_TRANSFER_GAS,
                    to: To::Call(to),
                    value,
                    access_list: AccessList(vec![AccessListItem {
                        address: to,
                        storage_keys: vec![],
                    }]),
                    input: Bytes::new(),
                })
            }
            TxKind::DynamicFeeTransfer => {
                let to = self.recipient();
                dynamic_fee(
                    chain_id,
                    nonce,
                    fees,
                    TRANSFER_GAS,
                    To::Call(to),
                    value,
                    Bytes::new(),
                )
            }
            TxKind::TokenTransfer => {
                let input = token::transfer_call(self.recipient(), value);
                dynamic_fee(
                    chain_id,
                    nonce,
                    fees,
                    TOKEN_TRANSFER_GAS,
                    To::Call(self.token),
                    U256::ZERO,
                    input,
                )
            }
            TxKind::LegacyTokenTransfer => UnsignedTx::Legacy(TxLegacy {
                chain_id: Some(chain_id),
                nonce,
                gas_price: fees.max_fee,
                gas_limit: TOKEN_TRANSFER_GAS,
                to: To::Call(self.token),
                value: U256::ZERO,
                input: token::transfer_call(self.recipient(), value),
            }),
            TxKind::FreshAddressTransfer => {
                let to = self.fresh_address();
                dynamic_fee(
                    chain_id,
                    nonce,
                    fees,
                    TRANSFER_GAS,
                    To::Call(to),
                    value,
                    Bytes::new(),
                )
            }
            TxKind::ContractCreation => creation(chain_id, nonce, fees.max_fee, fees.tip),
        };
        (kind, tx)
    }
}

fn dynamic_fee(
    chain_id: u64,
    nonce: u64,
    fees: Fees,
    gas_limit: u64,
    to: To,
    value: U256,
    input: Bytes,
) -> UnsignedTx {
    UnsignedTx::Eip1559(TxEip1559 {
        chain_id,
        nonce,
        gas_limit,
        max_fee_per_gas: fees.max_fee,
        max_priority_fee_per_gas: fees.tip,
        to,
        value,
        access_list: AccessList::default(),
        input,
    })
}

/// A dynamic-fee transaction deploying the token.
pub(crate) fn creation(chain_id: u64, nonce: u64, max_fee: u128, tip: u128) -> UnsignedTx {
    creation_of(chain_id, nonce, max_fee, tip, token::init_code())
}

/// A dynamic-fee transaction running `init` as a contract creation.
pub(crate) fn creation_of(
    chain_id: u64,
    nonce: u64,
    max_fee: u128,
    tip: u128,
    init: Bytes,
) -> UnsignedTx {
    UnsignedTx::Eip1559(TxEip1559 {
        chain_id,
        nonce,
        gas_limit: CREATION_GAS,
        max_fee_per_gas: max_fee,
        max_priority_fee_per_gas: tip,
        to: To::Create,
        value: U256::ZERO,
        access_list: AccessList::default(),
        input: init,
    })
}

/// SplitMix64: a tiny, well-distributed generator; the mix needs
/// reproducibility, not cryptographic quality.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_hundred() {
        assert_eq!(TxKind::ALL.iter().map(|k| k.weight()).sum::<u64>(), 100);
    }

    #[test]
    fn discriminants_index_all() {
        for (i, kind) in TxKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i);
        }
    }

    /// How often each kind came up in `n` transactions.
    fn kinds_drawn(transfers_only: bool, seed: u64, n: u64) -> [u64; 7] {
        let mut mix = Mix::new(
            seed,
            &[Address::repeat_byte(1)],
            Address::repeat_byte(2),
            transfers_only,
        );
        let fees = Fees {
            max_fee: 10,
            tip: 1,
        };
        let mut counts = [0u64; 7];
        for nonce in 0..n {
            counts[mix.next(1, nonce, fees).0 as usize] += 1;
        }
        counts
    }

    #[test]
    fn every_kind_appears_near_its_weight() {
        let counts = kinds_drawn(false, 42, 10_000);
        for kind in TxKind::ALL {
            let expected = kind.weight() * 100;
            let got = counts[kind as usize];
            assert!(
                got.abs_diff(expected) < expected / 4 + 30,
                "{kind:?}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn transfers_only_sends_plain_eth_transfers() {
        let seen = kinds_drawn(true, 7, 3_000);
        assert!(seen[..3].iter().all(|n| *n > 0), "{seen:?}");
        assert!(seen[3..].iter().all(|n| *n == 0), "{seen:?}");
    }
}
