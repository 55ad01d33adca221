//! Raft snapshots of the revision store.
//!
//! The store is its own snapshot. Building one (every `--snapshot-count` applied
//! entries) syncs the store's WAL and reports the applied log id: raft purges its log
//! only up to a snapshot it was told of, so the store on disk must never be behind one,
//! even after a power loss (the store's writes are not synced one by one; the raft log
//! is the durable record). Nothing is copied or flushed: a flush per snapshot left a
//! small L0 file in every column family, and the compactions they caused grew into
//! most of a member's CPU as the store filled (docs/benchmarks.md, issue 20's seventh
//! step).
//!
//! Only when raft asks for the current snapshot to send it to a follower behind the
//! purged log is the store exported, as of that moment, to the transfer file
//! `snapshot-<id>.snap`: the magic `QKSNAP02`, a length-prefixed JSON header (the raft
//! snapshot meta: last log id and membership), then `(column family, key, value)`
//! records, an end marker, and a trailer: the length of everything before it and its
//! CRC-32C. A snapshot received from the leader is kept as such a file and installed
//! record by record, so that neither side ever holds a snapshot whole in memory. A file
//! is checked whole against its trailer before it is sent and before an install
//! empties the store: a torn or damaged file is refused by name, never installed.
//! (`QKSNAP01` files, from builds before the trailer, are read unchecked.) This module
//! owns that format and which snapshot is current; it never talks to the network.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use quantykube_raft::{durable, SnapshotMeta};
use rocksdb::{IteratorMode, WriteBatch};

use super::hash::CASTAGNOLI;
use super::{meta, RevisionStore, StoreError, CF_HISTORY, CF_KV, CF_LATEST, CF_LEASE, CF_META};

/// A snapshot install between [`RevisionStore::begin_install`] and
/// [`RevisionStore::finish_install`]: the store emptied, the file read up to its
/// records.
pub struct InstallUnderWay {
    input: BufReader<File>,
    meta: SnapshotMeta,
    path: PathBuf,
}

const MAGIC: &[u8; 8] = b"QKSNAP02";
/// The format before the trailer.
const MAGIC_UNCHECKED: &[u8; 8] = b"QKSNAP01";
const END: u8 = 0xFF;
/// The trailer: the length of what precedes it (u64) and its CRC-32C (u32), big-endian.
const TRAILER_BYTES: u64 = 12;
/// Column families carried, by their record tag (the tag is the index; new families go
/// last, so that files written before them still read).
const CARRIED: [&str; 5] = [CF_KV, CF_HISTORY, CF_META, CF_LATEST, CF_LEASE];
const INSTALL_BATCH_BYTES: usize = 4 << 20;
const SNAPSHOT_EXTENSION: &str = "snap";
/// Where an export is written before its log id (its name) is known.
const EXPORT_STAGING: &str = "export.tmp";
/// What builds before this design left in the snapshot directory: RocksDB checkpoints,
/// removed at the first build.
const OLD_CHECKPOINT_PREFIX: &str = "checkpoint-";

/// A snapshot and the raft position it captures. `path` is its transfer file, which
/// exists once the snapshot was received or exported for a send.
#[derive(Clone, Debug)]
pub struct SnapshotInfo {
    pub meta: SnapshotMeta,
    pub path: PathBuf,
}

/// A writer that keeps the length and CRC-32C of what went through it.
struct Summed<W> {
    out: W,
    digest: crc::Digest<'static, u32>,
    len: u64,
}

impl<W: Write> Write for Summed<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = self.out.write(bytes)?;
        self.digest.update(&bytes[..n]);
        self.len += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
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

impl RevisionStore {
    /// Records a snapshot of the store as of now: the store itself is the snapshot, so
    /// this only makes it durable up to its applied log id (the position returned) and
    /// removes the transfer files that position supersedes. The returned path is
    /// written when a send first asks for it.
    pub fn build_snapshot(&self, dir: &Path) -> Result<SnapshotInfo, StoreError> {
        durable::create_dir_all(dir)?;
        let meta = self.durable_snapshot_meta()?;
        let path = transfer_file(dir, &meta);
        remove_superseded_snapshots(dir, &meta);
        tracing::debug!(snapshot = %snapshot_id(&meta), "built snapshot (store synced)");
        Ok(SnapshotInfo { meta, path })
    }

