//! JSON-RPC quantities (`"0x1a"`) read and written as `u64`.

/// Parses a JSON-RPC quantity (`"0x1a"`) into a `u64`.
pub fn parse_quantity(text: &str) -> Option<u64> {
    let digits = text.strip_prefix("0x")?;
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

/// A JSON-RPC quantity result (`"0x1a"`) as a `u64`: anything else (a
/// number, `null`, an object, a string that is not a quantity) fails to
/// decode, so a caller asking for one knows the answer had its shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quantity(pub u64);

impl<'de> serde::Deserialize<'de> for Quantity {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <String as serde::Deserialize>::deserialize(deserializer)?;
        parse_quantity(&text)
            .map(Quantity)
            .ok_or_else(|| serde::de::Error::custom(format!("{text:?} is not a quantity")))
    }
}

/// Formats a `u64` as a JSON-RPC quantity (`0x1a`).
pub fn quantity(value: u64) -> String {
    format!("0x{value:x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_round_trip_and_reject_non_hex() {
        assert_eq!(parse_quantity("0x0"), Some(0));
        assert_eq!(parse_quantity("0x1a"), Some(26));
        assert_eq!(parse_quantity(&quantity(u64::MAX)), Some(u64::MAX));
        assert_eq!(parse_quantity("1a"), None);
        assert_eq!(parse_quantity("0x"), None);
        assert_eq!(parse_quantity("0x1ffffffffffffffff"), None);
    }
}
