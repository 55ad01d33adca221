//! Malformed and hostile files: each is an error (or, for a mutation that keeps the file
//! well formed, a result), never a panic, a hang or an unbounded allocation.

mod common;

use std::hash::Hasher;
use std::os::unix::fs::FileExt;
use std::sync::mpsc;
use std::time::Duration;

use common::*;
use quantykube_bbolt::{write_database, Database, MetaProblem, ReadError};

const PS: usize = 1024;

/// A small database with every shape: an empty bucket, overflow values, a 3-level tree.
fn base() -> Vec<u8> {
    let mut rng = Rng::new(99);
    let mut src = MemSource::default();
    src.buckets.insert(b"a".to_vec(), Default::default());
    let big = src.buckets.entry(b"big".to_vec()).or_default();
    for i in 0..3u8 {
        big.insert(vec![b'k', i], rng.bytes(5000));
    }
    let deep = src.buckets.entry(b"deep".to_vec()).or_default();
    for i in 0..3000u32 {
        let n = rng.range(0, 20) as usize;
        deep.insert(format!("d{i:09}").into_bytes(), rng.bytes(n));
    }
    let key = src.buckets.entry(b"key".to_vec()).or_default();
    for i in 0..50 {
        key.insert(rev_key(i + 1, 0, i % 7 == 0), rng.bytes(30));
    }
    let mut out = Vec::new();
    write_database(&src, &mut out, PS).unwrap();
    out
}

/// Opens `bytes` and reads everything, as a user of the crate would.
fn read_everything(file: &std::fs::File, len: u64) -> Result<u64, ReadError> {
    let db = Database::open(file.try_clone().unwrap(), len)?;
    let mut n = 0;
    for name in db.buckets()? {
        let Some(b) = db.bucket(&name)? else {
            continue;
        };
        b.depth()?;
        for e in b.entries() {
            e?;
            n += 1;
        }
    }
    Ok(n)
}

fn temp_with(bytes: &[u8]) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().write_all_at(bytes, 0).unwrap();
    f
}

fn read_bytes(bytes: &[u8]) -> Result<u64, ReadError> {
    let f = temp_with(bytes);
    read_everything(f.as_file(), bytes.len() as u64)
}

/// Raw access to a file's pages, to aim mutations at its structure.
struct Raw<'b>(&'b mut Vec<u8>);

impl Raw<'_> {
    fn u16(&self, off: usize) -> u16 {
        u16::from_le_bytes(self.0[off..off + 2].try_into().unwrap())
    }
    fn u32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.0[off..off + 4].try_into().unwrap())
    }
    fn u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.0[off..off + 8].try_into().unwrap())
    }
    fn set_u32(&mut self, off: usize, v: u32) {
        self.0[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn set_u64(&mut self, off: usize, v: u64) {
        self.0[off..off + 8].copy_from_slice(&v.to_le_bytes());
    }
    fn flags(&self, id: u64) -> u16 {
        self.u16(id as usize * PS + 8)
    }
    fn count(&self, id: u64) -> usize {
        usize::from(self.u16(id as usize * PS + 10))
    }
    /// Absolute offset of element `i` of page `id`.
    fn elem(id: u64, i: usize) -> usize {
        id as usize * PS + 16 + 16 * i
    }
    fn key(&self, id: u64, i: usize) -> Vec<u8> {
        let e = Self::elem(id, i);
        let (pos, ksize) = if self.flags(id) & 2 != 0 {
            (self.u32(e + 4), self.u32(e + 8))
        } else {
            (self.u32(e), self.u32(e + 4))
        };
        let start = e + pos as usize;
        self.0[start..start + ksize as usize].to_vec()
    }
    fn meta_root(&self) -> u64 {
        self.u64(16 + 16)
    }
    /// The offset of bucket `name`'s root pgid in the root bucket's leaf.
    fn bucket_root_offset(&self, name: &[u8]) -> usize {
        let root = self.meta_root();
        assert_eq!(
            self.flags(root),
            2,
            "test files have a one-leaf root bucket"
        );
        for i in 0..self.count(root) {
            if self.key(root, i) == name {
                let e = Self::elem(root, i);
                return e + self.u32(e + 4) as usize + name.len();
            }
        }
        panic!("no bucket {name:?}")
    }
    fn bucket_root(&self, name: &[u8]) -> u64 {
        self.u64(self.bucket_root_offset(name))
    }
    /// Recomputes both metas' checksums after an edit.
    fn fix_metas(&mut self) {
        for page in 0..2 {
            let m = page * PS + 16;
            let mut h = fnv::FnvHasher::default();
            h.write(&self.0[m..m + 56]);
            let sum = h.finish();
            self.set_u64(m + 56, sum);
        }
    }
}

#[test]
fn the_base_file_reads() {
    assert_eq!(read_bytes(&base()).unwrap(), 3 + 3000 + 50);
}

#[test]
fn empty_and_tiny_files() {
    for n in [0usize, 1, 15, 16, 79, 80, 100, 1023, 1024, 2047] {
        let mut bytes = base();
        bytes.truncate(n);
        let e = read_bytes(&bytes).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::Truncated { .. } | ReadError::InvalidMetas { .. }
            ),
            "{n} bytes: {e}"
        );
    }
}

