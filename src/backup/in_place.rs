//! etcd's data dir, converted in place: a member started on the `--data-dir` an etcd
//! 3.4-3.6 member left (`member/snap/db`, `member/wal`, `member/snap/*.snap`) serves the
//! same keys, revisions, leases, users, alarms and members.
//!
//! The store is built as etcd would rebuild its own: the database imported as a
//! snapshot file is (`import`), then every raft entry the WAL holds after the
//! database's consistent index, through the commit point, applied by our own apply
//! path (`etcd_entries` translates them), each under its etcd log position. The
//! membership is etcd's: the newest `.snap` file's voters and learners (or none), then
//! every membership change the WAL holds after it. The store ends at etcd's last
//! applied (term, index), so that members converted one by one keep raft's order: a
//! member converted further along leads, and one behind receives its snapshot.
//!
//! Entries after the commit point the member knew of are not applied: they become the
//! first entries of its raft log, uncommitted, with etcd's log ids, so that the
//! cluster commits or replaces them as etcd's raft would have (an uncommitted
//! membership change is refused instead). This module writes only the store it is given; it never touches etcd's
//! files, the raft log or the member's identity (`server::from_etcd` does).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use openraft::entry::RaftEntry;
use openraft::vote::leader_id_adv::LeaderId;
use openraft::Membership;
use prost::Message;
use quantykube_bbolt::Database;
use quantykube_raft::{Command as RaftCommand, Entry, LogId, Member, NodeId, StoredMembership};
use serde::Deserialize;

use super::etcd_entries::{self, Replay, Translated};
use super::etcd_wal::{self, ConfChange, Snap, Wal};
use super::{file, schema, BackupError};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::{Command, MemberAttributes};
use crate::proto::etcdserverpb::{alarm_request::AlarmAction, AlarmRequest};
use crate::store::{ImportSummary, RevisionStore};

/// The node id under which etcd's entries are recorded: etcd logs no leader per entry,
/// and every converted member must give the same entry the same log id.
pub const ETCD_LEADER: NodeId = 0;

/// Where an etcd member keeps its files under a data dir.
#[derive(Clone, Debug)]
pub struct EtcdFiles {
    pub db: PathBuf,
    pub wal: PathBuf,
    pub snap: PathBuf,
}

impl EtcdFiles {
    /// etcd's files under `data_dir`, if it holds an etcd member's database. `wal_dir`
    /// is etcd's `--wal-dir`, where its WAL then is.
    pub fn find(data_dir: &Path, wal_dir: Option<&Path>) -> Option<EtcdFiles> {
        let member = data_dir.join("member");
        let files = EtcdFiles {
            db: member.join("snap").join("db"),
            wal: wal_dir.map_or_else(|| member.join("wal"), Path::to_path_buf),
            snap: member.join("snap"),
        };
        files.db.is_file().then_some(files)
    }
}

/// What the conversion needs beyond etcd's files.
#[derive(Clone, Debug)]
pub struct Conversion<'a> {
    pub replay: Replay,
    /// `--initial-cluster`'s names and peer URLs: the names of members etcd's files
    /// do not name.
    pub named_peers: &'a [(String, Vec<String>)],
}

/// What the conversion found and built.
#[derive(Debug)]
pub struct Converted {
    pub member_id: NodeId,
    pub cluster_id: u64,
    /// etcd's last applied (term, index), now the store's.
    pub applied: LogId,
    /// The newest term etcd's WAL knew (its hard state's, or the applied entry's).
    pub term: u64,
    pub imported: ImportSummary,
    /// The database's consistent index, and how many entries after it were replayed.
    pub consistent_index: u64,
    pub replayed: u64,
    pub voters: usize,
    pub learners: usize,
    /// The entries after the commit point, for the raft log (not applied).
    pub pending: Vec<Entry>,
}

fn refuse(what: impl std::fmt::Display) -> BackupError {
    BackupError::NotEtcd(format!("cannot convert etcd's data dir: {what}"))
}

