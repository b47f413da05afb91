//! What an answer was: the work, or the reject path.
//!
//! Load tools in this field count any HTTP 200 as a success, so a target
//! that answers `null` (not stored), a JSON-RPC error, or HTTP 421 measures
//! its cheapest path and looks fast. Every answer is classified here by a
//! scan of the envelope's top level that stops at the `result` or `error`
//! key: no JSON tree, and for a 55 KB block only the first few dozen bytes
//! are read.

/// The class of one answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// HTTP 2xx with a non-null `result`: the work was done.
    Ok,
    /// HTTP 2xx with `"result": null`.
    NullResult,
    /// HTTP 2xx with an `error` member.
    RpcError,
    /// HTTP 2xx whose body is not a JSON-RPC answer (a static file is
    /// always `Ok`: see [`classify_static`]).
    Malformed,
    /// Any other HTTP status (421 included).
    Status(u16),
}

impl Outcome {
    /// True for every outcome but `Ok`: the run measured something other
    /// than the work it asked for.
    pub fn is_reject(self) -> bool {
        self != Outcome::Ok
    }
}

/// Classifies a JSON-RPC answer by its HTTP status and body.
pub fn classify(status: u16, body: &[u8]) -> Outcome {
    if !(200..300).contains(&status) {
        return Outcome::Status(status);
    }
    match top_level_answer(body) {
        Some(Answer::Result { null: true }) => Outcome::NullResult,
        Some(Answer::Result { null: false }) => Outcome::Ok,
        Some(Answer::Error) => Outcome::RpcError,
        None => Outcome::Malformed,
    }
}

/// Classifies a static file's answer: only the status counts.
pub fn classify_static(status: u16) -> Outcome {
    if (200..300).contains(&status) {
        Outcome::Ok
    } else {
        Outcome::Status(status)
    }
}

enum Answer {
    Result { null: bool },
    Error,
}

/// Finds the first `result` or `error` member of the top-level object,
/// skipping the values of other members (`jsonrpc`, `id`) whatever they hold.
fn top_level_answer(body: &[u8]) -> Option<Answer> {
    let mut i = skip_ws(body, 0);
    if body.get(i) != Some(&b'{') {
        return None;
    }
    i += 1;
    loop {
        i = skip_ws(body, i);
        if body.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(body, i)?;
        let key = &body[i + 1..key_end - 1];
        i = skip_ws(body, key_end);
        if body.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(body, i + 1);
        match key {
            b"result" => {
                return Some(Answer::Result {
                    null: body[i..].starts_with(b"null"),
                });
            }
            b"error" => return Some(Answer::Error),
            _ => {}
        }
        i = skip_ws(body, value_end(body, i)?);
        match body.get(i) {
            Some(b',') => i += 1,
            _ => return None,
        }
    }
}

fn skip_ws(body: &[u8], mut i: usize) -> usize {
    while matches!(body.get(i), Some(b' ' | b'\n' | b'\r' | b'\t')) {
        i += 1;
    }
    i
}

/// The index just past the string that opens at `start`.
fn string_end(body: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < body.len() {
        match body[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// The index just past the value that starts at `start` (any JSON value).
fn value_end(body: &[u8], start: usize) -> Option<usize> {
    match body.get(start)? {
        b'"' => string_end(body, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            while i < body.len() {
                match body[i] {
                    b'"' => {
                        i = string_end(body, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let len = body[start..]
                .iter()
                .position(|b| matches!(b, b',' | b'}' | b' ' | b'\n' | b'\r' | b'\t'))?;
            Some(start + len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_the_work() {
        let body = br#"{"jsonrpc":"2.0","id":1,"result":{"number":"0x1"}}"#;
        assert_eq!(classify(200, body), Outcome::Ok);
        assert_eq!(
            classify(200, br#"{"jsonrpc":"2.0","id":7,"result":"0x0"}"#),
            Outcome::Ok
        );
        assert_eq!(
            classify(200, br#"{"jsonrpc":"2.0","id":7,"result":false}"#),
            Outcome::Ok
        );
        assert_eq!(
            classify(200, br#"{"jsonrpc":"2.0","id":7,"result":[]}"#),
            Outcome::Ok
        );
    }

    #[test]
    fn null_results_errors_and_statuses_are_the_reject_path() {
        let null = br#"{"jsonrpc":"2.0","id":1,"result":null}"#;
        assert_eq!(classify(200, null), Outcome::NullResult);
        assert_eq!(classify(421, null), Outcome::Status(421));
        let error = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"no"}}"#;
        assert_eq!(classify(200, error), Outcome::RpcError);
        assert_eq!(classify(503, b""), Outcome::Status(503));
        assert_eq!(classify(200, b"<html>"), Outcome::Malformed);
        assert_eq!(classify(200, b""), Outcome::Malformed);
        assert!(Outcome::NullResult.is_reject() && !Outcome::Ok.is_reject());
    }

    #[test]
    fn members_before_the_answer_are_skipped_whatever_they_hold() {
        // ids of every JSON kind, strings with quotes, braces and escapes.
        for id in [
            r#""a\"b}{""#,
            r#"{"x":[1,{"y":"}"}]}"#,
            "[1,2]",
            "null",
            "-12.5e3",
            "true",
        ] {
            let body = format!(r#"{{ "jsonrpc" : "2.0", "id" : {id} , "result" : null }}"#);
            assert_eq!(classify(200, body.as_bytes()), Outcome::NullResult, "{id}");
            let body = format!(r#"{{"id":{id},"error":{{"code":1}}}}"#);
            assert_eq!(classify(200, body.as_bytes()), Outcome::RpcError, "{id}");
        }
        // A nested "error" inside a result is part of the result.
        let body = br#"{"id":1,"result":{"error":"not mine","x":null}}"#;
        assert_eq!(classify(200, body), Outcome::Ok);
    }

    #[test]
    fn truncated_bodies_are_malformed_not_ok() {
        assert_eq!(
            classify(200, br#"{"jsonrpc":"2.0","id":"#),
            Outcome::Malformed
        );
        assert_eq!(classify(200, br#"{"id":"abc"#), Outcome::Malformed);
    }

    #[test]
    fn static_files_count_by_status() {
        assert_eq!(classify_static(200), Outcome::Ok);
        assert_eq!(classify_static(404), Outcome::Status(404));
    }
}