#[test]
fn truncated_at_every_page_boundary_and_mid_page() {
    let bytes = base();
    let pages = bytes.len() / PS;
    for page in 0..pages {
        for cut in [
            page * PS,
            page * PS + 17,
            page * PS + PS / 2,
            page * PS + PS - 1,
        ] {
            // The length given says less than the file has...
            let f = temp_with(&bytes);
            let e = read_everything(f.as_file(), cut as u64).unwrap_err();
            assert!(
                matches!(
                    e,
                    ReadError::Truncated { .. } | ReadError::InvalidMetas { .. }
                ),
                "cut {cut}: {e}"
            );
            // ...and the file itself is shorter than the length given.
            let g = temp_with(&bytes[..cut]);
            let e = read_everything(g.as_file(), bytes.len() as u64).unwrap_err();
            assert!(
                matches!(
                    e,
                    ReadError::Truncated { .. } | ReadError::InvalidMetas { .. }
                ),
                "short file {cut}: {e}"
            );
        }
    }
}

#[test]
fn one_bad_meta_falls_back_to_the_other_both_bad_is_an_error() {
    let good = read_bytes(&base()).unwrap();
    // Every bit of each meta (magic through checksum).
    for bit in 0..64 * 8 {
        let (byte, mask) = (16 + bit / 8, 1u8 << (bit % 8));
        for page in 0..2 {
            let mut b = base();
            b[page * PS + byte] ^= mask;
            assert_eq!(read_bytes(&b).unwrap(), good, "meta {page} bit {bit}");
        }
        let mut b = base();
        b[byte] ^= mask;
        b[PS + byte] ^= mask;
        match read_bytes(&b) {
            Err(ReadError::InvalidMetas { .. }) => {}
            other => panic!("both metas bit {bit}: {other:?}"),
        }
    }
    let mut b = base();
    b[16] ^= 1;
    b[PS + 16 + 4] ^= 1;
    match read_bytes(&b) {
        Err(ReadError::InvalidMetas {
            meta0: MetaProblem::BadMagic(_),
            meta1: MetaProblem::BadVersion(_),
        }) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn meta_fields_out_of_range() {
    // Offsets in the meta: root pgid 16, freelist 32, pgid (high-water mark) 40.
    let pages = (base().len() / PS) as u64;
    for (field, value) in [
        (16usize, pages),
        (16, 0),
        (16, 1),
        (16, u64::MAX),
        (32, pages),
        (32, u64::MAX - 1),
        (40, pages + 1),
        (40, u64::MAX / 4),
        (40, u64::MAX),
        (40, 1),
    ] {
        let mut b = base();
        let mut r = Raw(&mut b);
        for page in 0..2 {
            r.set_u64(page * PS + 16 + field, value);
        }
        r.fix_metas();
        let e = read_bytes(&b).unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::MetaOutOfRange { .. } | ReadError::Truncated { .. }
            ),
            "field {field} = {value}: {e}"
        );
    }
}

