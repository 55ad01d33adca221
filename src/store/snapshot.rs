//! Raft snapshots of the revision store.
//!
//! Building a snapshot takes a RocksDB checkpoint of the node's database in
//! `checkpoint-<id>/`: RocksDB flushes the memtables and hard-links the SST files, so a
//! snapshot every `--snapshot-count` entries costs a flush, not a copy of the store.
//! Only when raft asks for the current snapshot to send it to a follower that fell
//! behind the purged log is the checkpoint exported, once, to the
//! transfer file `snapshot-<id>.snap`: the magic `QKSNAP01`, a length-prefixed JSON
//! header (the raft snapshot meta: last log id and membership), then
//! `(column family, key, value)` records and an end marker. A snapshot received from
//! the leader is kept as such a file and installed record by record, so that neither
//! side ever holds a snapshot whole in memory. This module owns the checkpoints, that
//! format, and which snapshot is current; it never talks to the network.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use quantykube_raft::SnapshotMeta;
use rocksdb::checkpoint::Checkpoint;
use rocksdb::{IteratorMode, Options, ReadOptions, WriteBatch, DB};

use super::{meta, RevisionStore, StoreError, CF_HISTORY, CF_KV, CF_LATEST, CF_LEASE, CF_META};

const MAGIC: &[u8; 8] = b"QKSNAP01";
const END: u8 = 0xFF;
/// Column families carried, by their record tag (the tag is the index; new families go
/// last, so that files written before them still read).
const CARRIED: [&str; 5] = [CF_KV, CF_HISTORY, CF_META, CF_LATEST, CF_LEASE];
const INSTALL_BATCH_BYTES: usize = 4 << 20;
const CHECKPOINT_PREFIX: &str = "checkpoint-";
const SNAPSHOT_EXTENSION: &str = "snap";
/// Where a checkpoint is taken before its log id (its name) is known.
const CHECKPOINT_STAGING: &str = "checkpoint.staging";

/// A snapshot and the raft position it captures. `path` is its transfer file, which
/// [`latest_snapshot`] writes on first use when the snapshot is a checkpoint.
#[derive(Clone, Debug)]
pub struct SnapshotInfo {
    pub meta: SnapshotMeta,
    pub path: PathBuf,
}

fn write_chunk(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(|_| io::Error::other("record too large"))?;
    out.write_all(&len.to_be_bytes())?;
    out.write_all(bytes)
}

fn read_chunk(input: &mut impl Read) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    input.read_exact(&mut len)?;
    let mut buf = vec![0u8; u32::from_be_bytes(len) as usize];
    input.read_exact(&mut buf)?;
    Ok(buf)
}

fn snapshot_id(meta: &SnapshotMeta) -> String {
    match &meta.last_log_id {
        Some(id) => format!("{}-{}", id.committed_leader_id(), id.index()),
        None => "empty".to_string(),
    }
}

