//! Refusing a request body while it streams in: a batch past the element
//! limit, or nesting no JSON-RPC call needs, is known from its first bytes
//! past the limit, so neve answers then and closes instead of receiving
//! (and later parsing) the rest. A flood of 5,000-element batches or of
//! 200,000-deep arrays otherwise costs neve a whole body each.
//!
//! The scan is a byte loop over structure only (strings skipped, escapes
//! honoured); it does not validate JSON: a body it lets through is parsed
//! as before, and answers as before.

/// Deepest nesting a request may have. Calls nest a few levels (a filter's
/// topic alternatives are 5 deep, with the batch); serde_json's own
/// recursion limit, which neve's parsing would hit, is 128.
pub const MAX_NESTING: u32 = 128;

/// Why a body is refused before it is all read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// A batch with more elements than the limit.
    TooManyElements(usize),
    /// Nested deeper than [`MAX_NESTING`].
    TooDeep,
}

impl Refusal {
    /// The error message the refusal is answered with (code -32600).
    pub(crate) fn message(&self) -> String {
        match self {
            Refusal::TooManyElements(limit) => {
                format!("batch exceeds the limit of {limit} elements")
            }
            Refusal::TooDeep => format!("request nested deeper than {MAX_NESTING} levels"),
        }
    }
}

/// The scanner's state between frames of one body.
pub(crate) struct Prescan {
    max_batch: usize,
    depth: u32,
    in_string: bool,
    escaped: bool,
    /// The body is an array: a batch whose elements are counted.
    batch: bool,
    /// Seen the first structural byte.
    started: bool,
    /// In a batch, the next value at depth 1 starts an element.
    awaiting_element: bool,
    elements: usize,
}

impl Prescan {
    pub(crate) fn new(max_batch: usize) -> Self {
        Prescan {
            max_batch,
            depth: 0,
            in_string: false,
            escaped: false,
            batch: false,
            started: false,
            awaiting_element: false,
            elements: 0,
        }
    }

    /// A batch's elements seen so far; 0 for a single call.
    pub(crate) fn elements(&self) -> usize {
        self.elements
    }

    /// Scans the next bytes of the body. Runs of bytes that cannot change
    /// the state (a string's contents, a number's digits) are skipped with
    /// a tight search, so a long string or number costs little.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Result<(), Refusal> {
        let mut at = 0;
        while at < bytes.len() {
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                    at += 1;
                    continue;
                }
                match bytes[at..].iter().position(|&b| b == b'"' || b == b'\\') {
                    None => return Ok(()),
                    Some(found) => {
                        at += found;
                        if bytes[at] == b'\\' {
                            self.escaped = true;
                        } else {
                            self.in_string = false;
                        }
                        at += 1;
                    }
                }
                continue;
            }
            if self.started && !self.awaiting_element {
                match bytes[at..].iter().position(|&b| STRUCTURAL[b as usize]) {
                    None => return Ok(()),
                    Some(found) => at += found,
                }
            }
            self.structural(bytes[at])?;
            at += 1;
        }
        Ok(())
    }

    /// One byte outside strings, where the state may change.
    fn structural(&mut self, byte: u8) -> Result<(), Refusal> {
        if byte.is_ascii_whitespace() {
            return Ok(());
        }
        if !self.started {
            self.started = true;
            self.batch = byte == b'[';
        }
        match byte {
            b',' if self.depth == 1 => self.awaiting_element = self.batch,
            b']' | b'}' => self.depth = self.depth.saturating_sub(1),
            b',' | b':' => {}
            _ => {
                if self.depth == 1 && self.awaiting_element {
                    self.awaiting_element = false;
                    self.elements += 1;
                    if self.elements > self.max_batch {
                        return Err(Refusal::TooManyElements(self.max_batch));
                    }
                }
                match byte {
                    b'"' => self.in_string = true,
                    b'[' | b'{' => {
                        self.depth += 1;
                        if self.depth > MAX_NESTING {
                            return Err(Refusal::TooDeep);
                        }
                        if self.depth == 1 && self.batch {
                            self.awaiting_element = true;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Bytes outside strings that may change the scan's state.
static STRUCTURAL: [bool; 256] = {
    let mut table = [false; 256];
    let mut i = 0;
    while i < 6 {
        table[b"\"[{]},"[i] as usize] = true;
        i += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(body: &[u8], max_batch: usize) -> Result<(), Refusal> {
        let mut prescan = Prescan::new(max_batch);
        prescan.feed(body)
    }

    #[test]
    fn batches_are_counted_whatever_their_elements_hold() {
        let call = r#"{"jsonrpc":"2.0","id":"a,[{\"b","method":"eth_getLogs","params":[{"topics":[["0x1",null],null]}]}"#;
        let batch = |n: usize| format!("[{}]", vec![call; n].join(" , "));
        assert_eq!(scan(batch(3).as_bytes(), 3), Ok(()));
        assert_eq!(
            scan(batch(4).as_bytes(), 3),
            Err(Refusal::TooManyElements(3))
        );
        // Scalars are elements too, and a single call is not a batch.
        assert_eq!(
            scan(b"[1,\"x\",null,[]]", 3),
            Err(Refusal::TooManyElements(3))
        );
        assert_eq!(scan(call.as_bytes(), 0), Ok(()));
        assert_eq!(scan(b"[]", 0), Ok(()));
    }

    #[test]
    fn the_limit_is_found_across_frames_at_the_first_byte_past_it() {
        let body = format!("[{}]", ["{\"id\":1}"; 10].join(","));
        let mut prescan = Prescan::new(4);
        let cut = body.match_indices('{').nth(4).unwrap().0;
        for byte in body[..cut].bytes() {
            assert_eq!(prescan.feed(&[byte]), Ok(()));
        }
        assert_eq!(
            prescan.feed(&body.as_bytes()[cut..cut + 1]),
            Err(Refusal::TooManyElements(4))
        );
    }

    #[test]
    fn an_escape_split_across_frames_keeps_the_string_open() {
        let mut prescan = Prescan::new(1);
        // `["a\"[[` … the escaped quote does not end the string.
        assert_eq!(prescan.feed(br#"["a\"#), Ok(()));
        assert_eq!(prescan.feed(br#""{{{{,1,2"#), Ok(()));
        assert_eq!(prescan.feed(br#"",3]"#), Err(Refusal::TooManyElements(1)));
        let long_number = format!("[{}]", "9".repeat(100_000));
        assert_eq!(scan(long_number.as_bytes(), 1), Ok(()));
    }

    #[test]
    fn nesting_past_the_limit_is_refused_but_not_inside_strings() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert_eq!(scan(deep(MAX_NESTING as usize).as_bytes(), 1), Ok(()));
        assert_eq!(
            scan(deep(MAX_NESTING as usize + 1).as_bytes(), 1),
            Err(Refusal::TooDeep)
        );
        let quoted = format!("{{\"id\":\"{}\\\"{}\"}}", "[".repeat(500), "{".repeat(500));
        assert_eq!(scan(quoted.as_bytes(), 1), Ok(()));
    }
}