#[test]
fn aimed_structural_damage() {
    let pristine = base();
    let deep_root = Raw(&mut pristine.clone()).bucket_root(b"deep");
    let pages = (pristine.len() / PS) as u64;

    let damage = |f: &dyn Fn(&mut Raw)| {
        let mut b = pristine.clone();
        f(&mut Raw(&mut b));
        read_bytes(&b)
    };

    // A branch pointing past the end, at itself, at a meta page, at the freelist.
    let first_child = Raw::elem(deep_root, 0) + 8;
    let e = damage(&|r| r.set_u64(first_child, pages + 5)).unwrap_err();
    assert!(matches!(e, ReadError::PageOutOfRange { .. }), "{e}");
    let e = damage(&|r| r.set_u64(first_child, deep_root)).unwrap_err();
    assert!(
        matches!(
            e,
            ReadError::TreeTooDeep { .. } | ReadError::PageReachedTwice { .. }
        ),
        "{e}"
    );
    let e = damage(&|r| r.set_u64(first_child, 1)).unwrap_err();
    assert!(
        matches!(
            e,
            ReadError::PageIdMismatch { .. } | ReadError::WrongPageType { .. }
        ),
        "{e}"
    );
    let e = damage(&|r| r.set_u64(first_child, 2)).unwrap_err();
    assert!(matches!(e, ReadError::WrongPageType { .. }), "{e}");
    // Every child of the root pointing at the same page: a DAG.
    let e = damage(&|r| {
        let child = r.u64(first_child);
        for i in 0..r.count(deep_root) {
            r.set_u64(Raw::elem(deep_root, i) + 8, child);
        }
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            ReadError::KeysOutOfOrder { .. } | ReadError::PageReachedTwice { .. }
        ),
        "{e}"
    );

    // A leaf element past its page; a count past the page; an overflow past the end.
    let a_leaf = {
        let mut b = pristine.clone();
        let r = Raw(&mut b);
        let mut id = deep_root;
        while r.flags(id) & 1 != 0 {
            id = r.u64(Raw::elem(id, 0) + 8);
        }
        id
    };
    let e = damage(&|r| r.set_u32(Raw::elem(a_leaf, 1) + 4, 5000)).unwrap_err();
    assert!(
        matches!(e, ReadError::ElementOutOfBounds { index: 1, .. }),
        "{e}"
    );
    let e = damage(&|r| r.set_u32(Raw::elem(a_leaf, 0) + 12, u32::MAX)).unwrap_err();
    assert!(matches!(e, ReadError::ElementOutOfBounds { .. }), "{e}");
    let e = damage(&|r| {
        r.0[a_leaf as usize * PS + 10..][..2].copy_from_slice(&0xFFFFu16.to_le_bytes())
    })
    .unwrap_err();
    assert!(matches!(e, ReadError::CountOutOfBounds { .. }), "{e}");
    let e = damage(&|r| r.set_u32(a_leaf as usize * PS + 12, 1_000_000)).unwrap_err();
    assert!(matches!(e, ReadError::OverflowOutOfRange { .. }), "{e}");
    let e = damage(&|r| r.set_u32(Raw::elem(a_leaf, 0) + 8, 0)).unwrap_err();
    assert!(matches!(e, ReadError::EmptyKey { .. }), "{e}");
    // A nested bucket; a top-level key that is not a bucket.
    let e = damage(&|r| r.set_u32(Raw::elem(a_leaf, 2), 1)).unwrap_err();
    assert!(matches!(e, ReadError::NestedBucket { .. }), "{e}");
    let e = damage(&|r| {
        let root = r.meta_root();
        r.set_u32(Raw::elem(root, 0), 0)
    })
    .unwrap_err();
    assert!(matches!(e, ReadError::NotABucket { .. }), "{e}");
    // Keys out of order within a leaf.
    let e = damage(&|r| {
        let e = Raw::elem(a_leaf, 1);
        let at = e + r.u32(e + 4) as usize;
        r.0[at] = 0;
    })
    .unwrap_err();
    assert!(matches!(e, ReadError::KeysOutOfOrder { .. }), "{e}");
    // A bucket whose root is a meta page, page 0, or past the end.
    for root in [0u64, 1, pages, u64::MAX] {
        let e = damage(&|r| {
            let off = r.bucket_root_offset(b"deep");
            r.set_u64(off, root)
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                ReadError::PageOutOfRange { .. }
                    | ReadError::PageIdMismatch { .. }
                    | ReadError::WrongPageType { .. }
                    | ReadError::BadBucketValue { .. }
            ),
            "root {root}: {e}"
        );
    }
    // A page header naming another page.
    let e = damage(&|r| r.set_u64(a_leaf as usize * PS, a_leaf + 1)).unwrap_err();
    assert!(matches!(e, ReadError::PageIdMismatch { .. }), "{e}");
}

