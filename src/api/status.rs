//! The one mapping from QuantyKube's errors to etcd's gRPC statuses.
//!
//! Client libraries match on the exact text, so every message here is etcd's own
//! (`etcdserver: ...`), with etcd's gRPC code. Handlers never build a `Status` for an
//! etcd error themselves; they return one of these.

use tonic::{Code, Status};

use crate::auth::AuthError;
use crate::membership::MembershipError;
use crate::node::NodeError;
use crate::proto::command::command_error::Kind;
use crate::store::StoreError;

pub fn empty_key() -> Status {
    Status::invalid_argument("etcdserver: key is not provided")
}
pub fn key_not_found() -> Status {
    Status::invalid_argument("etcdserver: key not found")
}
pub fn value_provided() -> Status {
    Status::invalid_argument("etcdserver: value is provided")
}
pub fn lease_provided() -> Status {
    Status::invalid_argument("etcdserver: lease is provided")
}
pub fn too_many_ops() -> Status {
    Status::invalid_argument("etcdserver: too many operations in txn request")
}
pub fn duplicate_key() -> Status {
    Status::invalid_argument("etcdserver: duplicate key given in txn request")
}
pub fn invalid_sort_option() -> Status {
    Status::invalid_argument("etcdserver: invalid sort option")
}
/// etcd 3.7's RangeStream refusals (`checkRangeStreamRequest`): a stream cannot sort
/// or filter a range it never holds whole.
pub fn range_stream_custom_sort() -> Status {
    Status::unimplemented("RangeStream does not support custom sort orders")
}
pub fn range_stream_revision_filters() -> Status {
    Status::unimplemented("RangeStream does not support revision filters")
}
pub fn request_too_large() -> Status {
    Status::invalid_argument(NodeError::TooLarge.to_string())
}
pub fn no_space() -> Status {
    Status::resource_exhausted(NodeError::NoSpace.to_string())
}
/// etcd's `ErrGRPCCorrupt`, what a member answers while a CORRUPT alarm is active.
pub fn corrupt() -> Status {
    Status::data_loss("etcdserver: corrupt cluster")
}
/// etcd 3.6's downgrade errors (server/etcdserver/errors, server/etcdserver/version).
pub fn wrong_downgrade_version_format() -> Status {
    Status::invalid_argument("etcdserver: wrong downgrade target version format")
}
pub fn invalid_downgrade_target_version() -> Status {
    Status::invalid_argument("etcdserver: invalid downgrade target version")
}
/// etcd's `ErrUnknownMethod`, which no gRPC mapping names, so grpc-go sends Unknown.
pub fn unknown_method() -> Status {
    Status::unknown("etcdserver: unknown method")
}
/// etcd's text for a revision compaction removed, also a watch's cancel reason.
pub use crate::rpctypes::COMPACTED;

pub fn compacted() -> Status {
    Status::out_of_range(COMPACTED)
}
pub fn future_revision() -> Status {
    Status::out_of_range(crate::rpctypes::FUTURE_REVISION)
}
pub fn lease_not_found() -> Status {
    Status::not_found("etcdserver: requested lease not found")
}
pub fn lease_ttl_too_large() -> Status {
    Status::out_of_range("etcdserver: too large lease TTL")
}
pub fn lease_exists() -> Status {
    Status::failed_precondition("etcdserver: lease already exists")
}
pub fn no_leader() -> Status {
    Status::unavailable(NodeError::NoLeader.to_string())
}
pub fn timeout() -> Status {
    Status::unavailable(NodeError::Timeout.to_string())
}
pub fn leader_changed() -> Status {
    Status::unavailable(NodeError::LeaderChanged.to_string())
}
pub fn stopped() -> Status {
    Status::unavailable(NodeError::Stopped.to_string())
}

pub fn not_supported_for_learner() -> Status {
    // etcd 3.6's code; etcd 3.4 answered Unavailable with the same text.
    Status::failed_precondition("etcdserver: rpc not supported for learner")
}
pub fn not_leader() -> Status {
    Status::failed_precondition("etcdserver: not leader")
}

