//! Writes: propose on the leader, from whichever node the client reached.
//!
//! This file owns the write path's retry decisions. It must never resend a command
//! after a failure that leaves its fate unknown (a timeout, a dropped connection after
//! the request left, a discarded log entry): only redirects and failed dials retry.

use openraft::error::{ClientWriteError, RaftError};
use openraft::storage::RaftStateMachine;
use tokio::time::Instant;
use tonic::Code;

use super::forward::Delivery;
use super::{Attempt, Pause, RaftClient, Route, WriteError};
use crate::metrics;
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
        // etcd's proposal gauges count on the member that took the request, as here.
        let _pending = metrics::PendingProposal::start();
        let written = self.write_through_leader(cmd).await;
        if written.is_err() {
            metrics::proposal_failed();
        }
        written
    }

    async fn write_through_leader(&self, cmd: Command) -> Result<CommandOutcome, WriteError> {
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
        let linger = self.options.request_timeout;
        let opened = self
            .forwarder
            .stream_to(&self.channels, leader, member, linger);
        let stream = match tokio::time::timeout_at(deadline, opened).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(leader, error = %e, "cannot reach leader to forward a write");
                return not_sent;
            }
            Err(_) => return not_sent,
        };
        metrics::write_forwarded();
        let delivery = match stream.send(cmd.0.clone()) {
            Some(answer) => match tokio::time::timeout_at(deadline, answer).await {
                // A writer dropped without an answer was never handed to the stream.
                Ok(delivery) => delivery.unwrap_or(Delivery::NotSent),
                Err(_) => {
                    // The stream may be stuck on a dead connection: the next write
                    // dials anew.
                    self.forwarder.close(&stream, &self.channels);
                    return Attempt::Failed(WriteError::Timeout);
                }
            },
            None => Delivery::NotSent,
        };
        let outcome = match delivery {
            Delivery::Answered(outcome) => outcome,
            Delivery::NotSent => {
                // The stream could not open or had ended: the next attempt dials anew.
                self.forwarder.close(&stream, &self.channels);
                return not_sent;
            }
            Delivery::Lost => {
                self.forwarder.close(&stream, &self.channels);
                #[cfg(feature = "planted-bugs")]
                if crate::planted::is_planted(crate::planted::RaftBug::ForwarderRetriesLostWrites) {
                    return not_sent;
                }
                tracing::debug!(leader, "forwarding stream broke; write fate unknown");
                return Attempt::Failed(WriteError::Timeout);
            }
        };
        match (outcome.outcome, outcome.leader_redirect, outcome.error) {
            (Some(outcome), None, None) => Attempt::Done(CommandOutcome(outcome)),
            (None, Some(redirect), None) => {
                tracing::debug!(tried = leader, hint = ?redirect.leader_id, "write redirected");
                Attempt::Retry {
                    tried: Some(leader),
                    redirect: Some(redirect.into()),
                    reason: WriteError::NoLeader,
                }
            }
            (None, None, Some(error)) => {
                let code = Code::from_i32(error.code);
                tracing::debug!(leader, ?code, error = %error.message, "forwarded write failed");
                Attempt::Failed(match code {
                    Code::Aborted => WriteError::LeaderChanged,
                    // Refused before proposing.
                    Code::FailedPrecondition => WriteError::Network(error.message),
                    // The command may have reached the leader's log.
                    _ => WriteError::Timeout,
                })
            }
            // Malformed: the leader may have applied the command, so its fate is unknown.
            _ => {
                tracing::warn!(
                    leader,
                    "forwarded outcome sets none or several of outcome, leader_redirect, error"
                );
                Attempt::Failed(WriteError::Timeout)
            }
        }
    }
}
