//! Property-style round trips (random shapes with fixed seeds): what the writer writes,
//! the reader gives back exactly; and what the writer refuses.

mod common;

use std::cell::Cell;
use std::collections::BTreeMap;

use common::*;
use quantykube_bbolt::{write_database, Database, Source, WriteError, DEFAULT_PAGE_SIZE};

fn random_source(rng: &mut Rng) -> MemSource {
    let mut src = MemSource::default();
    let buckets = rng.range(0, 8);
    for _ in 0..buckets {
        let n = rng.range(1, 20) as usize;
        let name = rng.bytes(n);
        let b = src.buckets.entry(name).or_default();
        let entries = match rng.range(0, 3) {
            0 => 0,
            1 => rng.range(1, 10),
            2 => rng.range(10, 500),
            _ => rng.range(500, 5000),
        };
        for _ in 0..entries {
            let klen = match rng.range(0, 9) {
                0 => rng.range(1000, 5000),
                _ => rng.range(1, 40),
            } as usize;
            let vlen = match rng.range(0, 19) {
                0 => rng.range(4000, 200_000),
                1..=3 => 0,
                _ => rng.range(1, 300),
            } as usize;
            let k = rng.bytes(klen);
            let v = rng.bytes(vlen);
            b.insert(k, v);
        }
    }
    src
}

fn write_to_file<S: Source>(src: &S, page_size: usize) -> (tempfile::NamedTempFile, u64) {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    let summary = write_database(src, f.as_file_mut(), page_size).unwrap();
    (f, summary.bytes)
}

#[test]
fn random_databases_read_back_exactly() {
    for seed in 0..40 {
        let mut rng = Rng::new(seed);
        let src = random_source(&mut rng);
        let page_size = [1024, 4096, 4096, 8192, 65536][seed as usize % 5];
        let (f, len) = write_to_file(&src, page_size);
        assert_eq!(f.as_file().metadata().unwrap().len(), len);
        let db = Database::open(f.reopen().unwrap(), len).unwrap();
        assert_eq!(db.page_size(), page_size);
        let got = read_all(&db);
        let want: Vec<_> = src
            .buckets
            .iter()
            .map(|(n, b)| (n.clone(), b.clone().into_iter().collect::<Vec<_>>()))
            .collect();
        assert!(got == want, "seed {seed}: read back differs");
        // The output depends on the entries alone.
        let (g, _) = write_to_file(&src, page_size);
        assert!(std::fs::read(f.path()).unwrap() == std::fs::read(g.path()).unwrap());
    }
}

#[test]
fn some_random_databases_pass_etcdctl() {
    for seed in 100..106 {
        let mut rng = Rng::new(seed);
        let src = random_source(&mut rng);
        let (f, len) = write_to_file(&src, DEFAULT_PAGE_SIZE);
        assert_eq!(
            etcdctl_status(f.path()),
            mem_status(&src, len),
            "seed {seed}"
        );
    }
}

/// A source that generates entries instead of holding them: 300 000 entries written with
/// the writer's memory alone.
struct Generated {
    n: u64,
}

impl Source for Generated {
    type Error = std::convert::Infallible;
    fn buckets(&self) -> Vec<Vec<u8>> {
        vec![b"gen".to_vec()]
    }
    fn entries<'a>(
        &'a self,
        _: &[u8],
    ) -> Result<Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>), Self::Error>> + 'a>, Self::Error>
    {
        Ok(Box::new((0..self.n).map(|i| {
            Ok((
                i.to_be_bytes().to_vec(),
                vec![(i % 251) as u8; (i % 61) as usize],
            ))
        })))
    }
}

#[test]
fn generated_source_streams() {
    let src = Generated { n: 300_000 };
    let (f, len) = write_to_file(&src, DEFAULT_PAGE_SIZE);
    let db = Database::open(f.reopen().unwrap(), len).unwrap();
    let b = db.bucket(b"gen").unwrap().unwrap();
    let mut n = 0u64;
    for e in b.entries() {
        let (k, v) = e.unwrap();
        assert_eq!(k, n.to_be_bytes());
        assert_eq!(v, vec![(n % 251) as u8; (n % 61) as usize]);
        n += 1;
    }
    assert_eq!(n, 300_000);
    assert!(b.depth().unwrap() >= 3);
}

type Pair = (Vec<u8>, Vec<u8>);
type PairRef<'a> = (&'a [u8], &'a [u8]);

/// A source of fixed entries per bucket, in the order given (which may be wrong).
struct Raw {
    names: Vec<Vec<u8>>,
    entries: BTreeMap<Vec<u8>, Vec<Pair>>,
    calls: Cell<u32>,
    change_on_second_call: bool,
    fail: bool,
}

