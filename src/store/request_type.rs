//! etcd's names of request types (`getRequestType` in etcd's v3_server.go), the `op`
//! and `type` labels of `etcd_server_apply_duration_seconds` and
//! `etcd_server_request_duration_seconds`, and the one mapping from a replicated
//! command to its name.
//!
//! A closed enum rather than a string, so that metrics can resolve one series per type
//! once and index it on the hot path. It never decides anything about a command.

use crate::proto::command::auth_command::Request as Auth;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::Command;

/// The kind of one request, named as etcd names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestType {
    Range,
    /// A Txn that writes nothing, served without the log.
    ReadonlyTxn,
    Put,
    DeleteRange,
    Txn,
    Compaction,
    LeaseGrant,
    LeaseRevoke,
    LeaseCheckpoint,
    Alarm,
    ClusterMemberAttrSet,
    Authenticate,
    AuthEnable,
    AuthDisable,
    AuthUserAdd,
    AuthUserDelete,
    AuthUserChangePassword,
    AuthUserGrantRole,
    AuthUserRevokeRole,
    AuthRoleAdd,
    AuthRoleDelete,
    AuthRoleGrantPermission,
    AuthRoleRevokePermission,
    /// The admin API's records: QuantyKube's own commands.
    SyncMemberRecords,
    ChangeSnapshotRecord,
    Unknown,
}

impl RequestType {
    /// Every type, in the order of [`RequestType::index`].
    pub const ALL: [RequestType; 26] = [
        RequestType::Range,
        RequestType::ReadonlyTxn,
        RequestType::Put,
        RequestType::DeleteRange,
        RequestType::Txn,
        RequestType::Compaction,
        RequestType::LeaseGrant,
        RequestType::LeaseRevoke,
        RequestType::LeaseCheckpoint,
        RequestType::Alarm,
        RequestType::ClusterMemberAttrSet,
        RequestType::Authenticate,
        RequestType::AuthEnable,
        RequestType::AuthDisable,
        RequestType::AuthUserAdd,
        RequestType::AuthUserDelete,
        RequestType::AuthUserChangePassword,
        RequestType::AuthUserGrantRole,
        RequestType::AuthUserRevokeRole,
        RequestType::AuthRoleAdd,
        RequestType::AuthRoleDelete,
        RequestType::AuthRoleGrantPermission,
        RequestType::AuthRoleRevokePermission,
        RequestType::SyncMemberRecords,
        RequestType::ChangeSnapshotRecord,
        RequestType::Unknown,
    ];

    /// Its position in [`RequestType::ALL`] (a table of per-type series is indexed by it).
    pub fn index(self) -> usize {
        self as usize
    }

