//! Power lost around a restore: `snapshot restore` (etcdctl's for etcd, ours for
//! QuantyKube), then a power loss before the restored member ever starts. The member
//! must start on everything the snapshot held.

use etcd_client::GetOptions;
use quantykube_crashfs::Torn;

use crate::first_files::commit_metadata;
use std::path::PathBuf;

use crate::harness::{run, ClusterOptions, Target};
use crate::rig::{self, Rig, Server};

pub const KEYS: usize = 500;

/// A snapshot file `etcdctl snapshot save` took of a one-member cluster of `source`
/// holding [`KEYS`] keys `<prefix><i:03>` = `value-<i>`: its directory (removed when
/// dropped), its path and the revision of the last put.
pub async fn saved_keys(source: Target, prefix: &str) -> (tempfile::TempDir, PathBuf, i64) {
    let cluster = ClusterOptions::new(1).target(source).start().await;
    let mut client = cluster.client(0).await;
    let mut revision = 0;
    for i in 0..KEYS {
        let put = client
            .put(format!("{prefix}{i:03}"), format!("value-{i}"), None)
            .await
            .expect("put");
        revision = put.header().map(|h| h.revision()).unwrap_or_default();
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("backup.db");
    cluster
        .etcdctl_on(0, &["snapshot", "save", &file.to_string_lossy()])
        .await
        .assert_success();
    (dir, file, revision)
}

/// Restores a snapshot of [`KEYS`] keys onto a crash filesystem, cuts the power (after
/// the filesystem committed its metadata, as ext4's journal does, if
/// `metadata_committed`), starts the member, and answers how many keys it serves and at
/// which revision, with the snapshot's revision.
async fn restore_then_power_loss(
    server: Server,
    metadata_committed: bool,
) -> Option<(usize, i64, i64)> {
    if rig::unavailable().is_some() {
        return None;
    }
    let (_dir, file, revision) = saved_keys(Target::from_env(), "restored/").await;

    let mut rig = Rig::start(1, server, |o| o.unstarted()).await?;
    run(server.restore(&file, &rig.cluster.member_spec(0)));
    // The restore command has exited: what it wrote is what it made durable.
    if metadata_committed {
        commit_metadata(rig.disks[0].mountpoint());
    }
    rig.cut(&[0], Torn::No);
    rig.cluster.start_all().await;

    let mut client = rig.cluster.client(0).await;
    let got = client
        .get("restored/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("read the restored keys");
    for (i, kv) in got.kvs().iter().enumerate() {
        assert_eq!(kv.value_str().ok(), Some(format!("value-{i}").as_str()));
    }
    let served = got.header().map(|h| h.revision()).unwrap_or_default();
    Some((got.kvs().len(), served, revision))
}

/// etcd 3.4 passes this one (its restore syncs its bbolt file and WAL); QuantyKube
/// before its restore synced the store lost every key and served revision 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_member_keeps_every_key_through_a_power_loss_after_the_restore() {
    restored_keys_survive(Server::Shipped).await;
}

/// The scenario of the test above, for `server`; panics with what it found.
pub async fn restored_keys_survive(server: Server) {
    let Some((kept, served, revision)) = restore_then_power_loss(server, true).await else {
        return;
    };
    let target = Target::from_env();
    assert_eq!(
        kept, KEYS,
        "{target} kept {kept} of the {KEYS} restored keys (serving revision {served}, the \
         snapshot's {revision})"
    );
    assert!(
        served >= revision,
        "{target} serves revision {served}, below the snapshot's {revision}"
    );
}

/// The same power loss on a filesystem that had not committed the names the restore
/// made (POSIX promises a new directory only once its parent is synced). etcd 3.4
/// loses everything here: `etcdctl snapshot restore` makes the data dir without
/// syncing its parent, so the whole data dir is gone and etcd starts empty at
/// revision 1. QuantyKube's restore syncs every directory it makes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_member_keeps_every_key_even_if_no_name_the_restore_made_was_committed() {
    let Some((kept, served, revision)) = restore_then_power_loss(Server::Shipped, false).await
    else {
        return;
    };
    let target = Target::from_env();
    if target == Target::Etcd {
        eprintln!(
            "etcd 3.4 kept {kept} of the {KEYS} restored keys, serving revision {served} \
             (the snapshot's {revision}): its restore does not sync the data dir's parent"
        );
        return;
    }
    assert_eq!(
        (kept, served >= revision),
        (KEYS, true),
        "{target} kept {kept} of the {KEYS} restored keys (serving revision {served}, the \
         snapshot's {revision})"
    );
}
