//! The auth store as one applied value: the enabled flag, the auth revision, users and
//! roles, and every user's merged permissions; and the semantics of each auth change
//! (etcd's `authStore`), applied to a copy that becomes the new value.
//!
//! Every member reaches the same state from the same log: nothing here reads a clock,
//! a random source or the local configuration. Passwords arrive hashed; this module
//! never hashes, compares or logs one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use base64::Engine as _;

use super::error::AuthError;
use super::permissions::{Need, UserPermissions};
use crate::proto::authpb::permission::Type as PermissionType;
use crate::proto::authpb::{Permission, Role, User, UserAddOptions};
use crate::proto::command::auth_command::Request as AuthRequest;

pub const ROOT_USER: &str = "root";
pub const ROOT_ROLE: &str = "root";

/// One change to the stored auth records, as the store writes it.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    Enabled(bool),
    Revision(u64),
    PutUser(User),
    DeleteUser(String),
    PutRole(Role),
    DeleteRole(String),
}

/// What applying one auth command did.
#[derive(Debug, Default)]
pub struct Applied {
    pub changes: Vec<Change>,
    /// For an authentication: the simple token every member now knows.
    pub simple_token: Option<String>,
}

/// The applied auth store of one member.
#[derive(Clone, Debug, Default)]
pub struct AuthState {
    enabled: bool,
    revision: u64,
    users: BTreeMap<String, User>,
    roles: BTreeMap<String, Role>,
    permissions: HashMap<String, Arc<UserPermissions>>,
}

