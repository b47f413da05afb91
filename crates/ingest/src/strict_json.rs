//! JSON parsed once, to be checked rather than used: each received text
//! (a block, its receipts) becomes one tree that every later step reads.
//! Strings without escapes borrow the text, objects keep their entries in
//! order, every value knows where it lies in the text (so what is stored is
//! cut from the bytes as received), and an object that gives a key twice is
//! an error (a client may read the first, a check the last).
//!
//! The tree is compared with the `serde_json::Value` a check expects, and
//! typed values (headers, transactions, receipts) are deserialised from it
//! ([`de`]) instead of from the text again.

use std::borrow::Cow;

use neve_store::Span;
use serde_json::{Number, Value};

mod de;
mod parse;

/// One parsed JSON value and where it lies in the text.
#[derive(Debug)]
pub(crate) struct Json<'a> {
    kind: Kind<'a>,
    offset: u32,
    len: u32,
}

/// What a [`Json`] value is.
#[derive(Debug)]
enum Kind<'a> {
    Null,
    Bool(bool),
    Number(Number),
    String(Cow<'a, str>),
    Array(Vec<Json<'a>>),
    Object(Vec<(Cow<'a, str>, Json<'a>)>),
}

/// A text parsed, with the first key an object repeats, if any.
pub(crate) struct Parsed<'a> {
    pub tree: Json<'a>,
    /// Why the text is refused although it parsed: a key given twice.
    pub repeated: Option<serde_json::Error>,
}

impl<'a> Json<'a> {
    /// Parses `text`, refusing repeated keys.
    pub(crate) fn parse(text: &'a [u8]) -> Result<Json<'a>, serde_json::Error> {
        let text = std::str::from_utf8(text)
            .map_err(|e| parse::error_at(text, e.valid_up_to(), "invalid unicode code point"))?;
        let parsed = Json::parse_noting_repeats(text)?;
        match parsed.repeated {
            Some(error) => Err(error),
            None => Ok(parsed.tree),
        }
    }

    /// Parses `text`; a repeated key is not an error here but noted, for
    /// the caller to refuse the text when it chooses.
    pub(crate) fn parse_noting_repeats(text: &'a str) -> Result<Parsed<'a>, serde_json::Error> {
        parse::parse(text)
    }

    pub(crate) fn is_null(&self) -> bool {
        matches!(self.kind, Kind::Null)
    }

    /// Where this value lies in the text it was parsed from.
    pub(crate) fn span(&self) -> Span {
        Span::new(self.offset, self.len)
    }

    /// The value of `key`, when this is an object that has it (the first,
    /// when it has it twice).
    pub(crate) fn get(&self, key: &str) -> Option<&Json<'a>> {
        self.as_object()?
            .iter()
            .find_map(|(k, v)| (k == key).then_some(v))
    }

    pub(crate) fn as_array(&self) -> Option<&[Json<'a>]> {
        match &self.kind {
            Kind::Array(items) => Some(items),
            _ => None,
        }
    }

    pub(crate) fn as_object(&self) -> Option<&[(Cow<'a, str>, Json<'a>)]> {
        match &self.kind {
            Kind::Object(entries) => Some(entries),
            _ => None,
        }
    }

    /// The string, when this is one written without escapes: a slice of
    /// the text itself.
    pub(crate) fn as_borrowed_str(&self) -> Option<&'a str> {
        match self.kind {
            Kind::String(Cow::Borrowed(s)) => Some(s),
            _ => None,
        }
    }

