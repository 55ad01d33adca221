//! etcdserverpb.Auth: enabling auth, authenticating, and administering users and roles.
//!
//! Changes go through the log (`auth::state` says what each means); the member that
//! takes a request hashes a new password, or checks the one presented, first, so that
//! no password ever reaches the log. Reads (UserGet, RoleGet, the lists, AuthStatus)
//! are answered from this member's applied auth store after a read index, as etcd
//! answers them after its log. Handlers hold no auth rules of their own.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::{authorized, status};
use crate::auth::{password, simple_token, Action, AuthError, Caller};
use crate::node::Node;
use crate::proto::command::auth_command::Request as AuthRequest;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::command::{AuthCommand, AuthResult, Authenticate, Command};
use crate::proto::etcdserverpb::auth_server::Auth;
use crate::proto::etcdserverpb::*;

/// How many times an authentication is tried again because the auth store changed
/// between the password check and the log.
const ATTEMPTS: usize = 5;

pub struct AuthService {
    node: Arc<Node>,
}

impl AuthService {
    pub fn new(node: Arc<Node>) -> Self {
        AuthService { node }
    }

    fn header(&self) -> Result<ResponseHeader, Status> {
        Ok(self.node.current_header()?)
    }

    /// Proposes an administrative change for `caller` (root only once auth is on).
    async fn change(&self, caller: &Caller, request: AuthRequest) -> Result<AuthResult, Status> {
        let command = CommandRequest::Auth(AuthCommand {
            request: Some(request),
        });
        match authorized::propose(&self.node, caller, command, &[Action::Admin]).await? {
            Some(Outcome::Auth(result)) => Ok(result),
            other => Err(status::internal("auth", &format!("unexpected {other:?}"))),
        }
    }

    /// Authorises a read of the auth store and waits until it reflects every change
    /// committed before it.
    async fn before_read(&self, caller: &Caller, action: Action<'_>) -> Result<(), Status> {
        authorized::check(&self.node, caller, &[action]).await?;
        Ok(self.node.read_barrier().await?)
    }

    /// A new password's hash, as it travels in the log; off the async workers.
    async fn hash(&self, password: String) -> Result<String, Status> {
        let cost = self.node.auth().bcrypt_cost();
        self.node
            .offload()
            .run(move || password::hash(&password, cost))
            .await
            .map_err(|e| status::internal("hash", &e))?
            .map_err(|e| match e {
                // Go's bcrypt error, as etcd passes it on (not one of its own).
                password::PasswordError::TooLong => Status::unknown(e.to_string()),
                other => status::internal("hash", &other),
            })
    }

    /// The hash to store for a request that carries a password, a hash, or neither.
    async fn password_hash(
        &self,
        password: String,
        hashed_password: String,
        no_password: bool,
    ) -> Result<String, Status> {
        if no_password {
            return Ok(String::new());
        }
        if password.is_empty() && !hashed_password.is_empty() {
            // etcd 3.5+ clients may hash themselves; only a bcrypt hash is accepted.
            return match password::is_encoded_hash(&hashed_password) {
                true => Ok(hashed_password),
                false => Err(status::from_auth(AuthError::AuthFailed)),
            };
        }
        self.hash(password).await
    }
}

macro_rules! answered {
    ($response:ident { $($field:ident: $value:expr),* $(,)? }, $header:expr) => {
        Ok(Response::new($response {
            header: Some($header),
            $($field: $value,)*
        }))
    };
}

#[tonic::async_trait]
impl Auth for AuthService {
    async fn auth_enable(
        &self,
        request: Request<AuthEnableRequest>,
    ) -> Result<Response<AuthEnableResponse>, Status> {
        let caller = Caller::of(&request);
        self.change(&caller, AuthRequest::Enable(request.into_inner()))
            .await?;
        tracing::info!("authentication enabled");
        answered!(AuthEnableResponse {}, self.header()?)
    }

    async fn auth_disable(
        &self,
        request: Request<AuthDisableRequest>,
    ) -> Result<Response<AuthDisableResponse>, Status> {
        let caller = Caller::of(&request);
        self.change(&caller, AuthRequest::Disable(request.into_inner()))
            .await?;
        tracing::info!("authentication disabled");
        answered!(AuthDisableResponse {}, self.header()?)
    }

    /// etcd 3.5+.
    async fn auth_status(
        &self,
        request: Request<AuthStatusRequest>,
    ) -> Result<Response<AuthStatusResponse>, Status> {
        let caller = Caller::of(&request);
        self.before_read(&caller, Action::Admin).await?;
        let state = self.node.store().auth();
        answered!(
            AuthStatusResponse {
                enabled: state.enabled(),
                auth_revision: state.revision(),
            },
            self.header()?
        )
    }

