//! Writes through the log: admission (`--max-request-bytes`, `--quota-backend-bytes`),
//! replication, and what applying produced; alarms raised through the log.

use std::time::Instant;

use prost::Message;
use quantykube_raft::{Command as RaftCommand, NodeId};

use super::{metrics, Node, NodeError};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::command::{Command, CommandResult};
use crate::proto::etcdserverpb::alarm_request::AlarmAction;
use crate::proto::etcdserverpb::{AlarmMember, AlarmRequest, AlarmType};
use crate::store::RequestType;

impl Node {
    /// Replicates one write through raft and returns what applying it produced.
    pub async fn propose(&self, request: CommandRequest) -> Result<Option<Outcome>, NodeError> {
        self.propose_command(&Command {
            auth_revision: 0,
            auth_checked: false,
            request: Some(request),
        })
        .await
    }

    /// Replicates one command (a client's, stamped with the auth revision it was
    /// authorised at: see `api::authorized`) and returns what applying it produced.
    pub async fn propose_command(&self, command: &Command) -> Result<Option<Outcome>, NodeError> {
        let started = Instant::now();
        let outcome = self.admit_and_replicate(command).await;
        metrics::request_finished(RequestType::of(command), outcome.is_ok(), started.elapsed());
        outcome
    }

    async fn admit_and_replicate(&self, command: &Command) -> Result<Option<Outcome>, NodeError> {
        let encoded = command.encode_to_vec();
        if encoded.len() > self.parts.limits.max_request_bytes {
            return Err(NodeError::TooLarge);
        }
        if let Some(request) = &command.request {
            self.admit_within_quota(request).await?;
        }
        #[cfg(feature = "planted-bugs")]
        if let Some(acknowledged) = self.planted_early_ack(command, &encoded) {
            return Ok(Some(acknowledged));
        }
        self.replicate(encoded).await
    }

    /// `--quota-backend-bytes` where a write is proposed (etcd's `v3rpc/quota.go`):
    /// refuses `request` if it would take the store to the quota or past it, and raises
    /// NOSPACE for this member (through the log) so that every member refuses such
    /// writes until an operator disarms it. A write that costs nothing (deletes,
    /// compaction, revokes) always passes. The store's size is the one sampled at most
    /// 100 ms ago (`RevisionStore::recent_size`), as etcd weighs a bbolt file that grows
    /// only when its batch commits. (`quota::watch` is the apply-time half.)
    async fn admit_within_quota(&self, request: &CommandRequest) -> Result<(), NodeError> {
        let Some(quota) = self.parts.limits.quota_backend_bytes else {
            return Ok(());
        };
        let cost = crate::store::quota_cost(request);
        if cost == 0 {
            return Ok(());
        }
        let size = self.parts.store.recent_size();
        // etcd's `Available`: size + cost must stay below the quota.
        if size.saturating_add(cost) < quota {
            return Ok(());
        }
        tracing::warn!(
            quota_size_bytes = quota,
            size_bytes = size,
            cost,
            "message exceeded backend quota; raising alarm"
        );
        // As etcd, the refusal stands whether or not the alarm got through.
        self.raise_alarm(AlarmType::Nospace).await;
        Err(NodeError::NoSpace)
    }

    /// Proposes ACTIVATE of `alarm` for this member, unless it is already active. Its
    /// failure is only logged: the alarm is the cluster's memory of a refusal that
    /// stands anyway.
    pub async fn raise_alarm(&self, alarm: AlarmType) {
        self.raise_alarm_for(self.parts.id, alarm).await;
    }

    /// Raises `alarm` for `member_id` through the log (the leader's corruption check
    /// names the member it blames), unless that member already has it.
    pub async fn raise_alarm_for(&self, member_id: NodeId, alarm: AlarmType) {
        let wanted = AlarmMember {
            member_id,
            alarm: alarm.into(),
        };
        if self.parts.store.alarms().contains(&wanted) {
            return;
        }
        let raise = Command {
            auth_revision: 0,
            auth_checked: false,
            request: Some(CommandRequest::Alarm(AlarmRequest {
                action: AlarmAction::Activate.into(),
                member_id,
                alarm: alarm.into(),
            })),
        };
        let started = Instant::now();
        let raised = self.replicate(raise.encode_to_vec()).await;
        metrics::request_finished(RequestType::Alarm, raised.is_ok(), started.elapsed());
        if let Err(error) = raised {
            tracing::warn!(alarm = alarm.as_str_name(), member_id = %format!("{member_id:x}"), %error, "failed to raise an alarm");
        }
    }

    /// Writes one encoded command through raft and returns what applying it produced.
    async fn replicate(&self, encoded: Vec<u8>) -> Result<Option<Outcome>, NodeError> {
        let outcome = self.parts.client.write(RaftCommand(encoded.into())).await?;
        let result = CommandResult::decode(outcome.0)
            .map_err(|e| NodeError::internal("decode outcome", &e))?;
        match result.result {
            Some(Outcome::Error(error)) => Err(NodeError::Command(error.kind())),
            other => Ok(other),
        }
    }

    /// The planted `AckBeforeCommit` bug: a Put is proposed in the background and
    /// acknowledged at once with the revision it would get if nothing intervened.
    #[cfg(feature = "planted-bugs")]
    fn planted_early_ack(&self, command: &Command, encoded: &[u8]) -> Option<Outcome> {
        use crate::planted::{is_planted, PlantedBug};
        use crate::proto::etcdserverpb::ResponseHeader;
        let Some(CommandRequest::Put(_)) = &command.request else {
            return None;
        };
        if !is_planted(PlantedBug::AckBeforeCommit) {
            return None;
        }
        let guessed = self.parts.store.current_revision().ok()? + 1;
        let client = self.parts.client.clone();
        let entry = RaftCommand(encoded.to_vec().into());
        tokio::spawn(async move {
            let _ = client.write(entry).await;
        });
        Some(Outcome::Put(crate::proto::etcdserverpb::PutResponse {
            header: Some(ResponseHeader {
                revision: guessed,
                ..Default::default()
            }),
            prev_kv: None,
        }))
    }
}
