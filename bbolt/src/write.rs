//! The writer: a streaming bulk load of a whole database from a [`Source`].
//!
//! A layout pass runs every bucket through the tree builder counting only, which gives
//! each bucket's root page and the high-water mark; the write pass then writes pages
//! 0..N strictly in order: both metas (which name the root bucket's tree and the
//! high-water mark), an empty freelist page, the root bucket's tree (one element per
//! bucket, its header), then each bucket's tree. The output is never seeked, so it can be
//! streamed to a client as it is produced.
//!
//! This module owns the file's page order and the checks on what the source gives (names
//! and keys in order, within bbolt's limits, the same in both passes). It never holds more
//! than one pending page per tree level, plus one bucket root id per bucket.

use std::io::Write;

use crate::error::{ShownBytes, WriteError};
use crate::meta::{valid_page_size, Meta};
use crate::page::{
    encode_tree_page, BucketHeader, Kind, NewElement, PageHeader, BUCKET_HEADER_SIZE,
    BUCKET_LEAF_FLAG, FREELIST_PAGE_FLAG, MAX_KEY_SIZE, MAX_VALUE_SIZE,
};
use crate::tree::{BuildError, Built, Discard, PageSink, TreeBuilder};

/// What a database is written from: top-level buckets of key/value pairs (no nested
/// buckets).
pub trait Source {
    type Error: std::error::Error + Send + Sync + 'static;
    /// The top-level bucket names, in ascending byte order, each once.
    fn buckets(&self) -> Vec<Vec<u8>>;
    /// One bucket's entries in ascending key order, each key once. Called twice per
    /// bucket (a layout pass, then the write pass); it must yield the same entries both
    /// times.
    fn entries<'a>(&'a self, bucket: &[u8]) -> Result<SourceEntries<'a, Self::Error>, Self::Error>;
}

/// What [`Source::entries`] returns: a bucket's `(key, value)` pairs, each or the source's
/// error. (A name for the type the trait's signature spells out: an implementation may
/// write either.)
pub type SourceEntries<'a, E> = Box<dyn Iterator<Item = Result<(Vec<u8>, Vec<u8>), E>> + 'a>;

/// What [`write_database`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteSummary {
    /// The file's length: `pages × page_size`.
    pub bytes: u64,
    /// The high-water mark: every page of the file.
    pub pages: u64,
}

/// Page 2 holds the (empty) freelist, as in a database bbolt has just created.
const FREELIST_PAGE: u64 = 2;
/// The root bucket's tree starts after the metas and the freelist.
const ROOT_FIRST_PAGE: u64 = 3;
/// The txid of meta 0; meta 1 gets one less, as bbolt's Tx.WriteTo writes a snapshot.
const TXID: u64 = 1;

/// A database's layout, computed from the entry sizes alone: what [`Plan::write`] will
/// write, known before its first byte (e.g. to tell a client how many bytes to expect).
#[derive(Debug)]
pub struct Plan {
    page_size: usize,
    names: Vec<Vec<u8>>,
    root: Built,
    buckets: Vec<Built>,
    summary: WriteSummary,
}

/// The layout pass: runs every bucket of `source` through the tree builder, counting
/// pages only.
pub fn plan<S: Source>(source: &S, page_size: usize) -> Result<Plan, WriteError<S::Error>> {
    if !valid_page_size(page_size) {
        return Err(WriteError::InvalidPageSize(page_size));
    }
    let names = source.buckets();
    check_names::<S::Error>(&names)?;
    // The root bucket's tree first (its elements' sizes are known from the names alone),
    // then every bucket.
    let root = build_root(&names, &[], page_size, &mut Discard)?;
    let mut buckets = Vec::with_capacity(names.len());
    let mut next = root.next_id;
    for name in &names {
        let built = build_bucket(source, name, page_size, next, false, &mut Discard)?;
        next = built.next_id;
        buckets.push(built);
    }
    let bytes = next
        .checked_mul(page_size as u64)
        .ok_or(WriteError::TooManyPages)?;
    Ok(Plan {
        page_size,
        names,
        root,
        buckets,
        summary: WriteSummary { bytes, pages: next },
    })
}

impl Plan {
    /// What the write will produce.
    pub fn summary(&self) -> WriteSummary {
        self.summary
    }

    /// The write pass: pages 0..N to `out`, in order, from the same `source` the plan was
    /// made from (which must yield the same entries again).
    pub fn write<S: Source>(
        &self,
        source: &S,
        out: &mut dyn Write,
    ) -> Result<WriteSummary, WriteError<S::Error>> {
        let page_size = self.page_size;
        let mut w = PageWriter {
            out,
            page_size,
            written: 0,
        };
        let meta = Meta {
            page_size: page_size as u32,
            flags: 0,
            root: self.root.root,
            root_sequence: 0,
            freelist: FREELIST_PAGE,
            pgid: self.summary.pages,
            txid: TXID,
        };
        w.raw(&meta.encode_page(0, page_size))?;
        w.raw(
            &Meta {
                txid: TXID - 1,
                ..meta
            }
            .encode_page(1, page_size),
        )?;
        let mut freelist = vec![0u8; page_size];
        PageHeader {
            id: FREELIST_PAGE,
            flags: FREELIST_PAGE_FLAG,
            count: 0,
            overflow: 0,
        }
        .encode(&mut freelist);
        w.raw(&freelist)?;

        let roots: Vec<u64> = self.buckets.iter().map(|b| b.root).collect();
        if build_root(&self.names, &roots, page_size, &mut w)? != self.root {
            // The root tree depends on the names alone: this is a bug, not the source's.
            return Err(WriteError::BucketsChanged);
        }
        let mut next = self.root.next_id;
        for (name, planned) in self.names.iter().zip(&self.buckets) {
            let built = build_bucket(source, name, page_size, next, true, &mut w)?;
            if built != *planned {
                return Err(WriteError::SourceChanged {
                    bucket: ShownBytes::new(name),
                });
            }
            next = built.next_id;
        }
        w.out.flush()?;
        Ok(self.summary)
    }
}

