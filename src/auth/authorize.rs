//! The one entry point every service calls before it reads or proposes:
//! [`Auth::authorize`], which finds out who asks (a token, else with
//! `--client-cert-auth` the client certificate's Common Name) and whether the applied
//! auth store lets them do what they ask, as etcd's `isOpPermitted` and
//! `IsAdminPermitted` do.
//!
//! A grant names the auth revision it was decided at; a write carries it into the log,
//! where applying it fails if the auth store has changed since (see `store::write`),
//! so that a permission revoked before the write's turn is never used. This module
//! never reads keys and never logs a token.

use std::time::SystemTime;

use super::Auth;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::etcdserverpb::request_op::Request as Op;
use crate::proto::etcdserverpb::{RequestOp, TxnRequest};
use crate::store::auth::error::AuthError;
use crate::store::auth::permissions::Need;
use crate::store::auth::state::AuthState;
use crate::transport::ConnectionInfo;

/// The metadata key etcd's gRPC clients send their token under.
const TOKEN_KEY: &str = "token";
/// The key etcd's gRPC gateway (and some clients) send it under.
const AUTHORIZATION_KEY: &str = "authorization";
/// Present on requests etcd's gRPC gateway relays: the certificate is the gateway's,
/// never the user's.
const GATEWAY_KEY: &str = "grpcgateway-accept";

/// Who a request says it comes from, taken from it before its body is consumed.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    token: Option<String>,
    common_name: Option<String>,
}

impl Caller {
    pub fn of<T>(request: &tonic::Request<T>) -> Caller {
        let metadata = request.metadata();
        let token = metadata
            .get(TOKEN_KEY)
            .or_else(|| metadata.get(AUTHORIZATION_KEY))
            // A token that is not text is no token anyone was given.
            .map(|value| value.to_str().unwrap_or_default().to_owned());
        let common_name = if metadata.contains_key(GATEWAY_KEY) {
            None
        } else {
            request
                .extensions()
                .get::<ConnectionInfo>()
                .and_then(|info| info.client_common_name.clone())
        };
        Caller { token, common_name }
    }

    /// `message` as a request to another member (the leader) on this caller's behalf:
    /// it carries the caller's token, so that the other member decides for the same
    /// caller.
    pub fn relayed<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(token) = self
            .token
            .as_deref()
            .and_then(|t| tonic::metadata::MetadataValue::try_from(t).ok())
        {
            request.metadata_mut().insert(TOKEN_KEY, token);
        }
        request
    }
}

