//! `quantykube snapshot save`: etcdctl's online backup. It streams Maintenance.Snapshot
//! from one member into `<file>.part`, checks the SHA-256 trailer the member sent,
//! syncs, and renames it into place, so that an interrupted save never leaves a file
//! that looks complete. Given a directory (a path ending in `/`), it names the file
//! by the UTC time and can keep only the newest N there: what a CronJob in an image
//! without a shell needs. With `--user` it authenticates first and sends the token
//! (`client::auth`), as Snapshot is root's once auth is on.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use quantykube_raft::durable;

use super::file;
use super::BackupError;
use crate::client::{Credentials, TlsFiles};
use crate::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use crate::proto::etcdserverpb::SnapshotRequest;

/// How long authenticating may take (etcdctl's default `--command-timeout`).
const AUTH_TIMEOUT: Duration = Duration::from_secs(5);

/// What to save, from where.
pub struct Save<'a> {
    pub endpoints: &'a [String],
    pub tls: TlsFiles<'a>,
    pub dial_timeout: Duration,
    /// A file, or a directory (ending in `/`) to name a timestamped file in.
    pub target: &'a Path,
    /// In directory mode: how many `snapshot-*.db` files to keep (0 keeps all).
    pub keep: usize,
    /// `--user`: authenticate as this user first.
    pub user: Option<&'a Credentials>,
}

/// Saves the snapshot; returns the file written.
pub async fn save(request: &Save<'_>) -> Result<PathBuf, BackupError> {
    let endpoint = match request.endpoints {
        [one] => one,
        // etcdctl 3.4's words.
        many => {
            return Err(BackupError::Write(format!(
                "snapshot must be requested to one selected node, not multiple {many:?}"
            )))
        }
    };
    let channel = crate::client::dial(
        endpoint,
        &request.tls,
        request.dial_timeout,
        request.user,
        AUTH_TIMEOUT,
    )
    .await
    .map_err(|e| BackupError::Write(e.to_string()))?;
    let target = target_file(request.target)?;
    let part = PathBuf::from(format!("{}.part", target.display()));
    let mut out = std::fs::File::create(&part).map_err(BackupError::file(&part))?;
    let mut stream = MaintenanceClient::new(channel)
        .max_decoding_message_size(usize::MAX)
        .snapshot(SnapshotRequest {})
        .await
        .map_err(|s| BackupError::Write(s.message().to_string()))?
        .into_inner();
    let written = async {
        while let Some(message) = stream
            .message()
            .await
            .map_err(|s| BackupError::Write(s.message().to_string()))?
        {
            out.write_all(&message.blob)
                .map_err(BackupError::file(&part))?;
        }
        out.sync_all().map_err(BackupError::file(&part))?;
        // The member's SHA-256 trailer must match what arrived.
        file::open(&part, false)?;
        // Durable before the command says it saved: a script may delete the previous
        // backup next.
        durable::rename(&part, &target).map_err(BackupError::file(&target))
    }
    .await;
    if let Err(error) = written {
        let _ = std::fs::remove_file(&part);
        return Err(error);
    }
    if is_directory_target(request.target) && request.keep > 0 {
        prune(durable::parent_of(&target), request.keep)?;
    }
    Ok(target)
}

fn is_directory_target(target: &Path) -> bool {
    target.as_os_str().to_string_lossy().ends_with('/') || target.is_dir()
}

/// The file to write: `target`, or `snapshot-<UTC>.db` inside it when it is a directory.
fn target_file(target: &Path) -> Result<PathBuf, BackupError> {
    if !is_directory_target(target) {
        return Ok(target.to_path_buf());
    }
    durable::create_dir_all(target).map_err(BackupError::file(target))?;
    let now = time::OffsetDateTime::now_utc();
    Ok(target.join(format!(
        "snapshot-{:04}{:02}{:02}T{:02}{:02}{:02}Z.db",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )))
}

/// Deletes all but the newest `keep` `snapshot-*.db` files (their names sort by time).
fn prune(dir: &Path, keep: usize) -> Result<(), BackupError> {
    let mut saved: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(BackupError::file(dir))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("snapshot-") && n.ends_with(".db"))
        })
        .collect();
    saved.sort();
    let excess = saved.len().saturating_sub(keep);
    for old in &saved[..excess] {
        std::fs::remove_file(old).map_err(BackupError::file(old))?;
        tracing::info!(file = %old.display(), "removed an old snapshot");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_target_gets_a_timestamped_file_and_pruning_keeps_the_newest() {
        let dir = tempfile::tempdir().unwrap();
        let target = PathBuf::from(format!("{}/", dir.path().join("backups").display()));
        let file = target_file(&target).unwrap();
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        assert!(
            name.starts_with("snapshot-") && name.ends_with("Z.db"),
            "{name}"
        );
        for stamp in ["20260101T000000Z", "20260102T000000Z", "20260103T000000Z"] {
            std::fs::write(
                dir.path()
                    .join("backups")
                    .join(format!("snapshot-{stamp}.db")),
                b"x",
            )
            .unwrap();
        }
        std::fs::write(dir.path().join("backups").join("notes.txt"), b"x").unwrap();
        prune(&dir.path().join("backups"), 2).unwrap();
        let mut left: Vec<String> = std::fs::read_dir(dir.path().join("backups"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "notes.txt",
                "snapshot-20260102T000000Z.db",
                "snapshot-20260103T000000Z.db"
            ]
        );
        // A plain file path is used as given.
        let plain = dir.path().join("one.db");
        assert_eq!(target_file(&plain).unwrap(), plain);
    }
}