/// Writes the whole file to `out` sequentially, from its first byte to its last (so that
/// it can be streamed to a client as it is produced), with bounded memory whatever the
/// number of entries: [`plan`], then [`Plan::write`].
pub fn write_database<S: Source>(
    source: &S,
    out: &mut dyn Write,
    page_size: usize,
) -> Result<WriteSummary, WriteError<S::Error>> {
    plan(source, page_size)?.write(source, out)
}

fn check_names<E: std::error::Error + 'static>(names: &[Vec<u8>]) -> Result<(), WriteError<E>> {
    for (i, name) in names.iter().enumerate() {
        if name.is_empty() {
            return Err(WriteError::EmptyBucketName);
        }
        if name.len() > MAX_KEY_SIZE {
            return Err(WriteError::BucketNameTooLarge {
                name: ShownBytes::new(name),
                len: name.len(),
            });
        }
        if i > 0 && names[i - 1] >= *name {
            return Err(WriteError::BucketsOutOfOrder {
                previous: ShownBytes::new(&names[i - 1]),
                name: ShownBytes::new(name),
            });
        }
    }
    Ok(())
}

fn build_error<E: std::error::Error + 'static>(e: BuildError) -> WriteError<E> {
    match e {
        BuildError::Io(e) => WriteError::Io(e),
        BuildError::TooManyPages => WriteError::TooManyPages,
    }
}

/// The root bucket's tree: one bucket element per name. `roots` is empty in the layout
/// pass (only the sizes matter then).
fn build_root<E: std::error::Error + 'static>(
    names: &[Vec<u8>],
    roots: &[u64],
    page_size: usize,
    sink: &mut dyn PageSink,
) -> Result<Built, WriteError<E>> {
    let mut t = TreeBuilder::new(page_size, ROOT_FIRST_PAGE);
    for (i, name) in names.iter().enumerate() {
        let value = match roots.get(i) {
            Some(&root) => BucketHeader { root, sequence: 0 }.encode().to_vec(),
            None => Vec::new(),
        };
        t.push(
            NewElement {
                flags: BUCKET_LEAF_FLAG,
                key: name.clone(),
                value,
                value_len: BUCKET_HEADER_SIZE,
                child: 0,
            },
            sink,
        )
        .map_err(build_error)?;
    }
    t.finish(sink).map_err(build_error)
}

/// One bucket's tree from its first page `first`; `keep_values` is false in the layout
/// pass, which needs the values' lengths only.
fn build_bucket<S: Source>(
    source: &S,
    name: &[u8],
    page_size: usize,
    first: u64,
    keep_values: bool,
    sink: &mut dyn PageSink,
) -> Result<Built, WriteError<S::Error>> {
    let bucket = || ShownBytes::new(name);
    let mut t = TreeBuilder::new(page_size, first);
    let mut previous: Option<Vec<u8>> = None;
    for entry in source.entries(name).map_err(WriteError::Source)? {
        let (key, value) = entry.map_err(WriteError::Source)?;
        if key.is_empty() {
            return Err(WriteError::EmptyKey { bucket: bucket() });
        }
        if key.len() > MAX_KEY_SIZE {
            return Err(WriteError::KeyTooLarge {
                bucket: bucket(),
                key: ShownBytes::new(&key),
                len: key.len(),
            });
        }
        if value.len() > MAX_VALUE_SIZE {
            return Err(WriteError::ValueTooLarge {
                bucket: bucket(),
                key: ShownBytes::new(&key),
                len: value.len(),
            });
        }
        if let Some(p) = &previous {
            if *p >= key {
                return Err(WriteError::KeysOutOfOrder {
                    bucket: bucket(),
                    previous: ShownBytes::new(p),
                    key: ShownBytes::new(&key),
                });
            }
        }
        let mut p = previous.take().unwrap_or_default();
        p.clear();
        p.extend_from_slice(&key);
        previous = Some(p);
        let value_len = value.len();
        t.push(
            NewElement {
                flags: 0,
                key,
                value: if keep_values { value } else { Vec::new() },
                value_len,
                child: 0,
            },
            sink,
        )
        .map_err(build_error)?;
    }
    t.finish(sink).map_err(build_error)
}

/// Writes pages to the output in id order.
struct PageWriter<'o> {
    out: &'o mut dyn Write,
    page_size: usize,
    written: u64,
}

impl PageWriter<'_> {
    fn raw(&mut self, page: &[u8]) -> std::io::Result<()> {
        self.out.write_all(page)?;
        self.written += (page.len() / self.page_size) as u64;
        Ok(())
    }
}

impl PageSink for PageWriter<'_> {
    fn page(
        &mut self,
        id: u64,
        pages: u64,
        kind: Kind,
        elems: &[NewElement],
    ) -> std::io::Result<()> {
        if id != self.written {
            // The tree builder hands out ids in emission order; anything else is a bug.
            return Err(std::io::Error::other(format!(
                "page {id} emitted when page {} was due",
                self.written
            )));
        }
        let page = encode_tree_page(id, kind, elems, self.page_size, pages);
        self.raw(&page)
    }
}
