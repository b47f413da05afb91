//! What a call asks: geth's transaction arguments (`from`, `to`, `gas`, the
//! fee fields, `value`, `input`/`data`, access and authorization lists,
//! blob fields), its state overrides and its block overrides, parsed as
//! geth parses them. Nothing here reads state.

use std::collections::BTreeMap;

use alloy_eips::eip2930::AccessList;
use alloy_eips::eip7702::SignedAuthorization;
use alloy_primitives::{Address, B256, Bytes, U64, U256};
use serde::Deserialize;

/// geth's `TransactionArgs`, the fields a call reads.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallArgs {
    /// The sender (the zero address when absent).
    #[serde(default, deserialize_with = "strict::address")]
    pub from: Option<Address>,
    /// The callee; absent creates a contract.
    #[serde(default, deserialize_with = "strict::address")]
    pub to: Option<Address>,
    /// Gas; the gas cap when absent.
    #[serde(default, deserialize_with = "quantity::u64")]
    pub gas: Option<U64>,
    /// A legacy gas price.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub gas_price: Option<U256>,
    /// EIP-1559's fee cap.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub max_fee_per_gas: Option<U256>,
    /// EIP-1559's tip cap.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub max_priority_fee_per_gas: Option<U256>,
    /// Wei sent.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub value: Option<U256>,
    /// Ignored for calls (geth skips nonce checks), parsed to be refused
    /// when malformed.
    #[serde(default, deserialize_with = "quantity::u64")]
    pub nonce: Option<U64>,
    /// The old name of `input`.
    #[serde(default, deserialize_with = "strict::bytes")]
    pub data: Option<Bytes>,
    /// Call data.
    #[serde(default, deserialize_with = "strict::bytes")]
    pub input: Option<Bytes>,
    /// EIP-2930's list.
    pub access_list: Option<AccessList>,
    /// Must be the chain's when given.
    #[serde(default, deserialize_with = "quantity::u64")]
    pub chain_id: Option<U64>,
    /// EIP-4844's blob fee cap.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub max_fee_per_blob_gas: Option<U256>,
    /// EIP-4844's blob hashes.
    pub blob_versioned_hashes: Option<Vec<B256>>,
    /// EIP-7702's authorizations.
    pub authorization_list: Option<Vec<SignedAuthorization>>,
}

/// Why call arguments are refused before anything runs (geth's texts).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgsError {
    /// `gasPrice` beside the EIP-1559 fields.
    #[error("both gasPrice and (maxFeePerGas or maxPriorityFeePerGas) specified")]
    BothFeeKinds,
    /// Another chain's id.
    #[error("chainId does not match node's (have={have}, want={want})")]
    ChainId {
        /// The id given.
        have: u64,
        /// The chain's.
        want: u64,
    },
}

impl CallArgs {
    /// The call data: `input`, else `data`. geth's calls never compare
    /// the two (only sending does), so neither does neve.
    pub fn input(&self) -> Bytes {
        self.input
            .clone()
            .or_else(|| self.data.clone())
            .unwrap_or_default()
    }

    /// Whether any fee field was given (a fee-less call runs at price 0
    /// with the block's base fees read as 0).
    pub fn has_fees(&self) -> bool {
        let nonzero = |v: &Option<U256>| v.is_some_and(|v| !v.is_zero());
        nonzero(&self.gas_price)
            || nonzero(&self.max_fee_per_gas)
            || nonzero(&self.max_priority_fee_per_gas)
    }

    /// The sender.
    pub fn sender(&self) -> Address {
        self.from.unwrap_or_default()
    }

    /// `tx` with the call's lists and blob fields, as revm takes them.
    pub(crate) fn with_lists(&self, tx: revm::context::TxEnv) -> revm::context::TxEnv {
        revm::context::TxEnv {
            access_list: self.access_list.clone().unwrap_or_default(),
            blob_hashes: self.blob_versioned_hashes.clone().unwrap_or_default(),
            max_fee_per_blob_gas: self
                .max_fee_per_blob_gas
                .map_or(0, |fee| fee.saturating_to()),
            authorization_list: self
                .authorization_list
                .iter()
                .flatten()
                .cloned()
                .map(revm::context::either::Either::Left)
                .collect(),
            ..tx
        }
    }