/// etcd's `ErrMissingLeaderKey` (v3election), a plain Go error: Unknown.
pub fn missing_leader_key() -> Status {
    Status::unknown("\"leader\" field must be provided")
}

/// etcd's status for each membership refusal (`togRPCError`).
pub fn from_membership(error: MembershipError) -> Status {
    use MembershipError as E;
    let text = format!("etcdserver: {error}");
    match error {
        E::IdExists
        | E::PeerUrlExists
        | E::NotLearner
        | E::LearnerNotReady
        | E::TooManyLearners
        | E::BadLeaderTransferee => Status::failed_precondition(text),
        // etcd maps this one to a client-side error value, not a status, so grpc-go
        // sends it as Unknown (every etcd since 3.3); clients match the text.
        E::NotEnoughStarted => Status::unknown(text),
        E::NameExists => Status::already_exists(text),
        // etcd maps membership.ErrIDRemoved to ErrGRPCMemberNotFound.
        E::NotFound | E::Removed => Status::not_found("etcdserver: member not found"),
        E::BadUrls => Status::invalid_argument(text),
        E::Unhealthy | E::LeaderTransferTimeout | E::Timeout => Status::unavailable(text),
        E::NoLeader => no_leader(),
        E::LeaderChanged => leader_changed(),
        other => internal("membership", &other),
    }
}

/// A node-local failure that is not the request's fault; details go to the log, not
/// the client.
pub fn internal(context: &str, error: &dyn std::fmt::Display) -> Status {
    tracing::error!(context, %error, "internal error");
    Status::new(
        Code::Internal,
        format!("etcdserver: {context}: internal error"),
    )
}

/// A store error as the command's failure it is (`StoreError::command_kind`, the one
/// table), or a failure of this member.
pub fn from_store(error: StoreError) -> Status {
    match error.command_kind() {
        Some(kind) => from_command_error(kind),
        None => internal("store", &error),
    }
}

pub fn from_backup(error: crate::backup::BackupError) -> Status {
    match error {
        crate::backup::BackupError::Store(store) => from_store(store),
        other => internal("snapshot", &other),
    }
}

/// etcd's status for each auth refusal (`rpctypes.ErrGRPC*`).
pub fn from_auth(error: AuthError) -> Status {
    use AuthError as E;
    let text = error.to_string();
    match error {
        E::UserEmpty
        | E::RoleEmpty
        | E::AuthFailed
        | E::PermissionNotGiven
        | E::InvalidAuthMgmt
        | E::AuthOldRevision => Status::invalid_argument(text),
        E::PermissionDenied => Status::permission_denied(text),
        E::InvalidAuthToken => Status::unauthenticated(text),
        E::RootUserNotExist
        | E::RootRoleNotExist
        | E::UserAlreadyExist
        | E::UserNotFound
        | E::RoleAlreadyExist
        | E::RoleNotFound
        | E::RoleNotGranted
        | E::PermissionNotGranted
        | E::AuthNotEnabled => Status::failed_precondition(text),
    }
}

/// etcd's Defragment, Hash, HashKV and Snapshot refuse with the auth package's own
/// error, which no gRPC mapping converts: grpc-go sends it as Unknown, in the auth
/// package's words (`auth: permission denied`, `auth: user name is empty`...).
pub fn from_auth_unconverted(error: AuthError) -> Status {
    let text = match error {
        AuthError::UserNotFound => "user not found".to_string(),
        AuthError::AuthOldRevision => "revision in header is old".to_string(),
        other => other
            .to_string()
            .trim_start_matches("etcdserver: ")
            .to_string(),
    };
    Status::unknown(format!("auth: {text}"))
}

