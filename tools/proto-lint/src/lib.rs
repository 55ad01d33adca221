//! The mechanical rules of shared/seeds/api-style-guide.txt, checked over compiled
//! descriptors (protoc's own parse, so nothing here reads proto syntax).
//!
//! Each violation names the guide's section it breaks. What the guide asks that a
//! program cannot decide (a name being a noun, `optional` used only where null and
//! zero differ) is left to review. Resources are recognised by shape: a message whose
//! field 1 is `metadata`, or one a `Get` method returns.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use prost::Message;
use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
    FileDescriptorSet, MethodDescriptorProto,
};

/// One broken rule, where it is broken.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    pub file: String,
    /// 1-based; 0 when protoc gave no location.
    pub line: i32,
    /// `Type.field`, `Service.Method` or `Enum.VALUE`.
    pub element: String,
    /// The guide's section, as it titles it ("5. Field Naming").
    pub section: &'static str,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: section {}: {}",
            self.file, self.line, self.element, self.section, self.message
        )
    }
}

const RESOURCES: &str = "2.1 Identity and scope";
const OBJECT_REF: &str = "2.3 ObjectRef";
const GET: &str = "3.1 Get";
const LIST: &str = "3.2 List";
const CREATE: &str = "3.3 Create";
const UPDATE: &str = "3.4 Update";
const DELETE: &str = "3.5 Delete";
const CUSTOM: &str = "4. Custom Methods";
const FIELDS: &str = "5. Field Naming";
const ENUMS: &str = "5.1 Enum naming";
const STANDARD_FIELDS: &str = "6. Standard Fields";
const STATUS: &str = "8. Resource Status";
const UNIONS: &str = "9. Union Types";

/// Compiles `files` (paths under `include`) with the vendored protoc, keeping source
/// locations for the report.
pub fn compile(include: &Path, files: &[PathBuf]) -> Result<FileDescriptorSet, String> {
    let protoc = protoc_bin_vendored::protoc_bin_path().map_err(|e| e.to_string())?;
    let well_known = protoc_bin_vendored::include_path().map_err(|e| e.to_string())?;
    let out = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
    let mut command = std::process::Command::new(protoc);
    command
        .arg("-I")
        .arg(include)
        .arg("-I")
        .arg(well_known)
        .arg("--include_source_info")
        .arg(format!("--descriptor_set_out={}", out.path().display()));
    for file in files {
        command.arg(file);
    }
    let output = command.output().map_err(|e| format!("protoc: {e}"))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let bytes = std::fs::read(out.path()).map_err(|e| e.to_string())?;
    FileDescriptorSet::decode(bytes.as_slice()).map_err(|e| e.to_string())
}

/// Every violation in `set`'s files.
pub fn lint(set: &FileDescriptorSet) -> Vec<Violation> {
    let mut linter = Linter::new(set);
    for file in &set.file {
        linter.file(file);
    }
    linter.violations.sort();
    linter.violations
}

struct Linter<'a> {
    /// Every message by full name (`.pkg.Name`), of every file compiled.
    messages: BTreeMap<String, &'a DescriptorProto>,
    /// Short names of the messages that are resources.
    resources: BTreeSet<String>,
    violations: Vec<Violation>,
    /// The file being checked, and protoc's location of each element path in it.
    file: String,
    lines: BTreeMap<Vec<i32>, i32>,
}

impl<'a> Linter<'a> {
    fn new(set: &'a FileDescriptorSet) -> Self {
        let mut messages = BTreeMap::new();
        let mut resources = BTreeSet::new();
        for file in &set.file {
            let package = file.package();
            for message in &file.message_type {
                messages.insert(format!(".{package}.{}", message.name()), message);
                if message.field.iter().any(|f| f.name() == "metadata") {
                    resources.insert(message.name().to_string());
                }
            }
            for method in file.service.iter().flat_map(|s| &s.method) {
                if method.name().starts_with("Get") {
                    resources.insert(short(method.output_type()).to_string());
                }
            }
        }
        Linter {
            messages,
            resources,
            violations: Vec::new(),
            file: String::new(),
            lines: BTreeMap::new(),
        }
    }

    fn report(&mut self, path: &[i32], element: String, section: &'static str, message: String) {
        let line = self.lines.get(path).copied().unwrap_or(0);
        self.violations.push(Violation {
            file: self.file.clone(),
            line,
            element,
            section,
            message,
        });
    }

