//! `--config-file`: etcd's YAML configuration read as etcd reads it (embed's
//! `configFromFile` through `sigs.k8s.io/yaml`: YAML turned into JSON, then Go's
//! `encoding/json` into `embed.Config`), into the same settings the flags give, so that
//! every default and check is the flags' own.
//!
//! What that means, each checked against etcd 3.4 and 3.6's source:
//! - keys are `json` tags (`file_keys`), matched exactly, else ignoring ASCII case;
//!   unknown keys are ignored (a warning here; etcd says nothing);
//! - a value must have its Go type: strings are never made from numbers or booleans
//!   (`name: 123` is refused), durations are integers of nanoseconds, lists are YAML
//!   sequences; `null` (or an empty value) leaves the default, except that a null
//!   `peer-transport-security` is refused as etcd refuses it;
//! - errors are Go's, first key first in byte order (as Go decodes the JSON that a
//!   map marshals to), e.g. `error unmarshaling JSON: while decoding JSON: json: cannot
//!   unmarshal string into Go struct field configYAML.heartbeat-interval of type uint`,
//!   and malformed YAML is `error converting YAML to JSON: yaml: line 2: ...`.
//!
//! This module owns turning a document into settings, split by the flag table as the
//! command line's are. It touches the disk only in `read_config_file` (the reader
//! `config::parse` passes; tests pass their own), never interprets a value beyond its
//! Go type, and never logs.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Number, Value};

use super::error::ConfigError;
use super::file_keys::{GoType, Node, Section, Target, ROOT};
use super::flags::{self, EtcdFlag, Treatment};
use super::scan::Settings;
use super::setting::{Origin, Setting};

/// What a config file sets.
#[derive(Debug, Default)]
pub(super) struct FileSettings {
    /// Flag name and value, in the file's (sorted) order.
    pub(super) values: Vec<(&'static str, Setting)>,
    /// Flags whose key is present, even with a null value: etcd's `FlagsExplicitlySet`,
    /// for its checks of an old and a new name given together.
    pub(super) present: Vec<&'static str>,
    /// Keys etcd would ignore, for a warning.
    pub(super) unknown: Vec<String>,
}

/// etcd's words for a config file it cannot read (`open x: no such file or directory`).
pub(super) fn read_config_file(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|error| {
        let why = match error.kind() {
            std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            std::io::ErrorKind::IsADirectory => {
                return format!("read {}: is a directory", path.display())
            }
            _ => error.to_string(),
        };
        format!("open {}: {why}", path.display())
    })
}

