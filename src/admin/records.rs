//! When the admin API proposes a member records sync, and how it reads records that
//! are current: every read waits for the read index, and a read that finds records out
//! of date (a member added, promoted or started since) syncs them through the log
//! before it answers, so that a resource's content never shows with a version that
//! does not cover it. Writing records is the store's (`store::member_records`).

use std::collections::BTreeMap;

use crate::node::{Node, NodeError};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_error::Kind;
use crate::proto::command::{MemberGuard, MemberRecord, SyncMemberRecords};
use crate::store::member_records::{self, Described};

use super::AdminError;

/// One member: what the cluster says of it and its record, which says the same.
#[derive(Clone, Debug)]
pub struct CurrentMember {
    pub described: Described,
    pub record: MemberRecord,
}

/// How often a read syncs and looks again before it gives up: a cluster changing its
/// membership faster than that is not one an answer could describe anyway.
const SYNC_ATTEMPTS: usize = 5;

/// Every member with a current record, in order of name, as of a linearizable read.
pub async fn current_members(node: &Node) -> Result<Vec<CurrentMember>, AdminError> {
    node.read_barrier().await?;
    for _ in 0..SYNC_ATTEMPTS {
        let (described, records) = read(node).await?;
        if !member_records::out_of_date(&described, &records) {
            let mut members: Vec<CurrentMember> = described
                .into_iter()
                .filter_map(|d| {
                    let record = records.get(&d.member_id)?.clone();
                    Some(CurrentMember {
                        described: d,
                        record,
                    })
                })
                .collect();
            members.sort_by(|a, b| a.record.name.cmp(&b.record.name));
            return Ok(members);
        }
        // The sync waits for its own read index.
        sync(node, &described, &records, None).await?;
    }
    Err(AdminError::FailedPrecondition(
        "the membership kept changing while it was read; try again".into(),
    ))
}

/// The member named `name`, current.
pub async fn current_member(node: &Node, name: &str) -> Result<CurrentMember, AdminError> {
    current_members(node)
        .await?
        .into_iter()
        .find(|m| m.record.name == name)
        .ok_or_else(|| AdminError::NotFound {
            kind: "member",
            name: name.to_string(),
        })
}

/// Proposes a sync (with `guard`, a mutation's claim on one record) and waits for it
/// to be applied here. Members without a record get fresh UUID4s.
pub async fn sync(
    node: &Node,
    described: &[Described],
    records: &BTreeMap<u64, MemberRecord>,
    guard: Option<MemberGuard>,
) -> Result<(), AdminError> {
    let new_uids = described
        .iter()
        .filter(|d| !records.contains_key(&d.member_id))
        .map(|d| (d.member_id, uuid::Uuid::new_v4().hyphenated().to_string()))
        .collect();
    let command = CommandRequest::SyncMemberRecords(SyncMemberRecords {
        time_unix_nanos: unix_nanos(node),
        new_uids,
        guard,
    });
    node.propose(command).await?;
    node.read_barrier().await?;
    Ok(())
}

/// The time a record change carries: this member's clock, to the second (the node's
/// wall clock, which the simulation controls).
pub fn unix_nanos(node: &Node) -> i64 {
    i64::try_from(node.unix_seconds())
        .unwrap_or(i64::MAX)
        .saturating_mul(1_000_000_000)
}

/// Syncs every record after a change, so that the change shows with a new version.
pub async fn sync_now(node: &Node) -> Result<(), AdminError> {
    node.read_barrier().await?;
    let (described, records) = read(node).await?;
    sync(node, &described, &records, None).await
}

/// Claims `member`'s record for a mutation through the log, so that of two writers
/// guarded by the same version only the first goes on: fails with ABORTED if the uid
/// or version is not the one given (0 and "" skip that check; with both skipped there
/// is nothing to claim), NOT_FOUND if the member is gone. An update's claim carries the
/// unknown fields the resource keeps from now on.
pub async fn claim(
    node: &Node,
    member: &CurrentMember,
    uid: &str,
    version: i64,
    unknown_fields: Option<&[u8]>,
) -> Result<(), AdminError> {
    let name = member.record.name.clone();
    // Checked here first for the error that names the guard; the log decides.
    if !uid.is_empty() && uid != member.record.uid {
        return Err(aborted(name, "uid"));
    }
    if version != 0 && version != member.record.version {
        return Err(aborted(name, "version"));
    }
    if uid.is_empty() && version == 0 {
        return Ok(());
    }
    let (described, records) = read(node).await?;
    let guard = MemberGuard {
        member_id: member.record.member_id,
        uid: uid.to_string(),
        version,
        replace_unknown_fields: unknown_fields.is_some(),
        unknown_fields: unknown_fields.unwrap_or_default().to_vec().into(),
    };
    match sync(node, &described, &records, Some(guard)).await {
        Err(AdminError::Node(NodeError::Command(Kind::VersionMismatch))) => {
            Err(aborted(name, "version"))
        }
        Err(AdminError::Node(NodeError::Command(Kind::ResourceNotFound))) => {
            Err(AdminError::NotFound {
                kind: "member",
                name,
            })
        }
        other => other,
    }
}

fn aborted(name: String, guard: &'static str) -> AdminError {
    AdminError::Aborted {
        kind: "member",
        name,
        guard,
    }
}

async fn read(node: &Node) -> Result<(Vec<Described>, BTreeMap<u64, MemberRecord>), AdminError> {
    Ok(node
        .read_store(|store| {
            Ok((
                member_records::describe_members(store)?,
                member_records::read_member_records(store)?,
            ))
        })
        .await?)
}
