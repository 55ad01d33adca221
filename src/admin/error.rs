//! The admin API's errors and their one mapping to gRPC statuses, with the codes the
//! style guide gives each case (NOT_FOUND, ALREADY_EXISTS, INVALID_ARGUMENT, ABORTED,
//! FAILED_PRECONDITION). Errors from below (the node, raft, auth) keep etcd's status.

use thiserror::Error;
use tonic::Status;

use crate::membership::MembershipError;
use crate::node::NodeError;

#[derive(Debug, Error)]
pub enum AdminError {
    /// A field the request got wrong, named by its path (`member.metadata.name`).
    #[error("{field}: {reason}")]
    InvalidArgument { field: String, reason: String },
    #[error("{kind} {name:?} not found")]
    NotFound { kind: &'static str, name: String },
    #[error("{kind} {name:?} already exists")]
    AlreadyExists { kind: &'static str, name: String },
    /// A uid or version guard no longer holds: someone else changed the resource.
    #[error("{kind} {name:?} was changed since it was read: its {guard} is not the one given")]
    Aborted {
        kind: &'static str,
        name: String,
        guard: &'static str,
    },
    /// The cluster is not in the state the request needs.
    #[error("{0}")]
    FailedPrecondition(String),
    /// A membership change refused by etcd's rules.
    #[error(transparent)]
    Membership(#[from] MembershipError),
    /// The node refused (no leader, a timeout, a command's failure...).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// Auth, etcd's services or the member a request was relayed to refused, with
    /// etcd's own status.
    #[error("{}", .0.message())]
    Status(#[from] Status),
}

impl AdminError {
    pub fn invalid(field: impl Into<String>, reason: impl Into<String>) -> Self {
        AdminError::InvalidArgument {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

impl From<AdminError> for Status {
    fn from(error: AdminError) -> Status {
        let message = error.to_string();
        match error {
            AdminError::InvalidArgument { .. } => Status::invalid_argument(message),
            AdminError::NotFound { .. } => Status::not_found(message),
            AdminError::AlreadyExists { .. } => Status::already_exists(message),
            AdminError::Aborted { .. } => Status::aborted(message),
            AdminError::FailedPrecondition(_) => Status::failed_precondition(message),
            // etcd's codes already are the guide's: a learner not caught up, a member that
            // is not a learner, a peer URL in use are FAILED_PRECONDITION.
            AdminError::Membership(refusal) => crate::api::status::from_membership(refusal),
            AdminError::Node(refusal) => refusal.into(),
            AdminError::Status(status) => status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn each_case_has_the_guides_code() {
        let cases = [
            (
                AdminError::invalid("member.metadata.name", "is required"),
                Code::InvalidArgument,
            ),
            (
                AdminError::NotFound {
                    kind: "member",
                    name: "a".into(),
                },
                Code::NotFound,
            ),
            (
                AdminError::AlreadyExists {
                    kind: "member",
                    name: "a".into(),
                },
                Code::AlreadyExists,
            ),
            (
                AdminError::Aborted {
                    kind: "member",
                    name: "a".into(),
                    guard: "version",
                },
                Code::Aborted,
            ),
            (
                AdminError::Membership(MembershipError::LearnerNotReady),
                Code::FailedPrecondition,
            ),
            (
                AdminError::Membership(MembershipError::NameExists),
                Code::AlreadyExists,
            ),
        ];
        for (error, code) in cases {
            assert_eq!(Status::from(error).code(), code);
        }
    }
}