fn name_of(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

fn has_root_role(user: &User) -> bool {
    user.roles
        .binary_search_by(|r| r.as_str().cmp(ROOT_ROLE))
        .is_ok()
}

impl AuthState {
    /// The state stored records describe. A store that never had auth starts at
    /// revision 1, as etcd's does.
    pub fn from_records(enabled: bool, revision: u64, users: Vec<User>, roles: Vec<Role>) -> Self {
        let mut state = AuthState {
            enabled,
            revision: revision.max(1),
            users: users.into_iter().map(|u| (name_of(&u.name), u)).collect(),
            roles: roles.into_iter().map(|r| (name_of(&r.name), r)).collect(),
            permissions: HashMap::new(),
        };
        state.permissions = state
            .users
            .iter()
            .map(|(name, user)| {
                let granted = user
                    .roles
                    .iter()
                    .filter_map(|role| state.roles.get(role))
                    .flat_map(|role| role.key_permission.iter());
                (name.clone(), Arc::new(UserPermissions::merge(granted)))
            })
            .collect();
        state
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    pub fn revision(&self) -> u64 {
        self.revision
    }

    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    pub fn role(&self, name: &str) -> Option<&Role> {
        self.roles.get(name)
    }

    /// User names in byte order, as etcd lists them.
    pub fn user_names(&self) -> Vec<String> {
        self.users.keys().cloned().collect()
    }

    pub fn role_names(&self) -> Vec<String> {
        self.roles.keys().cloned().collect()
    }

    pub fn is_root(&self, user: &str) -> bool {
        self.users.get(user).is_some_and(has_root_role)
    }

    pub fn has_role(&self, user: &str, role: &str) -> bool {
        self.users
            .get(user)
            .is_some_and(|u| u.roles.iter().any(|r| r == role))
    }

    /// etcd's `isOpPermitted` once the user is known: root may do anything; an unknown
    /// user nothing.
    pub fn permits(&self, user: &str, need: Need, key: &[u8], range_end: &[u8]) -> bool {
        if self.is_root(user) {
            return true;
        }
        self.permissions
            .get(user)
            .is_some_and(|p| p.allows(need, key, range_end))
    }

    /// The permissions RoleGet shows: the root role holds every key, whatever is stored.
    pub fn role_permissions(&self, role: &Role) -> Vec<Permission> {
        if role.name == ROOT_ROLE.as_bytes() {
            return vec![Permission {
                perm_type: PermissionType::Readwrite as i32,
                key: bytes::Bytes::new(),
                range_end: bytes::Bytes::from_static(&[0]),
            }];
        }
        role.key_permission.clone()
    }

    /// Applies one auth command at `log_index` (etcd's `authStore` methods). A refusal
    /// changes nothing.
    pub fn apply(&self, request: &AuthRequest, log_index: u64) -> Result<Applied, AuthError> {
        let mut changes = Vec::new();
        let mut simple_token = None;
        let bump = |changes: &mut Vec<Change>| changes.push(Change::Revision(self.revision + 1));
        match request {
            AuthRequest::Enable(_) => {
                if !self.enabled {
                    let root = self
                        .users
                        .get(ROOT_USER)
                        .ok_or(AuthError::RootUserNotExist)?;
                    if !has_root_role(root) {
                        return Err(AuthError::RootRoleNotExist);
                    }
                    // etcd keeps the revision here; writes authorised while auth was
                    // off are told apart by their `auth_checked` instead.
                    changes.push(Change::Enabled(true));
                }
            }
            AuthRequest::Disable(_) => {
                if self.enabled {
                    changes.push(Change::Enabled(false));
                    bump(&mut changes);
                }
            }
            AuthRequest::Authenticate(auth) => {
                if !self.enabled {
                    return Err(AuthError::AuthNotEnabled);
                }
                let user = self.users.get(&auth.name).ok_or(AuthError::AuthFailed)?;
                if user.options.as_ref().is_some_and(|o| o.no_password) {
                    return Err(AuthError::AuthFailed);
                }
                if !auth.simple_token_prefix.is_empty() {
                    simple_token = Some(format!("{}.{log_index}", auth.simple_token_prefix));
                }
            }
            AuthRequest::UserAdd(add) => {
                if add.name.is_empty() {
                    return Err(AuthError::UserEmpty);
                }
                if self.users.contains_key(&add.name) {
                    return Err(AuthError::UserAlreadyExist);
                }
                let options = add.options.unwrap_or(UserAddOptions { no_password: false });
                let password = if options.no_password {
                    bytes::Bytes::new()
                } else {
                    decode_hash(&add.hashed_password)?
                };
                changes.push(Change::PutUser(User {
                    name: add.name.clone().into(),
                    password,
                    roles: Vec::new(),
                    options: Some(options),
                }));
                bump(&mut changes);
            }
            AuthRequest::UserDelete(delete) => {
                if self.enabled && delete.name == ROOT_USER {
                    return Err(AuthError::InvalidAuthMgmt);
                }
                if !self.users.contains_key(&delete.name) {
                    return Err(AuthError::UserNotFound);
                }
                changes.push(Change::DeleteUser(delete.name.clone()));
                bump(&mut changes);
            }
            AuthRequest::UserChangePassword(change) => {
                let user = self
                    .users
                    .get(&change.name)
                    .ok_or(AuthError::UserNotFound)?;
                let no_password = user.options.as_ref().is_some_and(|o| o.no_password);
                let mut updated = user.clone();
                updated.password = if no_password {
                    bytes::Bytes::new()
                } else {
                    decode_hash(&change.hashed_password)?
                };
                changes.push(Change::PutUser(updated));
                bump(&mut changes);
            }
            AuthRequest::UserGrantRole(grant) => {
                let user = self.users.get(&grant.user).ok_or(AuthError::UserNotFound)?;
                if grant.role != ROOT_ROLE && !self.roles.contains_key(&grant.role) {
                    return Err(AuthError::RoleNotFound);
                }
                if let Err(at) = user.roles.binary_search(&grant.role) {
                    let mut updated = user.clone();
                    updated.roles.insert(at, grant.role.clone());
                    changes.push(Change::PutUser(updated));
                    bump(&mut changes);
                }
            }
            AuthRequest::UserRevokeRole(revoke) => {
                if self.enabled && revoke.name == ROOT_USER && revoke.role == ROOT_ROLE {
                    return Err(AuthError::InvalidAuthMgmt);
                }
                let user = self
                    .users
                    .get(&revoke.name)
                    .ok_or(AuthError::UserNotFound)?;
                let mut updated = user.clone();
                updated.roles.retain(|r| *r != revoke.role);
                if updated.roles.len() == user.roles.len() {
                    return Err(AuthError::RoleNotGranted);
                }
                changes.push(Change::PutUser(updated));
                bump(&mut changes);
            }
            AuthRequest::RoleAdd(add) => {
                if add.name.is_empty() {
                    return Err(AuthError::RoleEmpty);
                }
                if self.roles.contains_key(&add.name) {
                    return Err(AuthError::RoleAlreadyExist);
                }
                changes.push(Change::PutRole(Role {
                    name: add.name.clone().into(),
                    key_permission: Vec::new(),
                }));
                bump(&mut changes);
            }
            AuthRequest::RoleDelete(delete) => {
                if self.enabled && delete.role == ROOT_ROLE {
                    return Err(AuthError::InvalidAuthMgmt);
                }
                if !self.roles.contains_key(&delete.role) {
                    return Err(AuthError::RoleNotFound);
                }
                changes.push(Change::DeleteRole(delete.role.clone()));
                for user in self.users.values() {
                    if user.roles.contains(&delete.role) {
                        let mut updated = user.clone();
                        updated.roles.retain(|r| *r != delete.role);
                        changes.push(Change::PutUser(updated));
                    }
                }
                bump(&mut changes);
            }
            AuthRequest::RoleGrantPermission(grant) => {
                let permission = grant.perm.as_ref().ok_or(AuthError::PermissionNotGiven)?;
                let role = self.roles.get(&grant.name).ok_or(AuthError::RoleNotFound)?;
                let mut updated = role.clone();
                let existing = updated
                    .key_permission
                    .iter_mut()
                    .find(|p| p.key == permission.key && p.range_end == permission.range_end);
                match existing {
                    Some(same_keys) => same_keys.perm_type = permission.perm_type,
                    None => {
                        let at = updated
                            .key_permission
                            .partition_point(|p| p.key <= permission.key);
                        updated.key_permission.insert(at, permission.clone());
                    }
                }
                changes.push(Change::PutRole(updated));
                bump(&mut changes);
            }
            AuthRequest::RoleRevokePermission(revoke) => {
                let role = self
                    .roles
                    .get(&revoke.role)
                    .ok_or(AuthError::RoleNotFound)?;
                let mut updated = role.clone();
                updated
                    .key_permission
                    .retain(|p| p.key != revoke.key || p.range_end != revoke.range_end);
                if updated.key_permission.len() == role.key_permission.len() {
                    return Err(AuthError::PermissionNotGranted);
                }
                changes.push(Change::PutRole(updated));
                bump(&mut changes);
            }
        }
        Ok(Applied {
            changes,
            simple_token,
        })
    }
}

/// A bcrypt hash as the proposer sent it (base64, etcd 3.5's `hashedPassword`).
fn decode_hash(encoded: &str) -> Result<bytes::Bytes, AuthError> {
    base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map(bytes::Bytes::from)
        .map_err(|_| AuthError::AuthFailed)
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
