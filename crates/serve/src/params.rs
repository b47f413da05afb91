//! Parsing the small part of a request: positional parameters. Each failure
//! names the parameter, as JSON-RPC's -32602 asks.

use serde_json::value::RawValue;

/// A bad parameter: becomes -32602 with this message.
#[derive(Debug, PartialEq, Eq)]
pub struct ParamError(pub String);

impl ParamError {
    fn at(index: usize, what: impl std::fmt::Display) -> Self {
        ParamError(format!("invalid argument {index}: {what}"))
    }
}

/// A block named by height or tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockTag {
    /// A height.
    Number(u64),
    /// `latest`.
    Latest,
    /// `earliest`.
    Earliest,
    /// `safe`.
    Safe,
    /// `finalized`.
    Finalized,
    /// `pending`.
    Pending,
}

/// A block named by height, tag or hash (EIP-1898 objects included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockRef {
    /// By height or tag.
    Tag(BlockTag),
    /// By hash.
    Hash([u8; 32]),
}

/// The positional parameters of one call.
pub struct Params<'a> {
    items: Vec<&'a RawValue>,
}

/// The digits after a `0x` prefix; geth takes `0X` too, and a front end
/// may send the same request to either, so neve does.
fn hex_digits(text: &str) -> Result<&str, String> {
    text.strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .ok_or_else(|| "hex string without 0x prefix".to_string())
}

/// Whether `digits` are hex digits only: checked before `from_str_radix`,
/// which also takes a leading `+` (`"0x+1"` is not a quantity to geth).
fn all_hex(digits: &str) -> bool {
    digits.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Parses a `0x` quantity: no empty digits, at most 64 bits.
pub fn quantity(text: &str) -> Result<u64, String> {
    let digits = hex_digits(text)?;
    if !all_hex(digits) {
        return Err("invalid hex string".into());
    }
    if digits.is_empty() {
        return Err("hex string \"0x\"".into());
    }
    if digits.len() > 1 && digits.starts_with('0') {
        return Err("hex number with leading zero digits".into());
    }
    if digits.len() > 16 {
        return Err("hex number > 64 bits".into());
    }
    u64::from_str_radix(digits, 16).map_err(|_| "invalid hex string".to_string())
}

/// Parses `0x` + exactly `2 * N` hex digits.
fn fixed_hex<const N: usize>(text: &str) -> Result<[u8; N], String> {
    let digits = hex_digits(text)?;
    // Byte slicing below needs ASCII: a multi-byte character is an error,
    // not a panic.
    if !all_hex(digits) {
        return Err("invalid hex string".into());
    }
    if digits.len() != 2 * N {
        return Err(format!(
            "hex string has length {}, want {}",
            digits.len(),
            2 * N
        ));
    }
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16)
            .map_err(|_| "invalid hex string".to_string())?;
    }
    Ok(out)
}

/// Parses `0x` + 64 hex digits.
pub fn hash(text: &str) -> Result<[u8; 32], String> {
    fixed_hex(text)
}

/// Parses `0x` + 40 hex digits.
pub fn address(text: &str) -> Result<[u8; 20], String> {
    fixed_hex(text)
}

/// A storage key as geth reads one (leniently, for compatibility): `0x`
/// optional, odd digits padded, at most 32 bytes, left-padded to 32.
/// Returns the key and how many bytes were given (geth echoes a key of
/// other than 32 bytes in `eth_getProof` as a quantity).
pub fn storage_key(text: &str) -> Result<([u8; 32], usize), String> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    let padded;
    let digits = if digits.len() % 2 == 1 {
        padded = format!("0{digits}");
        padded.as_str()
    } else {
        digits
    };
    if digits.len() > 64 {
        return Err(format!(
            "storage key too long (want at most 32 bytes): {text:?}"
        ));
    }
    if !all_hex(digits) {
        return Err(format!("invalid hex in storage key: {text:?}"));
    }
    let given = digits.len() / 2;
    let mut key = [0u8; 32];
    for i in 0..given {
        key[32 - given + i] = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16)
            .map_err(|_| format!("invalid hex in storage key: {text:?}"))?;
    }
    Ok((key, given))
}

/// A height or tag.
pub fn block_tag(text: &str) -> Result<BlockTag, String> {
    Ok(match text {
        "latest" => BlockTag::Latest,
        "earliest" => BlockTag::Earliest,
        "safe" => BlockTag::Safe,
        "finalized" => BlockTag::Finalized,
        "pending" => BlockTag::Pending,
        other => BlockTag::Number(quantity(other)?),
    })
}

