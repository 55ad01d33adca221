//! `json.Unmarshal(text, &x)` for the scalar Go types protobuf fields become: the value,
//! or Go's error ("json: cannot unmarshal string into Go value of type bool", "json:
//! cannot unmarshal number 1.5 into Go value of type int64", a base64 or syntax error).

use super::scanner::check_valid;
use super::{decode_base64, unquote};

/// The Go type a protobuf field is decoded into, named as Go's errors name it.
#[derive(Clone, Copy, Debug)]
pub enum GoType<'a> {
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Float32,
    Float64,
    String,
    Bytes,
    /// A protobuf enum: an `int32` under its Go name (`etcdserverpb.RangeRequest_SortOrder`).
    Enum(&'a str),
}

impl GoType<'_> {
    fn name(&self) -> &str {
        match self {
            GoType::Bool => "bool",
            GoType::Int32 => "int32",
            GoType::Int64 => "int64",
            GoType::Uint32 => "uint32",
            GoType::Uint64 => "uint64",
            GoType::Float32 => "float32",
            GoType::Float64 => "float64",
            GoType::String => "string",
            GoType::Bytes => "[]uint8",
            GoType::Enum(name) => name,
        }
    }
}

/// A decoded scalar. `Null` leaves the field as it is, as Go does.
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Text(String),
    Bytes(Vec<u8>),
}

/// The kind of JSON value a text starts, as Go's type errors name it.
pub fn kind_of(text: &[u8]) -> &'static str {
    match text.iter().find(|c| !c.is_ascii_whitespace()) {
        Some(b'"') => "string",
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b't' | b'f') => "bool",
        Some(b'n') => "null",
        _ => "number",
    }
}

pub fn type_error(kind: &str, go_type: &str) -> String {
    format!("json: cannot unmarshal {kind} into Go value of type {go_type}")
}

/// `json.Unmarshal(text, &value)` for a value of type `go_type`.
pub fn unmarshal(text: &[u8], go_type: GoType<'_>) -> Result<Literal, String> {
    check_valid(text)?;
    let trimmed = text.trim_ascii();
    let mismatch = |kind: &str| Err(type_error(kind, go_type.name()));
    match (kind_of(trimmed), go_type) {
        ("null", _) => Ok(Literal::Null),
        ("bool", GoType::Bool) => Ok(Literal::Bool(trimmed == b"true")),
        ("string", GoType::String) => Ok(Literal::Text(unquote(trimmed))),
        ("string", GoType::Bytes) => decode_base64(unquote(trimmed).as_bytes()).map(Literal::Bytes),
        ("array", GoType::Bytes) => byte_array(trimmed),
        ("number", _) => number(trimmed, go_type),
        (kind, _) => mismatch(kind),
    }
}

/// A number literal (valid JSON) into a numeric Go type.
fn number(literal: &[u8], go_type: GoType<'_>) -> Result<Literal, String> {
    let text = String::from_utf8_lossy(literal);
    let out_of_type = || Err(type_error(&format!("number {text}"), go_type.name()));
    // Go's ParseInt/ParseUint: integers only, no exponent or fraction.
    match go_type {
        GoType::Int64 => text
            .parse::<i64>()
            .map(Literal::Int)
            .or_else(|_| out_of_type()),
        GoType::Int32 | GoType::Enum(_) => match text.parse::<i64>() {
            Ok(n) if i32::try_from(n).is_ok() => Ok(Literal::Int(n)),
            _ => out_of_type(),
        },
        GoType::Uint64 => text
            .parse::<u64>()
            .map(Literal::Uint)
            .or_else(|_| out_of_type()),
        GoType::Uint32 => match text.parse::<u64>() {
            Ok(n) if u32::try_from(n).is_ok() => Ok(Literal::Uint(n)),
            _ => out_of_type(),
        },
        GoType::Float64 => match text.parse::<f64>() {
            Ok(n) if n.is_finite() => Ok(Literal::Float(n)),
            _ => out_of_type(),
        },
        GoType::Float32 => match text.parse::<f32>() {
            Ok(n) if n.is_finite() => Ok(Literal::Float(f64::from(n))),
            _ => out_of_type(),
        },
        GoType::Bool | GoType::String | GoType::Bytes => Err(type_error("number", go_type.name())),
    }
}