fn transfer_file(dir: &Path, meta: &SnapshotMeta) -> PathBuf {
    dir.join(format!(
        "snapshot-{}.{SNAPSHOT_EXTENSION}",
        snapshot_id(meta)
    ))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn remove_any(path: &Path) -> io::Result<()> {
    let removed = if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    match removed {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// A checkpoint opened read-only: the store as it was when the checkpoint was taken.
fn open_checkpoint(path: &Path) -> Result<RevisionStore, StoreError> {
    let opts = Options::default();
    let families = DB::list_cf(&opts, path)?;
    let db = DB::open_cf_for_read_only(&opts, path, families, false)?;
    RevisionStore::new(Arc::new(db))
}

impl RevisionStore {
    /// Captures the store as of now as a checkpoint in `dir`, and removes the snapshots
    /// it supersedes. The returned transfer file is written when first asked for.
    pub fn build_snapshot(&self, dir: &Path) -> Result<SnapshotInfo, StoreError> {
        std::fs::create_dir_all(dir)?;
        let staging = dir.join(CHECKPOINT_STAGING);
        remove_any(&staging)?;
        // `create_checkpoint` flushes the memtables first (log size for flush 0), so the
        // store on disk is never behind its checkpoint, even after a crash: which is why
        // only a send to a follower ever needs the checkpoint's data (`latest_snapshot`).
        Checkpoint::new(&self.db)?.create_checkpoint(&staging)?;
        // Apply goes on while the checkpoint is taken: its own meta says what it holds.
        let meta = open_checkpoint(&staging)?.snapshot_meta()?;
        let checkpoint = dir.join(format!("{CHECKPOINT_PREFIX}{}", snapshot_id(&meta)));
        if checkpoint.exists() {
            // Nothing was applied since the last snapshot: that one stands.
            remove_any(&staging)?;
        } else {
            std::fs::rename(&staging, &checkpoint)?;
            sync_dir(dir)?;
        }
        let path = transfer_file(dir, &meta);
        remove_other_snapshots(dir, &[&checkpoint, &path]);
        tracing::info!(path = %checkpoint.display(), "built snapshot (checkpoint)");
        Ok(SnapshotInfo { meta, path })
    }

    /// The raft position of this store's data.
    fn snapshot_meta(&self) -> Result<SnapshotMeta, StoreError> {
        self.snapshot_meta_at(&self.db.snapshot())
    }

    fn snapshot_meta_at(
        &self,
        snapshot: &rocksdb::Snapshot<'_>,
    ) -> Result<SnapshotMeta, StoreError> {
        let applied = meta::read_applied_at(self, snapshot)?;
        Ok(SnapshotMeta {
            last_log_id: applied.last_applied,
            last_membership: applied.membership,
        })
    }

    /// Writes the store, as of now, to the transfer file `path` (through a temporary
    /// file, so that `path` is complete whenever it exists).
    fn export_snapshot(&self, path: &Path) -> Result<SnapshotMeta, StoreError> {
        let snapshot = self.db.snapshot();
        // The raft position must match the data exactly: read both from one snapshot.
        let meta = self.snapshot_meta_at(&snapshot)?;
        let tmp_path = path.with_extension("tmp");
        let mut out = BufWriter::new(File::create(&tmp_path)?);
        out.write_all(MAGIC)?;
        let header = serde_json::to_vec(&meta).map_err(|e| StoreError::corrupt(e.to_string()))?;
        write_chunk(&mut out, &header)?;
        for (tag, name) in CARRIED.iter().enumerate() {
            let mut opts = ReadOptions::default();
            opts.set_snapshot(&snapshot);
            let iter = self
                .db
                .iterator_cf_opt(self.cf(name)?, opts, IteratorMode::Start);
            for item in iter {
                let (key, value) = item?;
                out.write_all(&[tag as u8])?;
                write_chunk(&mut out, &key)?;
                write_chunk(&mut out, &value)?;
            }
        }
        out.write_all(&[END])?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp_path, path)?;
        tracing::info!(path = %path.display(), "exported snapshot for transfer");
        Ok(meta)
    }

    /// Replaces the whole store with the snapshot in `path`.
    ///
    /// Crash-safe together with the caller, which keeps `path` as the current snapshot
    /// before calling: the applied log id is forgotten first and written last, so a
    /// store cut short in between claims nothing applied, and at restart openraft
    /// restores it from that current snapshot, whose log id is ahead.
    pub fn install_snapshot(&self, path: &Path) -> Result<SnapshotMeta, StoreError> {
        let mut input = BufReader::new(File::open(path)?);
        let meta = read_header(&mut input)?;
        // A compaction pass under way was for the store about to go.
        self.installs
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let mut forget = WriteBatch::default();
        meta::stage_forget_applied(self, &mut forget)?;
        self.db.write(forget)?;
        for name in CARRIED {
            self.clear(name)?;
        }
        let mut batch = WriteBatch::default();
        loop {
            let mut tag = [0u8; 1];
            input.read_exact(&mut tag)?;
            if tag[0] == END {
                break;
            }
            let name = CARRIED
                .get(tag[0] as usize)
                .ok_or_else(|| StoreError::corrupt("unknown snapshot record"))?;
            let key = read_chunk(&mut input)?;
            let value = read_chunk(&mut input)?;
            if *name == CF_META && meta::is_applied_log_id(&key) {
                continue;
            }
            batch.put_cf(self.cf(name)?, key, value);
            if batch.size_in_bytes() >= INSTALL_BATCH_BYTES {
                self.db.write(std::mem::take(&mut batch))?;
            }
        }
        if let Some(log_id) = &meta.last_log_id {
            meta::stage_applied_log_id(self, &mut batch, log_id)?;
        }
        self.db.write(batch)?;
        // A file from a node that did not keep `latest` yet carries none of it.
        self.ensure_latest_index()?;
        self.reload_alarms()?;
        self.reload_auth()?;
        self.physically_compacted
            .send_replace(meta::read_physically_compacted(self)?);
        self.schedule_compaction();
        // The store jumped: whoever follows the feed reads on from history.
        let current = self.current_revision()?;
        self.feed.publish(super::Changes {
            since: current,
            through: current,
            events: Vec::new(),
        });
        tracing::info!(path = %path.display(), "installed snapshot");
        Ok(meta)
    }

    pub(super) fn clear(&self, name: &str) -> Result<(), StoreError> {
        let cf = self.cf(name)?;
        let mut it = self.db.raw_iterator_cf(cf);
        it.seek_to_last();
        if let Some(last) = it.key() {
            let mut end = last.to_vec();
            end.push(0);
            self.db.delete_range_cf(cf, Vec::new(), end)?;
        }
        Ok(())
    }
}

/// Reads the raft meta at the head of a snapshot file.
pub fn read_snapshot_meta(path: &Path) -> Result<SnapshotMeta, StoreError> {
    read_header(&mut BufReader::new(File::open(path)?))
}

fn read_header(input: &mut impl Read) -> Result<SnapshotMeta, StoreError> {
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC {
        return Err(StoreError::corrupt("not a QuantyKube snapshot"));
    }
    let header = read_chunk(input)?;
    serde_json::from_slice(&header).map_err(|e| StoreError::corrupt(e.to_string()))
}

/// The current snapshot in `dir`: the newest checkpoint or received file. With `export`,
/// a checkpoint is exported to its transfer file first, unless that file exists; without
/// it, only the meta is right and the returned path may not exist yet. A checkpoint is
/// never ahead of the store it was taken from, so only a send needs its file.
pub fn latest_snapshot(dir: &Path, export: bool) -> Result<Option<SnapshotInfo>, StoreError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    // (meta, transfer file, checkpoint to export it from if the file is missing)
    let mut best: Option<(SnapshotMeta, PathBuf, Option<PathBuf>)> = None;
    // Newest first; at one position, the file, which needs no export.
    let rank = |(meta, _, checkpoint): &(SnapshotMeta, PathBuf, Option<PathBuf>)| {
        (meta.last_log_id, checkpoint.is_none())
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let candidate = if is_transfer_file(&path) {
            (read_snapshot_meta(&path)?, path, None)
        } else if is_checkpoint(&path) {
            let meta = open_checkpoint(&path)?.snapshot_meta()?;
            let file = transfer_file(dir, &meta);
            (meta, file, Some(path))
        } else {
            continue;
        };
        if best.as_ref().is_none_or(|b| rank(b) < rank(&candidate)) {
            best = Some(candidate);
        }
    }
    let Some((meta, path, checkpoint)) = best else {
        return Ok(None);
    };
    if let (Some(checkpoint), true) = (checkpoint, export) {
        if !path.exists() {
            open_checkpoint(&checkpoint)?.export_snapshot(&path)?;
        }
    }
    Ok(Some(SnapshotInfo { meta, path }))
}

fn is_transfer_file(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()) == Some(SNAPSHOT_EXTENSION)
}

