//! The meta page: bbolt's `meta` struct (db.go) that pages 0 and 1 carry after their page
//! header, its FNV-1a 64 checksum, and bbolt's rule for which of the two a reader uses.
//!
//! This module owns the meta's byte layout and its validation. It never reads a file and
//! never decides anything about pages other than the two metas.

use std::hash::Hasher;

use crate::error::MetaProblem;
use crate::page::{u32_at, u64_at, PageHeader, META_PAGE_FLAG, PAGE_HEADER_SIZE};

/// bbolt's `magic`.
pub(crate) const MAGIC: u32 = 0xED0C_DAED;
/// bbolt's data file format `version`.
pub(crate) const VERSION: u32 = 2;
/// bbolt's `pgidNoFreelist`: a database written with NoFreelistSync (as etcd runs bbolt)
/// has no freelist page; the freelist is rebuilt by scanning on open.
pub(crate) const NO_FREELIST: u64 = u64::MAX;

/// magic, version, pageSize, flags (4 × u32), root bucket (2 × u64), freelist, pgid,
/// txid (3 × u64): the checksum covers these 56 bytes (`unsafe.Offsetof(meta{}.checksum)`).
const CHECKSUMMED: usize = 56;
/// The meta struct with its checksum.
pub(crate) const META_SIZE: usize = CHECKSUMMED + 8;
/// A page header followed by a meta: what must be read of pages 0 and 1.
pub(crate) const META_PAGE_BYTES: usize = PAGE_HEADER_SIZE + META_SIZE;

/// The page sizes the reader accepts from a meta and the writer writes. bbolt takes the OS
/// page size (4 KiB on most machines, 16 KiB or 64 KiB on some arm64 and ppc64le ones).
pub(crate) const MIN_PAGE_SIZE: usize = 1024;
pub(crate) const MAX_PAGE_SIZE: usize = 1 << 16;

pub(crate) fn valid_page_size(n: usize) -> bool {
    n.is_power_of_two() && (MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&n)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Meta {
    pub page_size: u32,
    pub flags: u32,
    pub root: u64,
    pub root_sequence: u64,
    pub freelist: u64,
    /// The high-water mark: pages 0..pgid are in use.
    pub pgid: u64,
    pub txid: u64,
}

fn checksum(b: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(&b[..CHECKSUMMED]);
    h.finish()
}

impl Meta {
    /// Decodes and validates the meta of a page's first [`META_PAGE_BYTES`] bytes, as
    /// meta.validate does: magic, then version, then checksum. Like bbolt, a checksum of 0
    /// is not checked (bbolt's validate skips it). The page size must also be one we read.
    pub fn decode(page: &[u8]) -> Result<Meta, MetaProblem> {
        if page.len() < META_PAGE_BYTES {
            return Err(MetaProblem::Unreadable);
        }
        let m = &page[PAGE_HEADER_SIZE..META_PAGE_BYTES];
        let magic = u32_at(m, 0);
        if magic != MAGIC {
            return Err(MetaProblem::BadMagic(magic));
        }
        let version = u32_at(m, 4);
        if version != VERSION {
            return Err(MetaProblem::BadVersion(version));
        }
        let stored = u64_at(m, CHECKSUMMED);
        let computed = checksum(m);
        if stored != 0 && stored != computed {
            return Err(MetaProblem::BadChecksum { stored, computed });
        }
        let page_size = u32_at(m, 8);
        if !valid_page_size(page_size as usize) {
            return Err(MetaProblem::BadPageSize(page_size));
        }
        Ok(Meta {
            page_size,
            flags: u32_at(m, 12),
            root: u64_at(m, 16),
            root_sequence: u64_at(m, 24),
            freelist: u64_at(m, 32),
            pgid: u64_at(m, 40),
            txid: u64_at(m, 48),
        })
    }

    /// A whole meta page `id` of `page_size` bytes, checksummed (meta.write).
    pub fn encode_page(&self, id: u64, page_size: usize) -> Vec<u8> {
        let mut b = vec![0u8; page_size];
        PageHeader {
            id,
            flags: META_PAGE_FLAG,
            count: 0,
            overflow: 0,
        }
        .encode(&mut b);
        let m = &mut b[PAGE_HEADER_SIZE..META_PAGE_BYTES];
        m[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        m[4..8].copy_from_slice(&VERSION.to_le_bytes());
        m[8..12].copy_from_slice(&self.page_size.to_le_bytes());
        m[12..16].copy_from_slice(&self.flags.to_le_bytes());
        m[16..24].copy_from_slice(&self.root.to_le_bytes());
        m[24..32].copy_from_slice(&self.root_sequence.to_le_bytes());
        m[32..40].copy_from_slice(&self.freelist.to_le_bytes());
        m[40..48].copy_from_slice(&self.pgid.to_le_bytes());
        m[48..56].copy_from_slice(&self.txid.to_le_bytes());
        let sum = checksum(m);
        m[CHECKSUMMED..META_SIZE].copy_from_slice(&sum.to_le_bytes());
        b
    }
}

/// `file` with the checksum of each of its two meta pages set to what the meta's bytes
/// give, whatever they say; bytes that are not there are left alone. For fuzzers and
/// tests that change a meta's fields and want the reader to look past the checksum. The
/// second meta is found at the page size the first one names (4 KiB if it names none
/// the reader accepts).
pub fn reseal_meta_checksums(file: &mut [u8]) {
    let page_size = file
        .get(PAGE_HEADER_SIZE + 8..PAGE_HEADER_SIZE + 12)
        .map(|size| u32_at(size, 0) as usize)
        .filter(|size| valid_page_size(*size))
        .unwrap_or(4096);
    for page in [0, page_size] {
        let meta = page + PAGE_HEADER_SIZE;
        let Some(bytes) = file.get(meta..meta + CHECKSUMMED) else {
            continue;
        };
        let sum = checksum(bytes).to_le_bytes();
        if let Some(slot) = file.get_mut(meta + CHECKSUMMED..meta + META_SIZE) {
            slot.copy_from_slice(&sum);
        }
    }
}

/// db.meta(): the valid meta with the higher txid, else the other one if valid. On equal
/// txids bbolt keeps meta 0.
pub(crate) fn choose(
    m0: Result<Meta, MetaProblem>,
    m1: Result<Meta, MetaProblem>,
) -> Result<Meta, (MetaProblem, MetaProblem)> {
    match (m0, m1) {
        (Ok(a), Ok(b)) => Ok(if b.txid > a.txid { b } else { a }),
        (Ok(a), Err(_)) => Ok(a),
        (Err(_), Ok(b)) => Ok(b),
        (Err(a), Err(b)) => Err((a, b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_checksum_catches_flips() {
        let m = Meta {
            page_size: 4096,
            flags: 0,
            root: 3,
            root_sequence: 0,
            freelist: 2,
            pgid: 4,
            txid: 7,
        };
        let page = m.encode_page(1, 4096);
        assert_eq!(Meta::decode(&page), Ok(m));
        for byte in PAGE_HEADER_SIZE..META_PAGE_BYTES {
            let mut p = page.clone();
            p[byte] ^= 0x10;
            assert!(Meta::decode(&p).is_err(), "flip at {byte} accepted");
        }
    }
}
