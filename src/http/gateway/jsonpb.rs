//! Protobuf messages as etcd's gateway writes and reads them in JSON (grpc-gateway 1.9
//! with golang/protobuf 1.3's `jsonpb`, `OrigName` on): field names as in the .proto
//! file, 64-bit integers as strings (read as strings or numbers), bytes as base64,
//! enums by name (read by name or number), default values left out, unknown fields
//! ignored, `null` meaning "not set"; and Go's errors for what does not fit.
//!
//! Messages are prost-reflect's `DynamicMessage`s over the descriptors of our own
//! .proto files, so one walk serves every request and response type. This module never
//! calls a service; the gateway encodes what this produces and sends it on.

use std::collections::HashMap;
use std::io;

use prost_reflect::{
    DynamicMessage, EnumDescriptor, FieldDescriptor, Kind, MessageDescriptor, SerializeOptions,
    Value,
};

use super::go_json::literal::{self, kind_of, split_elements, type_error, GoType, Literal};
use super::go_json::quote_bytes;

/// The Go type a message decodes through first (golang/protobuf's `jsonFields`).
const GO_OBJECT: &str = "map[string]json.RawMessage";
/// ... and a repeated field.
const GO_LIST: &str = "[]json.RawMessage";

/// How deep messages may nest in one request: prost's recursion limit, which the gRPC
/// service's own decoding enforces, so the gateway refuses what the service would.
/// Without it a request nesting Txns thousands deep (each level a few bytes of JSON,
/// well inside Go's 10000 levels of JSON) recurses until the member's stack overflows.
pub const MAX_MESSAGE_DEPTH: usize = 100;

/// The refusal of a request nested deeper than [`MAX_MESSAGE_DEPTH`]: Go protobuf's
/// text for its own recursion limit.
pub const TOO_DEEP: &str = "proto: exceeded maximum recursion depth";

/// Decodes one JSON value (the raw text of a whole value, already valid JSON) into a
/// message of type `desc`, as `jsonpb.Unmarshaler{AllowUnknownFields: true}` does.
pub fn decode(text: &[u8], desc: &MessageDescriptor) -> Result<DynamicMessage, String> {
    decode_nested(text, desc, 0)
}

/// [`decode`] of a message `depth` messages down from the request's.
fn decode_nested(
    text: &[u8],
    desc: &MessageDescriptor,
    depth: usize,
) -> Result<DynamicMessage, String> {
    if depth > MAX_MESSAGE_DEPTH {
        return Err(TOO_DEEP.to_string());
    }
    let mut message = DynamicMessage::new(desc.clone());
    if text.trim_ascii() == b"null" {
        return Ok(message);
    }
    let mut members = object_members(text)?;
    // Plain fields in declaration order, then oneof members, as jsonpb walks them.
    let fields: Vec<FieldDescriptor> = desc
        .descriptor_proto()
        .field
        .iter()
        .filter_map(|f| desc.get_field_by_name(f.name()))
        .collect();
    let (oneof_members, plain): (Vec<_>, Vec<_>) = fields
        .into_iter()
        .partition(|f| f.containing_oneof().is_some());
    for field in plain.iter().chain(oneof_members.iter()) {
        // The proto name first; the lowerCamelCase JSON name wins if both are given.
        let mut raw = members.remove(field.name());
        if let Some(camel) = members.remove(field.json_name()) {
            raw = Some(camel);
        }
        let Some(raw) = raw else { continue };
        if raw.trim_ascii() == b"null" {
            continue;
        }
        if let Some(value) = decode_field(raw, field, depth)? {
            message.set_field(field, value);
        }
    }
    Ok(message)
}

/// The members of a JSON object (Go's `map[string]json.RawMessage`: a repeated name
/// keeps its last value), or Go's error for a value that is no object.
fn object_members(text: &[u8]) -> Result<HashMap<String, &[u8]>, String> {
    let text = text.trim_ascii();
    if kind_of(text) != "object" {
        return Err(type_error(kind_of(text), GO_OBJECT));
    }
    let mut members = HashMap::new();
    for member in split_elements(&text[1..text.len() - 1]) {
        let member = member.trim_ascii();
        let (name, value) = split_member(member);
        members.insert(super::go_json::unquote(name), value.trim_ascii());
    }
    Ok(members)
}