impl<'a> Params<'a> {
    /// Splits `params` (absent, null or an array) into its items.
    pub fn new(params: Option<&'a RawValue>) -> Result<Self, ParamError> {
        let items = match params.map(RawValue::get) {
            None | Some("null") => Vec::new(),
            Some(text) => {
                serde_json::from_str(text).map_err(|_| ParamError("non-array args".into()))?
            }
        };
        Ok(Params { items })
    }

    /// Fails as geth does when fewer than `required` or more than `max`
    /// were given: the same request must be refused by neve and by the
    /// node behind the same front end.
    pub fn arity(&self, required: usize, max: usize) -> Result<(), ParamError> {
        self.at_most(max)?;
        if self.items.len() < required {
            return Err(ParamError(format!(
                "missing value for required argument {}",
                self.items.len()
            )));
        }
        Ok(())
    }

    /// Fails when more than `max` were given.
    pub fn at_most(&self, max: usize) -> Result<(), ParamError> {
        if self.items.len() > max {
            return Err(ParamError(format!(
                "too many arguments, want at most {max}"
            )));
        }
        Ok(())
    }

    fn raw(&self, index: usize) -> Result<&'a RawValue, ParamError> {
        self.items
            .get(index)
            .copied()
            .ok_or_else(|| ParamError(format!("missing value for required argument {index}")))
    }

    fn string(&self, index: usize) -> Result<&'a str, ParamError> {
        let raw = self.raw(index)?;
        serde_json::from_str::<&str>(raw.get())
            .map_err(|_| ParamError::at(index, format!("expected a string, got {}", raw.get())))
    }

    /// A quantity.
    pub fn quantity(&self, index: usize) -> Result<u64, ParamError> {
        quantity(self.string(index)?).map_err(|e| ParamError::at(index, e))
    }

    /// A 32-byte hash.
    pub fn hash(&self, index: usize) -> Result<[u8; 32], ParamError> {
        hash(self.string(index)?).map_err(|e| ParamError::at(index, e))
    }

    /// A 20-byte address.
    pub fn address(&self, index: usize) -> Result<[u8; 20], ParamError> {
        address(self.string(index)?).map_err(|e| ParamError::at(index, e))
    }

    /// A storage key (see [`storage_key`]); the error is geth's, unprefixed.
    pub fn storage_key(&self, index: usize) -> Result<([u8; 32], usize), ParamError> {
        storage_key(self.string(index)?).map_err(ParamError)
    }

    /// A block reference that defaults to `latest` when absent or null.
    pub fn block_ref_or_latest(&self, index: usize) -> Result<BlockRef, ParamError> {
        match self.items.get(index) {
            None => Ok(BlockRef::Tag(BlockTag::Latest)),
            Some(raw) if raw.get() == "null" => Ok(BlockRef::Tag(BlockTag::Latest)),
            Some(_) => self.block_ref(index),
        }
    }

    /// A boolean; `default` when absent.
    pub fn bool_or(&self, index: usize, default: bool) -> Result<bool, ParamError> {
        match self.items.get(index) {
            None => Ok(default),
            Some(raw) => serde_json::from_str(raw.get())
                .map_err(|_| ParamError::at(index, "expected a boolean")),
        }
    }

    /// A height or tag.
    pub fn block_tag(&self, index: usize) -> Result<BlockTag, ParamError> {
        block_tag(self.string(index)?).map_err(|e| ParamError::at(index, e))
    }

    /// A height, tag or hash, as a string or an EIP-1898 object.
    pub fn block_ref(&self, index: usize) -> Result<BlockRef, ParamError> {
        let raw = self.raw(index)?;
        if let Ok(text) = serde_json::from_str::<&str>(raw.get()) {
            if text.len() == 66 {
                return hash(text)
                    .map(BlockRef::Hash)
                    .map_err(|e| ParamError::at(index, e));
            }
            return block_tag(text)
                .map(BlockRef::Tag)
                .map_err(|e| ParamError::at(index, e));
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Eip1898<'b> {
            #[serde(borrow)]
            block_number: Option<&'b str>,
            #[serde(borrow)]
            block_hash: Option<&'b str>,
            #[serde(default)]
            #[allow(dead_code)] // neve stores only canonical blocks
            require_canonical: bool,
        }
        let object: Eip1898<'_> = serde_json::from_str(raw.get()).map_err(|_| {
            ParamError::at(
                index,
                "expected a block number, tag, hash or {blockNumber|blockHash}",
            )
        })?;
        match (object.block_number, object.block_hash) {
            (Some(number), None) => block_tag(number)
                .map(BlockRef::Tag)
                .map_err(|e| ParamError::at(index, e)),
            (None, Some(h)) => hash(h)
                .map(BlockRef::Hash)
                .map_err(|e| ParamError::at(index, e)),
            _ => Err(ParamError::at(
                index,
                "specify exactly one of blockNumber and blockHash",
            )),
        }
    }

    /// The raw item at `index`, or `None` when absent or `null`.
    pub fn optional(&self, index: usize) -> Option<&'a RawValue> {
        self.items
            .get(index)
            .copied()
            .filter(|raw| raw.get() != "null")
    }

    /// The raw item, for methods that parse an object themselves.
    pub fn object(&self, index: usize) -> Result<&'a RawValue, ParamError> {
        self.raw(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(json: &str) -> Params<'_> {
        Params::new(Some(serde_json::from_str::<&RawValue>(json).unwrap())).unwrap()
    }

    #[test]
    fn quantities_follow_geth_rules() {
        assert_eq!(quantity("0x0"), Ok(0));
        assert_eq!(quantity("0x1b"), Ok(27));
        assert!(quantity("2").unwrap_err().contains("without 0x prefix"));
        assert_eq!(quantity("0X1b"), Ok(27), "geth takes an upper-case prefix");
        assert_eq!(hash(&format!("0X{}", "ab".repeat(32))), Ok([0xab; 32]));
        assert!(quantity("0x").is_err());
        assert!(quantity("0x01").is_err());
        assert!(quantity("0x10000000000000000").is_err());
    }

    /// Issue 32 (9): `from_str_radix` takes a leading `+`; geth does not.
    #[test]
    fn a_plus_sign_is_not_a_hex_digit() {
        assert!(quantity("0x+1").is_err());
        assert!(quantity("0x+").is_err());
        let plus_hash = format!("0x{}", "+a".repeat(32));
        assert!(hash(&plus_hash).is_err());
        assert!(address(&format!("0x{}", "+a".repeat(20))).is_err());
        assert!(storage_key("0x+1").is_err());
        assert!(storage_key(&"+a".repeat(16)).is_err());
        assert_eq!(
            storage_key("0x1"),
            Ok(([[0; 31].as_slice(), &[1]].concat().try_into().unwrap(), 1))
        );
    }

    #[test]
    fn block_refs_take_numbers_tags_hashes_and_objects() {
        let h = format!("0x{}", "ab".repeat(32));
        assert_eq!(
            params(r#"["latest"]"#).block_ref(0),
            Ok(BlockRef::Tag(BlockTag::Latest))
        );
        assert_eq!(
            params(r#"["0x5"]"#).block_ref(0),
            Ok(BlockRef::Tag(BlockTag::Number(5)))
        );
        assert_eq!(
            params(&format!(r#"["{h}"]"#)).block_ref(0),
            Ok(BlockRef::Hash([0xab; 32]))
        );
        assert_eq!(
            params(r#"[{"blockNumber":"0x7"}]"#).block_ref(0),
            Ok(BlockRef::Tag(BlockTag::Number(7)))
        );
        assert_eq!(
            params(&format!(
                r#"[{{"blockHash":"{h}","requireCanonical":true}}]"#
            ))
            .block_ref(0),
            Ok(BlockRef::Hash([0xab; 32]))
        );
        assert!(
            params(r#"[{"blockNumber":"0x7","blockHash":"0x00"}]"#)
                .block_ref(0)
                .is_err()
        );
        assert!(params(r#"[7]"#).block_ref(0).is_err());
    }

    #[test]
    fn storage_keys_are_read_as_geth_reads_them() {
        let mut one = [0u8; 32];
        one[31] = 1;
        assert_eq!(storage_key("0x1"), Ok((one, 1)));
        assert_eq!(storage_key("01"), Ok((one, 1)));
        assert_eq!(
            storage_key(&format!("0x{}01", "00".repeat(31))),
            Ok((one, 32))
        );
        assert_eq!(storage_key("0x"), Ok(([0; 32], 0)));
        assert!(
            storage_key(&format!("0x{}", "0".repeat(65)))
                .unwrap_err()
                .starts_with("storage key too long (want at most 32 bytes)")
        );
        assert!(storage_key("0xzz").unwrap_err().starts_with("invalid hex"));
        assert!(storage_key("0xé").is_err());
    }

    #[test]
    fn non_ascii_hex_is_an_error_not_a_panic() {
        let sneaky = format!("0xa{}a", "é".repeat(31));
        assert_eq!(sneaky.len(), 66);
        assert!(hash(&sneaky).is_err());
        assert!(address(&format!("0xa{}a", "é".repeat(19))).is_err());
    }

    #[test]
    fn errors_name_the_argument() {
        let error = params(r#"["0x1", "yes"]"#).bool_or(1, false).unwrap_err();
        assert_eq!(error.0, "invalid argument 1: expected a boolean");
        assert!(params("[]").hash(0).unwrap_err().0.contains("argument 0"));
        assert!(Params::new(Some(serde_json::from_str::<&RawValue>("{}").unwrap())).is_err());
    }
}
