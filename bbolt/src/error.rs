//! The crate's errors: what is wrong with a file being read ([`ReadError`]) and why a
//! database could not be written ([`WriteError`]).
//!
//! This module owns the error types and how they print. Every variant says what is wrong
//! and where (a page id, an element index, a bucket name), so that a report about a bad
//! snapshot file can be acted on. It never holds more of a key than it prints.

use std::fmt;

/// Where a tree page lives: a page of the file, or the page embedded in an inline
/// bucket's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    Page(u64),
    Inline,
    /// The meta page in use (which names the root bucket's tree).
    Meta,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Page(id) => write!(f, "page {id}"),
            Location::Inline => f.write_str("the inline page of a bucket"),
            Location::Meta => f.write_str("the meta page"),
        }
    }
}

/// A key or bucket name as an error shows it: printable ASCII as is, other bytes as
/// `\xNN`, and at most [`ShownBytes::MAX`] bytes of it.
#[derive(Clone, PartialEq, Eq)]
pub struct ShownBytes(Vec<u8>);

impl ShownBytes {
    pub const MAX: usize = 64;

    pub fn new(b: &[u8]) -> ShownBytes {
        let mut v = b[..b.len().min(Self::MAX + 1)].to_vec();
        v.shrink_to_fit();
        ShownBytes(v)
    }
}

impl fmt::Display for ShownBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"")?;
        for &c in self.0.iter().take(Self::MAX) {
            if (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\' {
                write!(f, "{}", c as char)?;
            } else {
                write!(f, "\\x{c:02x}")?;
            }
        }
        f.write_str("\"")?;
        if self.0.len() > Self::MAX {
            f.write_str("...")?;
        }
        Ok(())
    }
}

impl fmt::Debug for ShownBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why one meta page is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaProblem {
    #[error("it could not be read (the file is too short)")]
    Unreadable,
    #[error("bad magic {0:#010x} (want 0xed0cdaed)")]
    BadMagic(u32),
    #[error("unsupported version {0} (want 2)")]
    BadVersion(u32),
    #[error("bad checksum: stored {stored:#018x}, computed {computed:#018x}")]
    BadChecksum { stored: u64, computed: u64 },
    #[error("unsupported page size {0}")]
    BadPageSize(u32),
}

/// What is wrong with a file being read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading {len} bytes at offset {offset}: {source}")]
    Io {
        offset: u64,
        len: u64,
        #[source]
        source: std::io::Error,
    },
    #[error("file is truncated: {what} needs {needed} bytes, the file has {len}")]
    Truncated { what: String, needed: u64, len: u64 },
    #[error("not a bbolt database: meta page 0: {meta0}; meta page 1: {meta1}")]
    InvalidMetas {
        meta0: MetaProblem,
        meta1: MetaProblem,
    },
    #[error("meta (txid {txid}): {field} {value} is not below the high-water mark {pgid}")]
    MetaOutOfRange {
        txid: u64,
        field: &'static str,
        value: u64,
        pgid: u64,
    },
    #[error("page {page} (referenced from {from}) is past the high-water mark {pgid}")]
    PageOutOfRange {
        page: u64,
        from: Location,
        pgid: u64,
    },
    #[error("page {page} spans {overflow} overflow pages, past the high-water mark {pgid}")]
    OverflowOutOfRange { page: u64, overflow: u32, pgid: u64 },
    #[error("page {page} spans {bytes} bytes, more than any bbolt page can")]
    PageTooLarge { page: u64, bytes: u64 },
    #[error("page {page}'s header says it is page {found}")]
    PageIdMismatch { page: u64, found: u64 },
    #[error("{at} is {len} bytes, shorter than a page header")]
    PageTooShort { at: Location, len: usize },
    #[error("{at} has flags {flags:#06x}; expected a {expected} page")]
    WrongPageType {
        at: Location,
        flags: u16,
        expected: &'static str,
    },
    #[error("{at}: {count} elements do not fit in its {page_len} bytes")]
    CountOutOfBounds {
        at: Location,
        count: usize,
        page_len: usize,
    },
    #[error("{at}: element {index} ends at byte {end}, past the page's {page_len} bytes")]
    ElementOutOfBounds {
        at: Location,
        index: usize,
        end: u64,
        page_len: usize,
    },
    #[error("{at}: element {index} has an empty key")]
    EmptyKey { at: Location, index: usize },
    #[error("{at}: a branch page with no elements")]
    EmptyBranch { at: Location },
    #[error("{at}: element {index}'s key is not after the key before it")]
    KeysOutOfOrder { at: Location, index: usize },
    #[error("{at}: the tree is deeper than {max} levels (a page cycle?)")]
    TreeTooDeep { at: Location, max: usize },
    #[error(
        "{at}: the tree reaches more pages than the file has (a page referenced twice, or a cycle)"
    )]
    PageReachedTwice { at: Location },
    #[error("bucket {bucket}: key {key} is a nested bucket; etcd never nests buckets")]
    NestedBucket { bucket: ShownBytes, key: ShownBytes },
    #[error("top-level key {key} is not a bucket")]
    NotABucket { key: ShownBytes },
    #[error("bucket {bucket}: its value is {len} bytes, not a bucket header and page")]
    BadBucketValue { bucket: ShownBytes, len: usize },
    #[error("bucket {bucket}: an inline bucket's page must be a leaf")]
    InlineNotLeaf { bucket: ShownBytes },
}

/// Why a database could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError<E: std::error::Error + 'static> {
    #[error("the source failed: {0}")]
    Source(#[source] E),
    #[error("writing the database: {0}")]
    Io(#[from] std::io::Error),
    #[error("page size {0} is not a power of two from 1024 to 65536")]
    InvalidPageSize(usize),
    #[error("bucket name {name} is not after {previous} (out of order or duplicated)")]
    BucketsOutOfOrder {
        previous: ShownBytes,
        name: ShownBytes,
    },
    #[error("a bucket name is empty (bbolt requires one)")]
    EmptyBucketName,
    #[error("bucket name {name} is {len} bytes, over bbolt's MaxKeySize 32768")]
    BucketNameTooLarge { name: ShownBytes, len: usize },
    #[error("bucket {bucket}: key {key} is not after {previous} (out of order or duplicated)")]
    KeysOutOfOrder {
        bucket: ShownBytes,
        previous: ShownBytes,
        key: ShownBytes,
    },
    #[error("bucket {bucket}: an empty key (bbolt requires one)")]
    EmptyKey { bucket: ShownBytes },
    #[error("bucket {bucket}: key {key} is {len} bytes, over bbolt's MaxKeySize 32768")]
    KeyTooLarge {
        bucket: ShownBytes,
        key: ShownBytes,
        len: usize,
    },
    #[error("bucket {bucket}: key {key}'s value is {len} bytes, over bbolt's MaxValueSize")]
    ValueTooLarge {
        bucket: ShownBytes,
        key: ShownBytes,
        len: usize,
    },
    #[error(
        "bucket {bucket}: the source gave other entries in the write pass than in the layout pass"
    )]
    SourceChanged { bucket: ShownBytes },
    #[error("the source's bucket list changed between the layout and write passes")]
    BucketsChanged,
    #[error("the database would need more pages than a page id can count")]
    TooManyPages,
}