    fn file(&mut self, file: &FileDescriptorProto) {
        self.file = file.name().to_string();
        self.lines = file
            .source_code_info
            .iter()
            .flat_map(|info| &info.location)
            .filter_map(|l| Some((l.path.clone(), l.span.first()? + 1)))
            .collect();
        // Field numbers of FileDescriptorProto, DescriptorProto and ServiceDescriptorProto,
        // for the locations protoc keeps.
        for (i, message) in file.message_type.iter().enumerate() {
            self.message(message, &[4, index(i)]);
        }
        for (i, enumeration) in file.enum_type.iter().enumerate() {
            self.enumeration(enumeration, &[5, index(i)], true);
        }
        for (s, service) in file.service.iter().enumerate() {
            for (m, method) in service.method.iter().enumerate() {
                self.method(method, &[6, index(s), 2, index(m)]);
            }
        }
    }

    fn message(&mut self, message: &DescriptorProto, path: &[i32]) {
        let name = message.name().to_string();
        if !is_pascal(&name) {
            let text = format!("message {name} must be PascalCase");
            self.report(path, name.clone(), FIELDS, text);
        }
        for (i, field) in message.field.iter().enumerate() {
            let at = [path, &[2, index(i)]].concat();
            self.field(&name, field, &at);
        }
        for (i, oneof) in message.oneof_decl.iter().enumerate() {
            let synthetic = message
                .field
                .iter()
                .any(|f| f.oneof_index == Some(index(i)) && f.proto3_optional());
            if !synthetic {
                let at = [path, &[8, index(i)]].concat();
                let text = "unions are sibling fields tagged +k8s:unionMember, never oneof".into();
                self.report(&at, format!("{name}.{}", oneof.name()), UNIONS, text);
            }
        }
        for (i, nested) in message.enum_type.iter().enumerate() {
            self.enumeration(nested, &[path, &[4, index(i)]].concat(), false);
        }
        for (i, nested) in message.nested_type.iter().enumerate() {
            if !nested.options.as_ref().is_some_and(|o| o.map_entry()) {
                self.message(nested, &[path, &[3, index(i)]].concat());
            }
        }
        if self.resources.contains(&name) {
            self.resource(message, path);
        }
        match name.as_str() {
            "ResourceMetadata" => self.shape(
                message,
                path,
                STANDARD_FIELDS,
                &[
                    ("atespace", 1, Type::String, ""),
                    ("name", 2, Type::String, ""),
                    ("uid", 3, Type::String, ""),
                    ("version", 4, Type::Int64, ""),
                    (
                        "create_time",
                        5,
                        Type::Message,
                        ".google.protobuf.Timestamp",
                    ),
                    (
                        "update_time",
                        6,
                        Type::Message,
                        ".google.protobuf.Timestamp",
                    ),
                ],
            ),
            "ObjectRef" => self.shape(
                message,
                path,
                OBJECT_REF,
                &[
                    ("atespace", 1, Type::String, ""),
                    ("name", 2, Type::String, ""),
                ],
            ),
            "DeleteOptions" => self.shape(
                message,
                path,
                DELETE,
                &[
                    ("version", 1, Type::Int64, ""),
                    ("uid", 2, Type::String, ""),
                ],
            ),
            _ => {}
        }
    }

    /// `message` must have these fields with these numbers and types.
    fn shape(
        &mut self,
        message: &DescriptorProto,
        path: &[i32],
        section: &'static str,
        fields: &[(&str, i32, Type, &str)],
    ) {
        for (name, number, kind, type_name) in fields {
            let found = message.field.iter().find(|f| f.name() == *name);
            let right = found.is_some_and(|f| {
                f.number() == *number
                    && f.r#type() == *kind
                    && (type_name.is_empty() || f.type_name() == *type_name)
            });
            if !right {
                let text = format!("must have field `{name} = {number}` of the guide's type");
                self.report(path, message.name().to_string(), section, text);
            }
        }
    }

    fn resource(&mut self, message: &DescriptorProto, path: &[i32]) {
        let name = message.name().to_string();
        let metadata_first = message.field.iter().any(|f| {
            f.name() == "metadata"
                && f.number() == 1
                && short(f.type_name()) == "ResourceMetadata"
                && f.label() != Label::Repeated
        });
        if !metadata_first {
            let text = "a resource must have `ResourceMetadata metadata = 1`".into();
            self.report(path, name.clone(), RESOURCES, text);
        }
        for (i, field) in message.field.iter().enumerate() {
            let is_status_type = short(field.type_name()).ends_with("Status");
            let at = [path, &[2, index(i)]].concat();
            if field.name() == "status" && short(field.type_name()) != format!("{name}Status") {
                let text = format!("the output-only fields go in `{name}Status status`");
                self.report(&at, format!("{name}.status"), STATUS, text);
            } else if is_status_type && field.name() != "status" {
                let text = "a resource's status message is the field named `status`".into();
                self.report(&at, format!("{name}.{}", field.name()), STATUS, text);
            }
        }
    }

