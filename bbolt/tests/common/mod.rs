//! Helpers the integration tests share: a fixed-seed PRNG, an in-memory [`Source`], the
//! hash `etcdctl snapshot status` computes, and running etcdctl itself.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::Path;
use std::process::Command;

use quantykube_bbolt::{Database, Source};

/// splitmix64: a fixed-seed generator, so every run builds the same data.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in lo..=hi.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Buckets held in memory.
#[derive(Default, Clone)]
pub struct MemSource {
    pub buckets: BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl Source for MemSource {
    type Error = Infallible;
    fn buckets(&self) -> Vec<Vec<u8>> {
        self.buckets.keys().cloned().collect()
    }
    fn entries<'a>(
        &'a self,
        bucket: &[u8],
    ) -> Result<Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>), Infallible>> + 'a>, Infallible>
    {
        let b = &self.buckets[bucket];
        Ok(Box::new(b.iter().map(|(k, v)| Ok((k.clone(), v.clone())))))
    }
}

/// What `etcdctl snapshot status -w json` prints.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct Status {
    pub hash: u32,
    pub revision: i64,
    pub total_key: u64,
    pub total_size: u64,
}

pub const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// The status etcd 3.4's snapshot.Status computes: CRC-32C over every bucket name and
/// every key and value in order; the revision is the main part (big-endian u64) of the
/// last key of the `key` bucket.
pub fn expected_status<'a>(
    buckets: impl IntoIterator<Item = (&'a [u8], Vec<(Vec<u8>, Vec<u8>)>)>,
    total_size: u64,
) -> Status {
    let mut d = CRC32C.digest();
    let mut total_key = 0;
    let mut revision = 0;
    for (name, entries) in buckets {
        d.update(name);
        for (k, v) in &entries {
            d.update(k);
            d.update(v);
            total_key += 1;
            if name == b"key" {
                revision = i64::from_be_bytes(k[..8].try_into().unwrap());
            }
        }
    }
    Status {
        hash: d.finalize(),
        revision,
        total_key,
        total_size,
    }
}

pub fn mem_status(src: &MemSource, total_size: u64) -> Status {
    expected_status(
        src.buckets.iter().map(|(n, b)| {
            (
                n.as_slice(),
                b.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            )
        }),
        total_size,
    )
}

/// Every bucket's name with all its entries, in order.
pub type Dump = Vec<(Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>)>;

/// Our reader's view of a file: every bucket with all its entries.
pub fn read_all(db: &Database) -> Dump {
    db.buckets()
        .unwrap()
        .into_iter()
        .map(|name| {
            let b = db.bucket(&name).unwrap().unwrap();
            let entries = b.entries().collect::<Result<Vec<_>, _>>().unwrap();
            (name, entries)
        })
        .collect()
}

pub fn read_status(db: &Database) -> Status {
    let all = read_all(db);
    expected_status(
        all.iter().map(|(n, e)| (n.as_slice(), e.clone())),
        db.size(),
    )
}

pub fn etcdctl() -> Command {
    let mut c = Command::new("etcdctl");
    c.env("ETCDCTL_API", "3");
    c
}

/// Runs `etcdctl snapshot status <path> -w json`: Go's bbolt opens the file and runs its
/// integrity check first.
pub fn etcdctl_status(path: &Path) -> Status {
    let out = etcdctl()
        .args(["snapshot", "status", "-w", "json"])
        .arg(path)
        .output()
        .expect("run etcdctl (install etcd 3.4: deploy/local/install-deps.sh)");
    assert!(
        out.status.success(),
        "etcdctl snapshot status {}: {}{}",
        path.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Status {
        hash: v["hash"].as_u64().unwrap() as u32,
        revision: v["revision"].as_i64().unwrap(),
        total_key: v["totalKey"].as_u64().unwrap(),
        total_size: v["totalSize"].as_u64().unwrap(),
    }
}

pub fn open(path: &Path, len: u64) -> Database {
    Database::open(std::fs::File::open(path).unwrap(), len).unwrap()
}

/// A revision-shaped key of etcd's `key` bucket: main, '_', sub, big-endian.
pub fn rev_key(main: u64, sub: u64, tombstone: bool) -> Vec<u8> {
    let mut k = Vec::with_capacity(18);
    k.extend_from_slice(&main.to_be_bytes());
    k.push(b'_');
    k.extend_from_slice(&sub.to_be_bytes());
    if tombstone {
        k.push(b't');
    }
    k
}