/// Go decodes a JSON array into a `[]byte` element by element, each a `uint8`; a wrong
/// element is reported (the first one) after the whole array was read.
fn byte_array(literal: &[u8]) -> Result<Literal, String> {
    let inner = &literal[1..literal.len() - 1];
    let mut bytes = Vec::new();
    let mut first_error = None;
    for element in split_elements(inner) {
        let element = element.trim_ascii();
        let value = match kind_of(element) {
            "null" => Ok(0),
            "number" => {
                let text = String::from_utf8_lossy(element);
                text.parse::<u8>()
                    .map_err(|_| type_error(&format!("number {text}"), "uint8"))
            }
            kind => Err(type_error(kind, "uint8")),
        };
        match value {
            Ok(byte) => bytes.push(byte),
            Err(error) => {
                bytes.push(0);
                first_error.get_or_insert(error);
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(Literal::Bytes(bytes)),
    }
}

/// The elements of a valid JSON array's inside (or an object's members), split at the
/// top-level commas.
pub fn split_elements(inner: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, &c) in inner.iter().enumerate() {
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !inner[start..].trim_ascii().is_empty() || !parts.is_empty() {
        parts.push(&inner[start..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str, go_type: GoType<'_>) -> String {
        unmarshal(text.as_bytes(), go_type).unwrap_err()
    }

    #[test]
    fn values_decode_as_go_decodes_them() {
        assert_eq!(unmarshal(b"12", GoType::Int64), Ok(Literal::Int(12)));
        assert_eq!(unmarshal(b" -0 ", GoType::Int64), Ok(Literal::Int(0)));
        assert_eq!(unmarshal(b"null", GoType::Int64), Ok(Literal::Null));
        assert_eq!(unmarshal(b"true", GoType::Bool), Ok(Literal::Bool(true)));
        assert_eq!(
            unmarshal(b"\"Zm9v\"", GoType::Bytes),
            Ok(Literal::Bytes(b"foo".to_vec()))
        );
        assert_eq!(
            unmarshal(b"[102, 111,111]", GoType::Bytes),
            Ok(Literal::Bytes(b"foo".to_vec()))
        );
        assert_eq!(
            unmarshal(b"\"a\\u00e9\"", GoType::String),
            Ok(Literal::Text("aé".into()))
        );
        assert_eq!(
            unmarshal(b"18446744073709551615", GoType::Uint64),
            Ok(Literal::Uint(u64::MAX))
        );
    }

    #[test]
    fn errors_are_go_errors() {
        assert_eq!(
            error("1.5", GoType::Int64),
            "json: cannot unmarshal number 1.5 into Go value of type int64"
        );
        assert_eq!(
            error("1e2", GoType::Int64),
            "json: cannot unmarshal number 1e2 into Go value of type int64"
        );
        assert_eq!(
            error("-1", GoType::Uint64),
            "json: cannot unmarshal number -1 into Go value of type uint64"
        );
        assert_eq!(
            error("3000000000", GoType::Enum("etcdserverpb.AlarmType")),
            "json: cannot unmarshal number 3000000000 into Go value of type etcdserverpb.AlarmType"
        );
        assert_eq!(
            error("true", GoType::Int64),
            "json: cannot unmarshal bool into Go value of type int64"
        );
        assert_eq!(
            error("\"true\"", GoType::Bool),
            "json: cannot unmarshal string into Go value of type bool"
        );
        assert_eq!(
            error("5", GoType::Bytes),
            "json: cannot unmarshal number into Go value of type []uint8"
        );
        assert_eq!(
            error("{}", GoType::Bytes),
            "json: cannot unmarshal object into Go value of type []uint8"
        );
        assert_eq!(
            error("[\"a\"]", GoType::Bytes),
            "json: cannot unmarshal string into Go value of type uint8"
        );
        assert_eq!(
            error("[300]", GoType::Bytes),
            "json: cannot unmarshal number 300 into Go value of type uint8"
        );
        assert_eq!(
            error("\"Zm9\"", GoType::Bytes),
            "illegal base64 data at input byte 0"
        );
        assert_eq!(
            error("abc", GoType::Int64),
            "invalid character 'a' looking for beginning of value"
        );
        assert_eq!(error("", GoType::Int64), "unexpected end of JSON input");
        assert_eq!(
            error("1 2", GoType::Int64),
            "invalid character '2' after top-level value"
        );
    }
}
