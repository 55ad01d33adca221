//! The tail of the raft log, kept in memory for the readers that want it most, and
//! for the entries not yet written.
//!
//! Replication to every follower and the state machine's apply step read the entries
//! that were just appended. Served from RocksDB, each read is a memtable seek and a
//! decode of every entry; etcd keeps its raft log in memory for the same reason. And
//! the log store hands its writes to [`crate::log_writer`]'s thread, so an appended
//! entry may not be in RocksDB yet: until it is, the tail is the only place to read it.
//!
//! This module owns [`LogTail`]: a contiguous run of the newest entries, bounded in
//! bytes except for entries not yet written, which it never lets go of (each append
//! gets a sequence number; the writer reports the last one it wrote). It must never
//! hold an entry the log does not have, nor miss one inside its range; what lies
//! before its range is in RocksDB.

use std::collections::VecDeque;

use openraft::entry::RaftEntry;
use openraft::EntryPayload;

use crate::types::Entry;

/// Memory the tail may use by default for written entries: tens of thousands of
/// typical entries (a Kubernetes object is a few KiB), far more than replication and
/// apply lag behind in steady state; a follower further behind is served from RocksDB.
pub const DEFAULT_TAIL_BYTES: usize = 16 * 1024 * 1024;

/// Bookkeeping per entry beyond its command bytes.
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// The newest entries of the log, contiguous by index. Invariant: when not empty, its
/// last entry is the log's last entry.
#[derive(Debug)]
pub struct LogTail {
    /// Each entry with the sequence number of the append that put it here.
    entries: VecDeque<(u64, Entry)>,
    bytes: usize,
    max_bytes: usize,
    /// The last sequence number handed out.
    appended: u64,
    /// The last sequence number whose entries are written to RocksDB.
    written: u64,
}

/// Entries of a range read from the tail, and where the tail starts.
#[derive(Debug)]
pub struct TailRead {
    /// The range's entries the tail holds (those at or after `first`).
    pub entries: Vec<Entry>,
    /// The tail's first index, if it holds any entry: the range's entries before it
    /// are to be read from RocksDB.
    pub first: Option<u64>,
}