    /// etcd's name of it.
    pub fn name(self) -> &'static str {
        match self {
            RequestType::Range => "Range",
            RequestType::ReadonlyTxn => "ReadonlyTxn",
            RequestType::Put => "Put",
            RequestType::DeleteRange => "DeleteRange",
            RequestType::Txn => "Txn",
            RequestType::Compaction => "Compaction",
            RequestType::LeaseGrant => "LeaseGrant",
            RequestType::LeaseRevoke => "LeaseRevoke",
            RequestType::LeaseCheckpoint => "LeaseCheckpoint",
            RequestType::Alarm => "Alarm",
            RequestType::ClusterMemberAttrSet => "ClusterMemberAttrSet",
            RequestType::Authenticate => "Authenticate",
            RequestType::AuthEnable => "AuthEnable",
            RequestType::AuthDisable => "AuthDisable",
            RequestType::AuthUserAdd => "AuthUserAdd",
            RequestType::AuthUserDelete => "AuthUserDelete",
            RequestType::AuthUserChangePassword => "AuthUserChangePassword",
            RequestType::AuthUserGrantRole => "AuthUserGrantRole",
            RequestType::AuthUserRevokeRole => "AuthUserRevokeRole",
            RequestType::AuthRoleAdd => "AuthRoleAdd",
            RequestType::AuthRoleDelete => "AuthRoleDelete",
            RequestType::AuthRoleGrantPermission => "AuthRoleGrantPermission",
            RequestType::AuthRoleRevokePermission => "AuthRoleRevokePermission",
            RequestType::SyncMemberRecords => "SyncMemberRecords",
            RequestType::ChangeSnapshotRecord => "ChangeSnapshotRecord",
            RequestType::Unknown => "unknown",
        }
    }

    /// The type of a replicated command (a lease's expiry is its revocation, as etcd's
    /// leader revokes an expired lease).
    pub fn of(command: &Command) -> Self {
        match &command.request {
            Some(CommandRequest::Put(_)) => RequestType::Put,
            Some(CommandRequest::DeleteRange(_)) => RequestType::DeleteRange,
            Some(CommandRequest::Txn(_)) => RequestType::Txn,
            Some(CommandRequest::Compaction(_)) => RequestType::Compaction,
            Some(CommandRequest::LeaseGrant(_)) => RequestType::LeaseGrant,
            Some(CommandRequest::LeaseRevoke(_) | CommandRequest::LeaseExpiry(_)) => {
                RequestType::LeaseRevoke
            }
            Some(CommandRequest::LeaseCheckpoint(_)) => RequestType::LeaseCheckpoint,
            Some(CommandRequest::Alarm(_)) => RequestType::Alarm,
            Some(CommandRequest::PublishMember(_)) => RequestType::ClusterMemberAttrSet,
            Some(CommandRequest::Auth(auth)) => match &auth.request {
                Some(Auth::Enable(_)) => RequestType::AuthEnable,
                Some(Auth::Disable(_)) => RequestType::AuthDisable,
                Some(Auth::Authenticate(_)) => RequestType::Authenticate,
                Some(Auth::UserAdd(_)) => RequestType::AuthUserAdd,
                Some(Auth::UserDelete(_)) => RequestType::AuthUserDelete,
                Some(Auth::UserChangePassword(_)) => RequestType::AuthUserChangePassword,
                Some(Auth::UserGrantRole(_)) => RequestType::AuthUserGrantRole,
                Some(Auth::UserRevokeRole(_)) => RequestType::AuthUserRevokeRole,
                Some(Auth::RoleAdd(_)) => RequestType::AuthRoleAdd,
                Some(Auth::RoleDelete(_)) => RequestType::AuthRoleDelete,
                Some(Auth::RoleGrantPermission(_)) => RequestType::AuthRoleGrantPermission,
                Some(Auth::RoleRevokePermission(_)) => RequestType::AuthRoleRevokePermission,
                None => RequestType::Unknown,
            },
            Some(CommandRequest::SyncMemberRecords(_)) => RequestType::SyncMemberRecords,
            Some(CommandRequest::ChangeSnapshotRecord(_)) => RequestType::ChangeSnapshotRecord,
            None => RequestType::Unknown,
        }
    }
}

/// One pre-resolved series per request type and outcome: `[type][success as usize]`.
/// Built once from a labelled family; recording is then an index, no lookup.
pub struct PerRequestType<T>(Vec<[T; 2]>);

impl<T> PerRequestType<T> {
    /// `series(type, success)` for every type and both outcomes.
    pub fn new(series: impl Fn(RequestType, bool) -> T) -> Self {
        PerRequestType(
            RequestType::ALL
                .iter()
                .map(|&kind| [series(kind, false), series(kind, true)])
                .collect(),
        )
    }

    /// The series of `kind` and `success`.
    pub fn get(&self, kind: RequestType, success: bool) -> Option<&T> {
        self.0
            .get(kind.index())
            .map(|pair| &pair[usize::from(success)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_sits_at_its_index_and_has_etcds_name() {
        for (position, kind) in RequestType::ALL.iter().enumerate() {
            assert_eq!(kind.index(), position, "{kind:?}");
        }
        let names: std::collections::BTreeSet<&str> =
            RequestType::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), RequestType::ALL.len(), "names are distinct");
        assert_eq!(RequestType::ReadonlyTxn.name(), "ReadonlyTxn");
        assert_eq!(
            RequestType::ClusterMemberAttrSet.name(),
            "ClusterMemberAttrSet"
        );
    }

    #[test]
    fn a_table_hands_back_the_series_of_each_type_and_outcome() {
        let table = PerRequestType::new(|kind, success| (kind, success));
        assert_eq!(
            table.get(RequestType::Put, true),
            Some(&(RequestType::Put, true))
        );
        assert_eq!(
            table.get(RequestType::Unknown, false),
            Some(&(RequestType::Unknown, false))
        );
    }

    #[test]
    fn a_lease_expiry_counts_as_its_revocation() {
        let expiry = Command {
            request: Some(CommandRequest::LeaseExpiry(Default::default())),
            ..Default::default()
        };
        assert_eq!(RequestType::of(&expiry), RequestType::LeaseRevoke);
        assert_eq!(RequestType::of(&Command::default()), RequestType::Unknown);
    }
}