    /// The current snapshot: the newest of the transfer files in `dir` and the store.
    ///
    /// Without `export` (openraft asks while it starts, for the position only), a file
    /// wins only when it is ahead of the store: a received snapshot whose install a
    /// crash cut short, which openraft then installs again. With `export` (a send to a
    /// follower), the newest file is sent if there is one, and otherwise the store is
    /// exported to a new one. Any file is recent enough: every build removes the files
    /// behind it, so a file left is at or past the last snapshot raft was told of, and
    /// the entries after it are still in the log.
    pub fn current_snapshot(
        &self,
        dir: &Path,
        export: bool,
    ) -> Result<Option<SnapshotInfo>, StoreError> {
        let newest_file = newest_transfer_file(dir)?;
        if export {
            return match newest_file {
                Some(file) => match verify_transfer_file(&file.path) {
                    Ok(()) => Ok(Some(file)),
                    // Never sent damaged: exported afresh instead.
                    Err(error) => {
                        tracing::error!(%error, "removing a damaged snapshot file");
                        durable::remove_file(&file.path)?;
                        self.export_snapshot(dir)
                    }
                },
                None => self.export_snapshot(dir),
            };
        }
        let store = self.durable_snapshot_meta()?;
        Ok(match newest_file {
            Some(file) if file.meta.last_log_id >= store.last_log_id => Some(file),
            _ if store.last_log_id.is_none() => None,
            _ => Some(SnapshotInfo {
                path: transfer_file(dir, &store),
                meta: store,
            }),
        })
    }

    /// The store's raft position, synced to disk before it is reported: everything
    /// applied up to it is in the WAL, which the sync makes durable.
    fn durable_snapshot_meta(&self) -> Result<SnapshotMeta, StoreError> {
        let meta = self.snapshot_meta_at(&self.db.snapshot())?;
        self.sync_to_disk()?;
        Ok(meta)
    }

