//! The cluster's alarms (etcd's `alarm` bucket): which member raised which alarm, kept
//! in the `meta` column family so that they survive restarts and travel in raft
//! snapshots, and what an active alarm refuses when a command is applied (etcd's
//! `applierV3Capped` and `applierV3Corrupt`).
//!
//! Alarms change only through an applied `Alarm` command, so every member holds the same
//! set. The set is also kept in memory, read on every applied write and by the health
//! probes; it is reloaded from `meta` after every change and every snapshot install and
//! is never changed anywhere else. This module decides nothing about quotas (the node
//! checks them before proposing) and never raises an alarm itself.

use std::sync::RwLock;

use rocksdb::WriteBatch;

use super::{RevisionStore, StoreError, CF_META};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::etcdserverpb::alarm_request::AlarmAction;
use crate::proto::etcdserverpb::request_op::Request;
use crate::proto::etcdserverpb::{
    AlarmMember, AlarmRequest, AlarmResponse, AlarmType, RequestOp, TxnRequest,
};

/// One record per (member, alarm type): the key says it all, the value is empty.
const ALARM_PREFIX: &[u8] = b"alarm/";

fn alarm_key(member_id: u64, alarm: i32) -> Vec<u8> {
    let mut key = ALARM_PREFIX.to_vec();
    key.extend_from_slice(&member_id.to_be_bytes());
    key.extend_from_slice(&alarm.to_be_bytes());
    key
}

fn decode_alarm_key(key: &[u8]) -> Option<AlarmMember> {
    let raw = key.strip_prefix(ALARM_PREFIX)?;
    let (member, alarm) = raw.split_at_checked(8)?;
    Some(AlarmMember {
        member_id: u64::from_be_bytes(member.try_into().ok()?),
        alarm: i32::from_be_bytes(alarm.try_into().ok()?),
    })
}

/// The active alarms, in (member id, alarm type) order.
#[derive(Default)]
pub(super) struct AlarmCache {
    active: RwLock<Vec<AlarmMember>>,
}

impl AlarmCache {
    fn get(&self) -> Vec<AlarmMember> {
        self.active
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    fn has(&self, alarm: AlarmType) -> bool {
        self.active
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .any(|a| a.alarm == alarm as i32)
    }

    fn set(&self, alarms: Vec<AlarmMember>) {
        *self
            .active
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = alarms;
    }
}

/// etcd's quota cost of a request (`storage/quota.go`): 256 bytes of overhead plus key
/// and value for a put; for a transaction, the larger of its two branches' top-level
/// puts (etcd counts no puts of nested transactions); 64 for a lease grant; 0 for
/// everything else, which never grows the store.
pub fn quota_cost(request: &CommandRequest) -> u64 {
    match request {
        CommandRequest::Put(put) => put_cost(&put.key, &put.value),
        CommandRequest::Txn(txn) => txn_cost(txn),
        CommandRequest::LeaseGrant(_) => LEASE_OVERHEAD,
        _ => 0,
    }
}

const KV_OVERHEAD: u64 = 256;
const LEASE_OVERHEAD: u64 = 64;

fn put_cost(key: &[u8], value: &[u8]) -> u64 {
    KV_OVERHEAD + key.len() as u64 + value.len() as u64
}

fn txn_cost(txn: &TxnRequest) -> u64 {
    let branch = |ops: &[RequestOp]| -> u64 {
        ops.iter()
            .map(|op| match &op.request {
                Some(Request::RequestPut(put)) => put_cost(&put.key, &put.value),
                _ => 0,
            })
            .sum()
    };
    branch(&txn.success).max(branch(&txn.failure))
}

/// What an active alarm refuses `request` with, as etcd's appliers do: with CORRUPT,
/// every change to keys or leases (reads never reach the log); with NOSPACE, what
/// would grow the store. CORRUPT is checked first, as etcd wraps it outermost.
pub(super) fn refusal(store: &RevisionStore, request: &CommandRequest) -> Option<StoreError> {
    let corrupt = matches!(
        request,
        CommandRequest::Put(_)
            | CommandRequest::DeleteRange(_)
            | CommandRequest::Txn(_)
            | CommandRequest::Compaction(_)
            | CommandRequest::LeaseGrant(_)
            | CommandRequest::LeaseRevoke(_)
            // The leader's expiry becomes a revoke, which etcd refuses likewise.
            | CommandRequest::LeaseExpiry(_)
    );
    if corrupt && store.alarms.has(AlarmType::Corrupt) {
        return Some(StoreError::CorruptAlarm);
    }
    if quota_cost(request) > 0 && store.alarms.has(AlarmType::Nospace) {
        return Some(StoreError::NoSpace);
    }
    None
}

impl RevisionStore {
    /// Every active alarm of the cluster as (member id, alarm type) pairs, in member id
    /// then type order. An `AlarmMember`'s protobuf encoding is also the key etcd's
    /// snapshot `alarm` bucket keeps it under. Types etcd does not name are kept as
    /// the client sent them (etcd 3.4 and 3.6 store them too).
    pub fn alarms(&self) -> Vec<AlarmMember> {
        self.alarms.get()
    }