/// `"name": value` into its name literal and its value text.
fn split_member(member: &[u8]) -> (&[u8], &[u8]) {
    let mut escaped = false;
    for (i, &c) in member.iter().enumerate().skip(1) {
        match (escaped, c) {
            (true, _) => escaped = false,
            (false, b'\\') => escaped = true,
            (false, b'"') => {
                let rest = member[i + 1..].trim_ascii_start();
                let value = rest.strip_prefix(b":").unwrap_or(rest);
                return (&member[..=i], value);
            }
            _ => {}
        }
    }
    (member, b"")
}

fn decode_field(
    raw: &[u8],
    field: &FieldDescriptor,
    depth: usize,
) -> Result<Option<Value>, String> {
    let kind = field.kind();
    if field.is_list() {
        if kind_of(raw) != "array" {
            return Err(type_error(kind_of(raw), GO_LIST));
        }
        let mut values = Vec::new();
        for element in split_elements(&raw[1..raw.len() - 1]) {
            if let Some(value) = decode_singular(element.trim_ascii(), &kind, depth)? {
                values.push(value);
            } else {
                values.push(Value::default_value(&kind));
            }
        }
        return Ok(Some(Value::List(values)));
    }
    decode_singular(raw, &kind, depth)
}

/// One value of a field's kind, in a message `depth` down; `None` when the JSON leaves
/// the field unset (`null`).
fn decode_singular(raw: &[u8], kind: &Kind, depth: usize) -> Result<Option<Value>, String> {
    let go_type = match kind {
        Kind::Message(desc) => {
            if raw == b"null" {
                return Ok(Some(Value::Message(DynamicMessage::new(desc.clone()))));
            }
            return decode_nested(raw, desc, depth + 1).map(|m| Some(Value::Message(m)));
        }
        Kind::Enum(desc) => {
            if raw.first() == Some(&b'"') {
                // By name, the name taken as written between the quotes.
                let name = &raw[1..raw.len() - 1];
                let value = std::str::from_utf8(name)
                    .ok()
                    .and_then(|name| desc.get_value_by_name(name));
                return match value {
                    Some(value) => Ok(Some(Value::EnumNumber(value.number()))),
                    None => Err(format!(
                        "unknown value {} for enum {}",
                        quote_bytes(name),
                        go_enum_name(desc)
                    )),
                };
            }
            let name = go_enum_name(desc);
            return match literal::unmarshal(raw, GoType::Enum(&name))? {
                Literal::Int(n) => Ok(Some(Value::EnumNumber(n as i32))),
                _ => Ok(None),
            };
        }
        Kind::Bool => GoType::Bool,
        Kind::String => GoType::String,
        Kind::Bytes => GoType::Bytes,
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => GoType::Int32,
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => GoType::Int64,
        Kind::Uint32 | Kind::Fixed32 => GoType::Uint32,
        Kind::Uint64 | Kind::Fixed64 => GoType::Uint64,
        Kind::Float => GoType::Float32,
        Kind::Double => GoType::Float64,
    };
    // Numbers may come as strings: jsonpb strips the quotes and reads what is inside.
    let numeric = !matches!(go_type, GoType::Bool | GoType::String | GoType::Bytes);
    let text = if numeric && raw.first() == Some(&b'"') {
        &raw[1..raw.len() - 1]
    } else {
        raw
    };
    let value = match literal::unmarshal(text, go_type)? {
        Literal::Null => return Ok(None),
        Literal::Bool(b) => Value::Bool(b),
        Literal::Text(s) => Value::String(s),
        Literal::Bytes(b) => Value::Bytes(b.into()),
        Literal::Int(n) => match kind {
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => Value::I32(n as i32),
            _ => Value::I64(n),
        },
        Literal::Uint(n) => match kind {
            Kind::Uint32 | Kind::Fixed32 => Value::U32(n as u32),
            _ => Value::U64(n),
        },
        Literal::Float(f) => match kind {
            Kind::Float => Value::F32(f as f32),
            _ => Value::F64(f),
        },
    };
    Ok(Some(value))
}

