//! JSON as Go's `encoding/json` writes it, where serde writes otherwise:
//! the one escaping rule every answer worded by geth follows.

/// JSON text escaped as Go's `encoding/json` escapes it (`<`, `>`, `&`,
/// U+2028 and U+2029), so a node's words read byte for byte as geth's.
pub fn go_escaped(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}
