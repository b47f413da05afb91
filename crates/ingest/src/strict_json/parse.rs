//! The one pass over a received text that builds a [`Json`] tree with the
//! span of every value. It accepts what serde_json accepts: the grammar and
//! the whitespace are checked here, and the rare parts whose reading has
//! choices in it (a number, a string with escapes) are handed to serde_json
//! itself, so they read exactly as they did when serde_json parsed the
//! whole text. Containers nest at most as deep as serde_json allows.

use std::borrow::Cow;

use serde::de::Error as _;
use serde_json::{Error, Number};

use super::tree::{Json, Kind, Parsed};

impl<'a> Json<'a> {
    /// Parses `text`, refusing repeated keys.
    pub(crate) fn parse(text: &'a [u8]) -> Result<Json<'a>, serde_json::Error> {
        let text = std::str::from_utf8(text)
            .map_err(|e| error_at(text, e.valid_up_to(), "invalid unicode code point"))?;
        let parsed = Json::parse_noting_repeats(text)?;
        match parsed.repeated {
            Some(error) => Err(error),
            None => Ok(parsed.tree),
        }
    }

    /// Parses `text`; a repeated key is not an error here but noted, for
    /// the caller to refuse the text when it chooses.
    pub(crate) fn parse_noting_repeats(text: &'a str) -> Result<Parsed<'a>, serde_json::Error> {
        parse(text)
    }
}

/// serde_json's recursion limit: containers may nest 127 deep.
const MAX_DEPTH: u32 = 127;

/// Objects with up to this many entries look for a repeated key by
/// comparing each with those before it; larger ones sort their keys.
const SMALL_OBJECT: usize = 32;

/// Parses `text` into a tree, noting the first repeated key.
pub(super) fn parse(text: &str) -> Result<Parsed<'_>, Error> {
    if u32::try_from(text.len()).is_err() {
        return Err(Error::custom("text longer than 4 GiB"));
    }
    let mut parser = Parser {
        text,
        bytes: text.as_bytes(),
        at: 0,
        depth: 0,
        repeated: None,
    };
    let tree = parser.value()?;
    parser.skip_whitespace();
    if parser.at != text.len() {
        return Err(parser.error("trailing characters"));
    }
    Ok(Parsed {
        tree,
        repeated: parser.repeated,
    })
}

/// An error `what` at byte `at` of `text`, placed as serde_json places its
/// own (line and column, from 1).
pub(super) fn error_at(text: &[u8], at: usize, what: &str) -> Error {
    let before = &text[..at.min(text.len())];
    let line = 1 + before.iter().filter(|b| **b == b'\n').count();
    let column = before.len()
        - before
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
    Error::custom(format!("{what} at line {line} column {}", column + 1))
}

struct Parser<'a> {
    text: &'a str,
    bytes: &'a [u8],
    at: usize,
    depth: u32,
    repeated: Option<Error>,
}

impl<'a> Parser<'a> {
    fn error(&self, what: &str) -> Error {
        error_at(self.bytes, self.at, what)
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn value(&mut self) -> Result<Json<'a>, Error> {
        self.skip_whitespace();
        let start = self.at;
        let kind = match self.peek() {
            None => return Err(self.error("EOF while parsing a value")),
            Some(b'"') => Kind::String(self.string()?),
            Some(b'{') => self.object()?,
            Some(b'[') => self.array()?,
            Some(b't') => self.literal("true", Kind::Bool(true))?,
            Some(b'f') => self.literal("false", Kind::Bool(false))?,
            Some(b'n') => self.literal("null", Kind::Null)?,
            Some(b'-' | b'0'..=b'9') => Kind::Number(self.number()?),
            Some(_) => return Err(self.error("expected value")),
        };
        Ok(Json {
            kind,
            offset: start as u32,
            len: (self.at - start) as u32,
        })
    }

