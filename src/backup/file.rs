//! An etcd snapshot file on disk: a bbolt database, followed (when it came from the
//! Snapshot RPC, as `etcdctl snapshot save` writes it) by the SHA-256 of the database.
//!
//! Opening one checks the trailer as etcd's restore does: a file whose size is a
//! multiple of 512 plus 32 has one, and it must match unless `--skip-hash-check` (which
//! also lets a data dir's own `member/snap/db`, without a trailer, through). `status`
//! is `etcdctl snapshot status`. This module only reads the file.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use quantykube_bbolt::Database;
use sha2::{Digest, Sha256};

use super::schema;
use super::BackupError;

const SHA256_LEN: u64 = 32;

/// An opened, checked snapshot file.
pub struct SnapshotFile {
    pub db: Database,
    /// Whether a SHA-256 trailer followed the database.
    pub had_hash: bool,
}

/// Opens `path` and checks its trailer (see the module doc).
pub fn open(path: &Path, skip_hash_check: bool) -> Result<SnapshotFile, BackupError> {
    let mut file = File::open(path).map_err(BackupError::file(path))?;
    let len = file.metadata().map_err(BackupError::file(path))?.len();
    let had_hash = len % 512 == SHA256_LEN;
    if !had_hash && !skip_hash_check {
        return Err(BackupError::MissingHash);
    }
    let db_len = if had_hash { len - SHA256_LEN } else { len };
    if had_hash && !skip_hash_check {
        let mut sha = Sha256::new();
        let mut left = db_len;
        let mut buf = vec![0u8; 1 << 20];
        while left > 0 {
            let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
            file.read_exact(&mut buf[..want])
                .map_err(BackupError::file(path))?;
            sha.update(&buf[..want]);
            left -= want as u64;
        }
        let mut expected = [0u8; SHA256_LEN as usize];
        file.read_exact(&mut expected)
            .map_err(BackupError::file(path))?;
        let actual = sha.finalize();
        if actual.as_slice() != expected {
            return Err(BackupError::HashMismatch {
                expected: go_bytes(&expected),
                actual: go_bytes(&actual),
            });
        }
    }
    let file = File::open(path).map_err(BackupError::file(path))?;
    Ok(SnapshotFile {
        db: Database::open(file, db_len)?,
        had_hash,
    })
}

/// Bytes as Go's `%v` prints a `[]byte`, as etcd's hash mismatch error shows them.
fn go_bytes(bytes: &[u8]) -> String {
    let items: Vec<String> = bytes.iter().map(u8::to_string).collect();
    format!("[{}]", items.join(" "))
}

/// What `etcdctl snapshot status` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Status {
    pub hash: u32,
    pub revision: i64,
    #[serde(rename = "totalKey")]
    pub total_key: u64,
    #[serde(rename = "totalSize")]
    pub total_size: u64,
}

/// etcd's `snapshot status`: a CRC-32C over every bucket's name and entries, the last
/// revision in the `key` bucket, the number of entries and the database's size.
pub fn status(db: &Database) -> Result<Status, BackupError> {
    let mut digest = crate::store::CASTAGNOLI.digest();
    let mut status = Status {
        hash: 0,
        revision: 0,
        total_key: 0,
        total_size: db.size(),
    };
    for name in db.buckets()? {
        let Some(bucket) = db.bucket(&name)? else {
            return Err(BackupError::NotEtcd(format!(
                "cannot get hash of bucket {}",
                String::from_utf8_lossy(&name)
            )));
        };
        digest.update(&name);
        let is_key = name == schema::KEY;
        for entry in bucket.entries() {
            let (key, value) = entry?;
            digest.update(&key);
            digest.update(&value);
            if is_key {
                status.revision =
                    schema::parse_revision_key(&key).map_or(0, |revision| revision.main);
            }
            status.total_key += 1;
        }
    }
    status.hash = digest.finalize();
    Ok(status)
}

/// Bytes in SI units, as etcdctl prints sizes (go-humanize's `Bytes`).
pub fn human_bytes(size: u64) -> String {
    const UNITS: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if size < 10 {
        return format!("{size} B");
    }
    let exponent = ((size as f64).ln() / 1000f64.ln()).floor() as usize;
    let exponent = exponent.min(UNITS.len() - 1);
    let value = ((size as f64) / 1000f64.powi(exponent as i32) * 10.0 + 0.5).floor() / 10.0;
    if value < 10.0 {
        format!("{value:.1} {}", UNITS[exponent])
    } else {
        format!("{value:.0} {}", UNITS[exponent])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_as_etcdctl_prints_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(9), "9 B");
        assert_eq!(human_bytes(20480), "20 kB");
        assert_eq!(human_bytes(1500), "1.5 kB");
        assert_eq!(human_bytes(2_147_483_648), "2.1 GB");
        assert_eq!(go_bytes(&[1, 20, 255]), "[1 20 255]");
    }
}
