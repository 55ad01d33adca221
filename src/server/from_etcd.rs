//! A member started on an etcd member's `--data-dir` converts it before anything else
//! opens it: the most drop-in migration there is (stop etcd, start `quantykube` with the
//! same flags on the same directory).
//!
//! The store is built by `backup::in_place` in a staging directory beside etcd's files
//! (`<data-dir>/from-etcd`), the raft log is started after etcd's last applied entry,
//! and the member's identity (etcd's member and cluster ids) is written; then the
//! store, the log and `member.json` are renamed into place, `member.json` last: it is
//! the commit point. A crash before it leaves a data dir whose conversion is done
//! again from the start (what an earlier attempt left of ours is removed first); after
//! it, the member restarts as any other. etcd's own files are never changed, so that
//! etcd can still be started on the directory instead.

use quantykube_raft::{durable, LogStore, Vote};

use super::ServerError;
use crate::backup::etcd_entries::Replay;
use crate::backup::in_place::{self, Conversion, EtcdFiles};
use crate::backup::BackupError;
use crate::config::Config;
use crate::membership::join::{self, Identity};
use crate::store::RevisionStore;

/// Where the conversion is built before it is renamed into place.
const STAGING: &str = "from-etcd";
/// What the conversion renames into the data dir, in order; `member.json` last.
const CONVERTED: [&str; 3] = ["db", "wal", "member.json"];

/// Converts the data dir if it is an etcd member's that was not converted yet.
pub(super) fn convert_if_etcd(config: &Config) -> Result<(), ServerError> {
    let data_dir = &config.data_dir;
    let Some(etcd) = EtcdFiles::find(data_dir, config.wal_dir.as_deref()) else {
        return Ok(());
    };
    if join::read_identity(data_dir)?.is_some() {
        return Ok(());
    }
    if config.wal_dir.is_some() {
        // Our raft log would go where etcd's WAL is.
        return Err(not_converted(
            "etcd's WAL is in --wal-dir; convert without --wal-dir (move the WAL back to \
             <data-dir>/member/wal), then give the member a new --wal-dir",
        ));
    }
    let staging = data_dir.join(STAGING);
    for leftover in [staging.clone(), data_dir.join("db"), data_dir.join("wal")] {
        if leftover.exists() {
            tracing::info!(path = %leftover.display(), "removing what an interrupted conversion from etcd left");
            durable::remove_dir_all(&leftover)?;
        }
    }
    durable::create_dir_all(&staging)?;
    let databases = crate::disk::open(&staging, None)?;
    let store = RevisionStore::new(databases.store)?;
    let named_peers: Vec<(String, Vec<String>)> = config
        .initial_cluster
        .iter()
        .map(|m| (m.name.clone(), m.peer_urls.clone()))
        .collect();
    let conversion = Conversion {
        replay: Replay {
            min_lease_ttl: crate::lessor::min_ttl(config.election_timeout),
            bcrypt_cost: config.auth.bcrypt_cost,
        },
        named_peers: &named_peers,
    };
    let converted = in_place::convert(&etcd, &store, &conversion)?;
    drop(store);
    let mut log = LogStore::inline(databases.log)?;
    log.start_after(
        &converted.applied,
        &converted.pending,
        &Vote::new(converted.term, converted.member_id),
    )?;
    drop(log);
    join::write_identity(
        &staging,
        Identity {
            member_id: converted.member_id,
            cluster_id: converted.cluster_id,
        },
    )?;
    for name in CONVERTED {
        durable::rename(&staging.join(name), &data_dir.join(name))?;
    }
    durable::remove_dir_all(&staging)?;
    tracing::info!(
        "data-dir" = %data_dir.display(),
        "local-member-id" = %format!("{:x}", converted.member_id),
        "cluster-id" = %format!("{:x}", converted.cluster_id),
        "consistent-index" = converted.consistent_index,
        "replayed-entries" = converted.replayed,
        "uncommitted-entries" = converted.pending.len(),
        "applied-index" = converted.applied.index,
        "applied-term" = converted.applied.leader_id.term,
        revision = converted.imported.current_revision,
        leases = converted.imported.leases,
        voters = converted.voters,
        learners = converted.learners,
        "converted etcd's data dir in place; etcd's files under member/ are unchanged"
    );
    #[cfg(feature = "planted-bugs")]
    if crate::planted::is_planted(crate::planted::PlantedBug::PausedAfterConversion) {
        std::thread::sleep(crate::planted::CONVERSION_PAUSE);
    }
    Ok(())
}

fn not_converted(why: &str) -> ServerError {
    BackupError::NotEtcd(format!("cannot convert etcd's data dir: {why}")).into()
}