/// An inline bucket built by hand (our writer never writes one; etcd does), then damaged.
#[test]
fn inline_buckets() {
    // Turn bucket "a" (an empty leaf) into an inline bucket with two entries: rewrite the
    // root leaf with that value.
    fn leaf(elems: &[(u32, &[u8], &[u8])], len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[8..10].copy_from_slice(&2u16.to_le_bytes());
        p[10..12].copy_from_slice(&(elems.len() as u16).to_le_bytes());
        let mut data = 16 + 16 * elems.len();
        for (i, (flags, k, v)) in elems.iter().enumerate() {
            let e = 16 + 16 * i;
            p[e..e + 4].copy_from_slice(&flags.to_le_bytes());
            p[e + 4..e + 8].copy_from_slice(&((data - e) as u32).to_le_bytes());
            p[e + 8..e + 12].copy_from_slice(&(k.len() as u32).to_le_bytes());
            p[e + 12..e + 16].copy_from_slice(&(v.len() as u32).to_le_bytes());
            p[data..data + k.len()].copy_from_slice(k);
            data += k.len();
            p[data..data + v.len()].copy_from_slice(v);
            data += v.len();
        }
        p.truncate(data.max(16));
        p
    }
    let make = |inline_page: Vec<u8>| {
        let mut b = base();
        let r = Raw(&mut b);
        let root = r.meta_root();
        let mut value = vec![0u8; 16];
        value.extend_from_slice(&inline_page);
        let mut elems: Vec<(u32, Vec<u8>, Vec<u8>)> = Vec::new();
        for i in 0..r.count(root) {
            let k = r.key(root, i);
            let e = Raw::elem(root, i);
            let start = e + r.u32(e + 4) as usize + k.len();
            let v = if k == b"a" {
                value.clone()
            } else {
                r.0[start..start + 16].to_vec()
            };
            elems.push((1, k, v));
        }
        let borrowed: Vec<(u32, &[u8], &[u8])> = elems
            .iter()
            .map(|(f, k, v)| (*f, k.as_slice(), v.as_slice()))
            .collect();
        let mut page = leaf(&borrowed, PS);
        page.resize(PS, 0);
        page[0..8].copy_from_slice(&root.to_le_bytes());
        r.0[root as usize * PS..(root as usize + 1) * PS].copy_from_slice(&page);
        b
    };
    let good = make(leaf(&[(0, b"x", b"1"), (0, b"y", b"")], 4096));
    let f = temp_with(&good);
    let db = Database::open(f.reopen().unwrap(), good.len() as u64).unwrap();
    let a = db.bucket(b"a").unwrap().unwrap();
    assert!(a.is_inline());
    let got: Vec<_> = a.entries().map(Result::unwrap).collect();
    assert_eq!(
        got,
        vec![(b"x".to_vec(), b"1".to_vec()), (b"y".to_vec(), vec![])]
    );
    assert_eq!(read_bytes(&good).unwrap(), 3 + 3000 + 50 + 2);

    // Damaged inline pages.
    let e = read_bytes(&make(leaf(&[(1, b"x", b"")], 4096))).unwrap_err();
    assert!(matches!(e, ReadError::NestedBucket { .. }), "{e}");
    let mut p = leaf(&[(0, b"x", b"1")], 4096);
    p[16 + 8..16 + 12].copy_from_slice(&100u32.to_le_bytes());
    let e = read_bytes(&make(p)).unwrap_err();
    assert!(matches!(e, ReadError::ElementOutOfBounds { .. }), "{e}");
    let mut p = leaf(&[(0, b"x", b"1")], 4096);
    p[8] = 1;
    let e = read_bytes(&make(p)).unwrap_err();
    assert!(matches!(e, ReadError::InlineNotLeaf { .. }), "{e}");
    let e = read_bytes(&make(vec![2, 0, 0])).unwrap_err();
    assert!(matches!(e, ReadError::BadBucketValue { .. }), "{e}");
}

