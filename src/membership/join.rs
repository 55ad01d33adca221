//! Who this member is: its member id and cluster id, decided once and kept in the data
//! dir's `member.json`.
//!
//! A data dir that has them is started as it is, whatever the bootstrap flags say (as
//! etcd ignores `--initial-cluster*` once it has a WAL). A new member of a new cluster
//! computes both from `--initial-cluster`, as every founding member does alike. A new
//! member joining with `--initial-cluster-state existing` asks the peers named in
//! `--initial-cluster` for the cluster, and takes the id that MemberAdd gave its peer
//! URLs. This module decides identities; it never changes the membership.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use quantykube_raft::{fetch_cluster_members, Dialer, Member, NodeId, RemoteCluster};
use serde::{Deserialize, Serialize};

use super::MembershipError;
use crate::config::{ClusterState, Config};
use crate::identity;

const IDENTITY_FILE: &str = "member.json";
/// How long a joining member keeps asking its peers, as etcd retries
/// `GetClusterFromRemotePeers` before giving up.
const JOIN_ATTEMPTS: u32 = 10;
const JOIN_RETRY: Duration = Duration::from_millis(500);

/// This member's place in its cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub member_id: NodeId,
    pub cluster_id: u64,
}

/// How the member starts: with the identity it had, or as a new member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Start {
    /// The data dir had an identity (or a store from before identities were kept).
    Restart(Identity),
    /// A founding member of a new cluster; raft is initialized with these members.
    Bootstrap(Identity),
    /// A member added by MemberAdd, joining a running cluster.
    Join(Identity),
}

impl Start {
    pub fn identity(&self) -> Identity {
        match self {
            Start::Restart(i) | Start::Bootstrap(i) | Start::Join(i) => *i,
        }
    }
}

/// `member.json` as written: the identity and the format that wrote it (a file without
/// one is format 1's, which recorded none).
#[derive(Serialize, Deserialize)]
struct IdentityFile {
    #[serde(flatten)]
    identity: Identity,
    #[serde(default = "crate::format::unrecorded")]
    format: u32,
}