/// The name golang/protobuf registers an enum under: its package, then its nesting
/// joined by `_` (`etcdserverpb.RangeRequest_SortOrder`).
fn go_enum_name(desc: &EnumDescriptor) -> String {
    let package = desc.package_name();
    let nested = desc
        .full_name()
        .strip_prefix(package)
        .and_then(|rest| rest.strip_prefix('.'))
        .unwrap_or(desc.full_name());
    if package.is_empty() {
        nested.replace('.', "_")
    } else {
        format!("{package}.{}", nested.replace('.', "_"))
    }
}

/// How the gateway writes messages: proto names, 64-bit integers quoted, enums by name,
/// defaults left out.
fn options() -> SerializeOptions {
    SerializeOptions::new()
        .use_proto_field_name(true)
        .stringify_64_bit_integers(true)
        .use_enum_numbers(false)
        .skip_default_fields(true)
}

/// A message as etcd's gateway writes it.
pub fn encode(message: &DynamicMessage) -> Vec<u8> {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    // Writing to a Vec cannot fail, and every message of our descriptors serializes.
    if message
        .serialize_with_options(&mut serializer, &options())
        .is_err()
    {
        return b"{}".to_vec();
    }
    out
}

/// Any serde value written with Go's string escaping.
pub fn encode_value(value: &impl serde::Serialize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, GoFormatter);
    if value.serialize(&mut serializer).is_err() {
        return b"{}".to_vec();
    }
    out
}

/// Strings as Go's `encoding/json` escapes them: HTML-safe (`<`, `>`, `&` as `\u003c`
/// ...), U+2028 and U+2029 escaped, and control characters other than `\n`, `\r` and
/// `\t` as `\u00XX`.
struct GoFormatter;

