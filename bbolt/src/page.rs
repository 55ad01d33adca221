//! The page layer: bbolt's page header, its branch and leaf elements, and the bucket
//! header a bucket's value starts with (bbolt's page.go and bucket.go).
//!
//! This module owns the byte offsets and the bounds checks of one page held in memory.
//! It never does I/O and never trusts a count, offset or size read from a page: every
//! accessor checks it against the page's own length and returns an error instead.

use crate::error::{Location, ReadError};

/// `unsafe.Sizeof(page{})`: id u64, flags u16, count u16, overflow u32.
pub(crate) const PAGE_HEADER_SIZE: usize = 16;
/// `unsafe.Sizeof(branchPageElement{})`: pos u32, ksize u32, pgid u64.
pub(crate) const BRANCH_ELEMENT_SIZE: usize = 16;
/// `unsafe.Sizeof(leafPageElement{})`: flags u32, pos u32, ksize u32, vsize u32.
pub(crate) const LEAF_ELEMENT_SIZE: usize = 16;
/// `unsafe.Sizeof(bucket{})`: root pgid u64, sequence u64.
pub(crate) const BUCKET_HEADER_SIZE: usize = 16;

pub(crate) const BRANCH_PAGE_FLAG: u16 = 0x01;
pub(crate) const LEAF_PAGE_FLAG: u16 = 0x02;
pub(crate) const META_PAGE_FLAG: u16 = 0x04;
pub(crate) const FREELIST_PAGE_FLAG: u16 = 0x10;

/// A leaf element whose value is a bucket header (bbolt's `bucketLeafFlag`).
pub(crate) const BUCKET_LEAF_FLAG: u32 = 0x01;

/// bbolt's `MaxKeySize`.
pub const MAX_KEY_SIZE: usize = 32768;
/// bbolt's `MaxValueSize`.
pub const MAX_VALUE_SIZE: usize = (1 << 31) - 2;
/// node.write panics at `len(inodes) >= 0xFFFF`, and a freelist count of 0xFFFF means
/// "the real count is in the first element": a tree page holds at most 0xFFFE elements.
pub(crate) const MAX_ELEMENTS: usize = 0xFFFE;

pub(crate) fn u16_at(b: &[u8], off: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[off..off + 2]);
    u16::from_le_bytes(a)
}

pub(crate) fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// The 16-byte header every page (and every inline bucket's page) starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageHeader {
    pub id: u64,
    pub flags: u16,
    pub count: u16,
    pub overflow: u32,
}

impl PageHeader {
    /// Decodes the header at the start of `b`, which the caller has made at least
    /// [`PAGE_HEADER_SIZE`] long.
    pub fn decode(b: &[u8]) -> PageHeader {
        PageHeader {
            id: u64_at(b, 0),
            flags: u16_at(b, 8),
            count: u16_at(b, 10),
            overflow: u32_at(b, 12),
        }
    }

    pub fn encode(&self, b: &mut [u8]) {
        b[0..8].copy_from_slice(&self.id.to_le_bytes());
        b[8..10].copy_from_slice(&self.flags.to_le_bytes());
        b[10..12].copy_from_slice(&self.count.to_le_bytes());
        b[12..16].copy_from_slice(&self.overflow.to_le_bytes());
    }
}

/// What a tree page is. bbolt's cursor tests the leaf bit first and takes anything else
/// for a branch; we also require the branch bit, so that a meta or freelist page reached
/// through the tree is an error rather than garbage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Branch,
    Leaf,
}

/// One element of a tree page, borrowed from the page's bytes.
#[derive(Debug)]
pub(crate) enum Element<'p> {
    /// A branch element's key (its child's first key) is only needed to search, which
    /// this crate does not do: only the child is read.
    Branch { child: u64 },
    Leaf {
        flags: u32,
        key: &'p [u8],
        value: &'p [u8],
    },
}

/// A branch or leaf page held in memory: a whole page with its overflow pages, or the page
/// embedded in an inline bucket's value.
#[derive(Debug)]
pub(crate) struct TreePage {
    pub at: Location,
    pub kind: Kind,
    pub count: usize,
    pub bytes: Vec<u8>,
}

impl TreePage {
    /// Checks the header of `bytes` (the page's full span) and that its element array fits.
    pub fn parse(at: Location, bytes: Vec<u8>) -> Result<TreePage, ReadError> {
        if bytes.len() < PAGE_HEADER_SIZE {
            return Err(ReadError::PageTooShort {
                at,
                len: bytes.len(),
            });
        }
        let h = PageHeader::decode(&bytes);
        let kind = if h.flags & LEAF_PAGE_FLAG != 0 {
            Kind::Leaf
        } else if h.flags & BRANCH_PAGE_FLAG != 0 {
            Kind::Branch
        } else {
            return Err(ReadError::WrongPageType {
                at,
                flags: h.flags,
                expected: "branch or leaf",
            });
        };
        let count = usize::from(h.count);
        // Both element kinds are 16 bytes; the array must lie inside the page.
        let end = PAGE_HEADER_SIZE + count * LEAF_ELEMENT_SIZE;
        if end > bytes.len() {
            return Err(ReadError::CountOutOfBounds {
                at,
                count,
                page_len: bytes.len(),
            });
        }
        if kind == Kind::Branch && count == 0 {
            // A cursor descending an empty branch would read element 0 past the array.
            return Err(ReadError::EmptyBranch { at });
        }
        Ok(TreePage {
            at,
            kind,
            count,
            bytes,
        })
    }

