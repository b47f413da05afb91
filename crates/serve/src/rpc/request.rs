//! A request object as it arrives, borrowed from the body, and geth's rules
//! for what makes it a call. Decoding only: nothing here looks anything up
//! or knows a method.

use serde::Deserialize;
use serde_json::value::RawValue;

/// A request object, borrowed from the body. What makes it a valid
/// request is checked by [`Call::validate`], not by its shape, so a bad one
/// still gets its id back.
#[derive(Deserialize)]
pub(crate) struct Call<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<&'a RawValue>,
    /// `Some("null")` for `"id":null` (a call), `None` when absent (a
    /// notification).
    #[serde(borrow, default, deserialize_with = "present")]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub(crate) method: std::borrow::Cow<'a, str>,
    #[serde(borrow, default)]
    pub(crate) params: Option<&'a RawValue>,
}

/// A member that is present, null included.
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// What a request object is, judged as geth judges it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Validity {
    /// A call to answer.
    Call,
    /// A valid request without an id: nothing is answered.
    Notification,
    /// Not a request (-32600); answered with the id, or null when the id
    /// itself is the problem.
    Invalid { echo_id: bool },
}

/// A call's method and parameters, owned, to answer on another thread.
pub(crate) type OwnedCall = (String, Option<Box<RawValue>>);

impl Call<'_> {
    /// Its method and parameters, owned, to answer on another thread.
    pub(crate) fn to_owned_call(&self) -> OwnedCall {
        (self.method.to_string(), self.params.map(RawValue::to_owned))
    }

    /// JSON-RPC 2.0's rules as geth applies them: `jsonrpc` is exactly
    /// "2.0", a method is named, and an id, if any, is not an object or
    /// an array.
    pub(crate) fn validate(&self) -> Validity {
        let id_ok = self
            .id
            .is_none_or(|id| !matches!(id.get().as_bytes().first(), Some(b'{' | b'[')));
        if !id_ok {
            return Validity::Invalid { echo_id: false };
        }
        if self.jsonrpc.map(RawValue::get) != Some("\"2.0\"") || self.method.is_empty() {
            return Validity::Invalid { echo_id: true };
        }
        match self.id {
            None => Validity::Notification,
            Some(_) => Validity::Call,
        }
    }
}
