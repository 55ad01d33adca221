//! The auth store's semantics, change by change, against etcd's `authStore`.

use super::*;
use crate::proto::command::Authenticate;
use crate::proto::etcdserverpb::{
    AuthDisableRequest, AuthEnableRequest, AuthRoleAddRequest, AuthRoleDeleteRequest,
    AuthRoleGrantPermissionRequest, AuthRoleRevokePermissionRequest, AuthUserAddRequest,
    AuthUserDeleteRequest, AuthUserGrantRoleRequest, AuthUserRevokeRoleRequest,
};

/// Applies `request` and folds its changes into a new state, as the store does.
fn step(state: &AuthState, request: AuthRequest) -> Result<AuthState, AuthError> {
    let applied = state.apply(&request, 7)?;
    let mut enabled = state.enabled;
    let mut revision = state.revision;
    let mut users = state.users.clone();
    let mut roles = state.roles.clone();
    for change in applied.changes {
        match change {
            Change::Enabled(on) => enabled = on,
            Change::Revision(r) => revision = r,
            Change::PutUser(u) => {
                users.insert(name_of(&u.name), u);
            }
            Change::DeleteUser(n) => {
                users.remove(&n);
            }
            Change::PutRole(r) => {
                roles.insert(name_of(&r.name), r);
            }
            Change::DeleteRole(n) => {
                roles.remove(&n);
            }
        }
    }
    Ok(AuthState::from_records(
        enabled,
        revision,
        users.into_values().collect(),
        roles.into_values().collect(),
    ))
}

fn user_add(name: &str) -> AuthRequest {
    AuthRequest::UserAdd(AuthUserAddRequest {
        name: name.into(),
        hashed_password: base64::engine::general_purpose::STANDARD.encode("$2b$04$hash"),
        ..Default::default()
    })
}

fn grant_role(user: &str, role: &str) -> AuthRequest {
    AuthRequest::UserGrantRole(AuthUserGrantRoleRequest {
        user: user.into(),
        role: role.into(),
    })
}

fn grant(role: &str, kind: PermissionType, key: &str, end: &str) -> AuthRequest {
    AuthRequest::RoleGrantPermission(AuthRoleGrantPermissionRequest {
        name: role.into(),
        perm: Some(Permission {
            perm_type: kind as i32,
            key: key.as_bytes().to_vec().into(),
            range_end: end.as_bytes().to_vec().into(),
        }),
    })
}

fn with_root_enabled() -> AuthState {
    let mut s = AuthState::from_records(false, 1, vec![], vec![]);
    s = step(&s, user_add("root")).unwrap();
    s = step(&s, grant_role("root", "root")).unwrap();
    step(&s, AuthRequest::Enable(AuthEnableRequest {})).unwrap()
}

#[test]
fn enable_needs_a_root_user_holding_the_root_role() {
    let s = AuthState::from_records(false, 0, vec![], vec![]);
    assert_eq!(s.revision(), 1, "a new store starts at revision 1");
    let enable = || AuthRequest::Enable(AuthEnableRequest {});
    assert_eq!(step(&s, enable()).unwrap_err(), AuthError::RootUserNotExist);
    let s = step(&s, user_add("root")).unwrap();
    assert_eq!(step(&s, enable()).unwrap_err(), AuthError::RootRoleNotExist);
    let s = step(&s, grant_role("root", "root")).unwrap();
    let on = step(&s, enable()).unwrap();
    assert!(on.enabled());
    assert_eq!(
        on.revision(),
        s.revision(),
        "etcd keeps the revision on enable"
    );
    // Enabling twice changes nothing.
    assert_eq!(step(&on, enable()).unwrap().revision(), on.revision());
    let off = step(&on, AuthRequest::Disable(AuthDisableRequest {})).unwrap();
    assert!(!off.enabled());
    assert_eq!(off.revision(), on.revision() + 1);
}

#[test]
fn root_cannot_be_taken_apart_while_enabled() {
    let s = with_root_enabled();
    let delete_root = AuthRequest::UserDelete(AuthUserDeleteRequest {
        name: "root".into(),
    });
    assert_eq!(
        step(&s, delete_root.clone()).unwrap_err(),
        AuthError::InvalidAuthMgmt
    );
    let revoke = AuthRequest::UserRevokeRole(AuthUserRevokeRoleRequest {
        name: "root".into(),
        role: "root".into(),
    });
    assert_eq!(step(&s, revoke).unwrap_err(), AuthError::InvalidAuthMgmt);
    let s = step(
        &s,
        AuthRequest::RoleAdd(AuthRoleAddRequest {
            name: "root".into(),
        }),
    )
    .unwrap();
    let delete_role = AuthRequest::RoleDelete(AuthRoleDeleteRequest {
        role: "root".into(),
    });
    assert_eq!(
        step(&s, delete_role).unwrap_err(),
        AuthError::InvalidAuthMgmt
    );
    let off = step(&s, AuthRequest::Disable(AuthDisableRequest {})).unwrap();
    assert!(step(&off, delete_root).is_ok(), "allowed once disabled");
}

