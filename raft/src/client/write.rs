//! Writes: propose on the leader, from whichever node the client reached.
//!
//! This file owns the write path's retry decisions. It must never resend a command
//! after a failure that leaves its fate unknown (a timeout, a dropped connection after
//! the request left, a discarded log entry): only redirects and failed dials retry.

use openraft::error::{ClientWriteError, RaftError};
use openraft::storage::RaftStateMachine;
use tokio::time::Instant;
use tonic::Code;

use super::{with_timeout, Attempt, Pause, RaftClient, Route, WriteError};
use crate::channels::{is_connect_failure, Lane};
use crate::pb;
use crate::types::{Command, CommandOutcome, Member, NodeId, TypeConfig};

impl<SM> RaftClient<SM>
where
    SM: RaftStateMachine<TypeConfig>,
{
    /// Proposes `cmd` through the current leader and returns the outcome of applying it.
    ///
    /// On a follower the command is forwarded to the leader; the caller never sees "not
    /// leader". Gives up after the request timeout.
    pub async fn write(&self, cmd: Command) -> Result<CommandOutcome, WriteError> {
        let deadline = self.deadline();
        let mut redirect = None;
        loop {
            let attempt = match self.route(redirect.take()) {
                Route::NoLeader => match self.wait_for_leader(deadline).await {
                    Pause::Again => continue,
                    Pause::Deadline => return Err(WriteError::NoLeader),
                    Pause::Stopped(why) => return Err(WriteError::Stopped(why)),
                },
                Route::Local => self.propose_locally(&cmd, deadline).await,
                Route::Remote(leader, member) => {
                    self.forward(leader, &member, &cmd, deadline).await
                }
            };
            match attempt {
                Attempt::Done(outcome) => return Ok(outcome),
                Attempt::Failed(e) => return Err(e),
                Attempt::Retry {
                    tried,
                    redirect: next,
                    reason,
                } => {
                    redirect = next;
                    match self.pause(tried, deadline).await {
                        Pause::Again => {}
                        Pause::Deadline => return Err(reason),
                        Pause::Stopped(why) => return Err(WriteError::Stopped(why)),
                    }
                }
            }
        }
    }

    async fn propose_locally(
        &self,
        cmd: &Command,
        deadline: Instant,
    ) -> Attempt<CommandOutcome, WriteError> {
        // Dropping client_write at the deadline does not withdraw the entry; that is
        // why the answer is Timeout, not "not applied".
        match tokio::time::timeout_at(deadline, self.raft.client_write(cmd.clone())).await {
            Err(_) => Attempt::Failed(WriteError::Timeout),
            Ok(Ok(response)) => Attempt::Done(response.data),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(to)))) => Attempt::Retry {
                tried: Some(self.local_id()),
                redirect: Some(to.into()),
                reason: WriteError::NoLeader,
            },
            Ok(Err(RaftError::APIError(ClientWriteError::LogEntryDiscarded(_)))) => {
                Attempt::Failed(WriteError::LeaderChanged)
            }
            // Membership and precondition errors cannot come from a plain command.
            Ok(Err(RaftError::APIError(other))) => {
                Attempt::Failed(WriteError::Network(other.to_string()))
            }
            Ok(Err(RaftError::Fatal(fatal))) => {
                Attempt::Failed(WriteError::Stopped(fatal.to_string()))
            }
        }
    }

    async fn forward(
        &self,
        leader: NodeId,
        member: &Member,
        cmd: &Command,
        deadline: Instant,
    ) -> Attempt<CommandOutcome, WriteError> {
        let not_sent = Attempt::Retry {
            tried: Some(leader),
            redirect: None,
            reason: WriteError::NoLeader,
        };
        let pooled = match tokio::time::timeout_at(
            deadline,
            self.channels.get(leader, member, Lane::Forward),
        )
        .await
        {
            Ok(Ok(pooled)) => pooled,
            Ok(Err(e)) => {
                tracing::debug!(leader, error = %e, "cannot reach leader to forward a write");
                return not_sent;
            }
            Err(_) => return not_sent,
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let request = with_timeout(
            pb::ProposeCommandRequest {
                command: cmd.0.clone(),
            },
            remaining,
        );
        let mut client = pooled.client();
        let reply = match tokio::time::timeout_at(deadline, client.propose_command(request)).await {
            Ok(Ok(reply)) => reply.into_inner(),
            Ok(Err(status)) => {
                self.channels.discard(leader, Lane::Forward, &pooled);
                if is_connect_failure(&status) {
                    tracing::debug!(leader, error = %status, "leader unreachable; write not sent");
                    return not_sent;
                }
                tracing::debug!(leader, code = ?status.code(), error = %status.message(), "forwarded write failed");
                return Attempt::Failed(match status.code() {
                    Code::Aborted => WriteError::LeaderChanged,
                    // Refused before proposing.
                    Code::InvalidArgument
                    | Code::FailedPrecondition
                    | Code::ResourceExhausted
                    | Code::OutOfRange
                    | Code::Unimplemented => WriteError::Network(status.message().to_owned()),
                    // The request may have reached the leader's log.
                    _ => WriteError::Timeout,
                });
            }
            Err(_) => {
                self.channels.discard(leader, Lane::Forward, &pooled);
                return Attempt::Failed(WriteError::Timeout);
            }
        };
        match (reply.outcome, reply.leader_redirect) {
            (Some(outcome), None) => Attempt::Done(CommandOutcome(outcome)),
            (None, Some(redirect)) => {
                tracing::debug!(tried = leader, hint = ?redirect.leader_id, "write redirected");
                Attempt::Retry {
                    tried: Some(leader),
                    redirect: Some(redirect.into()),
                    reason: WriteError::NoLeader,
                }
            }
            // Malformed: the leader may have applied the command, so its fate is unknown.
            _ => {
                tracing::warn!(
                    leader,
                    "ProposeCommand response sets neither or both of outcome and leader_redirect"
                );
                Attempt::Failed(WriteError::Timeout)
            }
        }
    }
}
