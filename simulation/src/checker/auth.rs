//! The auth checker: no user request succeeded with a permission taken away before it
//! was sent, and no linearizable read was refused a permission that surely held.
//!
//! It judges an [`AuthLog`]: the administrator's changes (each with the facts it makes
//! true or false: a user exists, a user holds a role, a role grants readwrite on a
//! prefix) and the users' requests. A request needs three facts: its user exists, the
//! user holds its role, the role grants the prefix the key is under (the workload gives
//! each user one role, and no two of its prefixes overlap).
//!
//! Auth changes go through the log, so they take effect in one order, each at an
//! instant between its invocation and its answer (a change without an answer at any
//! instant after its invocation). A request that succeeded was authorised at an
//! instant within its own interval. So it violates `auth-revoked-used` if a change
//! that removed a fact it needs was answered before it was invoked, and no change that
//! gives the fact back can have taken effect between that removal and the request's
//! end: every grant-back was invoked after the request returned, or answered before
//! the removal was invoked.
//!
//! The converse (`auth-spurious-denial`) is checked only for linearizable reads: a
//! member serves one only once it has applied everything committed before the read
//! began, and authorises it then, so a permission granted (and answered) before the
//! read, with no removal sent before the read returned, must let it through. Writes
//! are left out on purpose: a member authorises a write against the auth state it has
//! applied when the write arrives, which may lag behind a grant the leader already
//! answered (the apply-time check only guards the other way, against revoked
//! permissions), so a refused write is no evidence of a bug.
//!
//! It must never talk to the cluster, and never excuse what it cannot decide in the
//! request's favour: only facts the changes' times prove are reported.

use std::time::Duration;

use super::Violation;
use crate::history::{
    AdminEntry, AuthChangeOutcome as ChangeOutcome, AuthLog, Fact, UserEntry, UserOutcome,
};

/// Violations beyond this many per property are counted, not listed.
const LISTED: usize = 5;

/// Checks `log` (see the module docs); every violation found.
pub fn check_auth(log: &AuthLog) -> Vec<Violation> {
    let admin = log.admin();
    let users = log.users();
    check_entries(&admin, &users, &|user| log.roles_of(user))
}

