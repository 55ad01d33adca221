//! Files the crate writes, opened by Go's bbolt through `etcdctl snapshot status` (which
//! runs bbolt's integrity check first) and by our own reader.

mod common;

use std::io::Write;

use common::*;
use quantykube_bbolt::{write_database, Database, DEFAULT_PAGE_SIZE};
use sha2::{Digest, Sha256};

fn write_file(src: &MemSource, page_size: usize) -> (tempfile::NamedTempFile, u64) {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let mut out = std::io::BufWriter::new(f.as_file_mut());
    let summary = write_database(src, &mut out, page_size).unwrap();
    out.flush().unwrap();
    drop(out);
    let len = f.as_file().metadata().unwrap().len();
    assert_eq!(len, summary.bytes, "file length is pages × page size");
    assert_eq!(summary.bytes, summary.pages * page_size as u64);
    (f, len)
}

/// Writes `src`, checks etcdctl's status against ours, and reads everything back.
fn check(src: &MemSource, page_size: usize) -> Database {
    let (f, len) = write_file(src, page_size);
    let want = mem_status(src, len);
    assert_eq!(etcdctl_status(f.path()), want, "etcdctl snapshot status");
    let db = open(f.path(), len);
    assert_eq!(db.page_size(), page_size);
    assert_eq!(db.size(), len);
    let got = read_all(&db);
    let expect: Vec<_> = src
        .buckets
        .iter()
        .map(|(n, b)| (n.clone(), b.clone().into_iter().collect::<Vec<_>>()))
        .collect();
    assert!(got == expect, "read back differs from what was written");
    db
}

#[test]
fn empty_database() {
    let src = MemSource::default();
    let db = check(&src, DEFAULT_PAGE_SIZE);
    // Metas, freelist, the root bucket's empty leaf: what bbolt's init writes.
    assert_eq!(db.size(), 4 * 4096);
    assert_eq!(db.freelist_page(), Some(2));
}

#[test]
fn etcd_shaped_database_with_big_values_and_a_deep_tree() {
    let mut rng = Rng::new(7);
    let mut src = MemSource::default();
    for name in [
        "alarm",
        "auth",
        "authRoles",
        "authUsers",
        "cluster",
        "lease",
        "members",
        "members_removed",
    ] {
        src.buckets.insert(name.into(), Default::default());
    }
    // Revision keys with values of 0 bytes to 2 MiB: overflow pages.
    let key = src.buckets.entry(b"key".to_vec()).or_default();
    let sizes = [
        0usize,
        1,
        100,
        4000,
        4080,
        4096,
        5000,
        70_000,
        1_500_000,
        2 << 20,
        10,
    ];
    for (i, &n) in sizes.iter().enumerate() {
        key.insert(rev_key(i as u64 + 2, 0, i == 3), rng.bytes(n));
    }
    // 200 000 entries: leaves, a branch level above them and a root above that.
    let many = src.buckets.entry(b"many".to_vec()).or_default();
    for i in 0..200_000u64 {
        many.insert(format!("k{:012}", i * 7).into_bytes(), {
            let n = rng.range(0, 40) as usize;
            rng.bytes(n)
        });
    }
    // Keys of a few KiB.
    let big_keys = src.buckets.entry(b"meta".to_vec()).or_default();
    for i in 0..300 {
        let mut k = {
            let n = rng.range(1, 4096) as usize;
            rng.bytes(n)
        };
        k.insert(0, i as u8);
        big_keys.insert(k, {
            let n = rng.range(0, 300) as usize;
            rng.bytes(n)
        });
    }
    let db = check(&src, DEFAULT_PAGE_SIZE);
    let depth = db.bucket(b"many").unwrap().unwrap().depth().unwrap();
    assert!(depth >= 3, "200 000 entries in a tree of {depth} levels");
    assert_eq!(db.bucket(b"alarm").unwrap().unwrap().entries().count(), 0);
    assert!(db.bucket(b"nope").unwrap().is_none());
}

#[test]
fn other_page_sizes() {
    let mut rng = Rng::new(11);
    for page_size in [1024, 16384, 65536] {
        let mut src = MemSource::default();
        let key = src.buckets.entry(b"key".to_vec()).or_default();
        for i in 0..20_000u64 {
            key.insert(rev_key(i + 1, 0, false), {
                let n = rng.range(0, 200) as usize;
                rng.bytes(n)
            });
        }
        key.insert(rev_key(30_000, 1, false), rng.bytes(300_000));
        src.buckets.insert(b"empty".to_vec(), Default::default());
        check(&src, page_size);
    }
}

#[test]
fn many_buckets_spill_the_root_bucket_over_pages() {
    let mut src = MemSource::default();
    for i in 0..3000u32 {
        let b = src
            .buckets
            .entry(format!("bucket-{i:05}").into_bytes())
            .or_default();
        for j in 0..(i % 4) {
            b.insert(vec![j as u8 + 1], vec![i as u8; j as usize]);
        }
    }
    check(&src, DEFAULT_PAGE_SIZE);
}

#[test]
fn status_and_reader_with_an_etcd_snapshot_trailer() {
    let mut src = MemSource::default();
    let key = src.buckets.entry(b"key".to_vec()).or_default();
    key.insert(rev_key(5, 0, false), b"v".to_vec());
    let (mut f, len) = write_file(&src, DEFAULT_PAGE_SIZE);
    let sha = Sha256::digest(std::fs::read(f.path()).unwrap());
    f.as_file_mut().write_all(&sha).unwrap();
    assert_eq!(f.as_file().metadata().unwrap().len() % 512, 32);
    // Go's bbolt ignores bytes past the high-water mark.
    assert_eq!(etcdctl_status(f.path()), mem_status(&src, len));
    let db = open(f.path(), len);
    assert_eq!(read_status(&db), mem_status(&src, len));
}

#[test]
fn keys_of_bbolts_max_size_on_small_pages() {
    // 32 KiB keys on 1 KiB pages: branch pages of two elements with overflow pages.
    let mut rng = Rng::new(5);
    let mut src = MemSource::default();
    let b = src.buckets.entry(vec![b'k'; 32768]).or_default();
    for i in 0..40u8 {
        let mut k = rng.bytes(32768);
        k[0] = i;
        let n = rng.range(0, 3000) as usize;
        b.insert(k, rng.bytes(n));
    }
    let db = check(&src, 1024);
    assert!(db.bucket(&[b'k'; 32768]).unwrap().unwrap().depth().unwrap() >= 3);
}