    /// Element `index`, with its key and value checked to lie inside the page.
    pub fn element(&self, index: usize) -> Result<Element<'_>, ReadError> {
        if index >= self.count {
            return Err(ReadError::CountOutOfBounds {
                at: self.at,
                count: index + 1,
                page_len: self.bytes.len(),
            });
        }
        let elem = PAGE_HEADER_SIZE + index * LEAF_ELEMENT_SIZE;
        let b = &self.bytes;
        let (flags, pos, ksize, vsize, child) = match self.kind {
            Kind::Leaf => (
                u32_at(b, elem),
                u32_at(b, elem + 4),
                u32_at(b, elem + 8),
                u32_at(b, elem + 12),
                0,
            ),
            Kind::Branch => (
                0,
                u32_at(b, elem),
                u32_at(b, elem + 4),
                0,
                u64_at(b, elem + 8),
            ),
        };
        // pos is relative to the element itself (node.write); u64 so no sum can wrap.
        let start = elem as u64 + u64::from(pos);
        let end = start + u64::from(ksize) + u64::from(vsize);
        if end > b.len() as u64 {
            return Err(ReadError::ElementOutOfBounds {
                at: self.at,
                index,
                end,
                page_len: b.len(),
            });
        }
        if ksize == 0 {
            // node.read asserts a non-empty key: bbolt never writes one.
            return Err(ReadError::EmptyKey { at: self.at, index });
        }
        // In bounds of a Vec, so these fit usize.
        let start = start as usize;
        let kend = start + ksize as usize;
        let key = &b[start..kend];
        Ok(match self.kind {
            Kind::Leaf => Element::Leaf {
                flags,
                key,
                value: &b[kend..end as usize],
            },
            Kind::Branch => Element::Branch { child },
        })
    }
}

/// A bucket's value in its parent leaf: where its tree is, and its sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BucketHeader {
    /// 0 for an inline bucket, whose page follows the header inside the value.
    pub root: u64,
    pub sequence: u64,
}

impl BucketHeader {
    pub fn decode(b: &[u8]) -> Option<BucketHeader> {
        if b.len() < BUCKET_HEADER_SIZE {
            return None;
        }
        Some(BucketHeader {
            root: u64_at(b, 0),
            sequence: u64_at(b, 8),
        })
    }

    pub fn encode(&self) -> [u8; BUCKET_HEADER_SIZE] {
        let mut b = [0u8; BUCKET_HEADER_SIZE];
        b[0..8].copy_from_slice(&self.root.to_le_bytes());
        b[8..16].copy_from_slice(&self.sequence.to_le_bytes());
        b
    }
}

/// One element to be written: a leaf entry or a branch pointer.
#[derive(Debug, Clone)]
pub(crate) struct NewElement {
    pub flags: u32,
    pub key: Vec<u8>,
    /// The value bytes; empty in the layout pass, which only needs `value_len`.
    pub value: Vec<u8>,
    pub value_len: usize,
    /// The child page of a branch element.
    pub child: u64,
}

/// The bytes a page of these elements takes (bbolt's node.size).
pub(crate) fn element_bytes(kind: Kind, key_len: usize, value_len: usize) -> usize {
    match kind {
        Kind::Leaf => LEAF_ELEMENT_SIZE + key_len + value_len,
        Kind::Branch => BRANCH_ELEMENT_SIZE + key_len,
    }
}

/// Encodes a branch or leaf page of `pages` pages starting at page `id`, as node.write
/// lays it out: the element array, then each element's key and value in order.
pub(crate) fn encode_tree_page(
    id: u64,
    kind: Kind,
    elems: &[NewElement],
    page_size: usize,
    pages: u64,
) -> Vec<u8> {
    let len = page_size * pages as usize;
    let mut b = vec![0u8; len];
    PageHeader {
        id,
        flags: match kind {
            Kind::Leaf => LEAF_PAGE_FLAG,
            Kind::Branch => BRANCH_PAGE_FLAG,
        },
        count: elems.len() as u16,
        overflow: (pages - 1) as u32,
    }
    .encode(&mut b);
    let mut data = PAGE_HEADER_SIZE + elems.len() * LEAF_ELEMENT_SIZE;
    for (i, e) in elems.iter().enumerate() {
        let elem = PAGE_HEADER_SIZE + i * LEAF_ELEMENT_SIZE;
        let pos = (data - elem) as u32;
        let ksize = e.key.len() as u32;
        match kind {
            Kind::Leaf => {
                b[elem..elem + 4].copy_from_slice(&e.flags.to_le_bytes());
                b[elem + 4..elem + 8].copy_from_slice(&pos.to_le_bytes());
                b[elem + 8..elem + 12].copy_from_slice(&ksize.to_le_bytes());
                b[elem + 12..elem + 16].copy_from_slice(&(e.value.len() as u32).to_le_bytes());
            }
            Kind::Branch => {
                b[elem..elem + 4].copy_from_slice(&pos.to_le_bytes());
                b[elem + 4..elem + 8].copy_from_slice(&ksize.to_le_bytes());
                b[elem + 8..elem + 16].copy_from_slice(&e.child.to_le_bytes());
            }
        }
        b[data..data + e.key.len()].copy_from_slice(&e.key);
        data += e.key.len();
        if kind == Kind::Leaf {
            b[data..data + e.value.len()].copy_from_slice(&e.value);
            data += e.value.len();
        }
    }
    b
}