impl LogTail {
    pub fn new(max_bytes: usize) -> Self {
        LogTail {
            entries: VecDeque::new(),
            bytes: 0,
            max_bytes,
            appended: 0,
            written: 0,
        }
    }

    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(_, e)| e.index())
    }

    fn last_index(&self) -> Option<u64> {
        self.entries.back().map(|(_, e)| e.index())
    }

    /// The log's last entry's id, if the tail holds any entry.
    pub fn last_log_id(&self) -> Option<crate::types::LogId> {
        self.entries.back().map(|(_, e)| e.log_id())
    }

    /// Records entries just appended to the log and returns their sequence number, to
    /// be reported to [`Self::written_through`] once they are in RocksDB. Entries at or
    /// after an index the tail holds replace what it holds from there; after a gap (a
    /// log that was reset) the tail starts again from them.
    pub fn append(&mut self, entries: &[Entry]) -> u64 {
        self.appended += 1;
        let seq = self.appended;
        if let Some(first) = entries.first() {
            self.truncate_from(first.index());
        }
        for entry in entries {
            if self
                .last_index()
                .is_some_and(|last| entry.index() != last + 1)
            {
                // Not contiguous: only what follows can be kept as one run (what came
                // before the gap was purged with the snapshot that made it).
                self.clear();
            }
            self.bytes += size_of(entry);
            self.entries.push_back((seq, entry.clone()));
        }
        self.evict();
        seq
    }

    /// Records that the appends up to sequence number `seq` are in RocksDB: their
    /// entries may be read from there, and leave the tail when it is full.
    pub fn written_through(&mut self, seq: u64) {
        self.written = self.written.max(seq);
        self.evict();
    }

    fn evict(&mut self) {
        while self.bytes > self.max_bytes
            && self.entries.len() > 1
            && self
                .entries
                .front()
                .is_some_and(|(seq, _)| *seq <= self.written)
        {
            self.pop_front();
        }
    }

    /// Forgets entries at `index` and after (a truncation of the log).
    pub fn truncate_from(&mut self, index: u64) {
        while self.last_index().is_some_and(|last| last >= index) {
            if let Some((_, entry)) = self.entries.pop_back() {
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
        if let Some((_, entry)) = self.entries.pop_front() {
            self.bytes -= size_of(&entry);
        }
    }

    /// The entries of `[start, end)` (`end` `None`: to the end of the log) that the tail
    /// holds, and where it starts.
    pub fn get(&self, start: u64, end: Option<u64>) -> TailRead {
        let (Some(first), Some(last)) = (self.first_index(), self.last_index()) else {
            return TailRead {
                entries: Vec::new(),
                first: None,
            };
        };
        let from = start.max(first);
        let to = end.map_or(last + 1, |end| end.min(last + 1));
        let entries = if from < to {
            let skip = usize::try_from(from - first).unwrap_or(usize::MAX);
            let take = usize::try_from(to - from).unwrap_or(usize::MAX);
            self.entries
                .iter()
                .skip(skip)
                .take(take)
                .map(|(_, e)| e.clone())
                .collect()
        } else {
            Vec::new()
        };
        TailRead {
            entries,
            first: Some(first),
        }
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

    fn indices(read: TailRead) -> (Option<u64>, Vec<(u64, u64)>) {
        let entries = read
            .entries
            .iter()
            .map(|e| (e.index(), e.log_id().committed_leader_id().term))
            .collect();
        (read.first, entries)
    }

    #[test]
    fn serves_what_it_holds_and_says_where_it_starts() {
        let mut tail = LogTail::new(DEFAULT_TAIL_BYTES);
        assert_eq!(indices(tail.get(1, None)), (None, vec![]));
        tail.append(&[entry(5, 1), entry(6, 1), entry(7, 1)]);
        assert_eq!(
            indices(tail.get(5, Some(7))),
            (Some(5), vec![(5, 1), (6, 1)])
        );
        assert_eq!(indices(tail.get(6, None)), (Some(5), vec![(6, 1), (7, 1)]));
        assert_eq!(indices(tail.get(8, None)), (Some(5), vec![]));
        assert_eq!(
            indices(tail.get(4, Some(6))),
            (Some(5), vec![(5, 1)]),
            "index 4 is before the tail: the caller reads it from RocksDB"
        );
        assert_eq!(
            indices(tail.get(6, Some(9))),
            (Some(5), vec![(6, 1), (7, 1)]),
            "the log ends at 7"
        );
        assert_eq!(indices(tail.get(1, Some(3))), (Some(5), vec![]));
    }

    #[test]
    fn overwrites_truncates_and_purges() {
        let mut tail = LogTail::new(DEFAULT_TAIL_BYTES);
        tail.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        tail.append(&[entry(2, 2)]);
        assert_eq!(indices(tail.get(1, None)).1, vec![(1, 1), (2, 2)]);
        tail.truncate_from(2);
        assert_eq!(indices(tail.get(1, None)).1, vec![(1, 1)]);
        tail.append(&[entry(2, 3), entry(3, 3)]);
        tail.purge_upto(2);
        assert_eq!(indices(tail.get(2, None)), (Some(3), vec![(3, 3)]));
        tail.append(&[entry(10, 4)]);
        assert_eq!(
            indices(tail.get(3, None)),
            (Some(10), vec![(10, 4)]),
            "a gap restarts the tail"
        );
    }

    #[test]
    fn keeps_within_its_bytes_what_is_written() {
        let mut tail = LogTail::new(3 * (100 + ENTRY_OVERHEAD_BYTES));
        let seq = tail.append(&(1..=10).map(|i| entry(i, 1)).collect::<Vec<_>>());
        assert_eq!(
            indices(tail.get(1, None)).0,
            Some(1),
            "nothing is written yet: everything stays"
        );
        tail.written_through(seq);
        assert_eq!(
            indices(tail.get(1, None)),
            (Some(8), vec![(8, 1), (9, 1), (10, 1)])
        );
    }

    #[test]
    fn never_lets_go_of_an_entry_not_yet_written() {
        let mut tail = LogTail::new(2 * (100 + ENTRY_OVERHEAD_BYTES));
        let first = tail.append(&[entry(1, 1), entry(2, 1)]);
        let second = tail.append(&[entry(3, 1), entry(4, 1)]);
        tail.written_through(first);
        assert_eq!(indices(tail.get(1, None)).0, Some(3), "1 and 2 are written");
        // A rewrite of index 4 is a new append: writing the first version of 4 (the
        // second append) does not make the rewrite written.
        let rewrite = tail.append(&[entry(4, 2), entry(5, 2)]);
        tail.written_through(second);
        assert_eq!(
            indices(tail.get(1, None)),
            (Some(4), vec![(4, 2), (5, 2)]),
            "3 is written and goes; the rewritten 4 and 5 stay"
        );
        tail.append(&[entry(6, 2)]);
        assert_eq!(indices(tail.get(1, None)).0, Some(4));
        tail.written_through(rewrite);
        assert_eq!(indices(tail.get(1, None)).0, Some(5));
    }
}