    /// The balance geth's `buyGas` wants of the sender for `gas` at
    /// `fee_cap`: gas × fee cap + value + blob gas × blob fee cap; `None`
    /// past 256 bits, which geth refuses ("required balance exceeds 256
    /// bits") where a sum that wrapped would pass.
    pub(crate) fn balance_needed(&self, gas: u64, fee_cap: U256) -> Option<U256> {
        let blobs = self.blob_versioned_hashes.as_ref().map_or(0, Vec::len) as u64;
        let blob_fee = U256::from(blobs * BLOB_GAS_PER_BLOB)
            .checked_mul(self.max_fee_per_blob_gas.unwrap_or_default())?;
        U256::from(gas)
            .checked_mul(fee_cap)?
            .checked_add(self.value.unwrap_or_default())?
            .checked_add(blob_fee)
    }
}

/// Blob gas of one blob (EIP-4844's `GAS_PER_BLOB`, 2^17).
pub(crate) const BLOB_GAS_PER_BLOB: u64 = 1 << 17;

/// geth's hexutil quantities: a string, `0x` then hex digits, no leading
/// zero, within the type's bits. serde's defaults for these types also
/// take decimal strings and numbers, which geth refuses (-32602).
pub(crate) mod quantity {
    use alloy_primitives::{U64, U256};
    use serde::{Deserialize, Deserializer, de::Error};

    fn digits<'de, D: Deserializer<'de>>(
        deserializer: D,
        bits: usize,
    ) -> Result<Option<U256>, D::Error> {
        let Some(text) = Option::<String>::deserialize(deserializer)? else {
            return Ok(None);
        };
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .ok_or_else(|| D::Error::custom("hex string without 0x prefix"))?;
        if digits.is_empty() {
            return Err(D::Error::custom("hex string \"0x\""));
        }
        if digits.len() > 1 && digits.starts_with('0') {
            return Err(D::Error::custom("hex number with leading zero digits"));
        }
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(D::Error::custom("invalid hex string"));
        }
        if digits.len() > bits / 4 {
            return Err(D::Error::custom(format!("hex number > {bits} bits")));
        }
        U256::from_str_radix(digits, 16)
            .map(Some)
            .map_err(|_| D::Error::custom("invalid hex string"))
    }

    pub(crate) fn u64<'de, D: Deserializer<'de>>(d: D) -> Result<Option<U64>, D::Error> {
        Ok(digits(d, 64)?.map(|v| U64::from(v.to::<u64>())))
    }

    pub(super) fn u256<'de, D: Deserializer<'de>>(d: D) -> Result<Option<U256>, D::Error> {
        digits(d, 256)
    }
}

/// geth's fixed-size and byte hex (`hexutil.Bytes`, `common.Address`,
/// `common.Hash`): a string, `0x` then hex digits, of the type's length.
/// alloy's serde also takes them without `0x`, and bytes as JSON arrays,
/// which geth refuses (-32602).
mod strict {
    use std::collections::BTreeMap;

    use alloy_primitives::{Address, B256, Bytes};
    use serde::{Deserialize, Deserializer, de::Error};