    fn literal(&mut self, word: &str, kind: Kind<'a>) -> Result<Kind<'a>, Error> {
        if !self.bytes[self.at..].starts_with(word.as_bytes()) {
            return Err(self.error("expected ident"));
        }
        self.at += word.len();
        Ok(kind)
    }

    /// A number, read by serde_json from its characters.
    fn number(&mut self) -> Result<Number, Error> {
        let start = self.at;
        let rest = &self.bytes[start..];
        let len = rest
            .iter()
            .position(|b| !matches!(b, b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E'))
            .unwrap_or(rest.len());
        self.at += len;
        serde_json::from_str(&self.text[start..self.at])
            .map_err(|e| relocated(self.bytes, start, &e))
    }

    /// A string (the parser is at its opening quote): borrowed when it has
    /// no escapes, else read by serde_json.
    fn string(&mut self) -> Result<Cow<'a, str>, Error> {
        let start = self.at;
        let mut at = start + 1;
        let mut escaped = false;
        loop {
            at = plain_run(self.bytes, at);
            match self.bytes.get(at) {
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    at += 2;
                }
                Some(_) => {
                    self.at = at;
                    return Err(self.error(
                        "control character (\\u0000-\\u001F) found while parsing a string",
                    ));
                }
                None => {
                    self.at = self.bytes.len();
                    return Err(self.error("EOF while parsing a string"));
                }
            }
        }
        self.at = at + 1;
        if !escaped {
            return Ok(Cow::Borrowed(&self.text[start + 1..at]));
        }
        serde_json::from_str(&self.text[start..=at])
            .map(Cow::Owned)
            .map_err(|e| relocated(self.bytes, start, &e))
    }

    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("recursion limit exceeded"));
        }
        self.at += 1;
        Ok(())
    }

    fn array(&mut self) -> Result<Kind<'a>, Error> {
        self.enter()?;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
        } else {
            loop {
                items.push(self.value()?);
                self.skip_whitespace();
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(b']') => {
                        self.at += 1;
                        break;
                    }
                    Some(_) => return Err(self.error("expected `,` or `]`")),
                    None => return Err(self.error("EOF while parsing a list")),
                }
            }
        }
        self.depth -= 1;
        Ok(Kind::Array(items))
    }

    fn object(&mut self) -> Result<Kind<'a>, Error> {
        let start = self.at;
        self.enter()?;
        let mut entries = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
        } else {
            loop {
                self.skip_whitespace();
                match self.peek() {
                    Some(b'"') => {}
                    Some(_) => return Err(self.error("key must be a string")),
                    None => return Err(self.error("EOF while parsing an object")),
                }
                let key = self.string()?;
                self.skip_whitespace();
                match self.peek() {
                    Some(b':') => self.at += 1,
                    Some(_) => return Err(self.error("expected `:`")),
                    None => return Err(self.error("EOF while parsing an object")),
                }
                entries.push((key, self.value()?));
                self.skip_whitespace();
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(b'}') => {
                        self.at += 1;
                        break;
                    }
                    Some(_) => return Err(self.error("expected `,` or `}`")),
                    None => return Err(self.error("EOF while parsing an object")),
                }
            }
        }
        self.depth -= 1;
        if self.repeated.is_none()
            && let Some(key) = repeated_key(&entries)
        {
            self.repeated = Some(error_at(
                self.bytes,
                start,
                &format!("key {key} appears twice in the object"),
            ));
        }
        Ok(Kind::Object(entries))
    }
}

/// A key `entries` give more than once (the least, when several are).
fn repeated_key<'e>(entries: &'e [(Cow<'_, str>, Json<'_>)]) -> Option<&'e str> {
    if entries.len() <= SMALL_OBJECT {
        return entries
            .iter()
            .enumerate()
            .filter(|(i, (key, _))| entries[..*i].iter().any(|(other, _)| other == key))
            .map(|(_, (key, _))| key.as_ref())
            .min();
    }
    let mut keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_ref()).collect();
    keys.sort_unstable();
    keys.windows(2)
        .find(|pair| pair[0] == pair[1])
        .map(|pair| pair[0])
}

/// serde_json's error for a part handed to it, placed in the whole text.
fn relocated(text: &[u8], start: usize, error: &Error) -> Error {
    let message = error.to_string();
    let what = message.split(" at line ").next().unwrap_or(&message);
    error_at(text, start + error.column().saturating_sub(1), what)
}

/// The index of the first byte from `at` on that ends a plain run of a
/// string: a quote, a backslash or a control character (or the end). Reads
/// eight bytes at a time.
fn plain_run(bytes: &[u8], mut at: usize) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte of `x` is zero where its bit in `zero(x)` is set, and the
    // lowest set bit is always such a byte.
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let stops = zero(word ^ (ONES * u64::from(b'"')))
            | zero(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word & HIGHS);
        if stops != 0 {
            return at + (stops.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    while let Some(&byte) = bytes.get(at) {
        if matches!(byte, b'"' | b'\\' | 0..=0x1f) {
            break;
        }
        at += 1;
    }
    at
}
