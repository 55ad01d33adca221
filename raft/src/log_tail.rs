//! The tail of the raft log, kept in memory for the readers that want it most.
//!
//! Replication to every follower and the state machine's apply step read the entries
//! that were just appended. Served from RocksDB, each read is a memtable seek and a
//! decode of every entry; etcd keeps its raft log in memory for the same reason. This
//! module owns [`LogTail`]: a contiguous run of the newest entries, bounded in bytes,
//! that the log store updates on every append, truncation and purge, after RocksDB.
//! It must never hold an entry RocksDB does not have, nor miss one inside its range:
//! when it cannot answer a read it says so, and the store reads RocksDB instead.

use std::collections::VecDeque;

use openraft::entry::RaftEntry;
use openraft::EntryPayload;

use crate::types::Entry;

/// Memory the tail may use by default: tens of thousands of typical entries (a
/// Kubernetes object is a few KiB), far more than replication and apply lag behind in
/// steady state; a follower further behind is served from RocksDB.
pub const DEFAULT_TAIL_BYTES: usize = 16 * 1024 * 1024;

/// Bookkeeping per entry beyond its command bytes.
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// The newest entries of the log, contiguous by index. Invariant: when not empty, its
/// last entry is the log's last entry.
#[derive(Debug)]
pub struct LogTail {
    entries: VecDeque<Entry>,
    bytes: usize,
    max_bytes: usize,
}

impl LogTail {
    pub fn new(max_bytes: usize) -> Self {
        LogTail {
            entries: VecDeque::new(),
            bytes: 0,
            max_bytes,
        }
    }

    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|e| e.index())
    }

    fn last_index(&self) -> Option<u64> {
        self.entries.back().map(|e| e.index())
    }

    /// Records entries just written to the log. Entries at or after an index the tail
    /// holds replace what it holds from there; after a gap (a log that was reset) the
    /// tail starts again from them.
    pub fn append(&mut self, entries: &[Entry]) {
        if let Some(first) = entries.first() {
            self.truncate_from(first.index());
        }
        for entry in entries {
            if self
                .last_index()
                .is_some_and(|last| entry.index() != last + 1)
            {
                // Not contiguous: only what follows can be kept as one run.
                self.clear();
            }
            self.bytes += size_of(entry);
            self.entries.push_back(entry.clone());
        }
        while self.bytes > self.max_bytes && self.entries.len() > 1 {
            self.pop_front();
        }
    }

    /// Forgets entries at `index` and after (a truncation of the log).
    pub fn truncate_from(&mut self, index: u64) {
        while self.last_index().is_some_and(|last| last >= index) {
            if let Some(entry) = self.entries.pop_back() {
                self.bytes -= size_of(&entry);
            }
        }
    }

    /// Forgets entries up to and including `index` (a purge of the log).
    pub fn purge_upto(&mut self, index: u64) {
        while self.first_index().is_some_and(|first| first <= index) {
            self.pop_front();
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }

    fn pop_front(&mut self) {
        if let Some(entry) = self.entries.pop_front() {
            self.bytes -= size_of(&entry);
        }
    }

    /// The entries in `[start, end)` (`end` `None`: to the end of the log), if the tail
    /// covers that range; `None` if the log must be read instead.
    pub fn get(&self, start: u64, end: Option<u64>) -> Option<Vec<Entry>> {
        let first = self.first_index()?;
        let last = self.last_index()?;
        if start < first || end.is_some_and(|end| end > last + 1) {
            return None;
        }
        let from = usize::try_from(start - first).ok()?;
        let to = match end {
            Some(end) => usize::try_from(end.min(last + 1).saturating_sub(first)).ok()?,
            None => self.entries.len(),
        }
        .min(self.entries.len());
        Some(self.entries.range(from.min(to)..to).cloned().collect())
    }
}

fn size_of(entry: &Entry) -> usize {
    ENTRY_OVERHEAD_BYTES
        + match &entry.payload {
            EntryPayload::Normal(command) => command.0.len(),
            EntryPayload::Blank | EntryPayload::Membership(_) => 0,
        }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use openraft::testing::log_id;

    use super::*;
    use crate::types::{Command, TypeConfig};

    fn entry(index: u64, term: u64) -> Entry {
        Entry::new_normal(
            log_id::<TypeConfig>(term, 1, index),
            Command(Bytes::from(vec![0u8; 100])),
        )
    }

    fn indices(entries: Option<Vec<Entry>>) -> Option<Vec<(u64, u64)>> {
        entries.map(|es| {
            es.iter()
                .map(|e| (e.index(), e.log_id().committed_leader_id().term))
                .collect()
        })
    }

    #[test]
    fn serves_only_ranges_it_covers() {
        let mut tail = LogTail::new(DEFAULT_TAIL_BYTES);
        assert_eq!(indices(tail.get(1, None)), None);
        tail.append(&[entry(5, 1), entry(6, 1), entry(7, 1)]);
        assert_eq!(indices(tail.get(5, Some(7))), Some(vec![(5, 1), (6, 1)]));
        assert_eq!(indices(tail.get(6, None)), Some(vec![(6, 1), (7, 1)]));
        assert_eq!(indices(tail.get(8, None)), Some(vec![]));
        assert_eq!(indices(tail.get(4, Some(6))), None, "before the tail");
        assert_eq!(indices(tail.get(6, Some(9))), None, "past the log's end");
    }

    #[test]
    fn overwrites_truncates_and_purges() {
        let mut tail = LogTail::new(DEFAULT_TAIL_BYTES);
        tail.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        tail.append(&[entry(2, 2)]);
        assert_eq!(indices(tail.get(1, None)), Some(vec![(1, 1), (2, 2)]));
        tail.truncate_from(2);
        assert_eq!(indices(tail.get(1, None)), Some(vec![(1, 1)]));
        tail.append(&[entry(2, 3), entry(3, 3)]);
        tail.purge_upto(2);
        assert_eq!(indices(tail.get(3, None)), Some(vec![(3, 3)]));
        assert_eq!(indices(tail.get(2, None)), None);
        tail.append(&[entry(10, 4)]);
        assert_eq!(indices(tail.get(3, None)), None, "a gap restarts the tail");
        assert_eq!(indices(tail.get(10, None)), Some(vec![(10, 4)]));
    }

    #[test]
    fn stays_within_its_bytes() {
        let mut tail = LogTail::new(3 * (100 + ENTRY_OVERHEAD_BYTES));
        tail.append(&(1..=10).map(|i| entry(i, 1)).collect::<Vec<_>>());
        assert_eq!(
            indices(tail.get(8, None)),
            Some(vec![(8, 1), (9, 1), (10, 1)])
        );
        assert_eq!(indices(tail.get(7, None)), None);
    }
}
