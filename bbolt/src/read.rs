//! The reader: a bbolt file opened with positional reads (never mmap), its top-level
//! buckets, and an iterator over one bucket's entries in key order.
//!
//! This module owns the walk of a tree from disk and every guard against a hostile file:
//! page ids are checked against the high-water mark and the file's length, a page's span
//! against bbolt's largest, the depth against [`MAX_DEPTH`], and the number of pages one
//! walk reads against the high-water mark (a tree that reaches more pages than the file
//! has must reference some page twice: a cycle). It never holds more than a stack of
//! pages, never the whole bucket, and never panics on what it reads.

use std::fs::File;
use std::os::unix::fs::FileExt;

use crate::error::{Location, MetaProblem, ReadError, ShownBytes};
use crate::meta::{self, Meta, META_PAGE_BYTES, NO_FREELIST};
use crate::page::{
    BucketHeader, Element, Kind, PageHeader, TreePage, BUCKET_HEADER_SIZE, BUCKET_LEAF_FLAG,
    MAX_KEY_SIZE, MAX_VALUE_SIZE, PAGE_HEADER_SIZE,
};

/// The deepest tree a walk follows. bbolt pages hold at least two elements when split
/// (minKeysPerPage), so a real tree of 2^64 pages is at most 64 levels deep.
pub const MAX_DEPTH: usize = 64;

/// The largest span a page may have: bbolt's split keeps at least two elements on a page,
/// each at most MaxKeySize + MaxValueSize, plus the header and a page of rounding.
const MAX_PAGE_BYTES: u64 = 2 * (16 + MAX_KEY_SIZE as u64 + MAX_VALUE_SIZE as u64)
    + PAGE_HEADER_SIZE as u64
    + meta::MAX_PAGE_SIZE as u64;

/// The page sizes tried for meta 1 when meta 0 is unreadable (bbolt itself would then
/// assume the OS page size): the default first.
const PAGE_SIZE_GUESSES: [usize; 7] = [4096, 1024, 2048, 8192, 16384, 32768, 65536];

/// A bbolt database file, read with positional reads.
#[derive(Debug)]
pub struct Database {
    file: File,
    len: u64,
    page_size: usize,
    meta: Meta,
}

impl Database {
    /// Opens the first `len` bytes of `file` as a bbolt database (`len` excludes e.g. the
    /// SHA-256 trailer of an etcd snapshot file).
    pub fn open(file: File, len: u64) -> Result<Database, ReadError> {
        let mut db = Database {
            file,
            len,
            page_size: 0,
            meta: Meta {
                page_size: 0,
                flags: 0,
                root: 0,
                root_sequence: 0,
                freelist: 0,
                pgid: 0,
                txid: 0,
            },
        };
        // Every read is bounded by `len`; a `len` past the file's end would let a hostile
        // meta or page header make us allocate for bytes that are not there.
        let actual = db
            .file
            .metadata()
            .map_err(|source| ReadError::Io {
                offset: 0,
                len: 0,
                source,
            })?
            .len();
        if len > actual {
            return Err(ReadError::Truncated {
                what: "the length given".into(),
                needed: len,
                len: actual,
            });
        }
        if len < META_PAGE_BYTES as u64 {
            return Err(ReadError::Truncated {
                what: "meta page 0".into(),
                needed: META_PAGE_BYTES as u64,
                len,
            });
        }
        let m0 = Meta::decode(&db.read_at(0, META_PAGE_BYTES)?);
        // Meta 1 sits one page in; the page size comes from meta 0 as bbolt's Open takes
        // it, or, when meta 0 is bad, from a meta 1 found at a page size it names itself.
        let m1 = match &m0 {
            Ok(m) => db.meta_at(m.page_size as usize)?,
            Err(_) => {
                // Report the problem of a meta 1 that was found (its magic matched) over
                // that of a guess where there was none.
                let rank = |m: &Result<Meta, MetaProblem>| match m {
                    Ok(_) => 3,
                    Err(MetaProblem::Unreadable) => 0,
                    Err(MetaProblem::BadMagic(_)) => 1,
                    Err(_) => 2,
                };
                let mut found = Err(MetaProblem::Unreadable);
                for ps in PAGE_SIZE_GUESSES {
                    let m = db.meta_at(ps)?;
                    if rank(&m) > rank(&found) {
                        found = m;
                    }
                    if found.is_ok() {
                        break;
                    }
                }
                found
            }
        };
        let meta = meta::choose(m0, m1)
            .map_err(|(meta0, meta1)| ReadError::InvalidMetas { meta0, meta1 })?;
        db.page_size = meta.page_size as usize;
        db.meta = meta;
        db.check_meta()?;
        Ok(db)
    }