/// Converts etcd's files into `store`, which must be new and empty.
pub fn convert(
    etcd: &EtcdFiles,
    store: &RevisionStore,
    conversion: &Conversion<'_>,
) -> Result<Converted, BackupError> {
    let database = file::open(&etcd.db, true)?.db;
    let wal = etcd_wal::read_wal(&etcd.wal)?;
    let snap = etcd_wal::read_newest_snap(&etcd.snap)?;
    let consistent_index = consistent_index(&database)?;
    let hard_state = wal.hard_state.clone().unwrap_or_default();
    let last = wal.last_index();
    let since = snap.as_ref().map_or(0, |snap| snap.index);
    let known = MemberDetails::gather(&database, snap.as_ref(), conversion.named_peers)?;

    // What the member knew to be committed is applied; entries after it stay in the
    // raft log, uncommitted, for the cluster to commit or replace, as etcd's raft would.
    let end = hard_state.commit.max(consistent_index);
    if end > last {
        return Err(refuse(format!(
            "its commit index {end} is past the WAL's last entry {last}"
        )));
    }
    let applied_term = wal
        .term_at(end)
        .or_else(|| snap.as_ref().filter(|s| s.index == end).map(|s| s.term))
        .ok_or_else(|| refuse(format!("no term for index {end} in the WAL")))?;
    let applied = etcd_log_id(applied_term, end);
    if since > end {
        return Err(refuse(format!(
            "its newest snapshot ({since}) is past its commit index {end}"
        )));
    }
    let members = members_through(&wal, snap.as_ref(), &known, end)?;
    if !members.details.contains_key(&wal.member_id) {
        return Err(refuse(format!(
            "member {:x} is not in its cluster's membership (was it removed?)",
            wal.member_id
        )));
    }
    let mut pending = Vec::new();
    for (index, entry) in wal.entries.range(end + 1..) {
        let log_id = etcd_log_id(entry.term, *index);
        pending.push(match entry.kind {
            etcd_wal::ENTRY_NORMAL => {
                match etcd_entries::translate(&entry.data, &conversion.replay)
                    .map_err(|why| refuse(format!("entry {index}: {why}")))?
                {
                    Translated::Command(command) => {
                        Entry::new_normal(log_id, RaftCommand(command.encode_to_vec().into()))
                    }
                    Translated::Nothing => Entry::new_blank(log_id),
                }
            }
            _ => {
                return Err(refuse(format!(
                    "entry {index}, after the commit index {end}, changes the membership; \
                     start etcd again until the change is committed"
                )))
            }
        });
    }

    let imported = super::import::import(&database, store)?;
    let mut batch = store.begin_apply()?;
    // The alarms the database holds, as they were before the entries after it.
    for alarm in alarms(&database)? {
        batch.command(&applied, &own_command(CommandRequest::Alarm(alarm)))?;
    }
    let mut replayed = 0;
    for index in consistent_index + 1..=end {
        let entry = wal
            .entries
            .get(&index)
            .ok_or_else(|| refuse(format!("its WAL lacks entry {index}")))?;
        let log_id = etcd_log_id(entry.term, index);
        match entry.kind {
            etcd_wal::ENTRY_NORMAL => {
                match etcd_entries::translate(&entry.data, &conversion.replay)
                    .map_err(|why| refuse(format!("entry {index}: {why}")))?
                {
                    Translated::Command(command) => {
                        batch.command(&log_id, &command)?;
                    }
                    Translated::Nothing => batch.blank(&log_id),
                }
            }
            // Applied below, as the membership they add up to.
            etcd_wal::ENTRY_CONF_CHANGE => batch.blank(&log_id),
            other => return Err(refuse(format!("entry {index} is of kind {other}"))),
        }
        replayed += 1;
    }
    // What each member published (names, client URLs), so that MemberList names them
    // before they publish again.
    for (id, member) in members.nodes() {
        let attributes = MemberAttributes {
            member_id: *id,
            name: member.name.clone(),
            client_urls: member.client_urls.clone(),
            ..Default::default()
        };
        batch.command(
            &applied,
            &own_command(CommandRequest::PublishMember(attributes)),
        )?;
    }
    let voters = members.voters.len();
    let learners = members.learners.len();
    let stored = StoredMembership::new(Some(applied), members.into_membership()?);
    batch.membership(&applied, &stored)?;
    batch.flush()?;
    // The store is not synced as it applies (the raft log replays what it loses); this
    // one has no log behind it, and `member.json` will say it is complete.
    if !crate::planted_bug!(ConvertWithoutSync) {
        store.sync_to_disk()?;
    }
    Ok(Converted {
        member_id: wal.member_id,
        cluster_id: wal.cluster_id,
        applied,
        term: hard_state.term.max(
            pending
                .last()
                .map_or(applied.leader_id.term, |e| e.log_id.leader_id.term),
        ),
        imported,
        consistent_index,
        replayed,
        voters,
        learners,
        pending,
    })
}

