//! The admin API's member records (`admin_member/<id>` in the meta column family): the
//! identity (name, uid) and version history that etcd's membership does not keep.
//!
//! Records change only by applying a `SyncMemberRecords` command, which brings them in
//! line with the applied membership and what members published, identically on every
//! member; a record's version is the log index of the entry that last changed it, so it
//! is comparable between members and survives restarts and snapshots. This module
//! decides what a sync writes; `admin` decides when to propose one and never writes
//! records itself.

use std::collections::{BTreeMap, BTreeSet};

use prost::Message;
use rocksdb::WriteBatch;

use super::{meta, RevisionStore, StoreError, CF_META};
use crate::proto::command::{MemberAttributes, MemberRecord, SyncMemberRecords};

const PREFIX: &[u8] = b"admin_member/";

fn key(member_id: u64) -> Vec<u8> {
    let mut key = PREFIX.to_vec();
    key.extend_from_slice(&member_id.to_be_bytes());
    key
}

/// Every member record, by member id.
pub fn read_member_records(
    store: &RevisionStore,
) -> Result<BTreeMap<u64, MemberRecord>, StoreError> {
    let mut records = BTreeMap::new();
    for value in meta::values_under(store, PREFIX)? {
        let record = MemberRecord::decode(value.as_ref())
            .map_err(|e| StoreError::corrupt(format!("member record: {e}")))?;
        records.insert(record.member_id, record);
    }
    Ok(records)
}

/// One member as the applied membership and its published attributes describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Described {
    pub member_id: u64,
    /// The name the membership entry carries (CreateMember's), if any.
    pub proposed_name: String,
    /// What the member published about itself once it started.
    pub published: Option<MemberAttributes>,
    pub peer_urls: Vec<String>,
    /// The membership entry's client URLs, shown until the member publishes its own.
    pub initial_client_urls: Vec<String>,
    pub learner: bool,
}

impl Described {
    fn client_urls(&self) -> &[String] {
        match &self.published {
            Some(published) => &published.client_urls,
            None => &self.initial_client_urls,
        }
    }

    fn started(&self) -> bool {
        self.published.as_ref().is_some_and(|p| !p.name.is_empty())
    }

    /// True when `record` says what this member is now.
    pub fn matches(&self, record: &MemberRecord) -> bool {
        record.peer_urls == self.peer_urls
            && record.client_urls == self.client_urls()
            && record.learner == self.learner
            && record.started == self.started()
    }
}

/// Every member of the applied membership, described.
pub fn describe_members(store: &RevisionStore) -> Result<Vec<Described>, StoreError> {
    let applied = meta::read_applied(store)?;
    let membership = applied.membership.membership();
    let learners: BTreeSet<u64> = membership.learner_ids().collect();
    let mut members = Vec::new();
    for (id, node) in membership.nodes() {
        members.push(Described {
            member_id: *id,
            proposed_name: node.name.clone(),
            published: meta::read_member_attributes(store, *id)?,
            peer_urls: node.peer_urls.clone(),
            initial_client_urls: node.client_urls.clone(),
            learner: learners.contains(id),
        });
    }
    Ok(members)
}

/// True when some member has no record, or a record that no longer says what it is, or
/// a record outlives its member: a sync would change something.
pub fn out_of_date(described: &[Described], records: &BTreeMap<u64, MemberRecord>) -> bool {
    described.len() != records.len()
        || described
            .iter()
            .any(|d| records.get(&d.member_id).is_none_or(|r| !d.matches(r)))
}

/// A resource name: a valid RFC-1123 label (the style guide's section 2.2).
pub fn is_resource_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let inner_ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-';
    let edge_ok = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(inner_ok)
        && bytes.first().is_some_and(edge_ok)
        && bytes.last().is_some_and(edge_ok)
}

/// The name a new record takes: the member's own name if it is a resource name no
/// other record has, else the one its membership entry carries, else `member-<id>`.
fn new_name(described: &Described, taken: &BTreeSet<String>) -> String {
    let published = described.published.as_ref().map(|p| p.name.as_str());
    [published, Some(described.proposed_name.as_str())]
        .into_iter()
        .flatten()
        .find(|name| is_resource_name(name) && !taken.contains(*name))
        .map(str::to_string)
        .unwrap_or_else(|| format!("member-{:016x}", described.member_id))
}

/// A UUID4 (RFC 9562 layout) from a digest of the entry's index and the member id: for
/// a member the proposer did not know of, the same on every member that applies it.
fn derived_uid(index: u64, member_id: u64) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(b"quantykube member uid")
        .chain_update(index.to_be_bytes())
        .chain_update(member_id.to_be_bytes())
        .finalize();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .hyphenated()
        .to_string()
}

