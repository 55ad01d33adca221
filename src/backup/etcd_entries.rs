//! What etcd 3.4-3.6 put in its raft log, as our own commands: each normal entry of
//! etcd's WAL is an `InternalRaftRequest` (or, from etcd's v2 store, a `Request`), and
//! each one that changes the keys, leases, alarms or auth becomes the [`Command`] our
//! apply path applies, so that a WAL tail is replayed by the same code that applies
//! our own log.
//!
//! Owns that translation and nothing else: it reads no files and writes no store.
//! An entry it does not know is refused (never skipped), since skipping a write would
//! serve a store etcd never had.

use prost::Message;

use crate::auth::password;
use crate::proto::command::auth_command::Request as AuthRequest;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::{AuthCommand, Command};
use crate::proto::etcdserverpb::*;

/// etcd's `RequestHeader`: set on every v3 request etcd proposes.
#[derive(Clone, PartialEq, Message)]
struct RequestHeader {
    #[prost(uint64, tag = "1")]
    id: u64,
}

/// etcd's `InternalRaftRequest`, with the requests that change nothing (reads through
/// the log, authentications, etcd 3.5's cluster bookkeeping) kept as raw bytes: their
/// presence is all that counts.
#[derive(Clone, PartialEq, Message)]
struct InternalRaftRequest {
    #[prost(message, optional, tag = "100")]
    header: Option<RequestHeader>,
    #[prost(bytes = "vec", optional, tag = "3")]
    range: Option<Vec<u8>>,
    #[prost(message, optional, tag = "4")]
    put: Option<PutRequest>,
    #[prost(message, optional, tag = "5")]
    delete_range: Option<DeleteRangeRequest>,
    #[prost(message, optional, tag = "6")]
    txn: Option<TxnRequest>,
    #[prost(message, optional, tag = "7")]
    compaction: Option<CompactionRequest>,
    #[prost(message, optional, tag = "8")]
    lease_grant: Option<LeaseGrantRequest>,
    #[prost(message, optional, tag = "9")]
    lease_revoke: Option<LeaseRevokeRequest>,
    #[prost(message, optional, tag = "10")]
    alarm: Option<AlarmRequest>,
    #[prost(message, optional, tag = "11")]
    lease_checkpoint: Option<LeaseCheckpointRequest>,
    #[prost(message, optional, tag = "1000")]
    auth_enable: Option<AuthEnableRequest>,
    #[prost(message, optional, tag = "1011")]
    auth_disable: Option<AuthDisableRequest>,
    #[prost(bytes = "vec", optional, tag = "1012")]
    authenticate: Option<Vec<u8>>,
    #[prost(message, optional, tag = "1100")]
    user_add: Option<AuthUserAddRequest>,
    #[prost(message, optional, tag = "1101")]
    user_delete: Option<AuthUserDeleteRequest>,
    #[prost(bytes = "vec", optional, tag = "1102")]
    user_get: Option<Vec<u8>>,
    #[prost(message, optional, tag = "1103")]
    user_change_password: Option<AuthUserChangePasswordRequest>,
    #[prost(message, optional, tag = "1104")]
    user_grant_role: Option<AuthUserGrantRoleRequest>,
    #[prost(message, optional, tag = "1105")]
    user_revoke_role: Option<AuthUserRevokeRoleRequest>,
    #[prost(bytes = "vec", optional, tag = "1106")]
    user_list: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1107")]
    role_list: Option<Vec<u8>>,
    #[prost(message, optional, tag = "1200")]
    role_add: Option<AuthRoleAddRequest>,
    #[prost(message, optional, tag = "1201")]
    role_delete: Option<AuthRoleDeleteRequest>,
    #[prost(bytes = "vec", optional, tag = "1202")]
    role_get: Option<Vec<u8>>,
    #[prost(message, optional, tag = "1203")]
    role_grant_permission: Option<AuthRoleGrantPermissionRequest>,
    #[prost(message, optional, tag = "1204")]
    role_revoke_permission: Option<AuthRoleRevokePermissionRequest>,
    // etcd 3.5+: the cluster version, a member's attributes, a downgrade's target.
    #[prost(bytes = "vec", optional, tag = "1300")]
    cluster_version_set: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1301")]
    member_attr_set: Option<Vec<u8>>,
    #[prost(bytes = "vec", optional, tag = "1302")]
    downgrade_info_set: Option<Vec<u8>>,
}

