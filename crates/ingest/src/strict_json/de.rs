//! Typed values (alloy's headers, transactions, receipts) deserialised from
//! a parsed [`Json`] tree instead of from the text again. Each request is
//! answered as serde_json's own deserializer answers it for the same text:
//! strings are handed borrowed (`visit_borrowed_str`, or `visit_str` when
//! they had escapes), numbers as the `u64`, `i64` or `f64` serde_json
//! reads, a request for a type the value is not is refused rather than
//! coerced, an array or object must be read to its end, and a value skipped
//! costs nothing.

use std::borrow::Cow;
use std::slice;

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    DeserializeSeed, Deserializer, EnumAccess, Error as _, Expected, MapAccess, SeqAccess,
    Unexpected, VariantAccess, Visitor,
};
use serde_json::{Error, Number};

use super::tree::{Json, Kind};

impl Json<'_> {
    fn unexpected(&self) -> Unexpected<'_> {
        match &self.kind {
            Kind::Null => Unexpected::Unit,
            Kind::Bool(b) => Unexpected::Bool(*b),
            Kind::Number(n) => number_unexpected(n),
            Kind::String(s) => Unexpected::Str(s),
            Kind::Array(_) => Unexpected::Seq,
            Kind::Object(_) => Unexpected::Map,
        }
    }

    fn invalid_type(&self, expected: &dyn Expected) -> Error {
        Error::invalid_type(self.unexpected(), expected)
    }
}

fn number_unexpected(n: &Number) -> Unexpected<'static> {
    if let Some(u) = n.as_u64() {
        Unexpected::Unsigned(u)
    } else if let Some(i) = n.as_i64() {
        Unexpected::Signed(i)
    } else {
        Unexpected::Float(n.as_f64().unwrap_or(f64::NAN))
    }
}

fn visit_number<'de, V: Visitor<'de>>(n: &Number, visitor: V) -> Result<V::Value, Error> {
    if let Some(u) = n.as_u64() {
        visitor.visit_u64(u)
    } else if let Some(i) = n.as_i64() {
        visitor.visit_i64(i)
    } else {
        visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// A string as serde_json hands it: borrowed when it is a slice of the text.
#[expect(clippy::ptr_arg, reason = "whether it is borrowed is the point")]
fn visit_str<'de, V: Visitor<'de>>(s: &'de Cow<'_, str>, visitor: V) -> Result<V::Value, Error> {
    match s {
        Cow::Borrowed(s) => visitor.visit_borrowed_str(s),
        Cow::Owned(s) => visitor.visit_str(s),
    }
}

fn visit_array<'de, 'a: 'de, V: Visitor<'de>>(
    items: &'de [Json<'a>],
    visitor: V,
) -> Result<V::Value, Error> {
    let mut seq = Seq(items.iter());
    let value = visitor.visit_seq(&mut seq)?;
    match seq.0.len() {
        0 => Ok(value),
        _ => Err(Error::invalid_length(
            items.len(),
            &"fewer elements in array",
        )),
    }
}

fn visit_object<'de, 'a: 'de, V: Visitor<'de>>(
    entries: &'de [(Cow<'a, str>, Json<'a>)],
    visitor: V,
) -> Result<V::Value, Error> {
    let mut map = Map {
        entries: entries.iter(),
        value: None,
    };
    let value = visitor.visit_map(&mut map)?;
    match map.entries.len() {
        0 => Ok(value),
        _ => Err(Error::invalid_length(
            entries.len(),
            &"fewer elements in map",
        )),
    }
}

/// Requests only a number answers.
macro_rules! numbers {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            match &self.kind {
                Kind::Number(n) => visit_number(n, visitor),
                _ => Err(self.invalid_type(&visitor)),
            }
        }
    )*};
}

