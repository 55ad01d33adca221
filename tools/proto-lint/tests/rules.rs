//! Each rule fires on the fixture that breaks it, with the guide's section, and the
//! project's own protos pass.

use std::path::{Path, PathBuf};

fn fixture_violations() -> Vec<String> {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let set = proto_lint::compile(&include, &[PathBuf::from("bad.proto")]).unwrap();
    proto_lint::lint(&set)
        .into_iter()
        .filter(|v| v.file == "bad.proto")
        .map(|v| v.to_string())
        .collect()
}

#[test]
fn every_rule_names_its_section() {
    let found = fixture_violations();
    let expect = [
        "ResourceMetadata: section 6. Standard Fields: must have field `version = 4`",
        "Widget: section 2.1 Identity and scope: a resource must have `ResourceMetadata metadata = 1`",
        "Widget.status: section 8. Resource Status: the output-only fields go in `WidgetStatus status`",
        "Widget.is_ready: section 5. Field Naming: booleans omit the is_ prefix",
        "Widget.tag: section 5. Field Naming: repeated fields use the plural form",
        "Widget.widgets: section 5. Field Naming: non-repeated fields use the singular form",
        "Widget.BadName: section 5. Field Naming: field names are lower_snake_case",
        "Widget.shape: section 9. Union Types",
        "Colour.RED: section 5.1 Enum naming: package-level enum values start with `COLOUR_`",
        "Colour.RED: section 5.1 Enum naming: the zero value is `COLOUR_UNSPECIFIED`",
        "Kind.KIND_UNSPECIFIED: section 5.1 Enum naming: values of a nested enum are not prefixed",
        "GetWidget: section 3.1 Get: the request message is `GetWidgetRequest`",
        "GetWidget: section 3.1 Get: returns the resource itself, `Widget`",
        "GetWidget: section 3.1 Get: the request names its target as `ObjectRef widget`",
        "ListWidgets: section 3.2 List: the request has `int32 page_size` and `string page_token`",
        "ListWidgets: section 3.2 List: the response has `repeated Widget widgets` and `string next_page_token`",
        "DeleteWidget: section 3.5 Delete: the request carries `DeleteOptions options`",
        "Frobnicate: section 4. Custom Methods: custom methods are {Verb}{Resource}",
        "PolishWidget: section 4. Custom Methods: returns `Widget` or `PolishWidgetResponse`",
    ];
    for wanted in expect {
        assert!(
            found.iter().any(|v| v.contains(wanted)),
            "no violation containing {wanted:?} in:\n{}",
            found.join("\n")
        );
    }
    assert!(
        found
            .iter()
            .all(|v| v.starts_with("bad.proto:") && !v.starts_with("bad.proto:0:")),
        "{found:?}"
    );
}

#[test]
fn the_admin_api_follows_the_guide() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto");
    let files: Vec<PathBuf> = [
        "admin.proto",
        "member.proto",
        "resource.proto",
        "snapshot.proto",
    ]
    .iter()
    .map(|f| PathBuf::from("quantykube/admin/v1").join(f))
    .collect();
    let set = proto_lint::compile(&root, &files).unwrap();
    let violations: Vec<String> = proto_lint::lint(&set)
        .into_iter()
        .filter(|v| v.file.starts_with("quantykube/"))
        .map(|v| v.to_string())
        .collect();
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}
