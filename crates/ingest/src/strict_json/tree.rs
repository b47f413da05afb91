//! The tree one parse gives: each value, where it lies in the text, and
//! how it compares with the `serde_json::Value` a check expects.

use std::borrow::Cow;

use neve_store::Span;
use serde_json::{Number, Value};

/// One parsed JSON value and where it lies in the text.
#[derive(Debug)]
pub(crate) struct Json<'a> {
    pub(super) kind: Kind<'a>,
    pub(super) offset: u32,
    pub(super) len: u32,
}

/// What a [`Json`] value is.
#[derive(Debug)]
pub(super) enum Kind<'a> {
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