/// Runs `f` on another thread and fails if it takes longer than `secs`: a hang is a bug.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .expect("did not finish in time (a hang?) or panicked")
}

#[test]
fn seeded_mutations_never_panic_or_hang() {
    within(240, || {
        let pristine = base();
        let f = temp_with(&pristine);
        let (mut ok, mut errors) = (0, 0);
        for seed in 0..3000u64 {
            let mut rng = Rng::new(seed);
            let mut b = pristine.clone();
            let edits = rng.range(1, 6);
            for _ in 0..edits {
                // Aim at page headers and element arrays half the time: that is where the
                // structure is.
                let page = rng.range(0, (b.len() / PS - 1) as u64) as usize;
                let off = match rng.range(0, 3) {
                    0 => page * PS + rng.range(0, 15) as usize,
                    1 => page * PS + 16 + rng.range(0, 16 * 8) as usize,
                    _ => rng.range(0, b.len() as u64 - 1) as usize,
                };
                match rng.range(0, 3) {
                    0 => b[off] ^= 1 << rng.range(0, 7),
                    1 => b[off] = rng.next() as u8,
                    _ => {
                        let v: u32 = [0, 1, 2, 0xFFFF, 0xFFFF_FFFF, 1 << 31, PS as u32]
                            [rng.range(0, 6) as usize];
                        let off = off.min(b.len() - 4);
                        b[off..off + 4].copy_from_slice(&v.to_le_bytes());
                    }
                }
            }
            if rng.range(0, 9) == 0 {
                Raw(&mut b).fix_metas();
            }
            f.as_file().write_all_at(&b, 0).unwrap();
            let len = if rng.range(0, 9) == 0 {
                rng.range(0, b.len() as u64)
            } else {
                b.len() as u64
            };
            match read_everything(f.as_file(), len) {
                Ok(_) => ok += 1,
                Err(e) => {
                    // Every error prints.
                    assert!(!e.to_string().is_empty());
                    errors += 1;
                }
            }
        }
        eprintln!("mutations: {ok} read, {errors} refused");
        assert!(errors > 500, "mutations are not reaching the structure");
    });
}

#[test]
fn random_bytes_never_panic() {
    within(120, || {
        for seed in 0..500u64 {
            let mut rng = Rng::new(seed ^ 0xABCD);
            let n = rng.range(0, 64 * 1024) as usize;
            let mut b = rng.bytes(n);
            // Half with valid metas over random pages, so that the tree walk is reached.
            if seed % 2 == 0 && b.len() >= 4 * PS {
                let pages = (b.len() / PS) as u64;
                for page in 0..2 {
                    let m = page * PS + 16;
                    b[m..m + 4].copy_from_slice(&0xED0C_DAEDu32.to_le_bytes());
                    b[m + 4..m + 8].copy_from_slice(&2u32.to_le_bytes());
                    b[m + 8..m + 12].copy_from_slice(&(PS as u32).to_le_bytes());
                    b[m + 16..m + 24].copy_from_slice(&rng.range(2, pages - 1).to_le_bytes());
                    b[m + 40..m + 48].copy_from_slice(&pages.to_le_bytes());
                }
                Raw(&mut b).fix_metas();
            }
            let _ = read_bytes(&b);
        }
    });
}
