//! Who this member is: its member id and cluster id, decided once and kept in the data
//! dir's `member.json`.
//!
//! A data dir that has them is started as it is, whatever the bootstrap flags say (as
//! etcd ignores `--initial-cluster*` once it has a WAL). A new member of a new cluster
//! computes both from `--initial-cluster`, as every founding member does alike. A new
//! member joining with `--initial-cluster-state existing` asks the peers named in
//! `--initial-cluster` for the cluster, and takes the id that MemberAdd gave its peer
//! URLs. This module decides identities; it never changes the membership.

use std::collections::BTreeMap;
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

/// The identity `member.json` records, if the data dir has one.
pub fn read_identity(data_dir: &Path) -> Result<Option<Identity>, MembershipError> {
    match std::fs::read(data_dir.join(IDENTITY_FILE)) {
        Ok(raw) => serde_json::from_slice(&raw)
            .map(Some)
            .map_err(|e| MembershipError::Identity(format!("{IDENTITY_FILE}: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(MembershipError::Identity(format!("{IDENTITY_FILE}: {e}"))),
    }
}

/// Writes the identity durably (temporary file, fsync, rename, fsync of the dir).
pub fn write_identity(data_dir: &Path, identity: Identity) -> Result<(), MembershipError> {
    write_json(data_dir, IDENTITY_FILE, &identity)
}

fn write_json<T: Serialize>(data_dir: &Path, name: &str, value: &T) -> Result<(), MembershipError> {
    let io = |e: std::io::Error| MembershipError::Identity(format!("{name}: {e}"));
    let tmp = data_dir.join(format!("{name}.tmp"));
    let raw =
        serde_json::to_vec(value).map_err(|e| MembershipError::Identity(format!("{name}: {e}")))?;
    {
        use std::io::Write;
        let mut file = std::fs::File::create(&tmp).map_err(io)?;
        file.write_all(&raw).map_err(io)?;
        file.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, data_dir.join(name)).map_err(io)?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(io)
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
async fn join_identity(config: &Config, dialer: &dyn Dialer) -> Result<Identity, MembershipError> {
    let own = &config.initial_advertise_peer_urls;
    let peers: Vec<&String> = config
        .initial_cluster
        .iter()
        .flat_map(|m| &m.peer_urls)
        .filter(|url| !own.contains(url))
        .collect();
    let mut last_error =
        MembershipError::CannotFetchCluster("no other member in --initial-cluster".into());
    for attempt in 0..JOIN_ATTEMPTS {
        for url in &peers {
            match fetch_cluster_members(dialer, url, Duration::from_secs(2)).await {
                // A member that has not applied the MemberAdd yet may not list us.
                Ok(cluster) => match identity_in(&cluster, own) {
                    Ok(identity) => return Ok(identity),
                    Err(error) => last_error = error,
                },
                Err(error) => {
                    tracing::warn!(peer_url = %url, %error, attempt, "cannot fetch the cluster from a peer");
                    last_error = MembershipError::CannotFetchCluster(error);
                }
            }
        }
        if peers.is_empty() {
            break;
        }
        tokio::time::sleep(JOIN_RETRY).await;
    }
    Err(last_error)
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