    fn field(&mut self, owner: &str, field: &FieldDescriptorProto, path: &[i32]) {
        let name = field.name();
        let element = format!("{owner}.{name}");
        if !is_lower_snake(name) {
            self.report(
                path,
                element.clone(),
                FIELDS,
                "field names are lower_snake_case".into(),
            );
        }
        if let Some(bare) = name.strip_prefix("is_") {
            if !RESERVED_WORDS.contains(&bare) {
                let text = format!("booleans omit the is_ prefix: `{bare}`");
                self.report(path, element.clone(), FIELDS, text);
            }
        }
        let map = self
            .messages
            .get(field.type_name())
            .is_some_and(|m| m.options.as_ref().is_some_and(|o| o.map_entry()));
        let last_word = name.rsplit('_').next().unwrap_or(name);
        if field.label() == Label::Repeated && !map && !last_word.ends_with('s') {
            let text = "repeated fields use the plural form".into();
            self.report(path, element.clone(), FIELDS, text);
        }
        let plural_of_resource = self.resources.iter().any(|r| plural(&snake(r)) == name);
        if field.label() != Label::Repeated && plural_of_resource {
            let text = "non-repeated fields use the singular form".into();
            self.report(path, element, FIELDS, text);
        }
    }

    fn enumeration(&mut self, enumeration: &EnumDescriptorProto, path: &[i32], top_level: bool) {
        let name = enumeration.name();
        if !is_pascal(name) {
            let text = "enum type names are PascalCase".into();
            self.report(path, name.to_string(), ENUMS, text);
        }
        let prefix = format!("{}_", upper_snake(name));
        for (i, value) in enumeration.value.iter().enumerate() {
            let at = [path, &[2, index(i)]].concat();
            let element = format!("{name}.{}", value.name());
            if !is_upper_snake(value.name()) {
                let text = "enum values are UPPER_SNAKE_CASE".into();
                self.report(&at, element.clone(), ENUMS, text);
            }
            if top_level && !value.name().starts_with(&prefix) {
                let text = format!("package-level enum values start with `{prefix}`");
                self.report(&at, element.clone(), ENUMS, text);
            }
            if !top_level && value.name().starts_with(&prefix) {
                let text = format!("values of a nested enum are not prefixed with `{prefix}`");
                self.report(&at, element.clone(), ENUMS, text);
            }
            let zero = if top_level {
                format!("{prefix}UNSPECIFIED")
            } else {
                "UNSPECIFIED".to_string()
            };
            if value.number() == 0 && value.name() != zero {
                let text = format!("the zero value is `{zero}`");
                self.report(&at, element, ENUMS, text);
            }
        }
        if !enumeration.value.iter().any(|v| v.number() == 0) {
            let text = "the zero value is {ENUM_NAME}_UNSPECIFIED".into();
            self.report(path, name.to_string(), ENUMS, text);
        }
    }