/// Applies `sync` at log index `index`: stages the records it creates, changes and
/// deletes. A failed guard stages nothing and fails the command.
pub fn stage_sync(
    store: &RevisionStore,
    batch: &mut WriteBatch,
    index: u64,
    sync: &SyncMemberRecords,
) -> Result<(), StoreError> {
    let described = describe_members(store)?;
    let mut records = read_member_records(store)?;
    let version = i64::try_from(index).map_err(|_| StoreError::corrupt("log index overflow"))?;
    if let Some(guard) = &sync.guard {
        let record = records
            .get(&guard.member_id)
            .ok_or(StoreError::ResourceNotFound)?;
        let current = described
            .iter()
            .find(|d| d.member_id == guard.member_id)
            .is_some_and(|d| d.matches(record));
        // 0 and "" skip a check (a Delete's optional guards).
        let uid_differs = !guard.uid.is_empty() && record.uid != guard.uid;
        let version_differs = guard.version != 0 && (!current || record.version != guard.version);
        if uid_differs || version_differs {
            return Err(StoreError::VersionMismatch);
        }
    }
    let cf = store.cf(CF_META)?;
    let present: BTreeSet<u64> = described.iter().map(|d| d.member_id).collect();
    for gone in records.keys().filter(|id| !present.contains(id)) {
        batch.delete_cf(cf, key(*gone));
    }
    records.retain(|id, _| present.contains(id));
    let mut taken: BTreeSet<String> = records.values().map(|r| r.name.clone()).collect();
    for member in &described {
        let claimed = sync
            .guard
            .as_ref()
            .is_some_and(|g| g.member_id == member.member_id);
        let record = match records.get(&member.member_id) {
            Some(record) if member.matches(record) && !claimed => continue,
            Some(record) => MemberRecord {
                version,
                unknown_fields: match sync.guard.as_ref() {
                    Some(guard) if claimed && guard.replace_unknown_fields => {
                        guard.unknown_fields.clone()
                    }
                    _ => record.unknown_fields.clone(),
                },
                update_time_unix_nanos: sync.time_unix_nanos,
                peer_urls: member.peer_urls.clone(),
                client_urls: member.client_urls().to_vec(),
                learner: member.learner,
                started: member.started(),
                ..record.clone()
            },
            None => {
                let name = new_name(member, &taken);
                taken.insert(name.clone());
                MemberRecord {
                    member_id: member.member_id,
                    name,
                    uid: sync
                        .new_uids
                        .get(&member.member_id)
                        .filter(|uid| uuid::Uuid::parse_str(uid).is_ok())
                        .cloned()
                        .unwrap_or_else(|| derived_uid(index, member.member_id)),
                    version,
                    create_time_unix_nanos: sync.time_unix_nanos,
                    update_time_unix_nanos: sync.time_unix_nanos,
                    peer_urls: member.peer_urls.clone(),
                    client_urls: member.client_urls().to_vec(),
                    learner: member.learner,
                    started: member.started(),
                    unknown_fields: Default::default(),
                }
            }
        };
        batch.put_cf(cf, key(member.member_id), record.encode_to_vec());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_names_are_rfc1123_labels() {
        for good in ["a", "etcd-0", "0", "a1-b2", &"a".repeat(63)] {
            assert!(is_resource_name(good), "{good}");
        }
        for bad in ["", "-a", "a-", "A", "a_b", "a.b", "é", &"a".repeat(64)] {
            assert!(!is_resource_name(bad), "{bad}");
        }
    }

    #[test]
    fn derived_uids_are_uuid4_and_differ_by_index() {
        let uid = uuid::Uuid::parse_str(&derived_uid(7, 1)).unwrap();
        assert_eq!(uid.get_version_num(), 4);
        assert_ne!(derived_uid(7, 1), derived_uid(8, 1));
        assert_eq!(derived_uid(7, 1), derived_uid(7, 1));
    }

    #[test]
    fn a_new_record_takes_the_first_free_valid_name() {
        let member = Described {
            member_id: 0xab,
            proposed_name: "etcd-3".into(),
            published: Some(MemberAttributes {
                member_id: 0xab,
                name: "Infra_1".into(),
                client_urls: vec![],
                ..Default::default()
            }),
            peer_urls: vec![],
            initial_client_urls: vec![],
            learner: true,
        };
        assert_eq!(new_name(&member, &BTreeSet::new()), "etcd-3");
        let taken = BTreeSet::from(["etcd-3".to_string()]);
        assert_eq!(new_name(&member, &taken), "member-00000000000000ab");
    }
}