/// [`check_auth`] on the entries themselves; `roles_of` names the roles the workload
/// gives a user (the first is the one its requests use).
pub fn check_entries(
    admin: &[AdminEntry],
    users: &[UserEntry],
    roles_of: &dyn Fn(&str) -> Vec<String>,
) -> Vec<Violation> {
    let mut revoked_used = Vec::new();
    let mut denied = Vec::new();
    for op in users {
        let Some(needs) = needs(admin, op, roles_of) else {
            continue;
        };
        match op.outcome {
            UserOutcome::Done => {
                if let Some(finding) = needs
                    .iter()
                    .find_map(|fact| used_after_removal(admin, op, fact, roles_of))
                {
                    revoked_used.push(finding);
                }
            }
            UserOutcome::PermissionDenied
                if op.linearizable
                    && needs
                        .iter()
                        .all(|fact| surely_held(admin, op, fact, roles_of)) =>
            {
                denied.push(format!(
                    "{op} was refused, but every fact it needs ({}) was granted and answered \
                     before it and nothing took one away before it returned",
                    needs
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            _ => {}
        }
    }
    let mut violations = Vec::new();
    for (property, findings) in [
        ("auth-revoked-used", revoked_used),
        ("auth-spurious-denial", denied),
    ] {
        if findings.is_empty() {
            continue;
        }
        let more = findings.len().saturating_sub(LISTED);
        let mut detail = findings
            .into_iter()
            .take(LISTED)
            .collect::<Vec<_>>()
            .join("; ");
        if more > 0 {
            detail.push_str(&format!("; and {more} more"));
        }
        violations.push(Violation::new(property, detail));
    }
    violations
}

/// The facts `op` needs: its user, the user's role, and the role's permission on the
/// prefix its key is under (the longest prefix any change ever granted that role).
/// `None` if the workload never gave the user a role or the key a prefix.
fn needs(
    admin: &[AdminEntry],
    op: &UserEntry,
    roles_of: &dyn Fn(&str) -> Vec<String>,
) -> Option<Vec<Fact>> {
    let role = roles_of(&op.user).into_iter().next()?;
    let prefix = admin
        .iter()
        .flat_map(|entry| entry.change.grants())
        .filter_map(|fact| match fact {
            Fact::Permission { role: r, prefix } if r == role && op.key.starts_with(&prefix) => {
                Some(prefix)
            }
            _ => None,
        })
        .max_by_key(String::len)?;
    Some(vec![
        Fact::User(op.user.clone()),
        Fact::Role {
            user: op.user.clone(),
            role: role.clone(),
        },
        Fact::Permission { role, prefix },
    ])
}

/// A removal of `fact` answered before `op` (which succeeded) was invoked, with no
/// grant-back that can have taken effect after it and before `op` returned.
fn used_after_removal(
    admin: &[AdminEntry],
    op: &UserEntry,
    fact: &Fact,
    roles_of: &dyn Fn(&str) -> Vec<String>,
) -> Option<String> {
    // Times are tick-granular: only a removal answered strictly before counts.
    let removal = admin.iter().find(|removal| {
        removal.outcome == ChangeOutcome::Done
            && removal.completed < op.invoked
            && removal.change.removes(roles_of).contains(fact)
            && !admin.iter().any(|grant| {
                grant.change.grants().contains(fact)
                    && grant.invoked < op.completed
                    && may_take_effect_after(grant, removal.invoked)
            })
    })?;
    Some(format!(
        "{op} succeeded, but {removal} took away {fact} before it was invoked, and nothing \
         gave it back in time"
    ))
}

/// True if `change` may take effect after `instant`: it was not answered before it (a
/// change without an answer may take effect at any time).
fn may_take_effect_after(change: &AdminEntry, instant: Duration) -> bool {
    match change.outcome {
        ChangeOutcome::Done => change.completed >= instant,
        ChangeOutcome::Unknown(_) => true,
    }
}

/// True if `fact` held throughout `op`: a grant of it was answered before `op` was
/// invoked, and every removal of it was either answered before that grant was sent or
/// sent after `op` returned.
fn surely_held(
    admin: &[AdminEntry],
    op: &UserEntry,
    fact: &Fact,
    roles_of: &dyn Fn(&str) -> Vec<String>,
) -> bool {
    admin.iter().any(|grant| {
        grant.outcome == ChangeOutcome::Done
            && grant.completed < op.invoked
            && grant.change.grants().contains(fact)
            && admin
                .iter()
                .filter(|removal| removal.change.removes(roles_of).contains(fact))
                .all(|removal| {
                    let before_grant =
                        removal.outcome == ChangeOutcome::Done && removal.completed < grant.invoked;
                    before_grant || removal.invoked > op.completed
                })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Access, AuthChange};

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn change(change: AuthChange, t: (u64, u64), done: bool) -> AdminEntry {
        AdminEntry {
            change,
            invoked: at(t.0),
            completed: at(t.1),
            outcome: if done {
                ChangeOutcome::Done
            } else {
                ChangeOutcome::Unknown("deadline".into())
            },
        }
    }

    fn grant_perm(t: (u64, u64)) -> AdminEntry {
        change(
            AuthChange::GrantPermission {
                role: "r-u1".into(),
                prefix: "auth/u1/".into(),
            },
            t,
            true,
        )
    }

    fn revoke_perm(t: (u64, u64)) -> AdminEntry {
        change(
            AuthChange::RevokePermission {
                role: "r-u1".into(),
                prefix: "auth/u1/".into(),
            },
            t,
            true,
        )
    }

    /// The setup: user u1 with role r-u1 granting `auth/u1/`, all answered by 10 ms.
    fn setup() -> Vec<AdminEntry> {
        vec![
            grant_perm((0, 2)),
            change(AuthChange::AddUser { user: "u1".into() }, (3, 5), true),
            change(
                AuthChange::GrantRole {
                    user: "u1".into(),
                    role: "r-u1".into(),
                },
                (6, 10),
                true,
            ),
        ]
    }

    fn op(t: (u64, u64), access: Access, outcome: UserOutcome) -> UserEntry {
        UserEntry {
            user: "u1".into(),
            key: "auth/u1/k0".into(),
            access,
            linearizable: access == Access::Read,
            invoked: at(t.0),
            completed: at(t.1),
            outcome,
        }
    }

    fn roles(user: &str) -> Vec<String> {
        vec![format!("r-{user}")]
    }

    fn properties(admin: &[AdminEntry], users: &[UserEntry]) -> Vec<&'static str> {
        check_entries(admin, users, &roles)
            .into_iter()
            .map(|v| v.property)
            .collect()
    }

    #[test]
    fn permitted_requests_pass() {
        let users = vec![
            op((20, 30), Access::Write, UserOutcome::Done),
            op((31, 40), Access::Read, UserOutcome::Done),
        ];
        assert!(properties(&setup(), &users).is_empty());
    }

    #[test]
    fn a_write_after_an_answered_revoke_is_caught() {
        let mut admin = setup();
        admin.push(revoke_perm((50, 60)));
        // Re-granted only after the write returned.
        admin.push(grant_perm((90, 95)));
        let users = vec![op((61, 70), Access::Write, UserOutcome::Done)];
        let violations = check_entries(&admin, &users, &roles);
        assert_eq!(violations.len(), 1);
        assert_eq!(violations[0].property, "auth-revoked-used");
        assert!(violations[0].detail.contains("revoke r-u1"));
        assert!(violations[0].detail.contains("auth/u1/k0"));
    }

    #[test]
    fn a_request_concurrent_with_the_revoke_may_succeed() {
        let mut admin = setup();
        admin.push(revoke_perm((50, 60)));
        // Invoked before the revoke was answered: may be ordered before it.
        let users = vec![op((55, 70), Access::Write, UserOutcome::Done)];
        assert!(properties(&admin, &users).is_empty());
    }

    #[test]
    fn a_regrant_invoked_before_the_request_returned_excuses_it() {
        let mut admin = setup();
        admin.push(revoke_perm((50, 60)));
        // The grant-back was sent while the write ran: it may have come first.
        admin.push(grant_perm((65, 90)));
        let users = vec![op((61, 70), Access::Write, UserOutcome::Done)];
        assert!(properties(&admin, &users).is_empty());
        // A grant-back answered before the revoke was sent does not.
        let mut admin = setup();
        admin.push(grant_perm((40, 45)));
        admin.push(revoke_perm((50, 60)));
        assert_eq!(properties(&admin, &users), ["auth-revoked-used"]);
        // One with no answer may have taken effect late: it does.
        let mut admin = setup();
        admin.push(change(
            AuthChange::GrantPermission {
                role: "r-u1".into(),
                prefix: "auth/u1/".into(),
            },
            (40, 45),
            false,
        ));
        admin.push(revoke_perm((50, 60)));
        assert!(properties(&admin, &users).is_empty());
    }

    #[test]
    fn a_deleted_user_loses_its_roles() {
        let mut admin = setup();
        admin.push(change(
            AuthChange::DeleteUser { user: "u1".into() },
            (50, 60),
            true,
        ));
        admin.push(change(
            AuthChange::AddUser { user: "u1".into() },
            (61, 62),
            true,
        ));
        // Added again, but the role is given back only after the read.
        admin.push(change(
            AuthChange::GrantRole {
                user: "u1".into(),
                role: "r-u1".into(),
            },
            (80, 85),
            true,
        ));
        let users = vec![op((63, 70), Access::Read, UserOutcome::Done)];
        let found = check_entries(&admin, &users, &roles);
        assert_eq!(found.len(), 1);
        assert!(found[0].detail.contains("delete user u1"), "{found:?}");
        // Once the role is back, it may read again.
        let later = vec![op((86, 90), Access::Read, UserOutcome::Done)];
        assert!(properties(&admin, &later).is_empty());
    }

    #[test]
    fn an_unanswered_revoke_proves_nothing() {
        let mut admin = setup();
        admin.push(change(
            AuthChange::RevokePermission {
                role: "r-u1".into(),
                prefix: "auth/u1/".into(),
            },
            (50, 60),
            false,
        ));
        let users = vec![op((61, 70), Access::Write, UserOutcome::Done)];
        assert!(properties(&admin, &users).is_empty());
    }

    #[test]
    fn a_linearizable_read_refused_a_held_permission_is_caught() {
        let users = vec![op((20, 30), Access::Read, UserOutcome::PermissionDenied)];
        assert_eq!(properties(&setup(), &users), ["auth-spurious-denial"]);
        // A write refused is no evidence (see the module docs).
        let writes = vec![op((20, 30), Access::Write, UserOutcome::PermissionDenied)];
        assert!(properties(&setup(), &writes).is_empty());
        // Nor is a read refused while a revoke was on its way.
        let mut admin = setup();
        admin.push(revoke_perm((25, 40)));
        assert!(properties(&admin, &users).is_empty());
        // A revoke answered before the grant-back was sent is over.
        let mut admin = setup();
        admin.push(revoke_perm((11, 12)));
        admin.push(grant_perm((13, 14)));
        assert_eq!(properties(&admin, &users), ["auth-spurious-denial"]);
    }
}