impl<'de, 'a: 'de> Deserializer<'de> for &'de Json<'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.kind {
            Kind::Null => visitor.visit_unit(),
            Kind::Bool(b) => visitor.visit_bool(*b),
            Kind::Number(n) => visit_number(n, visitor),
            Kind::String(s) => visit_str(s, visitor),
            Kind::Array(items) => visit_array(items, visitor),
            Kind::Object(entries) => visit_object(entries, visitor),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind {
            Kind::Bool(b) => visitor.visit_bool(b),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    numbers! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.kind {
            Kind::String(s) => visit_str(s, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.kind {
            Kind::String(Cow::Borrowed(s)) => visitor.visit_borrowed_bytes(s.as_bytes()),
            Kind::String(Cow::Owned(s)) => visitor.visit_bytes(s.as_bytes()),
            Kind::Array(items) => visit_array(items, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind {
            Kind::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.kind {
            Kind::Null => visitor.visit_unit(),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.kind {
            Kind::Array(items) => visit_array(items, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match &self.kind {
            Kind::Object(entries) => visit_object(entries, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match &self.kind {
            Kind::Array(items) => visit_array(items, visitor),
            Kind::Object(entries) => visit_object(entries, visitor),
            _ => Err(self.invalid_type(&visitor)),
        }
    }

    /// `"Variant"` or `{"Variant": value}`, as serde_json writes enums.
    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match &self.kind {
            Kind::String(s) => visitor.visit_enum(BorrowedStrDeserializer::<Error>::new(s)),
            Kind::Object(entries) => match &entries[..] {
                [(variant, value)] => visitor.visit_enum(Variant { variant, value }),
                _ => Err(Error::invalid_value(
                    Unexpected::Map,
                    &"map with a single key",
                )),
            },
            _ => Err(self.invalid_type(&"string or map")),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

struct Seq<'de, 'a>(slice::Iter<'de, Json<'a>>);

impl<'de, 'a: 'de> SeqAccess<'de> for Seq<'de, 'a> {
    type Error = Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, Error> {
        self.0.next().map(|item| seed.deserialize(item)).transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

struct Map<'de, 'a> {
    entries: slice::Iter<'de, (Cow<'a, str>, Json<'a>)>,
    value: Option<&'de Json<'a>>,
}

impl<'de, 'a: 'de> MapAccess<'de> for Map<'de, 'a> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.value = Some(value);
        seed.deserialize(Key(key)).map(Some)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Error> {
        let value = self
            .value
            .take()
            .ok_or_else(|| Error::custom("a value asked for before its key"))?;
        seed.deserialize(value)
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An object key, which is always a string; asked for a number or a bool
/// it reads as one, as serde_json's keys do.
struct Key<'de, 'a>(&'de Cow<'a, str>);

/// Requests a key answers by reading its text as a number.
macro_rules! numeric_keys {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
            let text: &'de str = self.0;
            let starts = text.starts_with(|c: char| c == '-' || c.is_ascii_digit());
            let ends = text.ends_with(|c: char| c.is_ascii_digit());
            if !starts || !ends {
                return Err(Error::custom("expected numeric key"));
            }
            let mut de = serde_json::Deserializer::from_str(text);
            let value = (&mut de).$method(visitor)?;
            de.end()?;
            Ok(value)
        }
    )*};
}

impl<'de, 'a: 'de> Deserializer<'de> for Key<'de, 'a> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visit_str(self.0, visitor)
    }

    numeric_keys! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
        deserialize_f32 deserialize_f64
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0.as_ref() {
            "true" => visitor.visit_bool(true),
            "false" => visitor.visit_bool(false),
            other => Err(Error::invalid_type(Unexpected::Str(other), &visitor)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_enum(BorrowedStrDeserializer::<Error>::new(self.0))
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Cow::Borrowed(s) => visitor.visit_borrowed_bytes(s.as_bytes()),
            Cow::Owned(s) => visitor.visit_bytes(s.as_bytes()),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_bytes(visitor)
    }

    serde::forward_to_deserialize_any! {
        char str string unit unit_struct seq tuple tuple_struct map struct
        identifier ignored_any
    }
}

/// `{"Variant": value}`.
struct Variant<'de, 'a> {
    variant: &'de Cow<'a, str>,
    value: &'de Json<'a>,
}

impl<'de, 'a: 'de> EnumAccess<'de> for Variant<'de, 'a> {
    type Error = Error;
    type Variant = &'de Json<'a>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), Error> {
        let variant = seed.deserialize(Key(self.variant))?;
        Ok((variant, self.value))
    }
}

impl<'de, 'a: 'de> VariantAccess<'de> for &'de Json<'a> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        serde::Deserialize::deserialize(self)
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_struct("", &[], visitor)
    }
}

#[cfg(test)]
mod tests;
