//! [`AuthLog`]: what an auth workload did, for the auth checker: each administrative
//! change (a permission, a role or a user taken away or given back) with its times
//! and whether it surely took effect, and each user request with the user, the key,
//! its times and how it ended (done, permission denied, invalid token, other error).
//!
//! It records; it never judges and never talks to the cluster. The user requests are
//! also in the [`super::History`] (as key-value operations), where the other checkers
//! judge their values and revisions.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// A fact a user request needs, which an administrative change makes true or false.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fact {
    /// The user exists.
    User(String),
    /// The user holds the role.
    Role { user: String, role: String },
    /// The role grants read and write on keys starting with `prefix`.
    Permission { role: String, prefix: String },
}

impl fmt::Display for Fact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fact::User(user) => write!(f, "user {user}"),
            Fact::Role { user, role } => write!(f, "role {role} of {user}"),
            Fact::Permission { role, prefix } => write!(f, "{role}'s readwrite on {prefix}*"),
        }
    }
}

/// One administrative request (as root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthChange {
    /// RoleGrantPermission: readwrite on `prefix`.
    GrantPermission { role: String, prefix: String },
    /// RoleRevokePermission of that permission.
    RevokePermission { role: String, prefix: String },
    /// UserGrantRole.
    GrantRole { user: String, role: String },
    /// UserRevokeRole.
    RevokeRole { user: String, role: String },
    /// UserAdd (with no role: etcd gives a new user none).
    AddUser { user: String },
    /// UserDelete: the user goes, with its roles and its tokens.
    DeleteUser { user: String },
}

impl AuthChange {
    /// The facts this change makes true.
    pub fn grants(&self) -> Vec<Fact> {
        match self {
            AuthChange::GrantPermission { role, prefix } => vec![Fact::Permission {
                role: role.clone(),
                prefix: prefix.clone(),
            }],
            AuthChange::GrantRole { user, role } => vec![Fact::Role {
                user: user.clone(),
                role: role.clone(),
            }],
            AuthChange::AddUser { user } => vec![Fact::User(user.clone())],
            _ => Vec::new(),
        }
    }

    /// The facts this change makes false. Deleting a user takes its roles too: a user
    /// added again under the name holds none.
    pub fn removes(&self, roles_of: impl Fn(&str) -> Vec<String>) -> Vec<Fact> {
        match self {
            AuthChange::RevokePermission { role, prefix } => vec![Fact::Permission {
                role: role.clone(),
                prefix: prefix.clone(),
            }],
            AuthChange::RevokeRole { user, role } => vec![Fact::Role {
                user: user.clone(),
                role: role.clone(),
            }],
            AuthChange::DeleteUser { user } => std::iter::once(Fact::User(user.clone()))
                .chain(roles_of(user).into_iter().map(|role| Fact::Role {
                    user: user.clone(),
                    role,
                }))
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl fmt::Display for AuthChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AuthChange::GrantPermission { role, prefix } => {
                write!(f, "grant {role} readwrite {prefix}*")
            }
            AuthChange::RevokePermission { role, prefix } => {
                write!(f, "revoke {role} readwrite {prefix}*")
            }
            AuthChange::GrantRole { user, role } => write!(f, "grant role {role} to {user}"),
            AuthChange::RevokeRole { user, role } => write!(f, "revoke role {role} from {user}"),
            AuthChange::AddUser { user } => write!(f, "add user {user}"),
            AuthChange::DeleteUser { user } => write!(f, "delete user {user}"),
        }
    }
}

/// How an administrative request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChangeOutcome {
    /// Answered: the change is in effect from some instant between invocation and
    /// completion (an answer that says it already was, e.g. "permission is not
    /// granted" to a revoke, counts too).
    Done,
    /// No answer, or an error that does not say: it may take effect at any time after
    /// its invocation, even after the client gave up.
    Unknown(String),
}

/// One administrative request with its times (simulated, since the start).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminEntry {
    pub change: AuthChange,
    pub invoked: Duration,
    pub completed: Duration,
    pub outcome: ChangeOutcome,
}

impl fmt::Display for AdminEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>9.3}s..{:>9.3}s] admin {} -> ",
            self.invoked.as_secs_f64(),
            self.completed.as_secs_f64(),
            self.change
        )?;
        match &self.outcome {
            ChangeOutcome::Done => write!(f, "done"),
            ChangeOutcome::Unknown(reason) => write!(f, "unknown ({reason})"),
        }
    }
}

/// What a user request needs of the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// A Range.
    Read,
    /// A Put.
    Write,
    /// A Txn that compares the key and writes it.
    ReadWrite,
}

/// How a user request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserOutcome {
    /// Executed: the member used the user's permission.
    Done,
    /// etcd's "permission denied".
    PermissionDenied,
    /// etcd's "invalid auth token" (or the user could not log in again).
    InvalidToken,
    /// Any other error or a timeout.
    Failed(String),
}

/// One request of a user with its times.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserEntry {
    pub user: String,
    pub key: String,
    pub access: Access,
    /// A linearizable read (authorised once the member caught up with the leader).
    pub linearizable: bool,
    pub invoked: Duration,
    pub completed: Duration,
    pub outcome: UserOutcome,
}

impl fmt::Display for UserEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{:>9.3}s..{:>9.3}s] {} {:?} {} -> {:?}",
            self.invoked.as_secs_f64(),
            self.completed.as_secs_f64(),
            self.user,
            self.access,
            self.key,
            self.outcome
        )
    }
}

#[derive(Debug, Default)]
struct Entries {
    admin: Vec<AdminEntry>,
    users: Vec<UserEntry>,
    /// Every user and the roles the setup gave it (what a deletion takes away).
    roles: Vec<(String, Vec<String>)>,
}

/// The auth workload's record. Cheap to clone; clones share it.
#[derive(Clone, Debug, Default)]
pub struct AuthLog {
    entries: Arc<Mutex<Entries>>,
}

impl AuthLog {
    pub fn new() -> Self {
        AuthLog::default()
    }

    /// Says that `user` holds `roles` (what deleting it takes away).
    pub fn set_roles(&self, user: &str, roles: Vec<String>) {
        let mut entries = self.lock();
        entries.roles.retain(|(u, _)| u != user);
        entries.roles.push((user.to_owned(), roles));
    }

    /// The roles `user` is given by the workload.
    pub fn roles_of(&self, user: &str) -> Vec<String> {
        self.lock()
            .roles
            .iter()
            .find(|(u, _)| u == user)
            .map(|(_, roles)| roles.clone())
            .unwrap_or_default()
    }

    pub fn record_admin(&self, entry: AdminEntry) {
        tracing::debug!(%entry, "auth change");
        self.lock().admin.push(entry);
    }

    pub fn record_user(&self, entry: UserEntry) {
        tracing::debug!(%entry, "auth user request");
        self.lock().users.push(entry);
    }

    pub fn admin(&self) -> Vec<AdminEntry> {
        self.lock().admin.clone()
    }

    pub fn users(&self) -> Vec<UserEntry> {
        self.lock().users.clone()
    }

    /// One line per entry, administrative changes first.
    pub fn trace(&self) -> Vec<String> {
        let entries = self.lock();
        entries
            .admin
            .iter()
            .map(ToString::to_string)
            .chain(entries.users.iter().map(ToString::to_string))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