    /// The meta at page 1 of a file of `page_size` pages: a problem unless it names that
    /// page size.
    fn meta_at(&self, page_size: usize) -> Result<Result<Meta, MetaProblem>, ReadError> {
        let off = page_size as u64;
        if self.len < off + META_PAGE_BYTES as u64 {
            return Ok(Err(MetaProblem::Unreadable));
        }
        let m = Meta::decode(&self.read_at(off, META_PAGE_BYTES)?);
        Ok(match m {
            Ok(m) if m.page_size as usize != page_size => {
                Err(MetaProblem::BadPageSize(m.page_size))
            }
            other => other,
        })
    }

    fn check_meta(&self) -> Result<(), ReadError> {
        let m = &self.meta;
        let ps = self.page_size as u64;
        let needed = m.pgid.saturating_mul(ps).max(2 * ps);
        if needed > self.len {
            return Err(ReadError::Truncated {
                what: format!("the high-water mark of {} pages", m.pgid),
                needed,
                len: self.len,
            });
        }
        let out_of_range = |field, value| ReadError::MetaOutOfRange {
            txid: m.txid,
            field,
            value,
            pgid: m.pgid,
        };
        if m.root >= m.pgid || m.root < 2 {
            return Err(out_of_range("root bucket page", m.root));
        }
        if m.freelist != NO_FREELIST && m.freelist >= m.pgid {
            return Err(out_of_range("freelist page", m.freelist));
        }
        Ok(())
    }

    fn read_at(&self, offset: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        let end = offset.saturating_add(len as u64);
        if end > self.len {
            return Err(ReadError::Truncated {
                what: format!("{len} bytes at offset {offset}"),
                needed: end,
                len: self.len,
            });
        }
        let mut buf = vec![0u8; len];
        self.file
            .read_exact_at(&mut buf, offset)
            .map_err(|source| {
                if source.kind() == std::io::ErrorKind::UnexpectedEof {
                    ReadError::Truncated {
                        what: format!(
                            "{len} bytes at offset {offset} (the file is shorter than {})",
                            self.len
                        ),
                        needed: end,
                        len: self.len,
                    }
                } else {
                    ReadError::Io {
                        offset,
                        len: len as u64,
                        source,
                    }
                }
            })?;
        Ok(buf)
    }

    /// Reads tree page `id` with its overflow pages; `from` is where it was referenced.
    /// Returns the page and the number of pages it spans.
    fn read_page(&self, id: u64, from: Location) -> Result<(TreePage, u64), ReadError> {
        let pgid = self.meta.pgid;
        if id >= pgid {
            return Err(ReadError::PageOutOfRange {
                page: id,
                from,
                pgid,
            });
        }
        let ps = self.page_size as u64;
        // id < pgid and pgid × page size ≤ len (check_meta): no overflow.
        let offset = id * ps;
        // One read for a page without overflow (most pages); the header says whether more
        // follows.
        let mut buf = self.read_at(offset, self.page_size)?;
        let h = PageHeader::decode(&buf);
        if h.id != id {
            return Err(ReadError::PageIdMismatch {
                page: id,
                found: h.id,
            });
        }
        let span = u64::from(h.overflow) + 1;
        if id + span > pgid {
            return Err(ReadError::OverflowOutOfRange {
                page: id,
                overflow: h.overflow,
                pgid,
            });
        }
        let bytes = span * ps;
        if bytes > MAX_PAGE_BYTES {
            return Err(ReadError::PageTooLarge { page: id, bytes });
        }
        if span > 1 {
            let rest = self.read_at(offset + ps, (bytes - ps) as usize)?;
            buf.reserve_exact(rest.len());
            buf.extend_from_slice(&rest);
        }
        let page = TreePage::parse(Location::Page(id), buf)?;
        Ok((page, span))
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// bbolt's `Tx.Size()`: the meta's high-water page id × page size.
    pub fn size(&self) -> u64 {
        self.meta.pgid * self.page_size as u64
    }

    /// The txid of the meta in use.
    pub fn txid(&self) -> u64 {
        self.meta.txid
    }

    /// The freelist page, or None for a database written with NoFreelistSync (as etcd
    /// runs bbolt), whose meta says 0xFFFFFFFFFFFFFFFF.
    pub fn freelist_page(&self) -> Option<u64> {
        (self.meta.freelist != NO_FREELIST).then_some(self.meta.freelist)
    }

    fn root_walk(&self) -> Walker<'_> {
        Walker::new(
            self,
            Start::Page {
                id: self.meta.root,
                from: Location::Meta,
            },
        )
    }

