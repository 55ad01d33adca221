//! How services act for a caller: authorise, then propose or read, and do both again
//! when the auth store changed in between, as etcd's `raftRequest` and `doSerialize`
//! loops do. Handlers call these instead of `Node::propose` for clients' requests.
//!
//! This module holds no permission rules (`auth::authorize` does) and no request
//! semantics.

use tonic::Status;

use super::status;
use crate::auth::{Action, AuthError, Caller, Grant};
use crate::node::Node;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::command::Command;

/// How many times a request is authorised again because the auth store changed under
/// it before the client is told to retry. Auth changes are rare; only a storm of them
/// exhausts this.
const ATTEMPTS: usize = 5;

/// Authorises `actions` for `caller` against one auth state.
async fn decide<'a>(
    node: &Node,
    caller: &Caller,
    actions: impl Iterator<Item = Action<'a>> + Clone,
) -> Result<Result<Grant, AuthError>, Status> {
    let auth = node.auth();
    Ok(match auth.authorize_all(caller, actions.clone()) {
        Err(_) => {
            // Refusals are decided on an auth store that has every change committed
            // before the call: a grant, a user, or a simple token (etcd's index
            // waiter) made through another member a moment ago may not be applied
            // here yet. Catch up once, then decide. Grants need no such wait: the log
            // checks their auth revision.
            node.read_barrier().await?;
            auth.authorize_all(caller, actions)
        }
        granted => granted,
    })
}

/// Authorises `actions` for `caller` against one auth state, or refuses in etcd's
/// words.
pub async fn check(node: &Node, caller: &Caller, actions: &[Action<'_>]) -> Result<Grant, Status> {
    decide(node, caller, actions.iter().copied())
        .await?
        .map_err(status::from_auth)
}

/// As [`check`], refusing as etcd's maintenance RPCs do (`status::from_auth_unconverted`).
pub async fn check_unconverted(
    node: &Node,
    caller: &Caller,
    actions: &[Action<'_>],
) -> Result<Grant, Status> {
    decide(node, caller, actions.iter().copied())
        .await?
        .map_err(status::from_auth_unconverted)
}

/// After a local read authorised by `grant`: etcd's `doSerialize` check that the auth
/// store did not change while the read ran, so that a permission revoked meanwhile is
/// not used. The client authorises again and retries.
pub fn confirm(node: &Node, grant: Grant) -> Result<(), Status> {
    if grant.checked && node.store().auth().revision() != grant.revision {
        return Err(status::from_auth(AuthError::AuthOldRevision));
    }
    Ok(())
}

/// Proposes `request` for `caller`, authorised for what the request itself needs and
/// for `also` (against one auth state), at the auth revision the log then checks. A
/// command refused at apply time because the auth store changed since is authorised
/// again once this member has applied the change.
pub async fn propose(
    node: &Node,
    caller: &Caller,
    request: CommandRequest,
    also: &[Action<'_>],
) -> Result<Option<Outcome>, Status> {
    let mut command = Command {
        auth_revision: 0,
        auth_checked: false,
        request: Some(request),
    };
    for _ in 0..ATTEMPTS {
        let needs = command.request.as_ref().map(Action::of_command);
        let grant = decide(node, caller, needs.into_iter().chain(also.iter().copied()))
            .await?
            .map_err(status::from_auth)?;
        command.auth_revision = grant.revision;
        command.auth_checked = grant.checked;
        match node.propose_command(&command).await {
            Err(refusal) if refusal.is_auth_old_revision() => {
                // The change was applied where the command was; wait until it is
                // here too, or the next attempt would be decided on the old store.
                node.read_barrier().await?;
            }
            outcome => return Ok(outcome?),
        }
    }
    Err(status::from_auth(AuthError::AuthOldRevision))
}