/// etcd's v2 `Request`: what etcd 3.4 proposes for its v2 store (members publishing
/// their names, the cluster version, TTL syncs).
#[derive(Clone, PartialEq, Message)]
struct V2Request {
    #[prost(string, tag = "2")]
    method: String,
    #[prost(string, tag = "3")]
    path: String,
}

/// What replay needs to decide as etcd's leader and apply did.
#[derive(Clone, Copy, Debug)]
pub struct Replay {
    /// etcd's lessor gives a lease at least this TTL (1.5 election timeouts).
    pub min_lease_ttl: i64,
    /// The cost of the bcrypt hash of a password etcd 3.4 logged in the clear.
    pub bcrypt_cost: u32,
}

/// What one normal entry of etcd's log is to us.
#[derive(Debug)]
pub enum Translated {
    /// A write to apply, as our log would carry it.
    Command(Box<Command>),
    /// Changes nothing we keep: a leader's empty entry, a read or an authentication
    /// through the log, etcd's v2 store or its cluster-version bookkeeping.
    Nothing,
}

/// Translates the data of one normal entry; `Err` says why it cannot be applied here.
pub fn translate(data: &[u8], replay: &Replay) -> Result<Translated, String> {
    if data.is_empty() {
        return Ok(Translated::Nothing);
    }
    let request = match InternalRaftRequest::decode(data) {
        Ok(request) if request.header.is_some() => request,
        // etcd's own test: what is not a v3 request is a v2 one.
        _ => {
            return match V2Request::decode(data) {
                Ok(v2) if !v2.method.is_empty() => {
                    tracing::debug!(method = %v2.method, path = %v2.path, "skipping etcd's v2 store request");
                    Ok(Translated::Nothing)
                }
                _ => Err("neither a v3 nor a v2 request".into()),
            };
        }
    };
    let command = |request: CommandRequest| {
        Ok(Translated::Command(Box::new(Command {
            request: Some(request),
            // Applied as the cluster's own: etcd authorised it when it was proposed.
            auth_revision: 0,
            auth_checked: false,
        })))
    };
    let auth = |request: AuthRequest| {
        command(CommandRequest::Auth(AuthCommand {
            request: Some(request),
        }))
    };
    let hashed = |name: &str, password: String, hashed: String, no_password: bool| {
        if no_password || !hashed.is_empty() {
            return Ok(hashed);
        }
        password::hash(&password, replay.bcrypt_cost)
            .map_err(|e| format!("the password of user {name:?}: {e}"))
    };
    if let Some(put) = request.put {
        return command(CommandRequest::Put(put));
    }
    if let Some(delete) = request.delete_range {
        return command(CommandRequest::DeleteRange(delete));
    }
    if let Some(txn) = request.txn {
        return command(CommandRequest::Txn(txn));
    }
    if let Some(compaction) = request.compaction {
        return command(CommandRequest::Compaction(compaction));
    }
    if let Some(mut grant) = request.lease_grant {
        // As etcd's lessor.Grant: never shorter than the minimum.
        grant.ttl = grant.ttl.max(replay.min_lease_ttl);
        return command(CommandRequest::LeaseGrant(grant));
    }
    if let Some(revoke) = request.lease_revoke {
        return command(CommandRequest::LeaseRevoke(revoke));
    }
    if let Some(alarm) = request.alarm {
        return command(CommandRequest::Alarm(alarm));
    }
    if let Some(checkpoint) = request.lease_checkpoint {
        return command(CommandRequest::LeaseCheckpoint(checkpoint));
    }
    if let Some(enable) = request.auth_enable {
        return auth(AuthRequest::Enable(enable));
    }
    if let Some(disable) = request.auth_disable {
        return auth(AuthRequest::Disable(disable));
    }
    if let Some(mut add) = request.user_add {
        let no_password = add.options.as_ref().is_some_and(|o| o.no_password);
        add.hashed_password = hashed(
            &add.name,
            std::mem::take(&mut add.password),
            std::mem::take(&mut add.hashed_password),
            no_password,
        )?;
        return auth(AuthRequest::UserAdd(add));
    }
    if let Some(delete) = request.user_delete {
        return auth(AuthRequest::UserDelete(delete));
    }
    if let Some(mut change) = request.user_change_password {
        change.hashed_password = hashed(
            &change.name,
            std::mem::take(&mut change.password),
            std::mem::take(&mut change.hashed_password),
            false,
        )?;
        return auth(AuthRequest::UserChangePassword(change));
    }
    if let Some(grant) = request.user_grant_role {
        return auth(AuthRequest::UserGrantRole(grant));
    }
    if let Some(revoke) = request.user_revoke_role {
        return auth(AuthRequest::UserRevokeRole(revoke));
    }
    if let Some(add) = request.role_add {
        return auth(AuthRequest::RoleAdd(add));
    }
    if let Some(delete) = request.role_delete {
        return auth(AuthRequest::RoleDelete(delete));
    }
    if let Some(grant) = request.role_grant_permission {
        return auth(AuthRequest::RoleGrantPermission(grant));
    }
    if let Some(revoke) = request.role_revoke_permission {
        return auth(AuthRequest::RoleRevokePermission(revoke));
    }
    let changes_nothing = [
        &request.range,
        &request.authenticate,
        &request.user_get,
        &request.user_list,
        &request.role_list,
        &request.role_get,
        &request.cluster_version_set,
        &request.member_attr_set,
        &request.downgrade_info_set,
    ]
    .iter()
    .any(|field| field.is_some());
    match changes_nothing {
        true => Ok(Translated::Nothing),
        false => Err("a request this build does not know".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLAY: Replay = Replay {
        min_lease_ttl: 2,
        bcrypt_cost: 4,
    };

    fn v3(request: InternalRaftRequest) -> Vec<u8> {
        InternalRaftRequest {
            header: Some(RequestHeader { id: 7 }),
            ..request
        }
        .encode_to_vec()
    }

    fn translated(data: &[u8]) -> Option<CommandRequest> {
        match translate(data, &REPLAY).expect("translates") {
            Translated::Command(command) => command.request,
            Translated::Nothing => None,
        }
    }

    #[test]
    fn writes_become_our_commands() {
        let put = PutRequest {
            key: b"k".to_vec().into(),
            value: b"v".to_vec().into(),
            ..Default::default()
        };
        let data = v3(InternalRaftRequest {
            put: Some(put.clone()),
            ..Default::default()
        });
        assert_eq!(translated(&data), Some(CommandRequest::Put(put)));
        let grant = v3(InternalRaftRequest {
            lease_grant: Some(LeaseGrantRequest { ttl: 1, id: 5 }),
            ..Default::default()
        });
        assert_eq!(
            translated(&grant),
            Some(CommandRequest::LeaseGrant(LeaseGrantRequest {
                ttl: 2,
                id: 5
            })),
            "etcd's minimum TTL"
        );
    }

    #[test]
    fn a_password_logged_in_the_clear_is_hashed() {
        let data = v3(InternalRaftRequest {
            user_add: Some(AuthUserAddRequest {
                name: "alice".into(),
                password: "secret".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        let Some(CommandRequest::Auth(AuthCommand {
            request: Some(AuthRequest::UserAdd(add)),
        })) = translated(&data)
        else {
            panic!("not a user add");
        };
        assert!(add.password.is_empty(), "no password travels in our log");
        assert!(password::is_encoded_hash(&add.hashed_password));
    }

    #[test]
    fn reads_empty_entries_and_v2_requests_change_nothing() {
        assert_eq!(translated(&[]), None);
        let range = v3(InternalRaftRequest {
            range: Some(Vec::new()),
            ..Default::default()
        });
        assert_eq!(translated(&range), None);
        let v2 = V2Request {
            method: "PUT".into(),
            path: "/0/members/8e9e05c52164694d/attributes".into(),
        }
        .encode_to_vec();
        assert_eq!(translated(&v2), None);
    }

    #[test]
    fn what_is_not_known_is_refused() {
        let unknown = v3(InternalRaftRequest::default());
        assert!(translate(&unknown, &REPLAY).is_err());
        assert!(translate(&[0xff, 0xff, 0xff], &REPLAY).is_err());
    }
}