    /// The top-level bucket names, in order.
    pub fn buckets(&self) -> Result<Vec<Vec<u8>>, ReadError> {
        let mut names = Vec::new();
        let mut walk = self.root_walk();
        while let Some(e) = walk.next_element() {
            let e = e?;
            if e.flags & BUCKET_LEAF_FLAG == 0 {
                return Err(ReadError::NotABucket {
                    key: ShownBytes::new(&e.key),
                });
            }
            names.push(e.key);
        }
        Ok(names)
    }

    /// The top-level bucket `name`, if there is one.
    pub fn bucket(&self, name: &[u8]) -> Result<Option<Bucket<'_>>, ReadError> {
        let mut walk = self.root_walk();
        while let Some(e) = walk.next_element() {
            let e = e?;
            if e.flags & BUCKET_LEAF_FLAG == 0 {
                return Err(ReadError::NotABucket {
                    key: ShownBytes::new(&e.key),
                });
            }
            match e.key.as_slice().cmp(name) {
                std::cmp::Ordering::Less => continue,
                std::cmp::Ordering::Greater => return Ok(None),
                std::cmp::Ordering::Equal => {}
            }
            let bad = || ReadError::BadBucketValue {
                bucket: ShownBytes::new(name),
                len: e.value.len(),
            };
            let header = BucketHeader::decode(&e.value).ok_or_else(bad)?;
            let root = if header.root == 0 {
                // Inline: a leaf page follows the header inside the value (bucket.go,
                // openBucket).
                let page =
                    TreePage::parse(Location::Inline, e.value[BUCKET_HEADER_SIZE..].to_vec())
                        .map_err(|_| bad())?;
                if page.kind != Kind::Leaf {
                    return Err(ReadError::InlineNotLeaf {
                        bucket: ShownBytes::new(name),
                    });
                }
                Root::Inline(page)
            } else {
                Root::Page {
                    id: header.root,
                    from: e.at,
                }
            };
            return Ok(Some(Bucket {
                db: self,
                name: name.to_vec(),
                sequence: header.sequence,
                root,
            }));
        }
        Ok(None)
    }
}

#[derive(Debug)]
enum Root {
    Page { id: u64, from: Location },
    Inline(TreePage),
}

/// A top-level bucket.
#[derive(Debug)]
pub struct Bucket<'a> {
    db: &'a Database,
    name: Vec<u8>,
    sequence: u64,
    root: Root,
}

impl<'a> Bucket<'a> {
    /// The bucket's entries in key order, read a page at a time.
    pub fn entries(&self) -> Entries<'a> {
        let start = match &self.root {
            Root::Page { id, from } => Start::Page {
                id: *id,
                from: *from,
            },
            Root::Inline(page) => Start::Inline(TreePage {
                at: page.at,
                kind: page.kind,
                count: page.count,
                bytes: page.bytes.clone(),
            }),
        };
        Entries {
            walk: Walker::new(self.db, start),
            bucket: self.name.clone(),
        }
    }

    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The bucket's sequence (bbolt's NextSequence counter).
    pub fn sequence(&self) -> u64 {
        self.sequence
    }

    /// The number of levels of the bucket's tree (1: a single leaf), following its first
    /// branch elements down.
    pub fn depth(&self) -> Result<usize, ReadError> {
        let (mut id, mut from) = match &self.root {
            Root::Inline(_) => return Ok(1),
            Root::Page { id, from } => (*id, *from),
        };
        for depth in 1..=MAX_DEPTH {
            let (page, _) = self.db.read_page(id, from)?;
            if page.kind == Kind::Leaf {
                return Ok(depth);
            }
            // A branch has at least one element (TreePage::parse).
            if let Element::Branch { child } = page.element(0)? {
                (id, from) = (child, page.at);
            }
        }
        Err(ReadError::TreeTooDeep {
            at: from,
            max: MAX_DEPTH,
        })
    }

    /// Whether the bucket is stored inline in its parent's leaf.
    pub fn is_inline(&self) -> bool {
        matches!(self.root, Root::Inline(_))
    }
}