/// The log id etcd's entry `index` of `term` has here.
fn etcd_log_id(term: u64, index: u64) -> LogId {
    LogId::new(
        LeaderId {
            term,
            node_id: ETCD_LEADER,
        },
        index,
    )
}

fn own_command(request: CommandRequest) -> Command {
    Command {
        request: Some(request),
        auth_revision: 0,
        auth_checked: false,
    }
}

/// The index of the last entry etcd applied to its database.
fn consistent_index(database: &Database) -> Result<u64, BackupError> {
    let Some(meta) = database.bucket(schema::META)? else {
        return Ok(0);
    };
    for entry in meta.entries() {
        let (key, value) = entry?;
        if key == schema::CONSISTENT_INDEX {
            let raw: [u8; 8] = value
                .as_slice()
                .try_into()
                .map_err(|_| refuse("its consistent index is not 8 bytes"))?;
            return Ok(u64::from_be_bytes(raw));
        }
    }
    Ok(0)
}

fn alarms(database: &Database) -> Result<Vec<AlarmRequest>, BackupError> {
    let mut alarms = Vec::new();
    if let Some(bucket) = database.bucket(schema::ALARM)? {
        for entry in bucket.entries() {
            let (key, _) = entry?;
            let alarm = schema::parse_alarm(&key)
                .map_err(|e| refuse(format!("an alarm does not decode: {e}")))?;
            alarms.push(AlarmRequest {
                action: AlarmAction::Activate.into(),
                member_id: alarm.member_id,
                alarm: alarm.alarm,
            });
        }
    }
    Ok(alarms)
}

/// What etcd's files say of each member's URLs and name.
struct MemberDetails {
    members: BTreeMap<NodeId, Member>,
    named_peers: Vec<(String, Vec<String>)>,
}

/// etcd's v2 store node, as its snapshot files hold it (JSON).
#[derive(Deserialize)]
struct V2Node {
    #[serde(rename = "Value", default)]
    value: String,
    #[serde(rename = "Children", default)]
    children: Option<BTreeMap<String, V2Node>>,
}

#[derive(Deserialize)]
struct V2Store {
    #[serde(rename = "Root")]
    root: V2Node,
}

#[derive(Deserialize, Default)]
struct RaftAttributes {
    #[serde(rename = "peerURLs", default)]
    peer_urls: Vec<String>,
}

#[derive(Deserialize, Default)]
struct Attributes {
    #[serde(default)]
    name: String,
    #[serde(rename = "clientURLs", default)]
    client_urls: Vec<String>,
}

impl MemberDetails {
    /// From the database's `members` bucket (etcd 3.6 keeps them there) and the newest
    /// snapshot's v2 store (etcd 3.4 and 3.5 do), the latter winning.
    fn gather(
        database: &Database,
        snap: Option<&Snap>,
        named_peers: &[(String, Vec<String>)],
    ) -> Result<MemberDetails, BackupError> {
        let mut members = BTreeMap::new();
        if let Some(bucket) = database.bucket(schema::MEMBERS)? {
            for entry in bucket.entries() {
                let (_, value) = entry?;
                let record: schema::MemberRecord = serde_json::from_slice(&value)
                    .map_err(|e| refuse(format!("a members record: {e}")))?;
                members.insert(
                    record.id,
                    Member {
                        name: record.name,
                        peer_urls: record.peer_urls,
                        client_urls: record.client_urls,
                    },
                );
            }
        }
        if let Some(snap) = snap.filter(|snap| !snap.v2_store.is_empty()) {
            let v2: V2Store = serde_json::from_slice(&snap.v2_store)
                .map_err(|e| refuse(format!("the snapshot's v2 store: {e}")))?;
            let listed = v2
                .root
                .child("0")
                .and_then(|cluster| cluster.child("members"))
                .and_then(|members| members.children.as_ref());
            for (hex, node) in listed.into_iter().flatten() {
                let Ok(id) = u64::from_str_radix(hex, 16) else {
                    continue;
                };
                let raft: RaftAttributes = node
                    .child("raftAttributes")
                    .map(|n| serde_json::from_str(&n.value).unwrap_or_default())
                    .unwrap_or_default();
                let attributes: Attributes = node
                    .child("attributes")
                    .map(|n| serde_json::from_str(&n.value).unwrap_or_default())
                    .unwrap_or_default();
                members.insert(
                    id,
                    Member {
                        name: attributes.name,
                        peer_urls: raft.peer_urls,
                        client_urls: attributes.client_urls,
                    },
                );
            }
        }
        Ok(MemberDetails {
            members,
            named_peers: named_peers.to_vec(),
        })
    }