/// A config file's settings, split as the command line's are, and the flags whose keys
/// it names (null ones too).
pub(super) fn settings(
    text: &str,
    warnings: &mut Vec<String>,
) -> Result<(Settings, Vec<&'static str>), ConfigError> {
    let read = read(text)?;
    for key in &read.unknown {
        warnings.push(format!(
            "config file key {key:?} is not an etcd setting: ignored, as etcd ignores it"
        ));
    }
    let mut settings = BTreeMap::new();
    let mut others: Vec<(&'static EtcdFlag, Setting)> = Vec::new();
    for (name, setting) in read.values {
        // What etcd's file reader leaves at its default: empty URL lists, and a zero
        // certificate validity.
        let unset = match name {
            "listen-peer-urls"
            | "listen-client-urls"
            | "listen-client-http-urls"
            | "initial-advertise-peer-urls"
            | "advertise-client-urls"
            | "listen-metrics-urls"
            | "cors"
            | "host-whitelist" => setting.value.is_empty(),
            "self-signed-cert-validity" => setting.value == "0",
            _ => false,
        };
        if unset {
            continue;
        }
        let Some(flag) = flags::lookup(name) else {
            continue;
        };
        if flag.treatment == Treatment::Implemented {
            settings.insert(flag.name, setting);
        } else {
            others.retain(|(f, _)| f.name != flag.name);
            others.push((flag, setting));
        }
    }
    Ok((
        Settings {
            implemented: settings,
            others,
        },
        read.present,
    ))
}

/// etcd's prefixes for the two stages of `sigs.k8s.io/yaml` (v1.1 in etcd 3.4, v1.4 in
/// 3.6).
const YAML_PREFIX: &str = "error converting YAML to JSON: yaml: ";
const JSON_PREFIX: &str = "error unmarshaling JSON: while decoding JSON: json: ";

/// Reads a config file's text.
pub(super) fn read(text: &str) -> Result<FileSettings, ConfigError> {
    // go-yaml's Unmarshal reads the first document of a stream and no further.
    let document = match serde_yaml_ng::Deserializer::from_str(text).next() {
        Some(first) => Lenient::deserialize(first).map_err(yaml_error)?.0,
        None => Value::Null,
    };
    if let Some(bad) = non_finite(&document) {
        return Err(ConfigError::ConfigFile(format!(
            "error converting YAML to JSON: json: unsupported value: {bad}"
        )));
    }
    let mut out = FileSettings::default();
    match untag(&document) {
        Value::Null => {}
        Value::Mapping(map) => {
            section(map, &ROOT, &mut out)?;
            // etcd checks this one again as a raw map, after decoding succeeded.
            if let Some(Value::Null) = lookup(map, "peer-transport-security").map(untag) {
                return Err(ConfigError::ConfigFile(
                    "invalid peer-transport-security".into(),
                ));
            }
        }
        other => {
            return Err(ConfigError::ConfigFile(format!(
                "{JSON_PREFIX}cannot unmarshal {} into Go value of type {}",
                json_kind(other),
                ROOT.type_name
            )))
        }
    }
    Ok(out)
}

/// A YAML value read as go-yaml reads one: a key given twice keeps its last value
/// (serde_yaml_ng's `Value` refuses the document instead).
struct Lenient(Value);

impl<'de> Deserialize<'de> for Lenient {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(LenientVisitor).map(Lenient)
    }
}

struct LenientVisitor;

impl<'de> serde::de::Visitor<'de> for LenientVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Lenient::deserialize(d).map(|l| l.0)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Lenient(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Sequence(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut mapping = Mapping::new();
        while let Some((Lenient(key), Lenient(value))) = map.next_entry()? {
            mapping.insert(key, value);
        }
        Ok(Value::Mapping(mapping))
    }
}

/// A YAML syntax error as go-yaml words it: `yaml: line N: problem`.
fn yaml_error(error: serde_yaml_ng::Error) -> ConfigError {
    let text = error.to_string();
    // serde_yaml_ng appends " at line L column C"; go-yaml puts the line first.
    let problem = text
        .rfind(" at line ")
        .map_or(text.as_str(), |at| &text[..at]);
    ConfigError::ConfigFile(match error.location() {
        Some(location) => format!("{YAML_PREFIX}line {}: {problem}", location.line()),
        None => format!("{YAML_PREFIX}{problem}"),
    })
}

fn untag(value: &Value) -> &Value {
    match value {
        Value::Tagged(tagged) => untag(&tagged.value),
        other => other,
    }
}

/// A map's keys as strings, as `sigs.k8s.io/yaml` converts them, sorted as Go's JSON
/// encoder writes a map.
fn keys(map: &Mapping) -> Vec<(String, &Value)> {
    let mut keys: Vec<(String, &Value)> = map
        .iter()
        .filter_map(|(k, v)| {
            let key = match untag(k) {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return None,
            };
            Some((key, v))
        })
        .collect();
    keys.sort_by(|a, b| a.0.cmp(&b.0));
    keys
}

fn lookup<'a>(map: &'a Mapping, key: &str) -> Option<&'a Value> {
    keys(map)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// Go's field matching: an exact `json` tag first, else one equal ignoring case.
