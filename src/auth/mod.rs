//! etcd's authentication and role-based access: who asks (tokens: `simple_token`, `jwt`;
//! passwords: `password`), and the one [`Auth::authorize`] entry point every service
//! calls before it reads or proposes (`authorize`), deciding against the applied users,
//! roles and key permissions.
//!
//! The store keeps the records and the applied state, and applies each auth change as
//! the log orders it (`store::auth`: `state`, `permissions`, `error`, named here too);
//! it never sees who asks. This module never logs a password, a hash or a token.

pub mod authorize;
pub mod jwt;
pub mod password;
pub mod simple_token;

// The applied auth state and what each auth change means live with the store, which
// applies them (`store::auth`); named here too for the callers of auth.
pub use crate::store::auth::{error, permissions, state};

use std::sync::Arc;

pub use authorize::{Action, Caller, Grant};
pub use error::AuthError;
pub use simple_token::SimpleTokens;

use crate::config::token_options::TokenOptions;
use crate::config::AuthConfig;
use crate::proto::command::auth_command::Request as AuthRequest;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::command::{Command, CommandResult};
use crate::store::RevisionStore;

/// One member's auth: the applied store, its tokens, and how it hashes passwords.
pub struct Auth {
    store: Arc<RevisionStore>,
    simple: Arc<SimpleTokens>,
    jwt: Option<jwt::JwtTokens>,
    bcrypt_cost: u32,
    client_cert_auth: bool,
    /// What an unknown user's password is compared against (`password::decoy_hash`).
    decoy: std::sync::OnceLock<String>,
}

impl Auth {
    /// `simple` is the token table the state machine fills as it applies
    /// authentications.
    pub fn new(
        store: Arc<RevisionStore>,
        simple: Arc<SimpleTokens>,
        config: &AuthConfig,
    ) -> Result<Auth, jwt::JwtError> {
        let jwt = match &config.token {
            TokenOptions::Simple => None,
            TokenOptions::Jwt(options) => Some(jwt::JwtTokens::new(options)?),
        };
        Ok(Auth {
            store,
            simple,
            jwt,
            bcrypt_cost: config.bcrypt_cost,
            client_cert_auth: config.client_cert_auth,
            decoy: std::sync::OnceLock::new(),
        })
    }

    pub fn store(&self) -> &Arc<RevisionStore> {
        &self.store
    }

    pub fn bcrypt_cost(&self) -> u32 {
        self.bcrypt_cost
    }

    /// Whether `password` is `user`'s, in the same time for every answer. Slow on
    /// purpose: run it off the async workers.
    pub fn password_matches(&self, password: &str, stored: Option<&[u8]>) -> bool {
        let decoy = self
            .decoy
            .get_or_init(|| password::decoy_hash(self.bcrypt_cost));
        password::matches(password, stored, decoy)
    }

    /// True while auth is on.
    pub fn enabled(&self) -> bool {
        self.store.auth().enabled()
    }

    /// True when authentications make simple tokens (no JWT configured).
    pub fn uses_simple_tokens(&self) -> bool {
        self.jwt.is_none()
    }

    /// The token an applied authentication of `user` at auth `revision` gives the
    /// client: the simple token every member now knows, or a JWT signed here.
    pub fn issue_token(
        &self,
        user: &str,
        revision: u64,
        simple_token: String,
    ) -> Result<String, jwt::JwtError> {
        match &self.jwt {
            None => Ok(simple_token),
            Some(jwt) => jwt.sign(user, revision, std::time::SystemTime::now()),
        }
    }
}

/// What the state machine tells the token table once a command is applied: the
/// simple token an authentication made, and the tokens a change invalidates (etcd's
/// `invalidateUser` and a disabled provider).
pub fn follow_applied(tokens: &SimpleTokens, command: &Command, result: &CommandResult) {
    let (Some(CommandRequest::Auth(auth)), Some(Outcome::Auth(applied))) =
        (&command.request, &result.result)
    else {
        return;
    };
    match &auth.request {
        Some(AuthRequest::Authenticate(who)) if !applied.simple_token.is_empty() => {
            tokens.register(applied.simple_token.clone(), who.name.clone());
        }
        Some(AuthRequest::UserDelete(user)) => tokens.forget_user(&user.name),
        Some(AuthRequest::UserChangePassword(user)) => tokens.forget_user(&user.name),
        Some(AuthRequest::Disable(_)) => tokens.clear(),
        _ => {}
    }
}