impl serde_json::ser::Formatter for GoFormatter {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            let escape = match c {
                '<' => "\\u003c",
                '>' => "\\u003e",
                '&' => "\\u0026",
                '\u{2028}' => "\\u2028",
                '\u{2029}' => "\\u2029",
                _ => continue,
            };
            writer.write_all(&fragment.as_bytes()[start..i])?;
            writer.write_all(escape.as_bytes())?;
            start = i + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    fn write_char_escape<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        escape: serde_json::ser::CharEscape,
    ) -> io::Result<()> {
        use serde_json::ser::CharEscape;
        let text: &[u8] = match escape {
            CharEscape::Quote => b"\\\"",
            CharEscape::ReverseSolidus => b"\\\\",
            CharEscape::Solidus => b"/",
            CharEscape::LineFeed => b"\\n",
            CharEscape::CarriageReturn => b"\\r",
            CharEscape::Tab => b"\\t",
            CharEscape::Backspace => b"\\u0008",
            CharEscape::FormFeed => b"\\u000c",
            CharEscape::AsciiControl(byte) => {
                return write!(writer, "\\u{byte:04x}");
            }
        };
        writer.write_all(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::descriptors;

    fn message(name: &str) -> MessageDescriptor {
        descriptors().get_message_by_name(name).unwrap()
    }

    fn decode_error(name: &str, text: &str) -> String {
        decode(text.as_bytes(), &message(name)).unwrap_err()
    }

    fn round_trip(name: &str, text: &str) -> String {
        let decoded = decode(text.as_bytes(), &message(name)).unwrap();
        String::from_utf8(encode(&decoded)).unwrap()
    }

    #[test]
    fn requests_decode_with_either_name_and_numbers_as_strings() {
        assert_eq!(
            round_trip(
                "etcdserverpb.RangeRequest",
                r#"{"key":"Zm9v","rangeEnd":"Zm9w","limit":"2","sort_order":"DESCEND","revision":3,"bogus":[1]}"#
            ),
            r#"{"key":"Zm9v","range_end":"Zm9w","limit":"2","revision":"3","sort_order":"DESCEND"}"#
        );
        assert_eq!(
            round_trip("etcdserverpb.RangeRequest", r#"{"key":null,"limit":null}"#),
            "{}"
        );
        assert_eq!(round_trip("etcdserverpb.RangeRequest", "null"), "{}");
        assert_eq!(
            round_trip(
                "etcdserverpb.TxnRequest",
                r#"{"compare":[{"target":"VERSION","key":"YQ==","version":"0"}],"success":[{"request_put":{"key":"YQ==","value":"PGI+"}}]}"#
            ),
            // VERSION is the enum's zero, left out; a oneof member is written even at 0.
            r#"{"compare":[{"key":"YQ==","version":"0"}],"success":[{"request_put":{"key":"YQ==","value":"PGI+"}}]}"#
        );
        assert_eq!(
            round_trip(
                "etcdserverpb.AlarmRequest",
                r#"{"action":1,"alarm":"NOSPACE"}"#
            ),
            r#"{"action":"ACTIVATE","alarm":"NOSPACE"}"#
        );
    }

    #[test]
    fn wrong_types_get_go_errors() {
        let range = "etcdserverpb.RangeRequest";
        assert_eq!(
            decode_error(range, "[]"),
            "json: cannot unmarshal array into Go value of type map[string]json.RawMessage"
        );
        assert_eq!(
            decode_error(range, r#"{"sort_order":"FOO"}"#),
            r#"unknown value "FOO" for enum etcdserverpb.RangeRequest_SortOrder"#
        );
        assert_eq!(
            decode_error(range, r#"{"sort_order":true}"#),
            "json: cannot unmarshal bool into Go value of type etcdserverpb.RangeRequest_SortOrder"
        );
        assert_eq!(
            decode_error(range, r#"{"limit":"abc"}"#),
            "invalid character 'a' looking for beginning of value"
        );
        assert_eq!(
            decode_error("etcdserverpb.TxnRequest", r#"{"compare":5}"#),
            "json: cannot unmarshal number into Go value of type []json.RawMessage"
        );
        assert_eq!(
            decode_error(
                "etcdserverpb.TxnRequest",
                r#"{"success":[{"request_put":5}]}"#
            ),
            "json: cannot unmarshal number into Go value of type map[string]json.RawMessage"
        );
    }

    #[test]
    fn strings_are_escaped_as_go_escapes_them() {
        let mut member = DynamicMessage::new(message("etcdserverpb.Member"));
        member.set_field_by_name("name", Value::String("a<b>&c\u{8}\u{2028}\"\n".into()));
        assert_eq!(
            String::from_utf8(encode(&member)).unwrap(),
            r#"{"name":"a\u003cb\u003e\u0026c\u0008\u2028\"\n"}"#
        );
    }

    /// A Txn whose success branch holds a Txn, `levels` deep, around one Put.
    fn nested_txn(levels: usize) -> String {
        let inner = r#"{"success":[{"request_put":{"key":"aw==","value":"eA=="}}]}"#;
        format!(
            "{}{inner}{}",
            r#"{"success":[{"request_txn":"#.repeat(levels),
            "}]}".repeat(levels)
        )
    }

    #[test]
    fn messages_nest_as_deep_as_the_grpc_service_decodes_and_no_deeper() {
        use prost::Message;
        let txn = message("etcdserverpb.TxnRequest");
        // Each level is a TxnRequest and a RequestOp: two messages.
        let mut deepest = None;
        for levels in 40..60 {
            match decode(nested_txn(levels).as_bytes(), &txn) {
                Ok(decoded) => {
                    let bytes = decoded.encode_to_vec();
                    crate::proto::etcdserverpb::TxnRequest::decode(bytes.as_slice())
                        .unwrap_or_else(|e| panic!("{levels} levels: {e}"));
                    deepest = Some(levels);
                }
                Err(text) => {
                    assert_eq!(text, TOO_DEEP);
                    break;
                }
            }
        }
        let deepest = deepest.unwrap();
        assert!(deepest < 59, "the limit was not reached");
        // One level more is what the service itself refuses.
        let bytes = decode(nested_txn(deepest).as_bytes(), &txn)
            .unwrap()
            .encode_to_vec();
        let mut deeper = crate::proto::etcdserverpb::TxnRequest::default();
        deeper.success.push(crate::proto::etcdserverpb::RequestOp {
            request: Some(crate::proto::etcdserverpb::request_op::Request::RequestTxn(
                crate::proto::etcdserverpb::TxnRequest::decode(bytes.as_slice()).unwrap(),
            )),
        });
        let deeper = deeper.encode_to_vec();
        assert!(crate::proto::etcdserverpb::TxnRequest::decode(deeper.as_slice()).is_err());
        // Thousands of levels are refused, not recursed through.
        assert_eq!(
            decode(nested_txn(3000).as_bytes(), &txn).unwrap_err(),
            TOO_DEEP
        );
    }
}