fn field<'s>(section: &'s Section, key: &str) -> Option<&'s super::file_keys::Field> {
    section.fields.iter().find(|f| f.key == key).or_else(|| {
        section
            .fields
            .iter()
            .find(|f| f.key.eq_ignore_ascii_case(key))
    })
}

fn section(
    map: &Mapping,
    section_spec: &Section,
    out: &mut FileSettings,
) -> Result<(), ConfigError> {
    for (key, value) in keys(map) {
        let Some(field) = field(section_spec, &key) else {
            out.unknown.push(key);
            continue;
        };
        let value = untag(value);
        match &field.node {
            Node::Section(inner) => {
                if let Some(flag_prefix) = present_prefix(field.path) {
                    // etcd marks `peer-<key>` as set for every key of this section.
                    if let Value::Mapping(inner_map) = value {
                        for (inner_key, _) in keys(inner_map) {
                            if let Some(f) = field_flag(inner, &inner_key) {
                                debug_assert!(f.starts_with(flag_prefix));
                                out.present.push(f);
                            }
                        }
                    }
                }
                match value {
                    Value::Null => {}
                    Value::Mapping(inner_map) => self::section(inner_map, inner, out)?,
                    other => {
                        return Err(type_error(
                            json_kind(other),
                            section_spec,
                            field.path,
                            inner.type_name,
                        ))
                    }
                }
            }
            Node::Leaf(ty, target) => {
                if let (Target::Flag(flag), true) =
                    (target, section_spec.struct_name == "configYAML")
                {
                    out.present.push(flag);
                }
                let Some(text) = decode(value, *ty, section_spec, field.path)? else {
                    continue;
                };
                match target {
                    Target::Flag(flag) => out.values.push((
                        flag,
                        Setting {
                            value: text,
                            origin: Origin::File {
                                key: field.path,
                                flag,
                            },
                        },
                    )),
                    Target::Inert => {}
                    Target::Refused if text.is_empty() => {}
                    Target::Refused => {
                        return Err(ConfigError::Invalid(format!(
                            "config file key {} is an etcd setting that QuantyKube does not \
                             implement yet",
                            field.path
                        )))
                    }
                }
            }
        }
    }
    Ok(())
}

/// The flag-name prefix of a section whose keys etcd counts as set flags.
fn present_prefix(path: &str) -> Option<&'static str> {
    (path == "peer-transport-security").then_some("peer-")
}

fn field_flag(section: &Section, key: &str) -> Option<&'static str> {
    match field(section, key).map(|f| &f.node) {
        Some(Node::Leaf(_, Target::Flag(flag))) => Some(flag),
        _ => None,
    }
}

/// Go's `UnmarshalTypeError` text, wrapped as etcd reports it.
fn type_error(value: String, section: &Section, path: &str, type_name: &str) -> ConfigError {
    ConfigError::ConfigFile(format!(
        "{JSON_PREFIX}cannot unmarshal {value} into Go struct field {}.{path} of type {type_name}",
        section.struct_name
    ))
}

/// How Go's decoder names a JSON value it cannot store.
fn json_kind(value: &Value) -> String {
    match untag(value) {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Sequence(_) => "array",
        Value::Mapping(_) => "object",
        Value::Tagged(_) => "object",
    }
    .to_string()
}

/// yaml.v2 (YAML 1.1) reads these plain scalars as booleans; serde_yaml_ng (YAML 1.2)
/// reads them as strings. Accepted where a boolean is expected.
fn yaml11_bool(s: &str) -> Option<bool> {
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => Some(true),
        "n" | "N" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => Some(false),
        _ => None,
    }
}

