//! A pure codec for bbolt database files: the format of etcd's backend (`member/snap/db`)
//! and, followed by a SHA-256 trailer, of `etcdctl snapshot save` files.
//!
//! The crate knows nothing of etcd's encodings or of any store: it reads and writes
//! top-level buckets of key/value pairs. [`write_database`] streams a whole file from a
//! [`Source`] in page order with bounded memory; [`Database`] opens a file with positional
//! reads and iterates a bucket a page at a time. Neither panics, loops forever or
//! allocates without bound on any input: a malformed file is a [`ReadError`].
//!
//! # The format (bbolt 1.3.x, as etcd 3.4–3.6 use it)
//!
//! Each fact below is what this crate relies on, with the bbolt source file it comes from.
//!
//! - `page.go`: a file is pages of `pageSize` bytes; a page starts with a 16-byte header:
//!   `id u64, flags u16, count u16, overflow u32`, little-endian. Flags: branch 0x01,
//!   leaf 0x02, meta 0x04, freelist 0x10. A page whose contents exceed a page spans
//!   `overflow` more pages (`db.go`, `allocate` sets `overflow = count - 1`).
//! - `page.go`: a leaf element is `flags u32, pos u32, ksize u32, vsize u32`; a branch
//!   element is `pos u32, ksize u32, pgid u64`; `pos` is the offset from the element to its
//!   key, the value follows the key. `node.go` (`write`) lays the element array first, then
//!   every key and value in order; it refuses 0xFFFF or more elements and empty keys
//!   (`read` asserts non-empty keys). A branch element's key is its child's first key.
//!   Leaf element flag 0x01 (`bucketLeafFlag`) marks a bucket.
//! - `db.go`: pages 0 and 1 hold a meta after the page header: `magic u32 = 0xED0CDAED,
//!   version u32 = 2, pageSize u32, flags u32, root {root pgid u64, sequence u64},
//!   freelist pgid u64, pgid u64` (the high-water mark), `txid u64, checksum u64`: FNV-1a
//!   64 of the 56 bytes before it. `validate` checks magic, version, then the checksum,
//!   and skips the checksum when it is 0; we do the same. `meta()` uses the valid meta with
//!   the higher txid (meta 0 on a tie). `Open` takes the page size from meta 0 when it is
//!   valid; `mmap` fails only if both metas fail. `pgidNoFreelist = 0xFFFFFFFFFFFFFFFF` is
//!   the freelist id of a database written with NoFreelistSync, as etcd runs bbolt.
//! - `bucket.go`: a bucket's value in its parent leaf is `{root pgid u64, sequence u64}`;
//!   `root == 0` means inline: a page header and leaf elements follow the 16 bytes inside
//!   the value (`openBucket`). `MaxKeySize = 32768`, `MaxValueSize = 2^31 - 2`; bucket names
//!   must not be empty (`CreateBucket`).
//! - `freelist.go`: a freelist page holds `count` page ids after its header (0xFFFF means
//!   the count is in the first u64). We write an empty one at page 2, as `db.init` does.
//! - `tx.go`: `Size()` is `meta.pgid × pageSize`; `WriteTo` (etcd's snapshot) writes both
//!   metas from the transaction's meta, meta 1 with txid − 1; `Check` (which
//!   `etcdctl snapshot status` runs) requires every page below the high-water mark to be
//!   reachable or free, and each to be referenced once.
//!
//! # The writer's layout
//!
//! Pages 0 and 1: metas (txid 1 and 0, as `WriteTo` writes them); page 2: the empty
//! freelist; then the root bucket's tree (one element per bucket, each a non-inline bucket
//! header); then each bucket's tree, in name order. Trees are bulk-loaded: leaves filled to
//! the page size, branch levels above them, pages in post-order (see `tree.rs`), every
//! page reachable, the file exactly `pages × page_size` bytes long.

mod error;
mod meta;
mod page;
mod read;
mod tree;
mod write;

pub use error::{Location, MetaProblem, ReadError, ShownBytes, WriteError};
pub use meta::reseal_meta_checksums;
pub use page::{MAX_KEY_SIZE, MAX_VALUE_SIZE};
pub use read::{Bucket, Database, Entries, MAX_DEPTH};
pub use write::{plan, write_database, Plan, Source, SourceEntries, WriteSummary};

/// The page size bbolt takes on most machines (the OS page size), and etcd's files have.
pub const DEFAULT_PAGE_SIZE: usize = 4096;
