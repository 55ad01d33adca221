//! Raft snapshots of the revision store: one file, written from a RocksDB snapshot and
//! read back record by record, so that neither side ever holds it whole in memory.
//!
//! Layout: the magic `QKSNAP01`, a length-prefixed JSON header (the raft snapshot
//! meta: last log id and membership), then `(column family, key, value)` records and
//! an end marker. This module owns that format, building a file and installing one;
//! it never talks to the network.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use quantykube_raft::SnapshotMeta;
use rocksdb::{IteratorMode, ReadOptions, WriteBatch};

use super::{meta, RevisionStore, StoreError, CF_HISTORY, CF_KV, CF_META};

const MAGIC: &[u8; 8] = b"QKSNAP01";
const END: u8 = 0xFF;
/// Column families carried, by their record tag (the tag is the index).
const CARRIED: [&str; 3] = [CF_KV, CF_HISTORY, CF_META];
const INSTALL_BATCH_BYTES: usize = 4 << 20;

/// A snapshot file and the raft position it captures.
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

impl RevisionStore {
    /// Writes the store as of now into a new file in `dir` and returns it.
    pub fn build_snapshot(&self, dir: &Path) -> Result<SnapshotInfo, StoreError> {
        std::fs::create_dir_all(dir)?;
        let snapshot = self.db.snapshot();
        // The raft position must match the data exactly: read both from one snapshot.
        let applied = meta::read_applied_at(self, &snapshot)?;
        let meta = SnapshotMeta {
            last_log_id: applied.last_applied,
            last_membership: applied.membership,
        };
        let final_path = dir.join(format!("snapshot-{}.snap", snapshot_id(&meta)));
        let tmp_path = final_path.with_extension("tmp");
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
        std::fs::rename(&tmp_path, &final_path)?;
        remove_other_snapshots(dir, &final_path);
        tracing::info!(path = %final_path.display(), "built snapshot");
        Ok(SnapshotInfo {
            meta,
            path: final_path,
        })
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
        tracing::info!(path = %path.display(), "installed snapshot");
        Ok(meta)
    }

    fn clear(&self, name: &str) -> Result<(), StoreError> {
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

/// The newest complete snapshot file in `dir`, if any.
pub fn latest_snapshot(dir: &Path) -> Result<Option<SnapshotInfo>, StoreError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    let mut best: Option<SnapshotInfo> = None;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("snap") {
            continue;
        }
        let meta = read_snapshot_meta(&path)?;
        if best
            .as_ref()
            .is_none_or(|b| b.meta.last_log_id < meta.last_log_id)
        {
            best = Some(SnapshotInfo { meta, path });
        }
    }
    Ok(best)
}

/// Older snapshots are superseded; a follower still streaming one keeps its open file.
fn remove_other_snapshots(dir: &Path, keep: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path != keep && path.extension().and_then(|e| e.to_str()) == Some("snap") {
            if let Err(error) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), %error, "could not remove old snapshot");
            }
        }
    }
}

/// Makes a received snapshot file the current snapshot in `dir` (before it is
/// installed, so that a crash during the install is repaired from it at restart) and
/// returns its new path.
pub fn keep_received_snapshot(dir: &Path, received: &Path) -> Result<PathBuf, StoreError> {
    std::fs::create_dir_all(dir)?;
    let meta = read_snapshot_meta(received)?;
    let target = dir.join(format!("snapshot-{}.snap", snapshot_id(&meta)));
    if received != target {
        if std::fs::rename(received, &target).is_err() {
            std::fs::copy(received, &target)?;
            File::open(&target)?.sync_all()?;
        }
        if let Ok(directory) = File::open(dir) {
            directory.sync_all()?;
        }
    }
    remove_other_snapshots(dir, &target);
    Ok(target)
}