    /// Makes every write the store took so far durable (its WAL, synced). The store's
    /// writes are not synced one by one: the raft log holds them, except where a
    /// command fills a store outside the log (a restore) before closing it.
    pub fn sync_to_disk(&self) -> Result<(), StoreError> {
        self.db.flush_wal(true)?;
        Ok(())
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

    /// Writes the store, as of now, to its transfer file in `dir` (through a staging
    /// file, so that a transfer file is complete whenever it exists). A store that has
    /// applied nothing has no snapshot.
    fn export_snapshot(&self, dir: &Path) -> Result<Option<SnapshotInfo>, StoreError> {
        durable::create_dir_all(dir)?;
        let snapshot = self.db.snapshot();
        // The raft position must match the data exactly: read both from one snapshot.
        let meta = self.snapshot_meta_at(&snapshot)?;
        if meta.last_log_id.is_none() {
            return Ok(None);
        }
        let staging = dir.join(EXPORT_STAGING);
        let started = std::time::Instant::now();
        let mut out = Summed {
            out: BufWriter::new(File::create(&staging)?),
            digest: CASTAGNOLI.digest(),
            len: 0,
        };
        out.write_all(MAGIC)?;
        let header = header_json(&meta)?;
        write_chunk(&mut out, &header)?;
        for (tag, name) in CARRIED.iter().enumerate() {
            let mut opts = super::total_order();
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
        let Summed {
            out: mut file,
            digest,
            len,
        } = out;
        file.write_all(&len.to_be_bytes())?;
        file.write_all(&digest.finalize().to_be_bytes())?;
        let file = file.into_inner().map_err(|e| e.into_error())?;
        let syncing = std::time::Instant::now();
        file.sync_all()?;
        super::metrics::snapshot_written(syncing - started, syncing.elapsed());
        let path = transfer_file(dir, &meta);
        durable::rename(&staging, &path)?;
        tracing::info!(path = %path.display(), "exported snapshot for transfer");
        Ok(Some(SnapshotInfo { meta, path }))
    }

    /// Replaces the whole store with the snapshot in `path`.
    ///
    /// Crash-safe together with the caller, which keeps `path` as the current snapshot
    /// before calling: the applied log id is forgotten first and written last, so a
    /// store cut short in between claims nothing applied, and at restart openraft
    /// restores it from that current snapshot, whose log id is ahead.
    pub fn install_snapshot(&self, path: &Path) -> Result<SnapshotMeta, StoreError> {
        let under_way = self.begin_install(path)?;
        self.finish_install(under_way)
    }

    /// The first half of [`install_snapshot`](Self::install_snapshot): checks the file's
    /// header, then forgets the applied log id and empties the store. Only a planted
    /// condition of the simulation lets anything run between the halves.
    pub fn begin_install(&self, path: &Path) -> Result<InstallUnderWay, StoreError> {
        // Before anything goes: a damaged file must leave the store as it is.
        verify_transfer_file(path)?;
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
        Ok(InstallUnderWay {
            input,
            meta,
            path: path.to_owned(),
        })
    }

    /// The second half: loads the file's records, writes the applied log id last, and
    /// reloads what follows from the store.
    pub fn finish_install(&self, under_way: InstallUnderWay) -> Result<SnapshotMeta, StoreError> {
        let InstallUnderWay {
            mut input,
            meta,
            path,
        } = under_way;
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
        let mut it = self.db.raw_iterator_cf_opt(cf, super::total_order());
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

/// Checks the transfer file `path` whole against its trailer; an error names the file.
pub fn verify_transfer_file(path: &Path) -> Result<(), StoreError> {
    if crate::planted_bug!(TransferFileUnchecked) {
        return Ok(());
    }
    let damaged = |what: String| {
        StoreError::corrupt(format!(
            "snapshot file {} is damaged ({what}): refusing it",
            path.display()
        ))
    };
    let mut input = BufReader::new(File::open(path)?);
    let mut magic = [0u8; 8];
    input
        .read_exact(&mut magic)
        .map_err(|e| damaged(e.to_string()))?;
    if &magic == MAGIC_UNCHECKED {
        return Ok(());
    }
    if &magic != MAGIC {
        return Err(damaged("not a QuantyKube snapshot".into()));
    }
    let size = std::fs::metadata(path)?.len();
    let Some(body) = size.checked_sub(TRAILER_BYTES) else {
        return Err(damaged(format!("{size} bytes, too short for its trailer")));
    };
    let mut digest = CASTAGNOLI.digest();
    digest.update(MAGIC);
    let mut left = body.saturating_sub(MAGIC.len() as u64);
    let mut buf = vec![0u8; 1 << 16];
    while left > 0 {
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        input
            .read_exact(&mut buf[..want])
            .map_err(|e| damaged(e.to_string()))?;
        digest.update(&buf[..want]);
        left -= want as u64;
    }
    let mut trailer = [0u8; TRAILER_BYTES as usize];
    input
        .read_exact(&mut trailer)
        .map_err(|e| damaged(e.to_string()))?;
    let (len, crc) = trailer.split_at(8);
    let len = u64::from_be_bytes(len.try_into().unwrap_or_default());
    let crc = u32::from_be_bytes(crc.try_into().unwrap_or_default());
    if len != body {
        return Err(damaged(format!(
            "its trailer says {len} bytes precede it, {body} do"
        )));
    }
    let actual = digest.finalize();
    if actual != crc {
        return Err(damaged(format!(
            "CRC-32C {actual:08x}, its trailer says {crc:08x}"
        )));
    }
    Ok(())
}

fn read_header(input: &mut impl Read) -> Result<SnapshotMeta, StoreError> {
    let mut magic = [0u8; 8];
    input.read_exact(&mut magic)?;
    if &magic != MAGIC && &magic != MAGIC_UNCHECKED {
        return Err(StoreError::corrupt("not a QuantyKube snapshot"));
    }
    let header = read_chunk(input)?;
    let corrupt = |e: serde_json::Error| StoreError::corrupt(e.to_string());
    let format: HeaderFormat = serde_json::from_slice(&header).map_err(corrupt)?;
    if format.format > crate::format::CURRENT {
        return Err(StoreError::corrupt(format!(
            "snapshot {}",
            crate::format::newer_file(format.format)
        )));
    }
    // The meta ignores the `format` key beside its own, as v0.1.0's reader does.
    serde_json::from_slice(&header).map_err(corrupt)
}

/// A transfer file's header is the raft position it captures (the snapshot's meta, as
/// JSON) with one more key, `format`: the format of the store's records it carries
/// (none in format 1's files). Not a struct that flattens the meta: serde's flatten
/// cannot read the meta's maps keyed by member id back.
fn header_json(meta: &SnapshotMeta) -> Result<Vec<u8>, StoreError> {
    let corrupt = |e: serde_json::Error| StoreError::corrupt(e.to_string());
    let mut header = serde_json::to_value(meta).map_err(corrupt)?;
    let Some(fields) = header.as_object_mut() else {
        return Err(StoreError::corrupt(
            "a snapshot meta that is not a JSON object",
        ));
    };
    fields.insert("format".into(), crate::format::CURRENT.into());
    serde_json::to_vec(&header).map_err(corrupt)
}

/// The `format` key of a transfer file's header.
#[derive(serde::Deserialize)]
struct HeaderFormat {
    #[serde(default = "crate::format::unrecorded")]
    format: u32,
}

/// The newest complete transfer file in `dir`, received or exported.
fn newest_transfer_file(dir: &Path) -> Result<Option<SnapshotInfo>, StoreError> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(None);
    };
    let mut newest: Option<SnapshotInfo> = None;
    for entry in entries.flatten() {
        let path = entry.path();
        if !is_transfer_file(&path) {
            continue;
        }
        let meta = read_snapshot_meta(&path)?;
        if newest
            .as_ref()
            .is_none_or(|n| n.meta.last_log_id < meta.last_log_id)
        {
            newest = Some(SnapshotInfo { meta, path });
        }
    }
    Ok(newest)
}

fn is_transfer_file(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()) == Some(SNAPSHOT_EXTENSION)
}

/// What a crash left half-written (an export's or a receive's `*.tmp`), and the
/// checkpoints of builds before this design.
fn is_leftover(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()) == Some("tmp")
        || path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(OLD_CHECKPOINT_PREFIX))
}

