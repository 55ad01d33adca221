//! The apply-time auth guard: a command authorised at an auth revision older than the
//! applied one, or authorised while auth was off once it is on, changes nothing and
//! answers AUTH_OLD_REVISION on every member alike; and the auth records survive a
//! reopen of the store.

use super::tests::{b, Harness};
use crate::proto::command::auth_command::Request as A;
use crate::proto::command::command::Request as C;
use crate::proto::command::command_error::Kind;
use crate::proto::command::command_result::Result as R;
use crate::proto::command::{AuthCommand, Command};
use crate::proto::etcdserverpb::*;

fn auth(request: A) -> C {
    C::Auth(AuthCommand {
        request: Some(request),
    })
}

fn put(key: &str) -> C {
    C::Put(PutRequest {
        key: b(key),
        value: b("v"),
        ..Default::default()
    })
}

/// Applies `request` stamped as a client's: authorised at `revision`, with auth on or
/// off.
fn apply_as(h: &mut Harness, request: C, revision: u64, checked: bool) -> R {
    h.apply_command(Command {
        auth_revision: revision,
        auth_checked: checked,
        request: Some(request),
    })
}

fn refused_as_old(result: &R) -> bool {
    matches!(result, R::Error(e) if e.kind() == Kind::AuthOldRevision)
}

#[test]
fn a_command_authorised_before_an_auth_change_is_refused_and_changes_nothing() {
    let mut h = Harness::new();
    let start = h.store.auth().revision();
    assert_eq!(start, 1, "a new store is at etcd's first auth revision");
    // Authorised at the current revision: applied.
    assert!(matches!(
        apply_as(&mut h, put("a"), start, false),
        R::Put(_)
    ));
    let role = auth(A::RoleAdd(AuthRoleAddRequest { name: "r".into() }));
    assert!(matches!(h.apply(role), R::Auth(a) if a.revision == start + 1));
    // Authorised before the change: refused, and nothing written.
    let before = h.store.current_revision().unwrap();
    assert!(refused_as_old(&apply_as(&mut h, put("b"), start, false)));
    assert_eq!(h.store.current_revision().unwrap(), before);
    // Authorised again at the new revision: applied.
    assert!(matches!(
        apply_as(&mut h, put("b"), start + 1, false),
        R::Put(_)
    ));
    // The cluster's own commands (revision 0) are never checked.
    assert!(matches!(h.apply(put("c")), R::Put(_)));
}

#[test]
fn a_command_authorised_while_auth_was_off_is_refused_once_it_is_on() {
    let mut h = Harness::new();
    let add = auth(A::UserAdd(AuthUserAddRequest {
        name: "root".into(),
        options: Some(crate::proto::authpb::UserAddOptions { no_password: true }),
        ..Default::default()
    }));
    assert!(matches!(h.apply(add), R::Auth(_)));
    let grant = auth(A::UserGrantRole(AuthUserGrantRoleRequest {
        user: "root".into(),
        role: "root".into(),
    }));
    assert!(matches!(h.apply(grant), R::Auth(_)));
    let revision = h.store.auth().revision();
    assert!(matches!(
        h.apply(auth(A::Enable(AuthEnableRequest {}))),
        R::Auth(_)
    ));
    assert!(h.store.auth().enabled());
    // AuthEnable keeps the revision, as etcd's: the flag tells the two apart.
    assert_eq!(h.store.auth().revision(), revision);
    assert!(refused_as_old(&apply_as(&mut h, put("k"), revision, false)));
    assert!(matches!(
        apply_as(&mut h, put("k"), revision, true),
        R::Put(_)
    ));
}

#[test]
fn auth_records_survive_a_reopen_and_refusals_are_deterministic() {
    let mut h = Harness::new();
    let add = || auth(A::RoleAdd(AuthRoleAddRequest { name: "r".into() }));
    assert!(matches!(h.apply(add()), R::Auth(_)));
    assert!(matches!(h.apply(add()), R::Error(e) if e.kind() == Kind::RoleAlreadyExist));
    let records = h.store.read_auth_records(None).unwrap();
    let reopened = h.reopen();
    assert_eq!(reopened.store.read_auth_records(None).unwrap(), records);
    assert!(reopened.store.auth().role("r").is_some());
}