    /// The hex digits of `text`, or geth's words for why not.
    fn digits(text: &str) -> Result<&str, String> {
        let digits = text
            .strip_prefix("0x")
            .or_else(|| text.strip_prefix("0X"))
            .ok_or("hex string without 0x prefix")?;
        if !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err("invalid hex string".into());
        }
        Ok(digits)
    }

    /// `text` as `N` bytes, named `kind` in geth's error.
    fn fixed<const N: usize>(text: &str, kind: &str) -> Result<[u8; N], String> {
        let digits = digits(text)?;
        if digits.len() != 2 * N {
            return Err(format!(
                "hex string has length {}, want {} for {kind}",
                digits.len(),
                2 * N
            ));
        }
        let mut out = [0u8; N];
        alloy_primitives::hex::decode_to_slice(digits, &mut out)
            .map_err(|_| "invalid hex string".to_string())?;
        Ok(out)
    }

    pub(super) fn address<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Address>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| fixed::<20>(&text, "common.Address").map(Address::from))
            .transpose()
            .map_err(D::Error::custom)
    }

    pub(super) fn b256<'de, D: Deserializer<'de>>(d: D) -> Result<Option<B256>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| fixed::<32>(&text, "common.Hash").map(B256::from))
            .transpose()
            .map_err(D::Error::custom)
    }

    pub(super) fn bytes<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Bytes>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let digits = digits(&text).map_err(D::Error::custom)?;
        if digits.len() % 2 == 1 {
            return Err(D::Error::custom("hex string of odd length"));
        }
        alloy_primitives::hex::decode(digits)
            .map(|bytes| Some(Bytes::from(bytes)))
            .map_err(|_| D::Error::custom("invalid hex string"))
    }

    pub(super) fn slots<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<BTreeMap<B256, B256>>, D::Error> {
        let Some(slots) = Option::<BTreeMap<String, String>>::deserialize(d)? else {
            return Ok(None);
        };
        slots
            .iter()
            .map(|(slot, value)| {
                Ok((
                    B256::from(fixed::<32>(slot, "common.Hash")?),
                    B256::from(fixed::<32>(value, "common.Hash")?),
                ))
            })
            .collect::<Result<_, String>>()
            .map(Some)
            .map_err(D::Error::custom)
    }
}

/// One account's overrides (geth's `OverrideAccount`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AccountOverride {
    /// Replaces the nonce.
    #[serde(default, deserialize_with = "quantity::u64")]
    pub nonce: Option<U64>,
    /// Replaces the code.
    #[serde(default, deserialize_with = "strict::bytes")]
    pub code: Option<Bytes>,
    /// Replaces the balance.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub balance: Option<U256>,
    /// Replaces the whole storage.
    #[serde(default, deserialize_with = "strict::slots")]
    pub state: Option<BTreeMap<B256, B256>>,
    /// Replaces these slots.
    #[serde(default, deserialize_with = "strict::slots")]
    pub state_diff: Option<BTreeMap<B256, B256>>,
    /// Moves a precompile here (geth's `movePrecompileToAddress`).
    #[serde(default, deserialize_with = "strict::address")]
    pub move_precompile_to_address: Option<Address>,
}

/// State overrides, by account.
pub type StateOverride = BTreeMap<Address, AccountOverride>;

