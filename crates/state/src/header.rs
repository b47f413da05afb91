//! Reading a block header's `stateRoot`.

use crate::trie::Hash;

/// The top-level `stateRoot` member of a header (or block) object. Parsed,
/// not searched for, so a nested member of the same name cannot stand in.
pub fn state_root_in_header(header: &[u8]) -> Option<Hash> {
    #[derive(serde::Deserialize)]
    struct Header<'a> {
        #[serde(rename = "stateRoot", borrow)]
        state_root: &'a str,
    }
    let header: Header<'_> = serde_json::from_slice(header).ok()?;
    let digits = header.state_root.strip_prefix("0x")?;
    if digits.len() != 64 || !digits.is_ascii() {
        return None;
    }
    let mut root = [0u8; 32];
    for (i, byte) in root.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_state_root_is_read_at_the_top_level_only() {
        let root = format!("0x{}", "ab".repeat(32));
        let decoy = format!("0x{}", "cd".repeat(32));
        let header = format!(
            r#"{{"extra":{{"stateRoot":"{decoy}"}},"number":"0x1","stateRoot":"{root}","transactions":[]}}"#
        );
        assert_eq!(state_root_in_header(header.as_bytes()), Some([0xab; 32]));
        assert_eq!(state_root_in_header(b"{\"number\":\"0x1\"}"), None);
        assert_eq!(
            state_root_in_header(br#"{"stateRoot":"0x12"}"#),
            None,
            "short root"
        );
    }
}