impl Raw {
    fn new(names: &[&[u8]], entries: &[(&[u8], &[PairRef])]) -> Raw {
        Raw {
            names: names.iter().map(|n| n.to_vec()).collect(),
            entries: entries
                .iter()
                .map(|(n, e)| {
                    (
                        n.to_vec(),
                        e.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect(),
                    )
                })
                .collect(),
            calls: Cell::new(0),
            change_on_second_call: false,
            fail: false,
        }
    }
}

impl Source for Raw {
    type Error = std::io::Error;
    fn buckets(&self) -> Vec<Vec<u8>> {
        self.names.clone()
    }
    fn entries<'a>(
        &'a self,
        bucket: &[u8],
    ) -> Result<Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>), Self::Error>> + 'a>, Self::Error>
    {
        self.calls.set(self.calls.get() + 1);
        if self.fail {
            return Err(std::io::Error::other("source failed"));
        }
        let mut e = self.entries.get(bucket).cloned().unwrap_or_default();
        if self.change_on_second_call && self.calls.get() > 1 {
            e.push((vec![0xff; 8], vec![0; 5000]));
        }
        Ok(Box::new(e.into_iter().map(Ok)))
    }
}

fn write_err(src: &Raw) -> WriteError<std::io::Error> {
    match write_database(src, &mut Vec::new(), DEFAULT_PAGE_SIZE) {
        Ok(_) => panic!("written"),
        Err(e) => e,
    }
}

#[test]
fn writer_refuses_bad_input() {
    let e = write_err(&Raw::new(&[b"b", b"a"], &[]));
    assert!(matches!(e, WriteError::BucketsOutOfOrder { .. }), "{e}");
    let e = write_err(&Raw::new(&[b"a", b"a"], &[]));
    assert!(matches!(e, WriteError::BucketsOutOfOrder { .. }), "{e}");
    let e = write_err(&Raw::new(&[b""], &[]));
    assert!(matches!(e, WriteError::EmptyBucketName), "{e}");
    let long = vec![b'x'; 32769];
    let e = write_err(&Raw::new(&[&long], &[]));
    assert!(matches!(e, WriteError::BucketNameTooLarge { .. }), "{e}");

    let e = write_err(&Raw::new(&[b"a"], &[(b"a", &[(b"2", b""), (b"1", b"")])]));
    assert!(matches!(e, WriteError::KeysOutOfOrder { .. }), "{e}");
    let e = write_err(&Raw::new(&[b"a"], &[(b"a", &[(b"1", b""), (b"1", b"")])]));
    assert!(matches!(e, WriteError::KeysOutOfOrder { .. }), "{e}");
    let e = write_err(&Raw::new(&[b"a"], &[(b"a", &[(b"", b"v")])]));
    assert!(matches!(e, WriteError::EmptyKey { .. }), "{e}");
    let e = write_err(&Raw::new(&[b"a"], &[(b"a", &[(&long, b"v")])]));
    assert!(
        matches!(e, WriteError::KeyTooLarge { len: 32769, .. }),
        "{e}"
    );

    let mut changing = Raw::new(&[b"a"], &[(b"a", &[(b"1", b"x")])]);
    changing.change_on_second_call = true;
    let e = write_err(&changing);
    assert!(matches!(e, WriteError::SourceChanged { .. }), "{e}");

    let mut failing = Raw::new(&[b"a"], &[]);
    failing.fail = true;
    let e = write_err(&failing);
    assert!(matches!(e, WriteError::Source(_)), "{e}");

    for ps in [0, 1000, 512, 4095, 1 << 17] {
        let e = match write_database(&Raw::new(&[], &[]), &mut Vec::new(), ps) {
            Ok(_) => panic!("page size {ps} accepted"),
            Err(e) => e,
        };
        assert!(matches!(e, WriteError::InvalidPageSize(_)), "{e}");
    }
}

#[test]
fn writer_io_error_is_reported() {
    struct Full(usize);
    impl std::io::Write for Full {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0 < b.len() {
                return Err(std::io::Error::other("disk full"));
            }
            self.0 -= b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let src = Raw::new(&[b"a"], &[(b"a", &[(b"1", b"x")])]);
    for room in [0, 4096, 3 * 4096] {
        match write_database(&src, &mut Full(room), DEFAULT_PAGE_SIZE) {
            Err(WriteError::Io(_)) => {}
            other => panic!("{room}: {:?}", other.map(|_| ())),
        }
    }
}
