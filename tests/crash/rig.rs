//! A cluster whose members each keep their data dir on a crash filesystem of its own,
//! and power losses of some or all of them.
//!
//! Each member's `--data-dir` is `data` in its own crashfs mount, so one member can
//! lose power while the others serve, and all of them can lose power together: every
//! mount is frozen first (a request after its freeze fails and changes nothing), then
//! the processes are killed, then each mount rolls back to what was durable and
//! remounts, and the members start again on what is left. Logs stay outside the
//! mounts.

use std::path::{Path, PathBuf};
use std::process::Command;

use quantykube_crashfs::{CrashFs, Names, PowerLossReport, Torn};
use tempfile::TempDir;

use crate::harness::{
    restore_command, with_restore_args, Cluster, ClusterOptions, MemberSpec, Target,
};

/// A cluster on crash filesystems. Fields drop in order: the members are killed before
/// their filesystems unmount.
pub struct Rig {
    pub cluster: Cluster,
    pub disks: Vec<CrashFs>,
    pub power_losses: usize,
    data_root: PathBuf,
    dir: TempDir,
}

/// The server a scenario runs: the target as shipped, or QuantyKube's planted build
/// with the bugs named (`QK_PLANTED_BUGS`) switched on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Shipped,
    Planted(&'static str),
}

impl Server {
    /// `options` running this server.
    pub fn options(self, options: ClusterOptions) -> ClusterOptions {
        match self {
            Server::Shipped => options,
            Server::Planted(bugs) => options
                .target(Target::Quantykube)
                .binary(planted_binary())
                .env("QK_PLANTED_BUGS", bugs),
        }
    }

    /// `snapshot restore` of `file` for `spec`, by this server (etcdctl's for etcd).
    pub fn restore(self, file: &Path, spec: &MemberSpec) -> Command {
        match self {
            Server::Shipped => restore_command(Target::from_env(), file, spec),
            Server::Planted(bugs) => {
                let mut command = Command::new(planted_binary());
                command.env("QK_PLANTED_BUGS", bugs);
                with_restore_args(command, file, spec)
            }
        }
    }
}

/// `quantykube-planted`, beside the `quantykube` binary the tests run.
pub fn planted_binary() -> PathBuf {
    let planted = Target::Quantykube
        .require_binary()
        .with_file_name("quantykube-planted");
    assert!(
        planted.is_file(),
        "{} is missing: `cargo build --bin quantykube-planted --features planted-bugs` \
         (make test does)",
        planted.display()
    );
    planted
}

/// When the disks make creates, renames and unlinks durable: `QK_CRASH_NAMES`
/// (`per-directory` or `journaled`), else per directory (POSIX's promise, the harsher
/// model) for QuantyKube, and journaled (as ext4 and XFS do) for etcd 3.4, which makes
/// its data dir without syncing the parent and so loses it whole to a power cut on the
/// first model.
pub fn names() -> Names {
    match std::env::var("QK_CRASH_NAMES").as_deref() {
        Ok("journaled") => Names::Journaled,
        Ok("per-directory") => Names::PerDirectory,
        Ok(other) => panic!("QK_CRASH_NAMES={other}: expected per-directory or journaled"),
        Err(_) if Target::from_env() == Target::Etcd => Names::Journaled,
        Err(_) => Names::PerDirectory,
    }
}

/// Member `i`'s disk: a crash filesystem at `<data_root>/m<i>` (its data dir is `data`
/// inside), kept in `<work>/disk<i>`.
fn mount_disk(work: &Path, data_root: &Path, i: usize) -> CrashFs {
    let disk = CrashFs::mount(
        work.join(format!("disk{i}")),
        data_root.join(format!("m{i}")),
    )
    .unwrap_or_else(|e| panic!("mount the crash filesystem of member {i}: {e}"));
    disk.set_names(names());
    disk
}

/// The reason the crash tests cannot run here, after printing it; under CI (where the
/// machine has FUSE and root) a panic instead.
pub fn unavailable() -> Option<String> {
    CrashFs::skip_reason()
}

impl Rig {
    /// Starts `members` members of `server`, each on a fresh crash filesystem, with
    /// the options `options` adds; `None` (test skipped) where crash filesystems cannot
    /// mount.
    pub async fn start(
        members: usize,
        server: Server,
        options: impl FnOnce(ClusterOptions) -> ClusterOptions,
    ) -> Option<Rig> {
        if unavailable().is_some() {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("qk-crash-")
            .tempdir()
            .expect("tempdir");
        let data_root = dir.path().join("data");
        let disks = (0..members)
            .map(|i| mount_disk(dir.path(), &data_root, i))
            .collect();
        let cluster = options(server.options(ClusterOptions::new(members).data_root(&data_root)))
            .start()
            .await;
        Some(Rig {
            cluster,
            disks,
            power_losses: 0,
            data_root,
            dir,
        })
    }

    /// Mounts the disk of member `i`, the next to join, before it starts.
    pub fn mount_disk(&mut self, i: usize) {
        assert_eq!(i, self.disks.len(), "disks are mounted in members' order");
        self.disks
            .push(mount_disk(self.dir.path(), &self.data_root, i));
    }

    /// The store's revision now, as the first running member reports it.
    pub async fn revision(&self) -> i64 {
        let first = self.cluster.running()[0];
        let mut client = self.cluster.client(first).await;
        let got = client.get("any", None).await.expect("read the revision");
        got.header().map(|h| h.revision()).unwrap_or_default()
    }

    /// Cuts the power of `members` at one instant, kills them, and brings their disks
    /// back as the power cut left them. The members stay stopped.
    pub fn cut(&mut self, members: &[usize], torn: Torn) -> Vec<PowerLossReport> {
        for &i in members {
            self.disks[i].power_cut();
        }
        for &i in members {
            self.cluster.kill9(i);
        }
        let reports = members
            .iter()
            .map(|&i| {
                self.disks[i]
                    .restart(torn)
                    .unwrap_or_else(|e| panic!("restart the disk of member {i}: {e}"))
            })
            .collect();
        self.power_losses += members.len();
        reports
    }

    /// A power loss of `members` ([`Rig::cut`]), then their restart; waits until
    /// every member serves a linearizable read.
    pub async fn power_loss(&mut self, members: &[usize], torn: Torn) -> Vec<PowerLossReport> {
        let reports = self.cut(members, torn);
        for &i in members {
            self.cluster.start_member(i);
        }
        self.cluster.wait_ready_all().await;
        reports
    }
}