pub fn from_command_error(kind: Kind) -> Status {
    if let Some(refusal) = AuthError::from_kind(kind) {
        return from_auth(refusal);
    }
    match kind {
        Kind::Compacted => compacted(),
        Kind::FutureRevision => future_revision(),
        Kind::KeyNotFound => key_not_found(),
        Kind::LeaseNotFound => lease_not_found(),
        Kind::LeaseExists => lease_exists(),
        Kind::NoSpace => no_space(),
        Kind::Corrupt => corrupt(),
        // The admin API's guards; `admin::error` words them for its resource.
        Kind::VersionMismatch => {
            Status::aborted("the resource's uid or version is not the one given")
        }
        Kind::ResourceNotFound => Status::not_found("the resource does not exist"),
        Kind::ResourceExists => Status::already_exists("the resource already exists"),
        _ => internal("apply", &format!("unexpected command error {kind:?}")),
    }
}

/// The one mapping of the node's errors: etcd's code, with the error's own text
/// (etcd's).
impl From<NodeError> for Status {
    fn from(error: NodeError) -> Self {
        match error {
            NodeError::TooLarge => request_too_large(),
            NodeError::NoSpace => no_space(),
            NodeError::NoLeader => no_leader(),
            NodeError::Timeout => timeout(),
            NodeError::LeaderChanged => leader_changed(),
            NodeError::Stopped => stopped(),
            NodeError::Command(kind) => from_command_error(kind),
            NodeError::Store(error) => from_store(error),
            NodeError::Internal { context, detail } => internal(context, &detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each node error reaches clients as etcd's status: its code and its exact text.
    #[test]
    fn each_node_error_is_etcds_status() {
        let cases = [
            (
                NodeError::TooLarge,
                Code::InvalidArgument,
                "etcdserver: request is too large",
            ),
            (
                NodeError::NoSpace,
                Code::ResourceExhausted,
                "etcdserver: mvcc: database space exceeded",
            ),
            (
                NodeError::NoLeader,
                Code::Unavailable,
                "etcdserver: no leader",
            ),
            (
                NodeError::Timeout,
                Code::Unavailable,
                "etcdserver: request timed out",
            ),
            (
                NodeError::LeaderChanged,
                Code::Unavailable,
                "etcdserver: leader changed",
            ),
            (
                NodeError::Stopped,
                Code::Unavailable,
                "etcdserver: server stopped",
            ),
            (
                NodeError::Command(Kind::Compacted),
                Code::OutOfRange,
                COMPACTED,
            ),
            (
                NodeError::Command(Kind::AuthOldRevision),
                Code::InvalidArgument,
                "etcdserver: revision of auth store is old",
            ),
            (
                NodeError::Command(Kind::VersionMismatch),
                Code::Aborted,
                "the resource's uid or version is not the one given",
            ),
            (
                NodeError::Store(StoreError::FutureRevision),
                Code::OutOfRange,
                "etcdserver: mvcc: required revision is a future revision",
            ),
            (
                NodeError::internal("decode outcome", &"bad bytes"),
                Code::Internal,
                "etcdserver: decode outcome: internal error",
            ),
        ];
        for (error, code, message) in cases {
            let status = Status::from(error);
            assert_eq!((status.code(), status.message()), (code, message));
        }
    }

    /// A store error maps as the command failure it is (`StoreError::command_kind`), so
    /// the same failure reads the same whether a read or the log reached it.
    #[test]
    fn a_store_error_and_its_command_kind_map_alike() {
        let errors = [
            StoreError::Compacted,
            StoreError::FutureRevision,
            StoreError::KeyNotFound,
            StoreError::LeaseNotFound,
            StoreError::LeaseExists,
            StoreError::NoSpace,
            StoreError::CorruptAlarm,
            StoreError::VersionMismatch,
            StoreError::ResourceNotFound,
            StoreError::ResourceExists,
            StoreError::Auth(AuthError::PermissionDenied),
        ];
        for error in errors {
            let kind = error.command_kind().expect("a command's failure");
            let (direct, logged) = (from_store(error), from_command_error(kind));
            assert_eq!(
                (direct.code(), direct.message()),
                (logged.code(), logged.message())
            );
        }
        assert!(StoreError::corrupt("x").command_kind().is_none());
    }
}