    /// etcd's snapshot `alarm` bucket: each active alarm's `AlarmMember` as a key, with
    /// an empty value.
    pub fn alarm_bucket(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.alarms()
            .iter()
            .map(|alarm| (prost::Message::encode_to_vec(alarm), Vec::new()))
            .collect()
    }

    /// True while any member has raised `alarm`.
    pub fn has_alarm(&self, alarm: AlarmType) -> bool {
        self.alarms.has(alarm)
    }

    /// Reads the alarms from `meta` into memory: at startup, after an applied alarm
    /// change and after a snapshot install.
    pub(super) fn reload_alarms(&self) -> Result<(), StoreError> {
        let cf = self.cf(CF_META)?;
        let mut found = Vec::new();
        let iter = self.db.iterator_cf(
            cf,
            rocksdb::IteratorMode::From(ALARM_PREFIX, rocksdb::Direction::Forward),
        );
        for item in iter {
            let (key, _) = item?;
            if !key.starts_with(ALARM_PREFIX) {
                break;
            }
            let alarm =
                decode_alarm_key(&key).ok_or_else(|| StoreError::corrupt("bad alarm record"))?;
            found.push(alarm);
        }
        self.alarms.set(found);
        Ok(())
    }

    /// Applies an alarm request as etcd's `applierV3backend.Alarm` does: GET lists the
    /// alarms of the asked type (every type for NONE, whatever the member id); ACTIVATE
    /// records one (NONE is ignored, as etcd 3.5+ does) and answers with it;
    /// DEACTIVATE removes one and answers with it, or with nothing if it was not
    /// active. The member id is never checked against the membership, as in etcd.
    /// The caller writes the batch and then reloads the alarms.
    pub(super) fn stage_alarm(
        &self,
        batch: &mut WriteBatch,
        request: &AlarmRequest,
    ) -> Result<AlarmResponse, StoreError> {
        let active = self.alarms.get();
        let member = AlarmMember {
            member_id: request.member_id,
            alarm: request.alarm,
        };
        let alarms = match AlarmAction::try_from(request.action) {
            Ok(AlarmAction::Get) => active
                .into_iter()
                .filter(|a| request.alarm == AlarmType::None as i32 || a.alarm == request.alarm)
                .collect(),
            Ok(AlarmAction::Activate) if request.alarm == AlarmType::None as i32 => Vec::new(),
            Ok(AlarmAction::Activate) => {
                if !active.contains(&member) {
                    batch.put_cf(
                        self.cf(CF_META)?,
                        alarm_key(member.member_id, member.alarm),
                        [],
                    );
                    tracing::warn!(
                        alarm = %alarm_name(member.alarm),
                        from = %format!("{:x}", member.member_id),
                        "alarm raised"
                    );
                }
                vec![member]
            }
            Ok(AlarmAction::Deactivate) => {
                if active.contains(&member) {
                    batch.delete_cf(self.cf(CF_META)?, alarm_key(member.member_id, member.alarm));
                    tracing::warn!(
                        alarm = %alarm_name(member.alarm),
                        from = %format!("{:x}", member.member_id),
                        "alarm disarmed"
                    );
                    vec![member]
                } else {
                    Vec::new()
                }
            }
            // etcd answers an unknown action with an empty response.
            Err(_) => Vec::new(),
        };
        Ok(AlarmResponse {
            header: None,
            alarms,
        })
    }
}

/// Go's `AlarmType.String()`: the name, or the number for a type etcd does not name.
pub fn alarm_name(alarm: i32) -> String {
    match AlarmType::try_from(alarm) {
        Ok(known) => known.as_str_name().to_string(),
        Err(_) => alarm.to_string(),
    }
}

/// Go's `AlarmMember.String()` (gogoproto's compact text form), which etcd puts in
/// `Status.errors` and etcdctl prints: `memberID:<decimal> alarm:<name> `. Zero fields
/// are left out, as proto3's text form does.
pub fn alarm_text(alarm: &AlarmMember) -> String {
    let mut text = String::new();
    if alarm.member_id != 0 {
        text.push_str(&format!("memberID:{} ", alarm.member_id));
    }
    if alarm.alarm != 0 {
        text.push_str(&format!("alarm:{} ", alarm_name(alarm.alarm)));
    }
    text
}
