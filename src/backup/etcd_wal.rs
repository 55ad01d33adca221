//! etcd's raft files in a member's data dir, read as etcd 3.4-3.6 reads them when it
//! restarts: the WAL (`member/wal/*.wal`: framed, CRC-chained records of raft entries,
//! hard states and snapshot marks) and the newest raft snapshot file
//! (`member/snap/*.snap`: the membership as of its index).
//!
//! Owns the byte formats only (record framing, padding, the rolling CRC-32C, the torn
//! tail etcd repairs); what the entries mean is `etcd_entries`'. It never writes: the
//! files stay as etcd left them, so that etcd can start on them again.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use prost::Message;

use super::BackupError;

/// etcd's `walpb.Record` types.
const METADATA_RECORD: i64 = 1;
const ENTRY_RECORD: i64 = 2;
const STATE_RECORD: i64 = 3;
const CRC_RECORD: i64 = 4;
const SNAPSHOT_RECORD: i64 = 5;

/// etcd refuses a record this large (`maxWALEntrySizeLimit`, 10 MiB).
const MAX_RECORD_BYTES: u64 = 10 * 1024 * 1024;

/// The sector a torn write tears along (etcd's `minSectorSize`).
const SECTOR: usize = 512;

#[derive(Clone, PartialEq, Message)]
struct Record {
    #[prost(int64, tag = "1")]
    kind: i64,
    #[prost(uint32, tag = "2")]
    crc: u32,
    #[prost(bytes = "vec", tag = "3")]
    data: Vec<u8>,
}

/// `raftpb.Entry`. `kind`: 0 normal, 1 a `ConfChange`, 2 a `ConfChangeV2`.
#[derive(Clone, PartialEq, Message)]
pub struct RaftEntry {
    #[prost(int32, tag = "1")]
    pub kind: i32,
    #[prost(uint64, tag = "2")]
    pub term: u64,
    #[prost(uint64, tag = "3")]
    pub index: u64,
    #[prost(bytes = "vec", tag = "4")]
    pub data: Vec<u8>,
}

pub const ENTRY_NORMAL: i32 = 0;
pub const ENTRY_CONF_CHANGE: i32 = 1;

/// `raftpb.HardState`.
#[derive(Clone, PartialEq, Message)]
pub struct HardState {
    #[prost(uint64, tag = "1")]
    pub term: u64,
    #[prost(uint64, tag = "2")]
    pub vote: u64,
    #[prost(uint64, tag = "3")]
    pub commit: u64,
}

/// `raftpb.ConfState`: the voters and learners as of a snapshot.
#[derive(Clone, PartialEq, Message)]
pub struct ConfState {
    #[prost(uint64, repeated, packed = "false", tag = "1")]
    pub voters: Vec<u64>,
    #[prost(uint64, repeated, packed = "false", tag = "2")]
    pub learners: Vec<u64>,
}

#[derive(Clone, PartialEq, Message)]
struct WalSnapshot {
    #[prost(uint64, tag = "1")]
    index: u64,
    #[prost(uint64, tag = "2")]
    term: u64,
}

/// `etcdserverpb.Metadata`: whose WAL this is.
#[derive(Clone, PartialEq, Message)]
struct Metadata {
    #[prost(uint64, tag = "1")]
    node_id: u64,
    #[prost(uint64, tag = "2")]
    cluster_id: u64,
}

/// `raftpb.ConfChange`. `kind`: 0 add, 1 remove, 2 update, 3 add as learner; `context`
/// is the member as JSON (etcd's `membership.Member`).
#[derive(Clone, PartialEq, Message)]
pub struct ConfChange {
    #[prost(int32, tag = "2")]
    pub kind: i32,
    #[prost(uint64, tag = "3")]
    pub node_id: u64,
    #[prost(bytes = "vec", tag = "4")]
    pub context: Vec<u8>,
}

pub const CONF_ADD: i32 = 0;
pub const CONF_REMOVE: i32 = 1;
pub const CONF_UPDATE: i32 = 2;
pub const CONF_ADD_LEARNER: i32 = 3;

/// What a member's WAL holds, as etcd reads it back.
#[derive(Debug, Default)]
pub struct Wal {
    pub member_id: u64,
    pub cluster_id: u64,
    /// The last hard state saved (term, vote, commit).
    pub hard_state: Option<HardState>,
    /// Every entry still in the WAL, by index: a later write of an index replaces it and
    /// every entry after it, as a new leader's entries replace an old one's.
    pub entries: BTreeMap<u64, RaftEntry>,
    /// The terms of the snapshot marks (index to term).
    pub snapshot_terms: BTreeMap<u64, u64>,
}