/// Removes the transfer files behind `current` and the leftovers; a follower still
/// streaming one keeps its open file. Runs under the state machine's snapshot lock, so
/// nothing here is being written.
fn remove_superseded_snapshots(dir: &Path, current: &SnapshotMeta) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let superseded = if is_transfer_file(&path) {
            // An unreadable header is a file no one can send or install.
            read_snapshot_meta(&path).map_or(true, |m| m.last_log_id < current.last_log_id)
        } else {
            is_leftover(&path)
        };
        if !superseded {
            continue;
        }
        if let Err(error) = remove_any(&path) {
            tracing::warn!(path = %path.display(), %error, "could not remove old snapshot");
        }
    }
    // A superseded file that came back after a power cut would be sent to a follower
    // that needs entries the log no longer has.
    if let Err(error) = durable::sync_dir(dir) {
        tracing::warn!(dir = %dir.display(), %error, "could not sync the snapshot folder");
    }
}

/// Makes a received snapshot file the current snapshot in `dir` (before it is
/// installed, so that a crash during the install is repaired from it at restart) and
/// returns its new path.
pub fn keep_received_snapshot(dir: &Path, received: &Path) -> Result<PathBuf, StoreError> {
    durable::create_dir_all(dir)?;
    let meta = read_snapshot_meta(received)?;
    let target = transfer_file(dir, &meta);
    if received != target && durable::rename(received, &target).is_err() {
        // Another filesystem: a copy, complete under a temporary name first.
        let copy = durable::temporary_name(&target);
        std::fs::copy(received, &copy)?;
        File::open(&copy)?.sync_all()?;
        durable::rename(&copy, &target)?;
    }
    remove_superseded_snapshots(dir, &meta);
    Ok(target)
}

#[cfg(test)]
mod header_tests {
    use super::*;
    use quantykube_raft::{Member, StoredMembership};

    fn file_with_header(header: &[u8]) -> Vec<u8> {
        let mut file = MAGIC.to_vec();
        write_chunk(&mut file, header).unwrap();
        file
    }

    /// A meta as a running cluster has it: member ids (u64 map keys, strings in JSON).
    fn meta() -> SnapshotMeta {
        let members = std::collections::BTreeMap::from([(
            0x249f302b5b2ab26c_u64,
            Member {
                name: "m0".into(),
                peer_urls: vec!["http://127.0.0.1:2380".into()],
                client_urls: vec![],
            },
        )]);
        let voters = members
            .keys()
            .copied()
            .collect::<std::collections::BTreeSet<u64>>();
        let membership = openraft::Membership::new(vec![voters], members).unwrap();
        let log_id = super::super::tests::log_id(7);
        SnapshotMeta {
            last_log_id: Some(log_id),
            last_membership: StoredMembership::new(Some(log_id), membership),
        }
    }

    #[test]
    fn a_header_records_its_format_and_one_without_is_format_1s() {
        let meta = meta();
        // As v0.1.0 wrote it: the meta alone.
        let old = serde_json::to_vec(&meta).unwrap();
        let read = read_header(&mut file_with_header(&old).as_slice()).unwrap();
        assert_eq!(read, meta);
        let current = header_json(&meta).unwrap();
        let text = String::from_utf8(current.clone()).unwrap();
        assert!(
            text.contains(&format!("\"format\":{}", crate::format::CURRENT)),
            "{text}"
        );
        assert_eq!(
            read_header(&mut file_with_header(&current).as_slice()).unwrap(),
            meta
        );
        // v0.1.0 reads the meta alone and ignores the key beside it.
        let as_v0_1: SnapshotMeta = serde_json::from_slice(&current).unwrap();
        assert_eq!(as_v0_1, meta);
    }

    #[test]
    fn a_header_of_a_newer_format_is_refused() {
        let mut newer: serde_json::Value =
            serde_json::from_slice(&header_json(&meta()).unwrap()).unwrap();
        newer["format"] = (crate::format::CURRENT + 1).into();
        let newer = serde_json::to_vec(&newer).unwrap();
        let refused = read_header(&mut file_with_header(&newer).as_slice()).unwrap_err();
        assert!(
            refused.to_string().contains("newer QuantyKube"),
            "{refused}"
        );
    }
}