    fn method(&mut self, method: &MethodDescriptorProto, path: &[i32]) {
        let rpc = method.name().to_string();
        let input = short(method.input_type()).to_string();
        let output = short(method.output_type()).to_string();
        let request = self.messages.get(method.input_type()).copied();
        let standard = ["Get", "List", "Create", "Update", "Delete"]
            .into_iter()
            .find_map(|verb| Some((verb, rpc.strip_prefix(verb)?.to_string())));
        let (section, resource) = match &standard {
            Some(("List", plural_name)) => (LIST, singular(plural_name)),
            Some((verb, resource)) => (verb_section(verb), resource.clone()),
            None => (
                CUSTOM,
                self.resources
                    .iter()
                    .filter(|r| rpc.len() > r.len() && rpc.ends_with(r.as_str()))
                    .max_by_key(|r| r.len())
                    .cloned()
                    .unwrap_or_default(),
            ),
        };
        if !self.resources.contains(&resource) {
            let text = match section {
                CUSTOM => "custom methods are {Verb}{Resource}, of a resource of this API",
                _ => "a standard method is named after a resource of this API",
            };
            self.report(path, rpc, section, text.into());
            return;
        }
        if input != format!("{rpc}Request") {
            let text = format!("the request message is `{rpc}Request`");
            self.report(path, rpc.clone(), section, text);
        }
        let resource_field = snake(&resource);
        let has = |name: &str, type_name: &str, repeated: bool| {
            request.is_some_and(|r| {
                r.field.iter().any(|f| {
                    f.name() == name
                        && short(f.type_name()) == type_name
                        && (f.label() == Label::Repeated) == repeated
                })
            })
        };
        match section {
            LIST => {
                if output != format!("{rpc}Response") {
                    let text = format!("the response message is `{rpc}Response`");
                    self.report(path, rpc.clone(), section, text);
                }
                let page_size = request.is_some_and(|r| {
                    r.field
                        .iter()
                        .any(|f| f.name() == "page_size" && f.r#type() == Type::Int32)
                });
                let page_token = request.is_some_and(|r| {
                    r.field
                        .iter()
                        .any(|f| f.name() == "page_token" && f.r#type() == Type::String)
                });
                if !page_size || !page_token {
                    let text = "the request has `int32 page_size` and `string page_token`".into();
                    self.report(path, rpc.clone(), section, text);
                }
                let response = self.messages.get(method.output_type()).copied();
                let listed = plural(&resource_field);
                let repeated = response.is_some_and(|r| {
                    r.field.iter().any(|f| {
                        f.name() == listed
                            && short(f.type_name()) == resource
                            && f.label() == Label::Repeated
                    })
                });
                let token = response.is_some_and(|r| {
                    r.field
                        .iter()
                        .any(|f| f.name() == "next_page_token" && f.r#type() == Type::String)
                });
                if !repeated || !token {
                    let text = format!(
                        "the response has `repeated {resource} {listed}` and `string next_page_token`"
                    );
                    self.report(path, rpc, section, text);
                }
            }
            GET | DELETE | CUSTOM => {
                let returns_resource = output == resource;
                if section != CUSTOM && !returns_resource {
                    let text = format!("returns the resource itself, `{resource}`");
                    self.report(path, rpc.clone(), section, text);
                }
                if section == CUSTOM && !returns_resource && output != format!("{rpc}Response") {
                    let text = format!("returns `{resource}` or `{rpc}Response`");
                    self.report(path, rpc.clone(), section, text);
                }
                if !has(&resource_field, "ObjectRef", false) {
                    let text =
                        format!("the request names its target as `ObjectRef {resource_field}`");
                    self.report(path, rpc.clone(), section, text);
                }
                if section == DELETE && !has("options", "DeleteOptions", false) {
                    let text = "the request carries `DeleteOptions options`".into();
                    self.report(path, rpc, section, text);
                }
            }
            _ => {
                if output != resource {
                    let text = format!("returns the resource itself, `{resource}`");
                    self.report(path, rpc.clone(), section, text);
                }
                if !has(&resource_field, &resource, false) {
                    let text = format!("the request embeds `{resource} {resource_field}`");
                    self.report(path, rpc, section, text);
                }
            }
        }
    }
}

fn verb_section(verb: &str) -> &'static str {
    match verb {
        "Get" => GET,
        "Create" => CREATE,
        "Update" => UPDATE,
        _ => DELETE,
    }
}

/// Words for which the guide keeps `is_` (reserved in common languages).
const RESERVED_WORDS: &[&str] = &["new", "default", "delete", "class", "const", "static"];

fn index(i: usize) -> i32 {
    i32::try_from(i).unwrap_or(i32::MAX)
}

fn short(type_name: &str) -> &str {
    type_name.rsplit('.').next().unwrap_or(type_name)
}

fn is_pascal(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric())
}

fn is_lower_snake(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.contains("__")
        && !name.ends_with('_')
}

fn is_upper_snake(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && name
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// `MemberState` → `member_state`.
fn snake(pascal: &str) -> String {
    let mut out = String::new();
    for (i, c) in pascal.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

fn upper_snake(pascal: &str) -> String {
    snake(pascal).to_ascii_uppercase()
}

/// English plurals of the resource names an API has (regular nouns).
fn plural(word: &str) -> String {
    if word.ends_with('s') || word.ends_with('x') || word.ends_with("ch") || word.ends_with("sh") {
        format!("{word}es")
    } else if word.ends_with('y') && !word.ends_with("ey") && !word.ends_with("ay") {
        format!("{}ies", &word[..word.len() - 1])
    } else {
        format!("{word}s")
    }
}

/// The resource a List method's plural names (`Members` → `Member`).
fn singular(plural_name: &str) -> String {
    if let Some(stem) = plural_name.strip_suffix("ies") {
        format!("{stem}y")
    } else if let Some(stem) = plural_name
        .strip_suffix("es")
        .filter(|s| s.ends_with('s') || s.ends_with('x') || s.ends_with("ch") || s.ends_with("sh"))
    {
        stem.to_string()
    } else {
        plural_name
            .strip_suffix('s')
            .unwrap_or(plural_name)
            .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_change_case_and_number() {
        assert_eq!(snake("ActorSnapshot"), "actor_snapshot");
        assert_eq!(upper_snake("MemberState"), "MEMBER_STATE");
        assert_eq!(plural("member"), "members");
        assert_eq!(plural("policy"), "policies");
        assert_eq!(plural("actor_snapshot"), "actor_snapshots");
        assert_eq!(singular("Members"), "Member");
        assert_eq!(singular("Policies"), "Policy");
        assert_eq!(singular("Boxes"), "Box");
    }
}
