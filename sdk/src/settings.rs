//! Reading a policy's settings: JSON in, the policy's `Settings` type out, or an error that names the field.
//!
//! serde_json parses the document into a [`Json`] tree; the `Settings` type is then read from that tree, whose
//! deserializer's error type is [`SettingsError`]. Why not `serde_json::from_str::<Settings>`: its error type
//! prints every unexpected value through serde's `Unexpected` Display, whose float arm links core's float printer
//! (21 KB, about a tenth of a trivial component) into every component, whatever its settings hold. Here floats
//! are printed by serde_json's own (small) printer, and the messages read the same. Why not `serde_json::Value`:
//! its objects are B-trees, whose code is another 8 KB; an object here is its entries in document order, so a
//! repeated field is refused (`duplicate field`) as serde_json refuses it.

use serde::de::value::{MapAccessDeserializer, MapDeserializer, SeqDeserializer};
use serde::de::{self, DeserializeOwned, Deserializer, Expected, IntoDeserializer, MapAccess, SeqAccess, Unexpected, Visitor};
use serde_json::Number;
use std::fmt;

/// What is wrong with a settings document. With [`parse`] it starts with the path of the field
/// (`label: invalid type: integer `3`, expected a string`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingsError {
    message: String,
}

impl SettingsError {
    fn new(message: String) -> Self {
        SettingsError { message }
    }
}

impl fmt::Display for SettingsError {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for SettingsError {}

impl de::Error for SettingsError {
    #[cold]
    fn custom<T: fmt::Display>(message: T) -> Self {
        SettingsError::new(message.to_string())
    }

    #[cold]
    fn invalid_type(unexpected: Unexpected, expected: &dyn Expected) -> Self {
        SettingsError::new(format!("invalid type: {}, expected {expected}", Described(unexpected)))
    }

    #[cold]
    fn invalid_value(unexpected: Unexpected, expected: &dyn Expected) -> Self {
        SettingsError::new(format!("invalid value: {}, expected {expected}", Described(unexpected)))
    }
}

/// serde's wording for an unexpected value, without core's float printer.
struct Described<'a>(Unexpected<'a>);

impl fmt::Display for Described<'_> {
    fn fmt(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        match self.0 {
            Unexpected::Bool(value) => write!(formatter, "boolean `{value}`"),
            Unexpected::Unsigned(value) => write!(formatter, "integer `{value}`"),
            Unexpected::Signed(value) => write!(formatter, "integer `{value}`"),
            Unexpected::Float(value) => match Number::from_f64(value) {
                Some(number) => write!(formatter, "floating point `{number}`"),
                None => formatter.write_str("floating point"),
            },
            Unexpected::Char(value) => write!(formatter, "character `{value}`"),
            Unexpected::Str(value) => write!(formatter, "string \"{value}\""),
            Unexpected::Bytes(_) => formatter.write_str("byte array"),
            Unexpected::Unit => formatter.write_str("null"),
            Unexpected::Option => formatter.write_str("Option value"),
            Unexpected::NewtypeStruct => formatter.write_str("newtype struct"),
            Unexpected::Seq => formatter.write_str("sequence"),
            Unexpected::Map => formatter.write_str("map"),
            Unexpected::Enum => formatter.write_str("enum"),
            Unexpected::UnitVariant => formatter.write_str("unit variant"),
            Unexpected::NewtypeVariant => formatter.write_str("newtype variant"),
            Unexpected::TupleVariant => formatter.write_str("tuple variant"),
            Unexpected::StructVariant => formatter.write_str("struct variant"),
            Unexpected::Other(other) => formatter.write_str(other),
        }
    }
}

/// Reads `T` from a settings document; an empty document means `{}` (every default).
pub fn parse<T: DeserializeOwned>(settings: &str) -> Result<T, SettingsError> {
    let settings = if settings.trim().is_empty() { "{}" } else { settings };
    // A syntax error says where: `expected value at line 1 column 9`.
    let tree: Json = serde_json::from_str(settings).map_err(|error| SettingsError::new(error.to_string()))?;
    serde_path_to_error::deserialize(tree).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        // The path of an unknown field ends with that field, which serde's message names already; a struct's
        // field names hold no dot, so it is the path's last segment.
        let path = match inner.message.starts_with("unknown field `") {
            true => path.rsplit_once('.').map_or(".", |(parent, _)| parent),
            false => &path,
        };
        match path {
            // The whole document.
            "." => inner,
            _ => SettingsError::new(format!("{path}: {inner}")),
        }
    })
}