fn read_identity_file(data_dir: &Path) -> Result<Option<IdentityFile>, MembershipError> {
    let describe =
        |e: &dyn std::fmt::Display| MembershipError::Identity(format!("{IDENTITY_FILE}: {e}"));
    let file: IdentityFile = match std::fs::read(data_dir.join(IDENTITY_FILE)) {
        Ok(raw) => serde_json::from_slice(&raw).map_err(|e| describe(&e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(describe(&e)),
    };
    if file.format > crate::format::CURRENT {
        return Err(describe(&crate::format::newer_file(file.format)));
    }
    Ok(Some(file))
}

/// The identity `member.json` records, if the data dir has one. A file a newer build
/// wrote is refused.
pub fn read_identity(data_dir: &Path) -> Result<Option<Identity>, MembershipError> {
    Ok(read_identity_file(data_dir)?.map(|file| file.identity))
}

/// Writes the identity durably (temporary file, fsync, rename, fsync of the dir), in
/// this build's format.
pub fn write_identity(data_dir: &Path, identity: Identity) -> Result<(), MembershipError> {
    write_identity_as(data_dir, identity, crate::format::CURRENT)
}

/// Brings `member.json`, if there is one, to `format` (the file's part of a data dir's
/// migration: one durable replacement, so a power cut leaves either format); returns
/// the format it was in.
pub fn migrate_identity(data_dir: &Path, format: u32) -> Result<Option<u32>, MembershipError> {
    let Some(file) = read_identity_file(data_dir)? else {
        return Ok(None);
    };
    if file.format != format {
        write_identity_as(data_dir, file.identity, format)?;
    }
    Ok(Some(file.format))
}

fn write_identity_as(
    data_dir: &Path,
    identity: Identity,
    format: u32,
) -> Result<(), MembershipError> {
    if format == crate::format::unrecorded() {
        // Format 1 recorded no format.
        return write_json(data_dir, IDENTITY_FILE, &identity);
    }
    write_json(data_dir, IDENTITY_FILE, &IdentityFile { identity, format })
}

fn write_json<T: Serialize>(data_dir: &Path, name: &str, value: &T) -> Result<(), MembershipError> {
    let raw =
        serde_json::to_vec(value).map_err(|e| MembershipError::Identity(format!("{name}: {e}")))?;
    quantykube_raft::durable::write_file(&data_dir.join(name), &raw)
        .map_err(|e| MembershipError::Identity(format!("{name}: {e}")))
}

/// The members a data dir made by `quantykube snapshot restore` founds its new cluster
/// with. Like etcd's restored WAL, it wins over `--initial-cluster`: the member starts
/// with the cluster it was restored for, whatever flags it is given.
const RESTORED_CLUSTER_FILE: &str = "restored-cluster.json";

/// Records the restored cluster's members (id to member), durably.
pub fn write_restored_cluster(
    data_dir: &Path,
    members: &BTreeMap<NodeId, Member>,
) -> Result<(), MembershipError> {
    write_json(data_dir, RESTORED_CLUSTER_FILE, members)
}

/// The restored cluster's members, if this data dir was restored from a snapshot.
pub fn read_restored_cluster(
    data_dir: &Path,
) -> Result<Option<BTreeMap<NodeId, Member>>, MembershipError> {
    let describe = |e: &dyn std::fmt::Display| {
        MembershipError::Identity(format!("{RESTORED_CLUSTER_FILE}: {e}"))
    };
    match std::fs::read(data_dir.join(RESTORED_CLUSTER_FILE)) {
        Ok(raw) => serde_json::from_slice(&raw)
            .map(Some)
            .map_err(|e| describe(&e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(describe(&e)),
    }
}

/// The identity etcd's static bootstrap gives this member: ids from the flags.
fn bootstrap_identity(config: &Config) -> Result<Identity, MembershipError> {
    let token = &config.initial_cluster_token;
    let ids: Vec<NodeId> = config
        .initial_cluster
        .iter()
        .map(|m| identity::member_id(&m.peer_urls, token))
        .collect();
    let member_id = identity::member_id(&config.initial_advertise_peer_urls, token);
    if !ids.contains(&member_id) {
        return Err(MembershipError::NotInInitialCluster(config.name.clone()));
    }
    Ok(Identity {
        member_id,
        cluster_id: identity::cluster_id(ids),
    })
}

/// Decides how this member starts. `has_data` says the store already holds applied
/// state (a data dir from before identities were kept in `member.json`).
pub async fn decide(
    config: &Config,
    has_data: bool,
    dialer: &dyn Dialer,
) -> Result<Start, MembershipError> {
    if let Some(identity) = read_identity(&config.data_dir)? {
        return Ok(Start::Restart(identity));
    }
    if has_data {
        let identity = bootstrap_identity(config)?;
        write_identity(&config.data_dir, identity)?;
        return Ok(Start::Restart(identity));
    }
    crate::config::verify_bootstrap(config)
        .map_err(|e| MembershipError::Bootstrap(e.to_string()))?;
    let start = match config.initial_cluster_state {
        ClusterState::New => Start::Bootstrap(bootstrap_identity(config)?),
        ClusterState::Existing => Start::Join(join_identity(config, dialer).await?),
    };
    write_identity(&config.data_dir, start.identity())?;
    Ok(start)
}

/// Asks the other members of `--initial-cluster` for the cluster, and finds this member
/// in it by its advertised peer URLs.
///
/// All of them are asked at once: a peer that is behind (partitioned while the operator
/// replaced a member, say) may still list the removed member this one replaces, under
/// the same peer URLs. An id that any peer has seen removed is never taken, and of the
/// rest the answer with the longest log wins.
async fn join_identity(config: &Config, dialer: &dyn Dialer) -> Result<Identity, MembershipError> {
    let own = &config.initial_advertise_peer_urls;
    let peers: Vec<&String> = config
        .initial_cluster
        .iter()
        .flat_map(|m| &m.peer_urls)
        .filter(|url| !own.contains(url))
        .collect();
    if peers.is_empty() {
        return Err(MembershipError::CannotFetchCluster(
            "no other member in --initial-cluster".into(),
        ));
    }
    let mut last_error = MembershipError::CannotFetchCluster("no peer answered".into());
    for attempt in 0..JOIN_ATTEMPTS {
        let asked = peers
            .iter()
            .map(|url| fetch_cluster_members(dialer, url, Duration::from_secs(2)));
        let mut answers = Vec::new();
        for (url, answer) in peers.iter().zip(futures::future::join_all(asked).await) {
            match answer {
                Ok(cluster) => answers.push(cluster),
                Err(error) => {
                    tracing::warn!(peer_url = %url, %error, attempt, "cannot fetch the cluster from a peer");
                    last_error = MembershipError::CannotFetchCluster(error);
                }
            }
        }
        if !answers.is_empty() {
            // A peer that has not applied the MemberAdd yet may not list us: ask again.
            match identity_among(&answers, own) {
                Ok(identity) => return Ok(identity),
                Err(error) => last_error = error,
            }
        }
        tokio::time::sleep(JOIN_RETRY).await;
    }
    Err(last_error)
}

/// This member's id among several peers' answers: from the answer with the longest log
/// that lists our peer URLs under an id no answer has seen removed.
pub fn identity_among(
    answers: &[RemoteCluster],
    own: &[String],
) -> Result<Identity, MembershipError> {
    let removed: BTreeSet<NodeId> = answers
        .iter()
        .filter(|_| !crate::planted_bug!(JoinerIgnoresRemovals))
        .flat_map(|a| a.removed_ids.iter().copied())
        .collect();
    let mut last_error = MembershipError::NoMatchingMember(own.join(","));
    let mut best: Option<(u64, Identity)> = None;
    for answer in answers {
        match identity_in(answer, own) {
            Ok(identity) if removed.contains(&identity.member_id) => {
                last_error = MembershipError::NoMatchingMember(format!(
                    "{} (a peer lists them under {:x}, which another has seen removed)",
                    own.join(","),
                    identity.member_id
                ));
            }
            Ok(identity) => {
                if best.is_none_or(|(index, _)| answer.last_log_index > index) {
                    best = Some((answer.last_log_index, identity));
                }
            }
            Err(error) => last_error = error,
        }
    }
    best.map(|(_, identity)| identity).ok_or(last_error)
}

/// This member's id in `cluster`: the member whose peer URLs are exactly ours.
pub fn identity_in(cluster: &RemoteCluster, own: &[String]) -> Result<Identity, MembershipError> {
    let mut own: Vec<&String> = own.iter().collect();
    own.sort();
    let found = cluster.members.iter().find(|m| {
        let mut urls: Vec<&String> = m.member.peer_urls.iter().collect();
        urls.sort();
        urls == own
    });
    match found {
        Some(member) => Ok(Identity {
            member_id: member.id,
            cluster_id: cluster.cluster_id,
        }),
        None => Err(MembershipError::NoMatchingMember(
            own.iter()
                .map(|u| u.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quantykube_raft::{Member, RemoteMember};

    fn cluster() -> RemoteCluster {
        let member = |id, urls: &[&str]| RemoteMember {
            id,
            member: Member {
                name: String::new(),
                peer_urls: urls.iter().map(|u| u.to_string()).collect(),
                client_urls: Vec::new(),
            },
            is_learner: false,
        };
        RemoteCluster {
            cluster_id: 9,
            members: vec![
                member(1, &["http://a:2380"]),
                member(2, &["http://c:2380", "http://b:2380"]),
            ],
            removed_ids: vec![],
            last_log_index: 0,
        }
    }

    #[test]
    fn a_joiner_takes_the_id_of_its_exact_peer_urls() {
        let found = identity_in(
            &cluster(),
            &["http://b:2380".into(), "http://c:2380".into()],
        );
        assert_eq!(
            found.ok(),
            Some(Identity {
                member_id: 2,
                cluster_id: 9
            })
        );
        assert!(matches!(
            identity_in(&cluster(), &["http://b:2380".into()]),
            Err(MembershipError::NoMatchingMember(_))
        ));
    }

    /// Soak seed 420: n3 was removed and added again (same peer URL, new id) while n1
    /// was partitioned; n1 still listed the old id, and the joiner took it from n1.
    #[test]
    fn a_joiner_never_takes_an_id_a_peer_has_seen_removed() {
        let own = ["http://b:2380".to_owned(), "http://c:2380".to_owned()];
        let behind = cluster(); // lists member 2 at our URLs, knows of no removal
        let mut current = cluster();
        current.members[1].id = 7;
        current.removed_ids = vec![2];
        current.last_log_index = 40;
        for answers in [
            vec![behind.clone(), current.clone()],
            vec![current.clone(), behind.clone()],
        ] {
            assert_eq!(identity_among(&answers, &own).unwrap().member_id, 7);
        }
        // Behind, yet with the longer log (a deposed leader's unreplicated tail): the
        // removal another peer reports still rules its listing out.
        let mut long_tail = behind.clone();
        long_tail.last_log_index = 99;
        assert_eq!(
            identity_among(&[long_tail, current.clone()], &own)
                .unwrap()
                .member_id,
            7
        );
        // Only peers that list the removed id under our URLs: nothing to take yet.
        let mut removed_still_listed = current.clone();
        removed_still_listed.members[1].id = 2;
        assert!(matches!(
            identity_among(&[removed_still_listed], &own),
            Err(MembershipError::NoMatchingMember(message)) if message.contains("removed")
        ));
    }

    #[test]
    fn a_joiner_takes_the_longest_log_among_answers_that_list_it() {
        let own = ["http://a:2380".to_owned()];
        let mut older = cluster();
        older.last_log_index = 5;
        let mut newer = cluster();
        newer.members[0].id = 11;
        newer.last_log_index = 12;
        assert_eq!(
            identity_among(&[older.clone(), newer.clone()], &own)
                .unwrap()
                .member_id,
            11
        );
        assert_eq!(identity_among(&[newer, older], &own).unwrap().member_id, 11);
        assert!(matches!(
            identity_among(&[], &own),
            Err(MembershipError::NoMatchingMember(_))
        ));
    }

    #[test]
    fn the_identity_file_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_identity(dir.path()).unwrap(), None);
        let identity = Identity {
            member_id: u64::MAX,
            cluster_id: 3,
        };
        write_identity(dir.path(), identity).unwrap();
        assert_eq!(read_identity(dir.path()).unwrap(), Some(identity));
    }
}