fn is_checkpoint(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(CHECKPOINT_PREFIX))
        && path.is_dir()
}

/// What a crash left half-written: an export's `*.tmp`, the checkpoint staging dir.
fn is_leftover(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()) == Some("tmp")
        || path.file_name().and_then(|n| n.to_str()) == Some(CHECKPOINT_STAGING)
}

/// Older snapshots are superseded; a follower still streaming one keeps its open file.
/// Runs under the state machine's snapshot lock, so nothing here is being written.
fn remove_other_snapshots(dir: &Path, keep: &[&Path]) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if keep.contains(&path.as_path())
            || !(is_transfer_file(&path) || is_checkpoint(&path) || is_leftover(&path))
        {
            continue;
        }
        if let Err(error) = remove_any(&path) {
            tracing::warn!(path = %path.display(), %error, "could not remove old snapshot");
        }
    }
}

/// Makes a received snapshot file the current snapshot in `dir` (before it is
/// installed, so that a crash during the install is repaired from it at restart) and
/// returns its new path.
pub fn keep_received_snapshot(dir: &Path, received: &Path) -> Result<PathBuf, StoreError> {
    std::fs::create_dir_all(dir)?;
    let meta = read_snapshot_meta(received)?;
    let target = transfer_file(dir, &meta);
    if received != target {
        if std::fs::rename(received, &target).is_err() {
            std::fs::copy(received, &target)?;
            File::open(&target)?.sync_all()?;
        }
        sync_dir(dir)?;
    }
    remove_other_snapshots(dir, &[&target]);
    Ok(target)
}
