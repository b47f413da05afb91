//! Hex digits and strings written straight into an answer being built
//! by hand, as geth writes them.

/// `bytes` as lowercase hex digits, appended.
pub(crate) fn hex_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len() * 2);
    for byte in bytes {
        out.push(DIGITS[usize::from(byte >> 4)]);
        out.push(DIGITS[usize::from(byte & 15)]);
    }
}

/// `text` as a JSON string the way Go's `encoding/json` writes it (`<`,
/// `>` and `&` escaped), so an error reads byte for byte as geth's.
pub(crate) fn go_json_string(text: &str) -> String {
    serde_json::to_string(text)
        .unwrap_or_default()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}
