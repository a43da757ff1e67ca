//! Protobuf request bodies, as kubectl's generators (`kubectl create namespace|deployment|configmap ...`) send
//! them: the magic `k8s\0`, then a `runtime.Unknown` (typeMeta = 1 {apiVersion = 1, kind = 2}, raw = 2,
//! contentEncoding = 3, contentType = 4) whose `raw` is the object's message. Decoded generically into the JSON
//! the API server would have received: one table of message fields (`sim/openapi/protobuf.json`, generated from
//! k8s-pb's prost sources by `sim/openapi/protobuf_fields.py`) and the JSON forms of the few well-known
//! apimachinery types (Time, MicroTime, Quantity, IntOrString, RawExtension, Duration).

use crate::error::ApiError;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::sync::OnceLock;

static EMBEDDED: &str = include_str!("../openapi/protobuf.json");

pub const MAGIC: &[u8] = b"k8s\0";

struct Field {
    name: String,
    kind: String,
    repeated: bool,
    message: Option<String>,
}

type Messages = HashMap<String, HashMap<u64, Field>>;

fn messages() -> &'static Messages {
    static MESSAGES: OnceLock<Messages> = OnceLock::new();
    MESSAGES.get_or_init(|| {
        let embedded: Value = serde_json::from_str(EMBEDDED).expect("sim/openapi/protobuf.json is valid JSON");
        let mut messages = HashMap::new();
        for (name, fields) in embedded["messages"].as_object().into_iter().flatten() {
            let fields = fields
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|field| {
                    let tag = field[0].as_u64()?;
                    let message = field.get(4).and_then(Value::as_str).map(str::to_string);
                    Some((tag, Field { name: field[1].as_str()?.to_string(), kind: field[2].as_str()?.to_string(), repeated: field[3] == true, message }))
                })
                .collect();
            messages.insert(name.clone(), fields);
        }
        messages
    })
}

fn invalid(why: impl std::fmt::Display) -> ApiError {
    ApiError::bad_request(format!("the protobuf body could not be decoded: {why}"))
}

/// The protobuf package of an API version: `apps/v1` -> `k8s.io.api.apps.v1`.
fn package(api_version: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("core", api_version));
    let group = group.strip_suffix(".k8s.io").unwrap_or(group);
    let group = group.strip_suffix(".authorization").unwrap_or(group);
    format!("k8s.io.api.{group}.{version}")
}

/// Decodes an enveloped protobuf body into the object's JSON.
pub fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let envelope = body.strip_prefix(MAGIC).ok_or_else(|| invalid("no k8s protobuf magic"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for entry in Reader(envelope) {
        let (tag, value) = entry?;
        match (tag, value) {
            (1, Wire::Bytes(type_meta)) => {
                for entry in Reader(type_meta) {
                    match entry? {
                        (1, Wire::Bytes(text)) => api_version = utf8(text)?,
                        (2, Wire::Bytes(text)) => kind = utf8(text)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(bytes)) => raw = bytes,
            (3, Wire::Bytes(encoding)) if !encoding.is_empty() => return Err(invalid("content encodings are not supported")),
            _ => {}
        }
    }
    let message = format!("{}.{kind}", package(&api_version));
    if !messages().contains_key(&message) {
        return Err(ApiError::unsupported_media_type(&format!("application/vnd.kubernetes.protobuf ({api_version} {kind})")));
    }
    let mut object = decode_message(&message, raw)?;
    object["apiVersion"] = json!(api_version);
    object["kind"] = json!(kind);
    Ok(object)
}

fn utf8(bytes: &[u8]) -> Result<String, ApiError> {
    String::from_utf8(bytes.to_vec()).map_err(invalid)
}

enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// The fields of one message, in order.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn varint(&mut self) -> Result<u64, ApiError> {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (&byte, rest) = self.0.split_first().ok_or_else(|| invalid("truncated varint"))?;
            self.0 = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(invalid("varint too long"))
    }

    fn take(&mut self, length: usize) -> Result<&[u8], ApiError> {
        if self.0.len() < length {
            return Err(invalid("truncated field"));
        }
        let (taken, rest) = self.0.split_at(length);
        self.0 = rest;
        Ok(taken)
    }
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<(u64, Wire<'a>), ApiError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let mut field = || -> Result<(u64, Wire<'a>), ApiError> {
            let key = self.varint()?;
            let value = match key & 7 {
                0 => Wire::Varint(self.varint()?),
                1 => Wire::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"))),
                2 => {
                    let length = usize::try_from(self.varint()?).map_err(invalid)?;
                    let data: &'a [u8] = self.0;
                    if data.len() < length {
                        return Err(invalid("truncated field"));
                    }
                    self.0 = &data[length..];
                    Wire::Bytes(&data[..length])
                }
                5 => Wire::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"))),
                other => return Err(invalid(format!("unsupported wire type {other}"))),
            };
            Ok((key >> 3, value))
        };
        let result = field();
        if result.is_err() {
            self.0 = &[];
        }
        Some(result)
    }
}