    async fn authenticate(
        &self,
        request: Request<AuthenticateRequest>,
    ) -> Result<Response<AuthenticateResponse>, Status> {
        let request = request.into_inner();
        // As etcd: decided on an auth store that has every change committed before
        // the call (a user just added through another member can log in here).
        self.node.read_barrier().await?;
        for _ in 0..ATTEMPTS {
            let state = self.node.store().auth();
            if !state.enabled() {
                return Err(status::from_auth(AuthError::AuthNotEnabled));
            }
            let stored = state
                .user(&request.name)
                .filter(|user| !user.options.as_ref().is_some_and(|o| o.no_password))
                .map(|user| user.password.clone());
            let presented = request.password.clone();
            let node = self.node.clone();
            let matches = self
                .node
                .offload()
                .run(move || node.auth().password_matches(&presented, stored.as_deref()))
                .await
                .map_err(|e| status::internal("authenticate", &e))?;
            if !matches {
                tracing::info!(user = %request.name, "authentication failed");
                return Err(status::from_auth(AuthError::AuthFailed));
            }
            let simple_token_prefix = if self.node.auth().uses_simple_tokens() {
                simple_token::new_prefix()
            } else {
                String::new()
            };
            let command = Command {
                // The password was checked against this revision: a change since
                // (a new password, a deleted user) makes the log refuse it.
                auth_revision: state.revision(),
                auth_checked: true,
                request: Some(CommandRequest::Auth(AuthCommand {
                    request: Some(AuthRequest::Authenticate(Authenticate {
                        name: request.name.clone(),
                        simple_token_prefix,
                    })),
                })),
            };
            match self.node.propose_command(&command).await {
                Err(refusal) if refusal.is_auth_old_revision() => {
                    self.node.read_barrier().await?;
                }
                Err(refusal) => return Err(refusal.into()),
                Ok(Some(Outcome::Auth(applied))) => {
                    let token = self
                        .node
                        .auth()
                        .issue_token(&request.name, applied.revision, applied.simple_token)
                        .map_err(|e| status::internal("sign token", &e))?;
                    return answered!(AuthenticateResponse { token: token }, self.header()?);
                }
                Ok(other) => return Err(status::internal("authenticate", &format!("{other:?}"))),
            }
        }
        Err(status::from_auth(AuthError::AuthOldRevision))
    }

    async fn user_add(
        &self,
        request: Request<AuthUserAddRequest>,
    ) -> Result<Response<AuthUserAddResponse>, Status> {
        let caller = Caller::of(&request);
        let mut add = request.into_inner();
        // Refused before any hashing, so that a stranger cannot make this member hash.
        authorized::check(&self.node, &caller, &[Action::Admin]).await?;
        let no_password = add.options.as_ref().is_some_and(|o| o.no_password);
        add.hashed_password = self
            .password_hash(
                std::mem::take(&mut add.password),
                std::mem::take(&mut add.hashed_password),
                no_password,
            )
            .await?;
        let name = add.name.clone();
        self.change(&caller, AuthRequest::UserAdd(add)).await?;
        tracing::info!(user = %name, "added a user");
        answered!(AuthUserAddResponse {}, self.header()?)
    }

    async fn user_get(
        &self,
        request: Request<AuthUserGetRequest>,
    ) -> Result<Response<AuthUserGetResponse>, Status> {
        let caller = Caller::of(&request);
        let get = request.into_inner();
        self.before_read(&caller, Action::UserGet(&get.name))
            .await?;
        let state = self.node.store().auth();
        let user = state
            .user(&get.name)
            .ok_or_else(|| status::from_auth(AuthError::UserNotFound))?;
        answered!(
            AuthUserGetResponse {
                roles: user.roles.clone()
            },
            self.header()?
        )
    }

    async fn user_list(
        &self,
        request: Request<AuthUserListRequest>,
    ) -> Result<Response<AuthUserListResponse>, Status> {
        let caller = Caller::of(&request);
        self.before_read(&caller, Action::Admin).await?;
        let users = self.node.store().auth().user_names();
        answered!(AuthUserListResponse { users: users }, self.header()?)
    }

    async fn user_delete(
        &self,
        request: Request<AuthUserDeleteRequest>,
    ) -> Result<Response<AuthUserDeleteResponse>, Status> {
        let caller = Caller::of(&request);
        let delete = request.into_inner();
        let name = delete.name.clone();
        self.change(&caller, AuthRequest::UserDelete(delete))
            .await?;
        tracing::info!(user = %name, "deleted a user");
        answered!(AuthUserDeleteResponse {}, self.header()?)
    }