/// geth's `BlockOverrides`, the fields a call may set.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockOverrides {
    /// `NUMBER`.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub number: Option<U256>,
    /// `DIFFICULTY`.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub difficulty: Option<U256>,
    /// `TIMESTAMP`.
    #[serde(default, deserialize_with = "quantity::u64")]
    pub time: Option<U64>,
    /// `GASLIMIT`.
    #[serde(default, deserialize_with = "quantity::u64")]
    pub gas_limit: Option<U64>,
    /// `COINBASE`.
    #[serde(default, deserialize_with = "strict::address")]
    pub fee_recipient: Option<Address>,
    /// `PREVRANDAO`.
    #[serde(default, deserialize_with = "strict::b256")]
    pub prev_randao: Option<B256>,
    /// `BASEFEE`.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub base_fee_per_gas: Option<U256>,
    /// `BLOBBASEFEE`.
    #[serde(default, deserialize_with = "quantity::u256")]
    pub blob_base_fee: Option<U256>,
    /// Refused for calls, as geth refuses it.
    #[serde(default, deserialize_with = "strict::b256")]
    pub beacon_root: Option<B256>,
    /// Refused for calls, as geth refuses it.
    pub withdrawals: Option<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_arguments_parse_as_geth_names_them() {
        let args: CallArgs = serde_json::from_str(
            r#"{"from":"0x0000000000000000000000000000000000000001","to":"0x0000000000000000000000000000000000000002","gas":"0x5208","value":"0x1","input":"0xff01","accessList":[{"address":"0x0000000000000000000000000000000000000003","storageKeys":["0x0000000000000000000000000000000000000000000000000000000000000001"]}]}"#,
        )
        .unwrap();
        assert_eq!(args.gas, Some(U64::from(21_000)));
        assert_eq!(args.input().as_ref(), &[0xff, 0x01]);
        assert_eq!(args.access_list.unwrap().0.len(), 1);
        assert!(!CallArgs::default().has_fees());
    }

    #[test]
    fn quantities_are_geths_hex_only() {
        for bad in [
            r#"{"gas":"12"}"#,
            r#"{"gas":12}"#,
            r#"{"gas":"0x"}"#,
            r#"{"gas":"0x01"}"#,
            r#"{"value":"0xzz"}"#,
            r#"{"gas":"0x10000000000000000"}"#,
        ] {
            assert!(serde_json::from_str::<CallArgs>(bad).is_err(), "{bad}");
        }
        let args: CallArgs =
            serde_json::from_str(r#"{"gas":"0X10","value":"0x0","nonce":null}"#).unwrap();
        assert_eq!(
            (args.gas, args.value, args.nonce),
            (Some(U64::from(16)), Some(U256::ZERO), None)
        );
    }

    /// Issue 42.13: addresses, hashes and bytes are geth's `0x` hex of
    /// their length, never bare digits or arrays.
    #[test]
    fn addresses_hashes_and_bytes_are_geths_hex_only() {
        let address = "0000000000000000000000000000000000000002";
        for bad in [
            format!(r#"{{"to":"{address}"}}"#),
            r#"{"to":"0x02"}"#.to_string(),
            r#"{"input":"70a08231"}"#.to_string(),
            r#"{"input":"0x123"}"#.to_string(),
            r#"{"data":[1,2]}"#.to_string(),
        ] {
            assert!(serde_json::from_str::<CallArgs>(&bad).is_err(), "{bad}");
        }
        let args: CallArgs = serde_json::from_str(&format!(
            r#"{{"to":"0x{address}","input":"0x","from":null}}"#
        ))
        .unwrap();
        assert_eq!(args.to, Some(Address::with_last_byte(2)));
        assert!(args.input().is_empty() && args.from.is_none());
        let slot = format!("0x{}", "00".repeat(32));
        for bad in [
            r#"{"code":"6000"}"#.to_string(),
            format!(r#"{{"state":{{"{}":"{slot}"}}}}"#, &slot[2..]),
            format!(r#"{{"stateDiff":{{"{slot}":"0x01"}}}}"#),
        ] {
            assert!(
                serde_json::from_str::<AccountOverride>(&bad).is_err(),
                "{bad}"
            );
        }
        let account: AccountOverride = serde_json::from_str(&format!(
            r#"{{"code":"0x6000","state":{{"{slot}":"{slot}"}}}}"#
        ))
        .unwrap();
        assert_eq!(account.state.unwrap().len(), 1);
        for bad in [r#"{"feeRecipient":"0x12"}"#, r#"{"prevRandao":"0x01"}"#] {
            assert!(
                serde_json::from_str::<BlockOverrides>(bad).is_err(),
                "{bad}"
            );
        }
    }

    /// Issue 42.13: block overrides are geth's hexutil quantities too.
    #[test]
    fn block_override_quantities_are_geths_hex_only() {
        for bad in [
            r#"{"number":5}"#,
            r#"{"number":"5"}"#,
            r#"{"time":"0x05"}"#,
            r#"{"gasLimit":"12"}"#,
            r#"{"baseFeePerGas":1}"#,
            r#"{"blobBaseFee":"0x"}"#,
            r#"{"difficulty":"0x01"}"#,
        ] {
            assert!(
                serde_json::from_str::<BlockOverrides>(bad).is_err(),
                "{bad}"
            );
        }
        let overrides: BlockOverrides =
            serde_json::from_str(r#"{"number":"0x5","time":"0x10","baseFeePerGas":null}"#).unwrap();
        assert_eq!(overrides.number, Some(U256::from(5)));
        assert_eq!(overrides.time, Some(U64::from(16)));
        assert_eq!(overrides.base_fee_per_gas, None);
    }

    #[test]
    fn input_wins_over_data_as_in_geths_calls() {
        let args: CallArgs = serde_json::from_str(r#"{"data":"0x01","input":"0x02"}"#).unwrap();
        assert_eq!(args.input().as_ref(), &[2]);
        let args: CallArgs = serde_json::from_str(r#"{"data":"0x01"}"#).unwrap();
        assert_eq!(args.input().as_ref(), &[1]);
    }
}