/// A value as the flag's text (`None`: null, which leaves the default), or Go's error.
fn decode(
    value: &Value,
    ty: GoType,
    section: &Section,
    path: &str,
) -> Result<Option<String>, ConfigError> {
    let mismatch = |value: &Value| type_error(json_kind(value), section, path, ty.name());
    if let Value::Null = value {
        return Ok(None);
    }
    let text = match ty {
        GoType::Str | GoType::NamedStr(_) => match value {
            Value::String(s) => s.clone(),
            other => return Err(mismatch(other)),
        },
        GoType::Bool => match value {
            Value::Bool(b) => b.to_string(),
            Value::String(s) => match yaml11_bool(s) {
                Some(b) => b.to_string(),
                None => return Err(mismatch(value)),
            },
            other => return Err(mismatch(other)),
        },
        GoType::Strings => match value {
            Value::Sequence(items) => {
                let mut texts = Vec::with_capacity(items.len());
                for item in items {
                    match untag(item) {
                        Value::Null => texts.push(String::new()),
                        Value::String(s) => texts.push(s.clone()),
                        other => return Err(type_error(json_kind(other), section, path, "string")),
                    }
                }
                texts.join(",")
            }
            other => return Err(mismatch(other)),
        },
        GoType::Uint | GoType::Uint32 | GoType::Uint64 => {
            let max = if ty == GoType::Uint32 {
                u128::from(u32::MAX)
            } else {
                u128::from(u64::MAX)
            };
            let n = integer(value, section, path, ty)?;
            if n < 0 || n.unsigned_abs() > max {
                return Err(number_error(value, section, path, ty));
            }
            n.to_string()
        }
        GoType::Int | GoType::Int64 | GoType::Duration => {
            let n = integer(value, section, path, ty)?;
            if i64::try_from(n).is_err() {
                return Err(number_error(value, section, path, ty));
            }
            if ty == GoType::Duration {
                format!("{n}ns")
            } else {
                n.to_string()
            }
        }
    };
    Ok(Some(text))
}

/// A YAML number as the integer Go's decoder would read from its JSON form.
fn integer(value: &Value, section: &Section, path: &str, ty: GoType) -> Result<i128, ConfigError> {
    let Value::Number(n) = value else {
        return Err(type_error(json_kind(value), section, path, ty.name()));
    };
    if let Some(u) = n.as_u64() {
        return Ok(i128::from(u));
    }
    if let Some(i) = n.as_i64() {
        return Ok(i128::from(i));
    }
    // A float marshals as its integer digits when it has no fraction (below 1e21).
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => Ok(f as i128),
        _ => Err(number_error(value, section, path, ty)),
    }
}

fn number_error(value: &Value, section: &Section, path: &str, ty: GoType) -> ConfigError {
    let literal = match value {
        Value::Number(n) => go_number(n),
        other => json_kind(other),
    };
    type_error(format!("number {literal}"), section, path, ty.name())
}

/// A number as Go's JSON encoder writes it.
fn go_number(n: &Number) -> String {
    if n.is_u64() || n.is_i64() {
        return n.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    if f.fract() == 0.0 && f.abs() < 1e21 {
        return format!("{f:.0}");
    }
    if f != 0.0 && (f.abs() < 1e-6 || f.abs() >= 1e21) {
        // Go: 1e+21, 1e-07 → 1e-7.
        let text = format!("{f:e}");
        return match text.split_once('e') {
            Some((mantissa, exp)) if !exp.starts_with('-') => format!("{mantissa}e+{exp}"),
            _ => text,
        };
    }
    f.to_string()
}

/// The first infinite or NaN number anywhere, as Go's encoder names it.
fn non_finite(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) => n.as_f64().filter(|f| !f.is_finite()).map(|f| {
            if f.is_nan() {
                "NaN".to_string()
            } else if f > 0.0 {
                "+Inf".to_string()
            } else {
                "-Inf".to_string()
            }
        }),
        Value::Sequence(items) => items.iter().find_map(non_finite),
        Value::Mapping(map) => map.values().find_map(non_finite),
        Value::Tagged(tagged) => non_finite(&tagged.value),
        _ => None,
    }
}