/// What a request asks to do, in the terms permissions are granted in.
#[derive(Clone, Copy, Debug)]
pub enum Action<'a> {
    /// Read `key`..`range_end` (Range, Watch creation).
    Read {
        key: &'a [u8],
        range_end: &'a [u8],
    },
    Put {
        key: &'a [u8],
        prev_kv: bool,
    },
    DeleteRange {
        key: &'a [u8],
        range_end: &'a [u8],
        prev_kv: bool,
    },
    /// Every compare and every operation of both branches, nested ones too.
    Txn(&'a TxnRequest),
    /// Write every key attached to a lease: LeaseRevoke, LeaseKeepAlive, a put (plain
    /// or in a transaction) that attaches to it (etcd's `checkLeasePuts` and
    /// `checkLeaseRenew`). Root may, whatever the keys.
    WriteKeys(&'a [bytes::Bytes]),
    /// Read every key attached to a lease: LeaseTimeToLive with keys, and every key of
    /// every lease for LeaseLeases (etcd's `checkLeaseTimeToLive`, `checkLeaseLeases`).
    ReadKeys(&'a [bytes::Bytes]),
    /// Root only: auth and member administration, alarms, maintenance.
    Admin,
    /// UserGet: root, or the user itself.
    UserGet(&'a str),
    /// RoleGet: root, or a holder of the role.
    RoleGet(&'a str),
    /// What etcd lets anyone do (Authenticate...): no identity needed, but a token that
    /// is sent must be valid.
    Authenticated,
    /// etcd's `requireAuthInfo` (3.6.9, 3.5.28, 3.4.42; Status, Alarm GET and
    /// MemberList since etcd pull request 21538): any user, but a user; with auth on, a
    /// request with neither a token nor a certificate's name is refused. Every Lease
    /// call needs it, keepalives and LeaseLeases included.
    LoggedIn,
}

impl<'a> Action<'a> {
    /// What proposing `request` needs, as far as the request itself tells: the keys it
    /// writes and reads. Requests whose needs depend on more (a lease's keys) or that
    /// are administration are named by the caller too.
    pub fn of_command(request: &'a CommandRequest) -> Action<'a> {
        match request {
            CommandRequest::Put(put) => Action::Put {
                key: &put.key,
                prev_kv: put.prev_kv,
            },
            CommandRequest::DeleteRange(delete) => Action::DeleteRange {
                key: &delete.key,
                range_end: &delete.range_end,
                prev_kv: delete.prev_kv,
            },
            CommandRequest::Txn(txn) => Action::Txn(txn),
            CommandRequest::LeaseGrant(_) | CommandRequest::LeaseRevoke(_) => Action::LoggedIn,
            _ => Action::Authenticated,
        }
    }
}

/// A request authorised at an auth revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grant {
    pub revision: u64,
    /// Auth was on: the request was checked against someone's permissions.
    pub checked: bool,
}

impl Auth {
    /// Decides `action` for `caller` against the applied auth store. With auth off,
    /// everything is granted (at the current revision, so that a write racing
    /// AuthEnable is authorised again).
    pub fn authorize(&self, caller: &Caller, action: Action<'_>) -> Result<Grant, AuthError> {
        self.authorize_all(caller, [action])
    }

    /// Decides several actions of one request against one auth state.
    pub fn authorize_all<'a>(
        &self,
        caller: &Caller,
        actions: impl IntoIterator<Item = Action<'a>>,
    ) -> Result<Grant, AuthError> {
        let state = self.store.auth();
        #[cfg(feature = "planted-bugs")]
        let state = if crate::planted::is_planted(crate::planted::PlantedBug::StaleAuthRevision) {
            self.store.auth_before_last_change()
        } else {
            state
        };
        if !state.enabled() {
            // As etcd 3.4: a token means nothing while auth is off, and says so.
            if caller.token.is_some() {
                return Err(AuthError::InvalidAuthToken);
            }
            return Ok(Grant {
                revision: state.revision(),
                checked: false,
            });
        }
        let identity = self.identify(caller, &state);
        // A token that is sent must be valid, even for what anyone may do.
        if let Err(AuthError::InvalidAuthToken) = identity {
            return Err(AuthError::InvalidAuthToken);
        }
        for action in actions {
            match action {
                Action::Authenticated => continue,
                Action::LoggedIn => {
                    identity.as_ref().map_err(|refusal| *refusal)?;
                    continue;
                }
                _ => {}
            }
            let (user, revision) = identity.as_ref().map_err(|refusal| *refusal)?;
            // etcd's IsAdminPermitted never looks at the token's revision; the key
            // checks (isOpPermitted) do.
            let administrative = matches!(
                action,
                Action::Admin | Action::UserGet(_) | Action::RoleGet(_)
            );
            if !administrative && *revision < state.revision() {
                return Err(AuthError::AuthOldRevision);
            }
            permitted(&state, user, action)?;
        }
        Ok(Grant {
            revision: state.revision(),
            checked: true,
        })
    }

    /// The user a request acts as, and the auth revision its credential was issued at.
    fn identify(&self, caller: &Caller, state: &AuthState) -> Result<(String, u64), AuthError> {
        if let Some(token) = &caller.token {
            return match &self.jwt {
                Some(jwt) => jwt
                    .verify(token, SystemTime::now())
                    .ok_or(AuthError::InvalidAuthToken),
                None => self
                    .simple
                    .user_of(token)
                    .map(|user| (user, state.revision()))
                    .ok_or(AuthError::InvalidAuthToken),
            };
        }
        match (&caller.common_name, self.client_cert_auth) {
            (Some(name), true) => Ok((name.clone(), state.revision())),
            _ => Err(AuthError::UserEmpty),
        }
    }
}

fn need(
    state: &AuthState,
    user: &str,
    need: Need,
    key: &[u8],
    end: &[u8],
) -> Result<(), AuthError> {
    if state.permits(user, need, key, end) {
        Ok(())
    } else {
        Err(AuthError::PermissionDenied)
    }
}

fn admin(state: &AuthState, user: &str) -> Result<(), AuthError> {
    match state.user(user) {
        None => Err(AuthError::UserNotFound),
        Some(_) if state.is_root(user) => Ok(()),
        Some(_) => Err(AuthError::PermissionDenied),
    }
}

fn permitted(state: &AuthState, user: &str, action: Action<'_>) -> Result<(), AuthError> {
    match action {
        Action::Read { key, range_end } => need(state, user, Need::Read, key, range_end),
        Action::Put { key, prev_kv } => {
            need(state, user, Need::Write, key, &[])?;
            if prev_kv {
                need(state, user, Need::Read, key, &[])?;
            }
            Ok(())
        }
        Action::DeleteRange {
            key,
            range_end,
            prev_kv,
        } => {
            if prev_kv {
                need(state, user, Need::Read, key, range_end)?;
            }
            need(state, user, Need::Write, key, range_end)
        }
        Action::Txn(txn) => txn_permitted(state, user, txn),
        Action::WriteKeys(keys) => keys
            .iter()
            .try_for_each(|key| need(state, user, Need::Write, key, &[])),
        Action::ReadKeys(keys) => keys
            .iter()
            .try_for_each(|key| need(state, user, Need::Read, key, &[])),
        Action::Admin => admin(state, user),
        Action::UserGet(name) if name == user => Ok(()),
        Action::RoleGet(role) if state.has_role(user, role) => Ok(()),
        Action::UserGet(_) | Action::RoleGet(_) => admin(state, user),
        Action::Authenticated | Action::LoggedIn => Ok(()),
    }
}

/// etcd's `checkTxnAuth`, with nested transactions checked as their parent.
fn txn_permitted(state: &AuthState, user: &str, txn: &TxnRequest) -> Result<(), AuthError> {
    for compare in &txn.compare {
        need(state, user, Need::Read, &compare.key, &compare.range_end)?;
    }
    ops_permitted(state, user, &txn.success)?;
    ops_permitted(state, user, &txn.failure)
}

fn ops_permitted(state: &AuthState, user: &str, ops: &[RequestOp]) -> Result<(), AuthError> {
    for op in ops {
        match &op.request {
            Some(Op::RequestRange(r)) => permitted(
                state,
                user,
                Action::Read {
                    key: &r.key,
                    range_end: &r.range_end,
                },
            )?,
            Some(Op::RequestPut(p)) => permitted(
                state,
                user,
                Action::Put {
                    key: &p.key,
                    prev_kv: p.prev_kv,
                },
            )?,
            Some(Op::RequestDeleteRange(d)) => permitted(
                state,
                user,
                Action::DeleteRange {
                    key: &d.key,
                    range_end: &d.range_end,
                    prev_kv: d.prev_kv,
                },
            )?,
            Some(Op::RequestTxn(nested)) => txn_permitted(state, user, nested)?,
            None => {}
        }
    }
    Ok(())
}