impl Wal {
    /// The term of the entry at `index`, from the entry or a snapshot mark.
    pub fn term_at(&self, index: u64) -> Option<u64> {
        self.entries
            .get(&index)
            .map(|entry| entry.term)
            .or_else(|| self.snapshot_terms.get(&index).copied())
    }

    /// The index of the last entry, or of the newest snapshot mark without entries.
    pub fn last_index(&self) -> u64 {
        let entries = self.entries.keys().next_back().copied().unwrap_or(0);
        let marks = self.snapshot_terms.keys().next_back().copied().unwrap_or(0);
        entries.max(marks)
    }
}

fn corrupt(path: &Path, offset: u64, what: impl std::fmt::Display) -> BackupError {
    BackupError::NotEtcd(format!(
        "etcd's WAL {} at byte {offset}: {what}",
        path.display()
    ))
}

/// CRC-32C continued from `previous`, as Go's `crc32.Update` does.
fn crc32c_update(previous: u32, data: &[u8]) -> u32 {
    // The crate reflects the initial register; Go's finalized value is its inverse.
    let mut digest = crate::store::CASTAGNOLI.digest_with_initial((!previous).reverse_bits());
    digest.update(data);
    digest.finalize()
}

/// The `.wal` files of `dir`, oldest first (their names are a sequence and an index,
/// both fixed-width hex).
fn wal_files(dir: &Path) -> Result<Vec<PathBuf>, BackupError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(BackupError::file(dir))? {
        let path = entry.map_err(BackupError::file(dir))?.path();
        if path.extension().is_some_and(|ext| ext == "wal") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Reads every record of etcd's WAL in `dir`. A torn last record of the last file (a
/// write a crash cut short) ends the log, as etcd's repair truncates it; anything else
/// that does not check out is refused.
pub fn read_wal(dir: &Path) -> Result<Wal, BackupError> {
    let files = wal_files(dir)?;
    if files.is_empty() {
        return Err(BackupError::NotEtcd(format!(
            "no etcd WAL files in {}",
            dir.display()
        )));
    }
    let mut wal = Wal::default();
    let mut crc = 0u32;
    let last = files.len() - 1;
    for (n, path) in files.iter().enumerate() {
        let file = File::open(path).map_err(BackupError::file(path))?;
        let mut reader = BufReader::new(file);
        read_file(&mut reader, path, n == last, &mut crc, &mut wal)?;
    }
    Ok(wal)
}

/// Reads one WAL file's bytes as the last file of a WAL (the fuzz target's door).
pub fn parse(bytes: &[u8]) -> Result<Wal, BackupError> {
    let mut wal = Wal::default();
    let mut crc = 0;
    read_file(&mut &bytes[..], Path::new("-"), true, &mut crc, &mut wal)?;
    Ok(wal)
}

/// Reads one file's records into `wal`; stops at its end or its preallocated zeros.
fn read_file(
    reader: &mut impl Read,
    path: &Path,
    is_last: bool,
    crc: &mut u32,
    wal: &mut Wal,
) -> Result<(), BackupError> {
    let mut offset = 0u64;
    loop {
        let mut frame = [0u8; 8];
        match read_full(reader, &mut frame).map_err(BackupError::file(path))? {
            0 => return Ok(()),
            8 => {}
            _ if is_last => return Ok(()),
            _ => return Err(corrupt(path, offset, "a record's length is cut short")),
        }
        let length = u64::from_le_bytes(frame);
        if length == 0 {
            return Ok(());
        }
        // The low 56 bits are the record's size; a set top bit says the low 3 bits of
        // the top byte count the padding after it.
        let record_bytes = length & !(0xff << 56);
        let padding = if length >> 63 == 1 {
            (length >> 56) & 0x7
        } else {
            0
        };
        if record_bytes >= MAX_RECORD_BYTES - padding {
            return Err(corrupt(path, offset, "a record is larger than etcd allows"));
        }
        let mut data = vec![0u8; (record_bytes + padding) as usize];
        let got = read_full(reader, &mut data).map_err(BackupError::file(path))?;
        if got < data.len() {
            if is_last {
                return Ok(());
            }
            return Err(corrupt(path, offset, "a record is cut short"));
        }
        let torn = |what: &str| -> Result<(), BackupError> {
            if is_last && has_zero_sector(&data) {
                Ok(())
            } else {
                Err(corrupt(path, offset, what))
            }
        };
        let record = match Record::decode(&data[..record_bytes as usize]) {
            Ok(record) => record,
            Err(error) => return torn(&format!("a record does not decode: {error}")),
        };
        if record.kind == CRC_RECORD {
            // Each file starts with the CRC the previous one ended with.
            if *crc != 0 && record.crc != *crc {
                return Err(corrupt(path, offset, "the CRC chain is broken"));
            }
            *crc = record.crc;
        } else {
            let next = crc32c_update(*crc, &record.data);
            if next != record.crc {
                return torn("CRC mismatch");
            }
            *crc = next;
            take_record(&record, wal).map_err(|what| corrupt(path, offset, what))?;
        }
        offset += 8 + record_bytes + padding;
    }
}

/// Reads until `buf` is full or the input ends; the bytes read.
fn read_full(reader: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// etcd's `isTornEntry`: a record one of whose sectors is all zeros was cut short by a
/// crash, not corrupted.
fn has_zero_sector(data: &[u8]) -> bool {
    data.chunks(SECTOR)
        .any(|chunk| chunk.iter().all(|b| *b == 0))
}

fn take_record(record: &Record, wal: &mut Wal) -> Result<(), String> {
    let data = record.data.as_slice();
    match record.kind {
        METADATA_RECORD => {
            let metadata = Metadata::decode(data).map_err(|e| format!("metadata: {e}"))?;
            wal.member_id = metadata.node_id;
            wal.cluster_id = metadata.cluster_id;
        }
        ENTRY_RECORD => {
            let entry = RaftEntry::decode(data).map_err(|e| format!("entry: {e}"))?;
            // A rewritten index drops everything from it on.
            let _dropped = wal.entries.split_off(&entry.index);
            wal.entries.insert(entry.index, entry);
        }
        STATE_RECORD => {
            let state = HardState::decode(data).map_err(|e| format!("hard state: {e}"))?;
            // etcd saves an empty hard state when nothing changed.
            if state != HardState::default() {
                wal.hard_state = Some(state);
            }
        }
        SNAPSHOT_RECORD => {
            let mark = WalSnapshot::decode(data).map_err(|e| format!("snapshot mark: {e}"))?;
            wal.snapshot_terms.insert(mark.index, mark.term);
        }
        other => return Err(format!("unknown record type {other}")),
    }
    Ok(())
}

/// `snappb.Snapshot`: a raft snapshot and its CRC.
#[derive(Clone, PartialEq, Message)]
struct SnapFile {
    #[prost(uint32, tag = "1")]
    crc: u32,
    #[prost(bytes = "vec", tag = "2")]
    data: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct RaftSnapshot {
    #[prost(bytes = "vec", tag = "1")]
    data: Vec<u8>,
    #[prost(message, optional, tag = "2")]
    metadata: Option<SnapshotMetadata>,
}

#[derive(Clone, PartialEq, Message)]
struct SnapshotMetadata {
    #[prost(message, optional, tag = "1")]
    conf_state: Option<ConfState>,
    #[prost(uint64, tag = "2")]
    index: u64,
    #[prost(uint64, tag = "3")]
    term: u64,
}

/// The newest raft snapshot file of a member: its index and term, the voters and
/// learners as of it, and the v2 store it carries (JSON; etcd 3.4 and 3.5 keep the
/// members' URLs and names there).
#[derive(Debug)]
pub struct Snap {
    pub index: u64,
    pub term: u64,
    pub conf_state: ConfState,
    pub v2_store: Vec<u8>,
}

/// The newest `.snap` file in `dir` whose CRC checks out (etcd skips a broken one and
/// takes the one before), if any.
pub fn read_newest_snap(dir: &Path) -> Result<Option<Snap>, BackupError> {
    let mut files = Vec::new();
    match std::fs::read_dir(dir) {
        Ok(entries) => {
            for entry in entries {
                let path = entry.map_err(BackupError::file(dir))?.path();
                if path.extension().is_some_and(|ext| ext == "snap") {
                    files.push(path);
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(BackupError::file(dir)(e)),
    }
    // Named `<term>-<index>` in fixed-width hex: the newest sorts last by index.
    files.sort_by_key(|path| {
        path.file_stem()
            .and_then(|stem| stem.to_str())
            .and_then(|stem| stem.split_once('-'))
            .and_then(|(_, index)| u64::from_str_radix(index, 16).ok())
    });
    for path in files.iter().rev() {
        let raw = std::fs::read(path).map_err(BackupError::file(path))?;
        let Ok(file) = SnapFile::decode(raw.as_slice()) else {
            tracing::warn!(file = %path.display(), "skipping an etcd snapshot file that does not decode");
            continue;
        };
        if crc32c_update(0, &file.data) != file.crc {
            tracing::warn!(file = %path.display(), "skipping an etcd snapshot file whose CRC does not match");
            continue;
        }
        let snapshot = RaftSnapshot::decode(file.data.as_slice())
            .map_err(|e| BackupError::NotEtcd(format!("{}: {e}", path.display())))?;
        let metadata = snapshot.metadata.unwrap_or_default();
        return Ok(Some(Snap {
            index: metadata.index,
            term: metadata.term,
            conf_state: metadata.conf_state.unwrap_or_default(),
            v2_store: snapshot.data,
        }));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_continues_as_gos_crc32_update() {
        // The standard check value of CRC-32C.
        assert_eq!(crc32c_update(0, b"123456789"), 0xE306_9283);
        let whole = crc32c_update(0, b"hello, etcd");
        assert_eq!(crc32c_update(crc32c_update(0, b"hello, "), b"etcd"), whole);
    }

    fn frame(record: &Record, padding: u8) -> Vec<u8> {
        let body = record.encode_to_vec();
        let mut length = body.len() as u64;
        if padding > 0 {
            length |= (0x80 | u64::from(padding)) << 56;
        }
        let mut out = length.to_le_bytes().to_vec();
        out.extend_from_slice(&body);
        out.extend(std::iter::repeat_n(0u8, usize::from(padding)));
        out
    }

    fn entry_record(crc: &mut u32, index: u64, term: u64, data: &[u8]) -> Record {
        let data = RaftEntry {
            kind: ENTRY_NORMAL,
            term,
            index,
            data: data.to_vec(),
        }
        .encode_to_vec();
        *crc = crc32c_update(*crc, &data);
        Record {
            kind: ENTRY_RECORD,
            crc: *crc,
            data,
        }
    }

    fn read(bytes: &[u8], is_last: bool) -> Result<Wal, BackupError> {
        let mut wal = Wal::default();
        let mut crc = 0;
        read_file(
            &mut &bytes[..],
            Path::new("test.wal"),
            is_last,
            &mut crc,
            &mut wal,
        )?;
        Ok(wal)
    }

    #[test]
    fn entries_padding_rewrites_and_the_preallocated_end() {
        let mut crc = 0;
        let mut bytes = frame(
            &Record {
                kind: CRC_RECORD,
                crc: 0,
                data: Vec::new(),
            },
            0,
        );
        bytes.extend(frame(&entry_record(&mut crc, 1, 1, b"a"), 3));
        bytes.extend(frame(&entry_record(&mut crc, 2, 1, b"b"), 0));
        bytes.extend(frame(&entry_record(&mut crc, 3, 1, b"c"), 0));
        // A new leader's entry 2 replaces 2 and 3.
        bytes.extend(frame(&entry_record(&mut crc, 2, 2, b"B"), 1));
        bytes.extend([0u8; 64]);
        let wal = read(&bytes, false).expect("reads");
        let kept: Vec<(u64, u64)> = wal.entries.values().map(|e| (e.index, e.term)).collect();
        assert_eq!(kept, [(1, 1), (2, 2)]);
        assert_eq!(wal.term_at(2), Some(2));
        assert_eq!(wal.last_index(), 2);
    }

    #[test]
    fn a_torn_tail_ends_the_last_file_and_is_refused_elsewhere() {
        let mut crc = 0;
        let mut bytes = frame(&entry_record(&mut crc, 1, 1, b"kept"), 0);
        let mut torn = frame(&entry_record(&mut crc, 2, 1, &[7u8; 2000]), 0);
        // The crash wrote the frame and the first sector only.
        let keep = 8 + SECTOR;
        torn[keep..].iter_mut().for_each(|b| *b = 0);
        bytes.extend(torn);
        let wal = read(&bytes, true).expect("a torn tail is the end");
        assert_eq!(wal.entries.keys().copied().collect::<Vec<_>>(), [1]);
        assert!(
            read(&bytes, false).is_err(),
            "only the last file may end torn"
        );
    }

    #[test]
    fn a_flipped_bit_is_refused() {
        let mut crc = 0;
        let mut bytes = frame(&entry_record(&mut crc, 1, 1, b"value"), 0);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let error = read(&bytes, true).expect_err("CRC mismatch");
        assert!(error.to_string().contains("CRC mismatch"), "{error}");
    }
}