#[test]
fn users_and_roles_refuse_duplicates_blanks_and_strangers() {
    let s = AuthState::from_records(false, 1, vec![], vec![]);
    assert_eq!(step(&s, user_add("")).unwrap_err(), AuthError::UserEmpty);
    let s = step(&s, user_add("alice")).unwrap();
    assert_eq!(
        step(&s, user_add("alice")).unwrap_err(),
        AuthError::UserAlreadyExist
    );
    let role_add = |n: &str| AuthRequest::RoleAdd(AuthRoleAddRequest { name: n.into() });
    assert_eq!(step(&s, role_add("")).unwrap_err(), AuthError::RoleEmpty);
    assert_eq!(
        step(&s, grant_role("bob", "r")).unwrap_err(),
        AuthError::UserNotFound
    );
    assert_eq!(
        step(&s, grant_role("alice", "r")).unwrap_err(),
        AuthError::RoleNotFound
    );
    let s = step(&s, role_add("r")).unwrap();
    assert_eq!(
        step(&s, role_add("r")).unwrap_err(),
        AuthError::RoleAlreadyExist
    );
    let granted = step(&s, grant_role("alice", "r")).unwrap();
    // Granting again is accepted and changes nothing, not even the revision.
    assert_eq!(
        step(&granted, grant_role("alice", "r")).unwrap().revision(),
        granted.revision()
    );
    let revoke = |role: &str| {
        AuthRequest::UserRevokeRole(AuthUserRevokeRoleRequest {
            name: "alice".into(),
            role: role.into(),
        })
    };
    assert_eq!(
        step(&granted, revoke("other")).unwrap_err(),
        AuthError::RoleNotGranted
    );
    assert!(step(&granted, revoke("r")).is_ok());
    assert_eq!(
        step(
            &s,
            AuthRequest::RoleGrantPermission(AuthRoleGrantPermissionRequest {
                name: "r".into(),
                perm: None
            })
        )
        .unwrap_err(),
        AuthError::PermissionNotGiven
    );
}

#[test]
fn permissions_follow_grants_revocations_and_role_deletion() {
    let mut s = AuthState::from_records(false, 1, vec![], vec![]);
    s = step(&s, user_add("alice")).unwrap();
    s = step(
        &s,
        AuthRequest::RoleAdd(AuthRoleAddRequest { name: "app".into() }),
    )
    .unwrap();
    s = step(&s, grant_role("alice", "app")).unwrap();
    assert!(!s.permits("alice", Need::Read, b"app/x", b""));
    s = step(&s, grant("app", PermissionType::Read, "app/", "app0")).unwrap();
    assert!(s.permits("alice", Need::Read, b"app/x", b""));
    assert!(!s.permits("alice", Need::Write, b"app/x", b""));
    // The same keys again update the type in place.
    s = step(&s, grant("app", PermissionType::Readwrite, "app/", "app0")).unwrap();
    assert!(s.permits("alice", Need::Write, b"app/x", b""));
    assert_eq!(s.role("app").unwrap().key_permission.len(), 1);
    let revoke = |end: &str| {
        AuthRequest::RoleRevokePermission(AuthRoleRevokePermissionRequest {
            role: "app".into(),
            key: b"app/".to_vec().into(),
            range_end: end.as_bytes().to_vec().into(),
        })
    };
    assert_eq!(
        step(&s, revoke("other")).unwrap_err(),
        AuthError::PermissionNotGranted
    );
    let revoked = step(&s, revoke("app0")).unwrap();
    assert!(!revoked.permits("alice", Need::Read, b"app/x", b""));
    let deleted = step(
        &s,
        AuthRequest::RoleDelete(AuthRoleDeleteRequest { role: "app".into() }),
    )
    .unwrap();
    assert!(deleted.user("alice").unwrap().roles.is_empty());
    assert!(!deleted.permits("alice", Need::Read, b"app/x", b""));
}

#[test]
fn authentication_is_for_enabled_stores_and_users_with_passwords() {
    let s = with_root_enabled();
    let auth = |name: &str, prefix: &str| {
        AuthRequest::Authenticate(Authenticate {
            name: name.into(),
            simple_token_prefix: prefix.into(),
        })
    };
    let applied = s.apply(&auth("root", "abcdefghijklmnop"), 42).unwrap();
    assert_eq!(applied.simple_token.as_deref(), Some("abcdefghijklmnop.42"));
    assert!(applied.changes.is_empty(), "authenticating changes nothing");
    assert!(s
        .apply(&auth("root", ""), 42)
        .unwrap()
        .simple_token
        .is_none());
    assert_eq!(
        s.apply(&auth("nobody", "p"), 1).unwrap_err(),
        AuthError::AuthFailed
    );
    let certificate_only = step(
        &s,
        AuthRequest::UserAdd(AuthUserAddRequest {
            name: "cn".into(),
            options: Some(UserAddOptions { no_password: true }),
            ..Default::default()
        }),
    )
    .unwrap();
    assert_eq!(
        certificate_only.apply(&auth("cn", "p"), 1).unwrap_err(),
        AuthError::AuthFailed
    );
    let off = step(&s, AuthRequest::Disable(AuthDisableRequest {})).unwrap();
    assert_eq!(
        off.apply(&auth("root", "p"), 1).unwrap_err(),
        AuthError::AuthNotEnabled
    );
}

#[test]
fn the_root_role_shows_every_key() {
    let s = AuthState::from_records(
        false,
        1,
        vec![],
        vec![Role {
            name: b"root".to_vec().into(),
            key_permission: vec![],
        }],
    );
    let shown = s.role_permissions(s.role("root").unwrap());
    assert_eq!(shown.len(), 1);
    assert_eq!(shown[0].key.as_ref(), b"");
    assert_eq!(shown[0].range_end.as_ref(), b"\0");
}
