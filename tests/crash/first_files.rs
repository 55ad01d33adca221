//! Files a member writes once and relies on ever after: auto-TLS's certificate and
//! key, and the admin API's snapshot files. A power loss right after they were written
//! must not leave a file that blocks every later start, or a record that names a file
//! that is gone.

use std::fs::File;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

use quantykube_crashfs::Torn;

use crate::harness::{ClientTls, Target, START_TIMEOUT};
use crate::rig::{Rig, Server};

/// fsyncs every directory under `root` (not the files): what a filesystem that commits
/// its metadata on its own does (ext4's journal, every 5 s), whatever the files' data.
pub fn commit_metadata(root: &Path) {
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .unwrap_or_else(|e| panic!("fsync {}: {e}", dir.display()));
        for entry in std::fs::read_dir(&dir).expect("list") {
            let entry = entry.expect("entry");
            if entry.file_type().expect("type").is_dir() {
                dirs.push(entry.path());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_with_auto_tls_starts_again_after_a_power_loss_right_after_its_first_start() {
    let Some(mut rig) = Rig::start(1, Server::Shipped, |o| {
        o.https_clients(ClientTls::insecure())
            .https_peers()
            .args(["--auto-tls", "--peer-auto-tls"])
    })
    .await
    else {
        return;
    };
    // The member made its certificates at start. The filesystem has committed their
    // names, not necessarily their bytes.
    commit_metadata(rig.disks[0].mountpoint());
    rig.cut(&[0], Torn::No);
    rig.cluster.start_member(0);
    let started = rig
        .cluster
        .try_wait_ready(0, Instant::now() + START_TIMEOUT)
        .await;
    if Target::from_env() == Target::Etcd {
        // etcd 3.4 writes both files without an fsync: it exits at every start with
        // "tls: failed to find any PEM data in certificate input" until an operator
        // deletes them.
        eprintln!("etcd 3.4 after the power loss: {started:?}");
        return;
    }
    started.unwrap_or_else(|why| panic!("{why}"));
    rig.cluster
        .etcdctl(&["put", "after", "the power loss"])
        .await
        .assert_success();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_snapshot_recorded_ready_keeps_its_file_through_a_power_loss() {
    if Target::from_env() == Target::Etcd {
        eprintln!("etcd has no admin API: nothing to check");
        return;
    }
    admin_snapshot_survives(Server::Shipped).await;
}

/// The scenario of the test above, for `server`; panics with what it found.
pub async fn admin_snapshot_survives(server: Server) {
    let Some(mut rig) = Rig::start(3, server, |o| o).await else {
        return;
    };
    rig.cluster
        .etcdctl(&["put", "backed", "up"])
        .await
        .assert_success();
    let endpoint = rig.cluster.endpoint(0);
    let admin = |args: &[&str]| {
        let out = Command::new(match server {
            Server::Shipped => Target::Quantykube.require_binary(),
            Server::Planted(_) => crate::rig::planted_binary(),
        })
        .args(["admin", "--endpoints", &endpoint])
        .args(args)
        .output()
        .expect("run quantykube admin");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    };
    let (created, output) = admin(&["snapshots", "create", "nightly-1"]);
    assert!(created, "create: {output}");
    // READY is in the log of every member; the file is on member 0's disk only.
    let everyone: Vec<usize> = (0..3).collect();
    rig.power_loss(&everyone, Torn::No).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("nightly-1.db");
    let (downloaded, output) = admin(&[
        "snapshots",
        "download",
        "nightly-1",
        &file.to_string_lossy(),
    ]);
    assert!(
        downloaded,
        "a snapshot recorded READY before the power loss cannot be downloaded: {output}"
    );
}
