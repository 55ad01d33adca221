//! Request checks of the admin API: every field a request carries is checked before
//! anything is read or proposed, and a failure names the field (the style guide's
//! section 10).

use crate::proto::admin_v1::{ObjectRef, ResourceMetadata};
use crate::store::member_records::is_resource_name;

use super::AdminError;

/// The name an ObjectRef to a global-scoped resource points at.
pub fn object_ref(field: &str, reference: Option<&ObjectRef>) -> Result<String, AdminError> {
    let reference = reference.ok_or_else(|| AdminError::invalid(field, "is required"))?;
    if !reference.atespace.is_empty() {
        return Err(AdminError::invalid(
            format!("{field}.atespace"),
            "must be empty: the resource is global-scoped",
        ));
    }
    resource_name(&format!("{field}.name"), &reference.name)?;
    Ok(reference.name.clone())
}

/// A caller-given resource name (section 2.2).
pub fn resource_name(field: &str, name: &str) -> Result<(), AdminError> {
    if name.is_empty() {
        return Err(AdminError::invalid(field, "is required"));
    }
    if !is_resource_name(name) {
        return Err(AdminError::invalid(
            field,
            "must be a valid resource name: lowercase letters, digits and '-', starting and \
             ending with a letter or digit, at most 63 characters",
        ));
    }
    Ok(())
}

/// The identity a Create or Update request's metadata carries; what it says of
/// server-managed fields is ignored.
pub fn identity(field: &str, metadata: Option<&ResourceMetadata>) -> Result<String, AdminError> {
    let metadata = metadata.ok_or_else(|| AdminError::invalid(field, "is required"))?;
    if !metadata.atespace.is_empty() {
        return Err(AdminError::invalid(
            format!("{field}.atespace"),
            "must be empty: the resource is global-scoped",
        ));
    }
    resource_name(&format!("{field}.name"), &metadata.name)?;
    Ok(metadata.name.clone())
}

/// A uid and version given as guards: a uid, when given, is a UUID; a version is never
/// negative. `field` is where they are (`member.metadata`, `options`).
pub fn guards(field: &str, uid: &str, version: i64) -> Result<(), AdminError> {
    if !uid.is_empty() && uuid::Uuid::parse_str(uid).is_err() {
        return Err(AdminError::invalid(
            format!("{field}.uid"),
            "must be a UUID",
        ));
    }
    if version < 0 {
        return Err(AdminError::invalid(
            format!("{field}.version"),
            "must not be negative",
        ));
    }
    Ok(())
}

/// URLs as etcd takes a member's (`scheme://host:port`, http, https, unix or unixs, no
/// path), sorted; `required` refuses an empty list.
pub fn member_urls(
    field: &str,
    urls: &[String],
    required: bool,
) -> Result<Vec<String>, AdminError> {
    if urls.is_empty() {
        return match required {
            true => Err(AdminError::invalid(field, "is required")),
            false => Ok(Vec::new()),
        };
    }
    crate::api::cluster::peer_urls(urls).map_err(|_| {
        AdminError::invalid(
            field,
            "each URL must be scheme://host:port with scheme http, https, unix or unixs and no \
             path",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_refs_need_a_valid_name_and_no_atespace() {
        let named = |atespace: &str, name: &str| ObjectRef {
            atespace: atespace.into(),
            name: name.into(),
        };
        assert_eq!(
            object_ref("member", Some(&named("", "etcd-0"))).unwrap(),
            "etcd-0"
        );
        let message = |r: Option<&ObjectRef>| object_ref("member", r).unwrap_err().to_string();
        assert_eq!(message(None), "member: is required");
        assert!(message(Some(&named("ns", "a"))).starts_with("member.atespace: "));
        assert!(message(Some(&named("", ""))).starts_with("member.name: is required"));
        assert!(message(Some(&named("", "Etcd"))).starts_with("member.name: must be"));
    }

    #[test]
    fn guards_are_a_uuid_and_a_version() {
        assert!(guards("options", "", 0).is_ok());
        assert!(guards("options", "0f0e6ad2-3c57-4c2c-9e4d-3f5f0b1a2c3d", 7).is_ok());
        let message = |uid, version| guards("options", uid, version).unwrap_err().to_string();
        assert_eq!(message("x", 1), "options.uid: must be a UUID");
        assert_eq!(message("", -1), "options.version: must not be negative");
    }

    #[test]
    fn member_urls_are_etcds() {
        let urls = |list: &[&str]| list.iter().map(|u| u.to_string()).collect::<Vec<_>>();
        assert_eq!(
            member_urls(
                "peer_urls",
                &urls(&["http://b:2380", "http://a:2380"]),
                true
            )
            .unwrap(),
            urls(&["http://a:2380", "http://b:2380"])
        );
        assert!(member_urls("peer_urls", &[], true).is_err());
        assert!(member_urls("client_urls", &[], false).unwrap().is_empty());
        assert!(member_urls("peer_urls", &urls(&["http://a"]), true).is_err());
    }
}