/// A parsed JSON document, read by serde_json and deserialized from with [`SettingsError`].
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Unsigned(u64),
    Signed(i64),
    Float(f64),
    String(String),
    Array(Vec<Json>),
    /// The entries in document order.
    Object(Vec<(String, Json)>),
}

impl<'de> de::Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, value: bool) -> Result<Json, E> {
        Ok(Json::Bool(value))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Json, E> {
        Ok(Json::Unsigned(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Json, E> {
        Ok(Json::Signed(value))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Json, E> {
        Ok(Json::Float(value))
    }

    fn visit_str<E>(self, value: &str) -> Result<Json, E> {
        Ok(Json::String(value.to_string()))
    }

    fn visit_string<E>(self, value: String) -> Result<Json, E> {
        Ok(Json::String(value))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Json, A::Error> {
        let mut array = Vec::new();
        while let Some(item) = items.next_element()? {
            array.push(item);
        }
        Ok(Json::Array(array))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut entries: A) -> Result<Json, A::Error> {
        let mut object = Vec::new();
        while let Some(entry) = entries.next_entry()? {
            object.push(entry);
        }
        Ok(Json::Object(object))
    }
}

impl<'de> IntoDeserializer<'de, SettingsError> for Json {
    type Deserializer = Self;

    fn into_deserializer(self) -> Self {
        self
    }
}

impl Json {
    fn unexpected(&self) -> Unexpected<'_> {
        match self {
            Json::Null => Unexpected::Unit,
            Json::Bool(value) => Unexpected::Bool(*value),
            Json::Unsigned(value) => Unexpected::Unsigned(*value),
            Json::Signed(value) => Unexpected::Signed(*value),
            Json::Float(value) => Unexpected::Float(*value),
            Json::String(value) => Unexpected::Str(value),
            Json::Array(_) => Unexpected::Seq,
            Json::Object(_) => Unexpected::Map,
        }
    }
}

impl<'de> Deserializer<'de> for Json {
    type Error = SettingsError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SettingsError> {
        match self {
            Json::Null => visitor.visit_unit(),
            Json::Bool(value) => visitor.visit_bool(value),
            Json::Unsigned(value) => visitor.visit_u64(value),
            Json::Signed(value) => visitor.visit_i64(value),
            Json::Float(value) => visitor.visit_f64(value),
            Json::String(value) => visitor.visit_string(value),
            Json::Array(items) => {
                let mut items = SeqDeserializer::new(items.into_iter());
                let value = visitor.visit_seq(&mut items)?;
                items.end()?;
                Ok(value)
            }
            Json::Object(entries) => {
                let mut entries = MapDeserializer::new(entries.into_iter());
                let value = visitor.visit_map(&mut entries)?;
                entries.end()?;
                Ok(value)
            }
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, SettingsError> {
        match self {
            Json::Null => visitor.visit_none(),
            value => visitor.visit_some(value),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _name: &'static str, visitor: V) -> Result<V::Value, SettingsError> {
        visitor.visit_newtype_struct(self)
    }

    /// As serde_json has enums: a unit variant is its name, any other variant a map with one key.
    fn deserialize_enum<V: Visitor<'de>>(self, _name: &'static str, _variants: &'static [&'static str], visitor: V) -> Result<V::Value, SettingsError> {
        match self {
            Json::String(variant) => visitor.visit_enum(variant.into_deserializer()),
            Json::Object(entries) if entries.len() == 1 => visitor.visit_enum(MapAccessDeserializer::new(MapDeserializer::new(entries.into_iter()))),
            Json::Object(_) => Err(de::Error::invalid_value(Unexpected::Map, &"a map with a single key")),
            other => Err(de::Error::invalid_type(other.unexpected(), &"a string or a map with a single key")),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit unit_struct seq
        tuple tuple_struct map struct identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::collections::BTreeMap;

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields, rename_all = "camelCase")]
    struct Settings {
        label: String,
        weight: u32,
        ratio: f64,
        offset: Option<i64>,
        zones: Vec<String>,
        weights: BTreeMap<String, u8>,
        mode: Mode,
        threshold: Threshold,
        nested: Nested,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(rename_all = "PascalCase")]
    enum Mode {
        #[default]
        Spread,
        Pack,
        Limit(u32),
        Range {
            low: u32,
            high: u32,
        },
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(untagged)]
    enum Threshold {
        #[default]
        Off,
        Percent(u8),
        Named(String),
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(default)]
    struct Nested {
        items: Vec<Item>,
    }

    #[derive(Debug, Default, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Item {
        name: String,
    }

    fn error(settings: &str) -> String {
        parse::<Settings>(settings).unwrap_err().to_string()
    }

    #[test]
    fn every_shape_serde_json_reads_is_read_the_same() {
        let document = r#"{"label": "a", "weight": 3, "ratio": 0.5, "offset": -2, "zones": ["x", "y"],
            "weights": {"x": 1}, "mode": {"Range": {"low": 1, "high": 2}}, "threshold": 80,
            "nested": {"items": [{"name": "n"}]}}"#;
        let parsed = parse::<Settings>(document).unwrap();
        assert_eq!(parsed.ratio, 0.5);
        assert_eq!(parsed.offset, Some(-2));
        assert_eq!(parsed.mode, Mode::Range { low: 1, high: 2 });
        assert_eq!(parsed.threshold, Threshold::Percent(80));
        assert_eq!(parsed.nested.items, vec![Item { name: "n".into() }]);
        assert_eq!(parsed.weights["x"], 1);
        assert_eq!(parse::<Settings>(r#"{"mode": "Pack", "threshold": "high"}"#).unwrap().mode, Mode::Pack);
        assert_eq!(parse::<Settings>(r#"{"mode": {"Limit": 4}, "offset": null}"#).unwrap().mode, Mode::Limit(4));
        assert_eq!(parse::<Settings>("  ").unwrap(), Settings::default());
        assert_eq!(parse::<Settings>(r#"{"threshold": null}"#).unwrap().threshold, Threshold::Off);
    }

    #[test]
    fn errors_name_the_field_and_read_as_serde_jsons() {
        assert_eq!(error(r#"{"label": 3}"#), "label: invalid type: integer `3`, expected a string");
        assert_eq!(error(r#"{"weight": 1.5}"#), "weight: invalid type: floating point `1.5`, expected u32");
        assert_eq!(error(r#"{"weight": -1}"#), "weight: invalid value: integer `-1`, expected u32");
        assert_eq!(error(r#"{"weights": {"x": 300}}"#), "weights.x: invalid value: integer `300`, expected u8");
        assert_eq!(error(r#"{"zones": "x"}"#), r#"zones: invalid type: string "x", expected a sequence"#);
        assert_eq!(error(r#"{"nested": {"items": [{"name": true}]}}"#), "nested.items[0].name: invalid type: boolean `true`, expected a string");
        assert!(error(r#"{"lable": "a"}"#).starts_with("unknown field `lable`, expected one of `label`, `weight`"), "{}", error(r#"{"lable": "a"}"#));
        assert_eq!(error(r#"{"nested": {"items": [{"nme": "n"}]}}"#), "nested.items[0]: unknown field `nme`, expected `name`");
        assert!(error(r#"{"mode": "Bogus"}"#).starts_with("mode: unknown variant `Bogus`"), "{}", error(r#"{"mode": "Bogus"}"#));
        assert_eq!(error(r#"{"mode": {"Pack": 1, "Spread": 2}}"#), "mode: invalid value: map, expected a map with a single key");
        assert_eq!(error("3"), "invalid type: integer `3`, expected struct Settings");
        assert_eq!(error(r#"{"label": "a", "label": "b"}"#), "duplicate field `label`");
        assert_eq!(error(r#"{"label": "#), "EOF while parsing a value at line 1 column 10");
    }
}