fn timestamp(seconds: i64, nanos: i64, micros: bool) -> Value {
    match jiff::Timestamp::new(seconds, i32::try_from(nanos).unwrap_or(0)) {
        Ok(at) if micros => json!(at.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()),
        Ok(at) => json!(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
        Err(_) => Value::Null,
    }
}

/// The JSON of the well-known apimachinery messages, which are not objects in JSON.
fn well_known(name: &str, object: &Map<String, Value>) -> Option<Value> {
    let int = |field: &str| object.get(field).and_then(Value::as_i64).unwrap_or(0);
    let text = |field: &str| object.get(field).cloned().unwrap_or(json!(""));
    Some(match name {
        "k8s.io.apimachinery.pkg.apis.meta.v1.Time" | "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime" => {
            // The zero time is null in JSON (and absent under omitempty).
            if int("seconds") == 0 && int("nanos") == 0 {
                Value::Null
            } else {
                timestamp(int("seconds"), int("nanos"), name.ends_with("MicroTime"))
            }
        }
        "k8s.io.apimachinery.pkg.api.resource.Quantity" => text("string"),
        "k8s.io.apimachinery.pkg.util.intstr.IntOrString" => {
            if int("type") == 1 {
                text("strVal")
            } else {
                json!(int("intVal"))
            }
        }
        "k8s.io.apimachinery.pkg.apis.meta.v1.Duration" => {
            let nanos = int("duration");
            json!(format!("{}s", nanos as f64 / 1e9))
        }
        "k8s.io.apimachinery.pkg.runtime.RawExtension" => {
            let raw = object.get("raw").and_then(Value::as_str).unwrap_or("");
            serde_json::from_str(&crate::defaults::base64_decode(raw).unwrap_or_default()).unwrap_or(Value::Null)
        }
        _ => return None,
    })
}

fn scalar(kind: &str, value: &Wire) -> Result<Value, ApiError> {
    Ok(match (kind, value) {
        ("string", Wire::Bytes(bytes)) => json!(utf8(bytes)?),
        ("bytes", Wire::Bytes(bytes)) => json!(crate::defaults::base64(bytes)),
        ("bool", Wire::Varint(number)) => json!(*number != 0),
        ("int32", Wire::Varint(number)) => json!(*number as i64 as i32),
        ("int64", Wire::Varint(number)) => json!(*number as i64),
        ("double", Wire::Fixed64(bits)) => json!(f64::from_bits(*bits)),
        ("float", Wire::Fixed32(bits)) => json!(f32::from_bits(*bits)),
        (kind, _) => return Err(invalid(format!("a {kind} field has the wrong wire type"))),
    })
}

fn decode_message(name: &str, bytes: &[u8]) -> Result<Value, ApiError> {
    let fields = messages().get(name).ok_or_else(|| invalid(format!("unknown message {name}")))?;
    let mut object = Map::new();
    for entry in Reader(bytes) {
        let (tag, wire) = entry?;
        // Unknown fields are skipped, as a proto decoder does.
        let Some(field) = fields.get(&tag) else { continue };
        let value = match (field.kind.as_str(), &wire) {
            ("message", Wire::Bytes(inner)) => decode_message(field.message.as_deref().unwrap_or(""), inner)?,
            (map @ ("map:string" | "map:bytes" | "map:message"), Wire::Bytes(entry)) => {
                let (mut key, mut value) = (String::new(), Value::Null);
                for part in Reader(entry) {
                    match part? {
                        (1, Wire::Bytes(text)) => key = utf8(text)?,
                        (2, Wire::Bytes(inner)) if map == "map:message" => value = decode_message(field.message.as_deref().unwrap_or(""), inner)?,
                        (2, inner) => value = scalar(&map[4..], &inner)?,
                        _ => {}
                    }
                }
                if value.is_null() && map == "map:string" {
                    value = json!("");
                }
                let target = object.entry(field.name.clone()).or_insert_with(|| json!({}));
                target[key] = value;
                continue;
            }
            // Packed repeated scalars.
            ("int32" | "int64" | "bool", Wire::Bytes(packed)) if field.repeated => {
                let mut reader = Reader(packed);
                while !reader.0.is_empty() {
                    let number = reader.varint()?;
                    let value = scalar(&field.kind, &Wire::Varint(number))?;
                    object.entry(field.name.clone()).or_insert_with(|| json!([])).as_array_mut().expect("an array").push(value);
                }
                continue;
            }
            (kind, wire) => scalar(kind, wire)?,
        };
        if field.repeated {
            object.entry(field.name.clone()).or_insert_with(|| json!([])).as_array_mut().expect("an array").push(value);
        } else {
            object.insert(field.name.clone(), value);
        }
    }
    if let Some(value) = well_known(name, &object) {
        return Ok(value);
    }
    // Go's protobuf marshals non-pointer fields even when empty; its JSON omits them (omitempty).
    object.retain(|_, value| !matches!(value, Value::Null) && value != &json!("") && value != &json!(false));
    Ok(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut value: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }

    fn bytes_field(tag: u64, bytes: &[u8], out: &mut Vec<u8>) {
        varint(tag << 3 | 2, out);
        varint(bytes.len() as u64, out);
        out.extend_from_slice(bytes);
    }

    #[test]
    fn decodes_an_enveloped_config_map() {
        let mut metadata = Vec::new();
        bytes_field(1, b"settings", &mut metadata);
        bytes_field(3, b"", &mut metadata); // namespace: empty, omitted in JSON
        let mut entry = Vec::new();
        bytes_field(1, b"mode", &mut entry);
        bytes_field(2, b"fast", &mut entry);
        let mut config_map = Vec::new();
        bytes_field(1, &metadata, &mut config_map);
        bytes_field(2, &entry, &mut config_map);
        let mut type_meta = Vec::new();
        bytes_field(1, b"v1", &mut type_meta);
        bytes_field(2, b"ConfigMap", &mut type_meta);
        let mut body = MAGIC.to_vec();
        bytes_field(1, &type_meta, &mut body);
        bytes_field(2, &config_map, &mut body);
        assert_eq!(decode(&body).unwrap(), json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"}, "data": {"mode": "fast"}}));
    }

    #[test]
    fn every_writable_served_kind_and_every_referenced_message_is_known() {
        // CustomResourceDefinitions arrive as JSON: no kubectl generator sends them as protobuf.
        let writable = crate::resources::RESOURCES.iter().filter(|resource| !resource.read_only && resource.kind != "CustomResourceDefinition");
        for resource in writable {
            let message = format!("{}.{}", package(&resource.api_version()), resource.kind);
            assert!(messages().contains_key(&message), "{message} is missing from sim/openapi/protobuf.json");
        }
        for fields in messages().values() {
            for field in fields.values() {
                if let Some(message) = &field.message {
                    assert!(messages().contains_key(message), "{message} is referenced but not described");
                }
            }
        }
    }

    #[test]
    fn packages_follow_api_versions() {
        assert_eq!(package("v1"), "k8s.io.api.core.v1");
        assert_eq!(package("apps/v1"), "k8s.io.api.apps.v1");
        assert_eq!(package("rbac.authorization.k8s.io/v1"), "k8s.io.api.rbac.v1");
        assert_eq!(package("coordination.k8s.io/v1"), "k8s.io.api.coordination.v1");
    }
}
