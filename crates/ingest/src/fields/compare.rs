//! Comparing a received JSON object with what the verified data gives,
//! key by key, and the error a difference is.

use serde_json::Value;

use crate::strict_json::Json;

/// A served field that is not what the verified block gives, is given
/// twice, or is one nothing verifies.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{object}: {field} {reason}")]
pub struct FieldError {
    /// Which object (`block`, `transaction 3`, `receipt 0`, `log 7`,
    /// `raw block`, `raw receipts`).
    pub object: String,
    /// Its key.
    pub field: String,
    /// What is wrong with it.
    pub reason: String,
}

pub(super) fn mismatch(object: &str, field: &str, reason: impl Into<String>) -> FieldError {
    FieldError {
        object: object.to_string(),
        field: field.to_string(),
        reason: reason.into(),
    }
}

/// A quantity as the JSON-RPC API writes it.
pub(super) fn quantity(value: impl Into<u128>) -> Value {
    Value::String(format!("{:#x}", value.into()))
}

pub(super) fn json(value: impl serde::Serialize) -> Value {
    serde_json::to_value(value).expect("alloy types serialise")
}

pub(super) type Entries<'v, 'a> = &'v [(std::borrow::Cow<'a, str>, Json<'a>)];

pub(super) fn object<'v, 'a>(
    value: &'v Json<'a>,
    what: &str,
) -> Result<Entries<'v, 'a>, FieldError> {
    value
        .as_object()
        .ok_or_else(|| mismatch(what, "(any)", "is not an object"))
}

/// Compares every field of `received` with what `expected` says of its key;
/// `None` is a key nothing verifies.
pub(super) fn compare<'a>(
    what: &str,
    received: Entries<'_, 'a>,
    apart: &[&str],
    mut expected: impl FnMut(&str, &Json<'a>) -> Result<Option<Value>, FieldError>,
) -> Result<(), FieldError> {
    for (key, value) in received {
        if apart.contains(&key.as_ref()) {
            continue;
        }
        match expected(key, value)? {
            None => return Err(mismatch(what, key, "is not verified by anything")),
            Some(want) if !value.is(&want) => {
                let value = value.to_value();
                return Err(mismatch(what, key, format!("is {value}, verified {want}")));
            }
            Some(_) => {}
        }
    }
    Ok(())
}
