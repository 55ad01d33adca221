//! Linearizable read barriers: after `read_barrier` returns, the local state machine
//! reflects every write acknowledged before the barrier started.
//!
//! This file owns obtaining a read index (locally on the leader, or from the leader
//! over the peer API) and waiting for local apply to reach it. It must never treat a
//! read index as valid without a quorum's confirmation: the leader's
//! `get_read_linearizer(ReadIndex)` provides that, and a follower only ever uses an
//! index the leader handed out.

use openraft::error::{LinearizableReadError, RaftError};
use openraft::raft::linearizable_read::{Linearizer, ReadLogId};
use openraft::storage::RaftStateMachine;
use openraft::ReadPolicy;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::Code;

use super::read_rounds::WaitingRead;
use super::{with_timeout, Attempt, Pause, RaftClient, ReadError, Route};
use crate::channels::{is_connect_failure, Lane};
use crate::codec;
use crate::metrics;
use crate::pb;
use crate::types::{LogId, Member, NodeId, TypeConfig};

impl<SM> RaftClient<SM>
where
    SM: RaftStateMachine<TypeConfig>,
{
    /// Returns once local state is at least as fresh as any write acknowledged before
    /// this call: the leader confirms it still leads with a quorum (ReadIndex) and this
    /// node applies up to the leader's read index. Gives up after the request timeout.
    pub async fn read_barrier(&self) -> Result<(), ReadError> {
        let fenced = self.read_index_then_apply().await;
        match &fenced {
            Ok(()) => {}
            Err(ReadError::Timeout) => {
                metrics::read_index_failed();
                metrics::read_index_slow();
            }
            Err(_) => metrics::read_index_failed(),
        }
        fenced
    }

    async fn read_index_then_apply(&self) -> Result<(), ReadError> {
        let deadline = self.deadline();
        let mut redirect = None;
        loop {
            let attempt = match self.route(redirect.take()) {
                Route::NoLeader => match self.wait_for_leader(deadline).await {
                    Pause::Again => continue,
                    Pause::Deadline => return Err(ReadError::NoLeader),
                    Pause::Stopped(why) => return Err(ReadError::Stopped(why)),
                },
                Route::Local => self.read_index_locally(deadline).await,
                Route::Remote(leader, member) => {
                    self.read_index_in_round(leader, member, deadline).await
                }
            };
            match attempt {
                Attempt::Done(linearizer) => return self.await_applied(linearizer, deadline).await,
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
                        Pause::Stopped(why) => return Err(ReadError::Stopped(why)),
                    }
                }
            }
        }
    }

    async fn read_index_locally(
        &self,
        deadline: Instant,
    ) -> Attempt<Linearizer<TypeConfig>, ReadError> {
        let tried = Some(self.local_id());
        match tokio::time::timeout_at(
            deadline,
            self.raft.get_read_linearizer(ReadPolicy::ReadIndex),
        )
        .await
        {
            Err(_) => Attempt::Failed(ReadError::Timeout),
            Ok(Ok(linearizer)) => {
                metrics::read_index_local();
                Attempt::Done(linearizer)
            }
            Ok(Err(RaftError::APIError(LinearizableReadError::ForwardToLeader(to)))) => {
                Attempt::Retry {
                    tried,
                    redirect: Some(to.into()),
                    reason: ReadError::LeaderChanged,
                }
            }
            Ok(Err(RaftError::APIError(LinearizableReadError::QuorumNotEnough(e)))) => {
                tracing::debug!(error = %e, "leadership not confirmed for a read");
                Attempt::Retry {
                    tried: None,
                    redirect: None,
                    reason: ReadError::Timeout,
                }
            }
            Ok(Err(RaftError::Fatal(fatal))) => {
                Attempt::Failed(ReadError::Stopped(fatal.to_string()))
            }
        }
    }

    /// A read index from the leader, shared with every read waiting for the same round
    /// (see `read_rounds`).
    async fn read_index_in_round(
        &self,
        leader: NodeId,
        member: Member,
        deadline: Instant,
    ) -> Attempt<Linearizer<TypeConfig>, ReadError> {
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::RaftBug::ReadTakesEarlierRound) {
            if let Some(earlier) = self.read_rounds.last_answer() {
                return earlier;
            }
        }
        let (answer, answered) = oneshot::channel();
        let read = WaitingRead {
            leader,
            member,
            answer,
        };
        if self.read_rounds.join(read) {
            let client = self.clone();
            tokio::spawn(async move { client.run_read_rounds().await });
        }
        match tokio::time::timeout_at(deadline, answered).await {
            Ok(Ok(attempt)) => attempt,
            // The runner stopped without answering (the runtime is shutting down).
            Ok(Err(_)) => Attempt::Failed(ReadError::Stopped("read-index rounds stopped".into())),
            Err(_) => Attempt::Failed(ReadError::Timeout),
        }
    }

    /// Runs rounds until no read waits: one ReadIndex request per round, to the leader
    /// the newest waiting read would ask, with a full request timeout of its own.
    async fn run_read_rounds(self) {
        while let Some(round) = self.read_rounds.next_round() {
            let Some(newest) = round.last() else { continue };
            let (leader, member) = (newest.leader, newest.member.clone());
            let attempt = self
                .read_index_remotely(leader, &member, self.deadline())
                .await;
            tracing::trace!(reads = round.len(), leader, "read-index round done");
            metrics::read_index_round(round.len());
            #[cfg(feature = "planted-bugs")]
            self.read_rounds.remember(&attempt);
            for read in round {
                let _ = read.answer.send(attempt.clone());
            }
        }
    }

    async fn read_index_remotely(
        &self,
        leader: NodeId,
        member: &Member,
        deadline: Instant,
    ) -> Attempt<Linearizer<TypeConfig>, ReadError> {
        let tried = Some(leader);
        let pooled = match tokio::time::timeout_at(
            deadline,
            self.channels.get(leader, member, Lane::Forward),
        )
        .await
        {
            Ok(Ok(pooled)) => pooled,
            Ok(Err(e)) => {
                tracing::debug!(leader, error = %e, "cannot reach leader for a read index");
                return Attempt::Retry {
                    tried,
                    redirect: None,
                    reason: ReadError::NoLeader,
                };
            }
            Err(_) => return Attempt::Failed(ReadError::NoLeader),
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let mut client = pooled.client();
        let reply = match tokio::time::timeout_at(
            deadline,
            client.read_index(with_timeout(pb::ReadIndexRequest {}, remaining)),
        )
        .await
        {
            Ok(Ok(reply)) => reply.into_inner(),
            Ok(Err(status)) => {
                self.channels.discard(leader, Lane::Forward, &pooled);
                tracing::debug!(leader, code = ?status.code(), error = %status.message(), "read index failed");
                // Reads are idempotent: every failure may be retried until the deadline.
                let reason = if is_connect_failure(&status) {
                    ReadError::NoLeader
                } else if status.code() == Code::Unavailable {
                    ReadError::Timeout
                } else {
                    ReadError::Network(status.message().to_owned())
                };
                return Attempt::Retry {
                    tried,
                    redirect: None,
                    reason,
                };
            }
            Err(_) => {
                self.channels.discard(leader, Lane::Forward, &pooled);
                return Attempt::Failed(ReadError::Timeout);
            }
        };
        match (reply.read_log_id, reply.leader_redirect) {
            (Some(bytes), None) => match codec::decode::<LogId>("read log id", &bytes) {
                Ok(log_id) => Attempt::Done(Linearizer::new(
                    self.local_id(),
                    ReadLogId::from_log_id(log_id),
                    None,
                )),
                Err(e) => Attempt::Retry {
                    tried,
                    redirect: None,
                    reason: ReadError::Network(e.to_string()),
                },
            },
            (None, Some(redirect)) => Attempt::Retry {
                tried,
                redirect: Some(redirect.into()),
                reason: ReadError::LeaderChanged,
            },
            _ => Attempt::Retry {
                tried,
                redirect: None,
                reason: ReadError::Network(
                    "ReadIndex response must set exactly one of read_log_id and leader_redirect"
                        .to_owned(),
                ),
            },
        }
    }

    /// Waits until this node has applied the read index.
    async fn await_applied(
        &self,
        linearizer: Linearizer<TypeConfig>,
        deadline: Instant,
    ) -> Result<(), ReadError> {
        #[cfg(feature = "planted-bugs")]
        if crate::planted::is_planted(crate::planted::RaftBug::ReadSkipsApplyWait) {
            return Ok(());
        }
        let remaining = deadline.saturating_duration_since(Instant::now());
        match linearizer
            .try_await_ready(&self.raft, Some(remaining))
            .await
        {
            Ok(Ok(_ready)) => Ok(()),
            Ok(Err(behind)) => {
                tracing::debug!(state = %behind, "apply did not reach the read index in time");
                Err(ReadError::Timeout)
            }
            Err(fatal) => Err(ReadError::Stopped(fatal.to_string())),
        }
    }
}
