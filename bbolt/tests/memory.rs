//! Bounded memory: writing and reading a million entries with the heap never holding more
//! than a few pages' worth (measured by a counting allocator, this test binary's own).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use quantykube_bbolt::{write_database, Database, Source, SourceEntries, DEFAULT_PAGE_SIZE};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The heap's growth over `f`, at its peak.
fn peak_growth<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let t = f();
    (t, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

struct Generated {
    n: u64,
}

impl Source for Generated {
    type Error = std::convert::Infallible;
    fn buckets(&self) -> Vec<Vec<u8>> {
        vec![b"a".to_vec(), b"key".to_vec(), b"z".to_vec()]
    }
    fn entries<'a>(&'a self, bucket: &[u8]) -> Result<SourceEntries<'a, Self::Error>, Self::Error> {
        let n = if bucket == b"key" { self.n } else { 10 };
        Ok(Box::new((0..n).map(|i| {
            let mut k = i.to_be_bytes().to_vec();
            k.extend_from_slice(b"_\0\0\0\0\0\0\0\0");
            Ok((k, vec![b'v'; (i % 97) as usize]))
        })))
    }
}

#[test]
fn writing_and_reading_a_million_entries_in_bounded_memory() {
    const N: u64 = 1_000_000;
    let file = tempfile::tempfile().unwrap();
    let (summary, write_peak) = peak_growth(|| {
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, &file);
        write_database(&Generated { n: N }, &mut out, DEFAULT_PAGE_SIZE).unwrap()
    });
    // The file is ~100 MB; the writer holds a page per level and the output buffer.
    assert!(summary.bytes > 80_000_000);
    assert!(
        write_peak < 1 << 20,
        "writer peak heap growth {write_peak} bytes"
    );

    let (count, read_peak) = peak_growth(|| {
        let db = Database::open(file.try_clone().unwrap(), summary.bytes).unwrap();
        let b = db.bucket(b"key").unwrap().unwrap();
        let mut count = 0u64;
        for e in b.entries() {
            let (k, _) = e.unwrap();
            assert_eq!(k[..8], count.to_be_bytes());
            count += 1;
        }
        count
    });
    assert_eq!(count, N);
    assert!(
        read_peak < 1 << 20,
        "reader peak heap growth {read_peak} bytes"
    );
    eprintln!(
        "{} bytes written; peak heap growth: writer {write_peak}, reader {read_peak}",
        summary.bytes
    );
}