    async fn user_change_password(
        &self,
        request: Request<AuthUserChangePasswordRequest>,
    ) -> Result<Response<AuthUserChangePasswordResponse>, Status> {
        let caller = Caller::of(&request);
        let mut change = request.into_inner();
        authorized::check(&self.node, &caller, &[Action::Admin]).await?;
        let no_password = self
            .node
            .store()
            .auth()
            .user(&change.name)
            .is_some_and(|u| u.options.as_ref().is_some_and(|o| o.no_password));
        change.hashed_password = self
            .password_hash(
                std::mem::take(&mut change.password),
                std::mem::take(&mut change.hashed_password),
                no_password,
            )
            .await?;
        let name = change.name.clone();
        self.change(&caller, AuthRequest::UserChangePassword(change))
            .await?;
        tracing::info!(user = %name, "changed a user's password");
        answered!(AuthUserChangePasswordResponse {}, self.header()?)
    }

    async fn user_grant_role(
        &self,
        request: Request<AuthUserGrantRoleRequest>,
    ) -> Result<Response<AuthUserGrantRoleResponse>, Status> {
        let caller = Caller::of(&request);
        self.change(&caller, AuthRequest::UserGrantRole(request.into_inner()))
            .await?;
        answered!(AuthUserGrantRoleResponse {}, self.header()?)
    }

    async fn user_revoke_role(
        &self,
        request: Request<AuthUserRevokeRoleRequest>,
    ) -> Result<Response<AuthUserRevokeRoleResponse>, Status> {
        let caller = Caller::of(&request);
        self.change(&caller, AuthRequest::UserRevokeRole(request.into_inner()))
            .await?;
        answered!(AuthUserRevokeRoleResponse {}, self.header()?)
    }

    async fn role_add(
        &self,
        request: Request<AuthRoleAddRequest>,
    ) -> Result<Response<AuthRoleAddResponse>, Status> {
        let caller = Caller::of(&request);
        self.change(&caller, AuthRequest::RoleAdd(request.into_inner()))
            .await?;
        answered!(AuthRoleAddResponse {}, self.header()?)
    }

    async fn role_get(
        &self,
        request: Request<AuthRoleGetRequest>,
    ) -> Result<Response<AuthRoleGetResponse>, Status> {
        let caller = Caller::of(&request);
        let get = request.into_inner();
        self.before_read(&caller, Action::RoleGet(&get.role))
            .await?;
        let state = self.node.store().auth();
        let role = state
            .role(&get.role)
            .ok_or_else(|| status::from_auth(AuthError::RoleNotFound))?;
        answered!(
            AuthRoleGetResponse {
                perm: state.role_permissions(role)
            },
            self.header()?
        )
    }

    async fn role_list(
        &self,
        request: Request<AuthRoleListRequest>,
    ) -> Result<Response<AuthRoleListResponse>, Status> {
        let caller = Caller::of(&request);
        self.before_read(&caller, Action::Admin).await?;
        let roles = self.node.store().auth().role_names();
        answered!(AuthRoleListResponse { roles: roles }, self.header()?)
    }

    async fn role_delete(
        &self,
        request: Request<AuthRoleDeleteRequest>,
    ) -> Result<Response<AuthRoleDeleteResponse>, Status> {
        let caller = Caller::of(&request);
        self.change(&caller, AuthRequest::RoleDelete(request.into_inner()))
            .await?;
        answered!(AuthRoleDeleteResponse {}, self.header()?)
    }

    async fn role_grant_permission(
        &self,
        request: Request<AuthRoleGrantPermissionRequest>,
    ) -> Result<Response<AuthRoleGrantPermissionResponse>, Status> {
        let caller = Caller::of(&request);
        self.change(
            &caller,
            AuthRequest::RoleGrantPermission(request.into_inner()),
        )
        .await?;
        answered!(AuthRoleGrantPermissionResponse {}, self.header()?)
    }

    async fn role_revoke_permission(
        &self,
        request: Request<AuthRoleRevokePermissionRequest>,
    ) -> Result<Response<AuthRoleRevokePermissionResponse>, Status> {
        let caller = Caller::of(&request);
        self.change(
            &caller,
            AuthRequest::RoleRevokePermission(request.into_inner()),
        )
        .await?;
        answered!(AuthRoleRevokePermissionResponse {}, self.header()?)
    }
}