/// A bucket's entries in key order: `(key, value)`. After an error it ends.
pub struct Entries<'a> {
    walk: Walker<'a>,
    bucket: Vec<u8>,
}

impl Iterator for Entries<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let e = match self.walk.next_element()? {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        if e.flags & BUCKET_LEAF_FLAG != 0 {
            self.walk.stop();
            return Some(Err(ReadError::NestedBucket {
                bucket: ShownBytes::new(&self.bucket),
                key: ShownBytes::new(&e.key),
            }));
        }
        Some(Ok((e.key, e.value)))
    }
}

enum Start {
    Page { id: u64, from: Location },
    Inline(TreePage),
}

struct LeafElement {
    at: Location,
    flags: u32,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// A depth-first walk over a tree's leaf elements.
struct Walker<'a> {
    db: &'a Database,
    start: Option<Start>,
    /// The pages from the root down, each with the index of its next element.
    stack: Vec<(TreePage, usize)>,
    /// Pages this walk may still read: a tree has at most the high-water mark's pages.
    budget: u64,
    last_key: Option<Vec<u8>>,
    done: bool,
}

impl<'a> Walker<'a> {
    fn new(db: &'a Database, start: Start) -> Walker<'a> {
        Walker {
            db,
            start: Some(start),
            stack: Vec::new(),
            budget: db.meta.pgid,
            last_key: None,
            done: false,
        }
    }

    fn stop(&mut self) {
        self.done = true;
        self.stack.clear();
    }

    fn push_page(&mut self, id: u64, from: Location) -> Result<(), ReadError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(ReadError::TreeTooDeep {
                at: from,
                max: MAX_DEPTH,
            });
        }
        if self.budget == 0 {
            return Err(ReadError::PageReachedTwice { at: from });
        }
        let (page, span) = self.db.read_page(id, from)?;
        self.budget = self
            .budget
            .checked_sub(span)
            .ok_or(ReadError::PageReachedTwice {
                at: Location::Page(id),
            })?;
        self.stack.push((page, 0));
        Ok(())
    }

    fn next_element(&mut self) -> Option<Result<LeafElement, ReadError>> {
        if self.done {
            return None;
        }
        match self.advance() {
            Ok(Some(e)) => Some(Ok(e)),
            Ok(None) => {
                self.stop();
                None
            }
            Err(e) => {
                self.stop();
                Some(Err(e))
            }
        }
    }

    fn advance(&mut self) -> Result<Option<LeafElement>, ReadError> {
        match self.start.take() {
            Some(Start::Page { id, from }) => self.push_page(id, from)?,
            Some(Start::Inline(page)) => self.stack.push((page, 0)),
            None => {}
        }
        loop {
            let Some((page, next)) = self.stack.last_mut() else {
                return Ok(None);
            };
            if *next >= page.count {
                self.stack.pop();
                continue;
            }
            let index = *next;
            *next += 1;
            let at = page.at;
            match page.element(index)? {
                Element::Branch { child, .. } => self.push_page(child, at)?,
                Element::Leaf { flags, key, value } => {
                    if let Some(last) = &self.last_key {
                        if last.as_slice() >= key {
                            return Err(ReadError::KeysOutOfOrder { at, index });
                        }
                    }
                    let key = key.to_vec();
                    let value = value.to_vec();
                    self.last_key = Some(key.clone());
                    return Ok(Some(LeafElement {
                        at,
                        flags,
                        key,
                        value,
                    }));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_can_move_to_other_threads() {
        fn send_sync<T: Send + Sync>() {}
        fn send<T: Send>() {}
        send_sync::<Database>();
        send::<Bucket<'static>>();
        send::<Entries<'static>>();
    }
}