    /// The member `id`, from what etcd knew of it or what a membership change said.
    /// `current` is what the changes before this one said of it.
    fn member(
        &self,
        id: NodeId,
        current: Option<&Member>,
        changed: Option<&schema::MemberRecord>,
    ) -> Member {
        let mut member = current
            .or_else(|| self.members.get(&id))
            .cloned()
            .unwrap_or_default();
        if let Some(record) = changed {
            if !record.peer_urls.is_empty() {
                member.peer_urls = record.peer_urls.clone();
            }
            if member.name.is_empty() {
                member.name = record.name.clone();
            }
        }
        if member.name.is_empty() {
            let mut urls = member.peer_urls.clone();
            urls.sort();
            if let Some((name, _)) = self.named_peers.iter().find(|(_, peers)| {
                let mut peers = peers.clone();
                peers.sort();
                peers == urls
            }) {
                member.name = name.clone();
            }
        }
        member
    }
}

impl V2Node {
    fn child(&self, name: &str) -> Option<&V2Node> {
        self.children.as_ref()?.get(name)
    }
}

/// A membership as etcd's raft keeps it.
struct Members {
    voters: BTreeSet<NodeId>,
    learners: BTreeSet<NodeId>,
    details: BTreeMap<NodeId, Member>,
}

impl Members {
    fn nodes(&self) -> impl Iterator<Item = (&NodeId, &Member)> {
        self.details.iter()
    }

    fn into_membership(self) -> Result<openraft::Membership<NodeId, Member>, BackupError> {
        for (id, member) in &self.details {
            if member.peer_urls.is_empty() {
                return Err(refuse(format!(
                    "member {id:x} has no peer URLs in etcd's files"
                )));
            }
        }
        Membership::new(vec![self.voters], self.details)
            .map_err(|e| refuse(format!("the membership: {e}")))
    }
}

/// The membership after every change through `end`: the snapshot's, then the WAL's
/// changes after it.
fn members_through(
    wal: &Wal,
    snap: Option<&Snap>,
    known: &MemberDetails,
    end: u64,
) -> Result<Members, BackupError> {
    let (mut voters, mut learners) = match snap {
        Some(snap) => (
            snap.conf_state.voters.iter().copied().collect(),
            snap.conf_state.learners.iter().copied().collect(),
        ),
        None => (BTreeSet::new(), BTreeSet::new()),
    };
    let mut details: BTreeMap<NodeId, Member> = voters
        .iter()
        .chain(learners.iter())
        .map(|id| (*id, known.member(*id, None, None)))
        .collect();
    let since = snap.map_or(0, |snap| snap.index);
    let changes = wal.entries.range(since + 1..);
    for (index, entry) in changes.take_while(|(index, _)| **index <= end) {
        if entry.kind != etcd_wal::ENTRY_CONF_CHANGE {
            continue;
        }
        let change = <ConfChange as prost::Message>::decode(entry.data.as_slice())
            .map_err(|e| refuse(format!("membership change {index}: {e}")))?;
        let record: Option<schema::MemberRecord> = match change.context.is_empty() {
            true => None,
            false => Some(
                serde_json::from_slice(&change.context)
                    .map_err(|e| refuse(format!("membership change {index}: {e}")))?,
            ),
        };
        let id = change.node_id;
        match change.kind {
            etcd_wal::CONF_ADD => {
                learners.remove(&id);
                voters.insert(id);
                let member = known.member(id, details.get(&id), record.as_ref());
                details.insert(id, member);
            }
            etcd_wal::CONF_ADD_LEARNER => {
                learners.insert(id);
                let member = known.member(id, details.get(&id), record.as_ref());
                details.insert(id, member);
            }
            etcd_wal::CONF_REMOVE => {
                voters.remove(&id);
                learners.remove(&id);
                details.remove(&id);
            }
            etcd_wal::CONF_UPDATE => {
                let member = known.member(id, details.get(&id), record.as_ref());
                details.insert(id, member);
            }
            other => return Err(refuse(format!("membership change {index} of kind {other}"))),
        }
    }
    Ok(Members {
        voters,
        learners,
        details,
    })
}