    /// The same value as a `serde_json::Value` (for messages).
    pub(crate) fn to_value(&self) -> Value {
        match &self.kind {
            Kind::Null => Value::Null,
            Kind::Bool(b) => Value::Bool(*b),
            Kind::Number(n) => Value::Number(n.clone()),
            Kind::String(s) => Value::String(s.to_string()),
            Kind::Array(items) => Value::Array(items.iter().map(Json::to_value).collect()),
            Kind::Object(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_value()))
                    .collect(),
            ),
        }
    }

    /// Whether this is `value`: the same type and contents, an object's
    /// keys in any order.
    pub(crate) fn is(&self, value: &Value) -> bool {
        match (&self.kind, value) {
            (Kind::Null, Value::Null) => true,
            (Kind::Bool(a), Value::Bool(b)) => a == b,
            (Kind::Number(a), Value::Number(b)) => a == b,
            (Kind::String(a), Value::String(b)) => a == b,
            (Kind::Array(a), Value::Array(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(a, b)| a.is(b))
            }
            (Kind::Object(a), Value::Object(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(k, v)| b.get(k.as_ref()).is_some_and(|b| v.is(b)))
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_compare_as_json_and_repeated_keys_are_refused() {
        let text = br#"{"a":"0x1","b":[1,true,null],"c":{"d":"e\u0041","f":2}}"#;
        let parsed = Json::parse(text).unwrap();
        assert!(parsed.is(&json!({"c": {"f": 2, "d": "eA"}, "b": [1, true, null], "a": "0x1"})));
        assert!(!parsed.is(&json!({"a": "0x1", "b": [1, true, null], "c": {"d": "eA"}})));
        assert!(!parsed.get("a").unwrap().is(&json!("0x01")));
        assert!(!parsed.get("b").unwrap().is(&json!([1, "true", null])));
        assert_eq!(
            parsed.to_value(),
            serde_json::from_slice::<Value>(text).unwrap()
        );
        let repeated = Json::parse(br#"{"x":{"a":1,"b":2,"a":1}}"#).unwrap_err();
        assert!(repeated.to_string().contains("key a appears twice"));
        assert!(
            Json::parse(br#"{"a\u0062":1,"ab":2}"#).is_err(),
            "escaped keys too"
        );
    }

    #[test]
    fn every_value_knows_where_it_lies_in_the_text() {
        let text = " {\"a\" : [1, \"x\\ny\", {\"b\":null}] ,\"c\":true}\n";
        let parsed = Json::parse_noting_repeats(text).unwrap();
        assert!(parsed.repeated.is_none());
        let at = |json: &Json<'_>| {
            let span = json.span();
            &text[span.offset as usize..(span.offset + span.len) as usize]
        };
        let tree = &parsed.tree;
        assert_eq!(at(tree), text.trim());
        let a = tree.get("a").unwrap();
        assert_eq!(at(a), "[1, \"x\\ny\", {\"b\":null}]");
        let items = a.as_array().unwrap();
        assert_eq!(
            items.iter().map(at).collect::<Vec<_>>(),
            ["1", "\"x\\ny\"", "{\"b\":null}"]
        );
        assert_eq!(items[1].as_borrowed_str(), None, "an escaped string is not");
        assert_eq!(at(items[2].get("b").unwrap()), "null");
        assert_eq!(at(tree.get("c").unwrap()), "true");
    }

    #[test]
    fn a_repeated_key_is_noted_where_the_tree_is_still_wanted() {
        let parsed = Json::parse_noting_repeats(r#"[{"a":1},{"b":{"c":1,"c":2}}]"#).unwrap();
        let repeated = parsed.repeated.expect("noted");
        assert!(repeated.to_string().contains("key c appears twice"));
        let many: String = (0..100).map(|i| format!("\"k{i}\":{i},")).collect();
        let text = format!("{{{many}\"k42\":0}}");
        assert!(
            Json::parse(text.as_bytes()).is_err(),
            "in a large object too"
        );
        assert!(Json::parse(format!("{{{many}\"k\":0}}").as_bytes()).is_ok());
    }

    /// The parser accepts exactly what serde_json accepts, and reads the
    /// same values.
    #[test]
    fn the_parser_accepts_and_reads_what_serde_json_does() {
        let texts: &[&str] = &[
            "null",
            " true ",
            "false",
            "0",
            "-0",
            "12345678901234567890",
            "123456789012345678901",
            "-9223372036854775809",
            "1.5e3",
            "-2.25E-2",
            "1e400",
            "01",
            "1.",
            ".5",
            "-",
            "+1",
            "1e",
            "\"\"",
            "\"\\u00e9\\ud83d\\ude00\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
            "\"\\ud83d\"",
            "\"\\x\"",
            "\"tab\there\"",
            "\"é ü 😀\"",
            "\"unterminated",
            "[]",
            "[1,]",
            "[1 2]",
            "{}",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{1:2}",
            "[[[[]]]]",
            "",
            "   ",
            "nul",
            "truex",
            "[true] x",
            "{\"a\":[{\"b\":\"c\"}],\"d\":-1.0}",
        ];
        for text in texts {
            let ours = Json::parse(text.as_bytes());
            let theirs = serde_json::from_str::<Value>(text);
            match (&ours, &theirs) {
                (Ok(ours), Ok(theirs)) => assert_eq!(&ours.to_value(), theirs, "{text}"),
                (Err(_), Err(_)) => {}
                _ => panic!("{text}: ours {ours:?}, serde_json {theirs:?}"),
            }
        }
        let deep = |n: usize| "[".repeat(n) + &"]".repeat(n);
        for n in [127, 128, 1000] {
            assert_eq!(
                Json::parse(deep(n).as_bytes()).is_ok(),
                serde_json::from_str::<Value>(&deep(n)).is_ok(),
                "{n} deep"
            );
        }
        assert!(Json::parse(b"\"\xff\"").is_err());
    }
}
