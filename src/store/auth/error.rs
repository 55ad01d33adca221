//! The auth store's refusals, in etcd's words, and their one translation to the
//! command-error kinds the log carries (an auth change refused at apply time must read
//! the same on every member and reach the proposer).
//!
//! The gRPC status of each lives in `api::status::from_auth`; nothing here may carry a
//! password, a hash or a token.

use thiserror::Error;

use crate::proto::command::command_error::Kind;

/// etcd's `auth.Err*` values, with the text of their gRPC twins (`rpctypes.ErrGRPC*`).
#[derive(Clone, Copy, Debug, Error, PartialEq, Eq)]
pub enum AuthError {
    #[error("etcdserver: root user does not exist")]
    RootUserNotExist,
    #[error("etcdserver: root user does not have root role")]
    RootRoleNotExist,
    #[error("etcdserver: user name already exists")]
    UserAlreadyExist,
    #[error("etcdserver: user name is empty")]
    UserEmpty,
    #[error("etcdserver: user name not found")]
    UserNotFound,
    #[error("etcdserver: role name already exists")]
    RoleAlreadyExist,
    #[error("etcdserver: role name not found")]
    RoleNotFound,
    #[error("etcdserver: role name is empty")]
    RoleEmpty,
    #[error("etcdserver: authentication failed, invalid user ID or password")]
    AuthFailed,
    #[error("etcdserver: permission not given")]
    PermissionNotGiven,
    #[error("etcdserver: permission denied")]
    PermissionDenied,
    #[error("etcdserver: role is not granted to the user")]
    RoleNotGranted,
    #[error("etcdserver: permission is not granted to the role")]
    PermissionNotGranted,
    #[error("{}", crate::rpctypes::AUTH_NOT_ENABLED)]
    AuthNotEnabled,
    #[error("{}", crate::rpctypes::INVALID_AUTH_TOKEN)]
    InvalidAuthToken,
    #[error("etcdserver: invalid auth management")]
    InvalidAuthMgmt,
    #[error("etcdserver: revision of auth store is old")]
    AuthOldRevision,
}

impl AuthError {
    /// The kind an apply-time refusal is logged as. `InvalidAuthToken` never happens at
    /// apply time (tokens are checked before proposing).
    pub fn kind(self) -> Kind {
        match self {
            AuthError::RootUserNotExist => Kind::RootUserNotExist,
            AuthError::RootRoleNotExist => Kind::RootRoleNotExist,
            AuthError::UserAlreadyExist => Kind::UserAlreadyExist,
            AuthError::UserEmpty => Kind::UserEmpty,
            AuthError::UserNotFound => Kind::UserNotFound,
            AuthError::RoleAlreadyExist => Kind::RoleAlreadyExist,
            AuthError::RoleNotFound => Kind::RoleNotFound,
            AuthError::RoleEmpty => Kind::RoleEmpty,
            AuthError::AuthFailed => Kind::AuthFailed,
            AuthError::PermissionNotGiven => Kind::PermissionNotGiven,
            AuthError::PermissionDenied | AuthError::InvalidAuthToken => Kind::PermissionDenied,
            AuthError::RoleNotGranted => Kind::RoleNotGranted,
            AuthError::PermissionNotGranted => Kind::PermissionNotGranted,
            AuthError::AuthNotEnabled => Kind::AuthNotEnabled,
            AuthError::InvalidAuthMgmt => Kind::InvalidAuthMgmt,
            AuthError::AuthOldRevision => Kind::AuthOldRevision,
        }
    }

    /// The refusal a logged kind stands for, if it is an auth one.
    pub fn from_kind(kind: Kind) -> Option<AuthError> {
        Some(match kind {
            Kind::RootUserNotExist => AuthError::RootUserNotExist,
            Kind::RootRoleNotExist => AuthError::RootRoleNotExist,
            Kind::UserAlreadyExist => AuthError::UserAlreadyExist,
            Kind::UserEmpty => AuthError::UserEmpty,
            Kind::UserNotFound => AuthError::UserNotFound,
            Kind::RoleAlreadyExist => AuthError::RoleAlreadyExist,
            Kind::RoleNotFound => AuthError::RoleNotFound,
            Kind::RoleEmpty => AuthError::RoleEmpty,
            Kind::AuthFailed => AuthError::AuthFailed,
            Kind::PermissionNotGiven => AuthError::PermissionNotGiven,
            Kind::PermissionDenied => AuthError::PermissionDenied,
            Kind::RoleNotGranted => AuthError::RoleNotGranted,
            Kind::PermissionNotGranted => AuthError::PermissionNotGranted,
            Kind::AuthNotEnabled => AuthError::AuthNotEnabled,
            Kind::InvalidAuthMgmt => AuthError::InvalidAuthMgmt,
            Kind::AuthOldRevision => AuthError::AuthOldRevision,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_apply_time_refusal_survives_the_log() {
        for error in [
            AuthError::RootUserNotExist,
            AuthError::RootRoleNotExist,
            AuthError::UserAlreadyExist,
            AuthError::UserEmpty,
            AuthError::UserNotFound,
            AuthError::RoleAlreadyExist,
            AuthError::RoleNotFound,
            AuthError::RoleEmpty,
            AuthError::AuthFailed,
            AuthError::PermissionNotGiven,
            AuthError::PermissionDenied,
            AuthError::RoleNotGranted,
            AuthError::PermissionNotGranted,
            AuthError::AuthNotEnabled,
            AuthError::InvalidAuthMgmt,
            AuthError::AuthOldRevision,
        ] {
            assert_eq!(AuthError::from_kind(error.kind()), Some(error));
        }
        assert_eq!(AuthError::from_kind(Kind::Compacted), None);
    }
}
