//! Reading the change log: the events of a run of revisions, in order, as a watch
//! replays them from history.
//!
//! This module owns turning `history` entries into etcd's `mvccpb::Event`s: each put's
//! record read from `kv`, each delete as its key and revision, and, when asked, the
//! key's version just before, all from one RocksDB snapshot. It must never write, and
//! never split a revision: a page ends only after the last event of a revision.

use prost::Message;

use super::encoding::{history_key, history_revision, HistoryEntry};
use super::range::Reader;
use super::{RevisionStore, StoreError, CF_HISTORY};
use crate::proto::mvccpb::event::EventType;
use crate::proto::mvccpb::{Event, KeyValue};

/// Whether a reader of history wants a key's events; ordered from wanting the least to
/// wanting the most, so that several readers' interests combine by `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Interest {
    Ignore,
    Events,
    /// The events, each with the key's version just before it.
    EventsWithPrevious,
}

/// Events of consecutive revisions, from a page's first revision on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// Every event up to this revision is in `events` (those of the watched keys); the
    /// next page starts after it.
    pub through: i64,
}

impl RevisionStore {
    /// The events of revisions `from..=to` on the keys `interest` wants, as it wants
    /// them. Stops after the revision that brings the page to `max_bytes` of encoded
    /// events (so a page may exceed it to finish a revision), and at the current
    /// revision. `from` below the compacted revision is [`StoreError::Compacted`]; the
    /// compacted revision's own events are kept (as etcd, a watch may start there).
    pub fn events(
        &self,
        from: i64,
        to: i64,
        interest: &dyn Fn(&[u8]) -> Interest,
        max_bytes: usize,
    ) -> Result<EventPage, StoreError> {
        let snapshot = self.db.snapshot();
        let reader = Reader::new(self, &snapshot)?;
        let revisions = reader.revisions();
        if from < revisions.compacted {
            return Err(StoreError::Compacted);
        }
        let to = to.min(revisions.current);
        let mut page = EventPage {
            events: Vec::new(),
            through: from - 1,
        };
        if from > to {
            return Ok(page);
        }
        let mut it = reader.iterator(CF_HISTORY, Some(history_key(to + 1, 0).to_vec()))?;
        it.seek(history_key(from.max(1), 0));
        let mut bytes = 0;
        while let (Some(raw_key), Some(raw)) = (it.key(), it.value()) {
            let revision = history_revision(raw_key)?;
            if revision > page.through && bytes >= max_bytes {
                // The previous revision was the last one this page takes.
                return Ok(page);
            }
            page.through = revision;
            let entry = HistoryEntry::decode(raw)?;
            let prev_kv = match interest(&entry.key) {
                Interest::Ignore => None,
                Interest::Events => Some(false),
                Interest::EventsWithPrevious => Some(true),
            };
            if let Some(prev_kv) = prev_kv {
                let event = event(&reader, revision, entry, prev_kv)?;
                bytes += event.encoded_len();
                page.events.push(event);
            }
            it.next();
        }
        it.status()?;
        page.through = to;
        Ok(page)
    }
}

/// The event `entry` records at `revision`, as a watch sends it.
fn event(
    reader: &Reader<'_>,
    revision: i64,
    entry: HistoryEntry,
    prev_kv: bool,
) -> Result<Event, StoreError> {
    let prev_kv = if prev_kv {
        // None once compacted away: etcd then leaves prev_kv out too.
        reader.get(&entry.key, revision - 1)?
    } else {
        None
    };
    if entry.deleted {
        return Ok(Event {
            r#type: EventType::Delete.into(),
            kv: Some(KeyValue {
                key: entry.key.into(),
                mod_revision: revision,
                ..Default::default()
            }),
            prev_kv,
        });
    }
    let kv = reader
        .written_at(&entry.key, revision)?
        .ok_or_else(|| StoreError::corrupt("history names a version kv lacks"))?;
    Ok(Event {
        r#type: EventType::Put.into(),
        kv: Some(kv),
        prev_kv,
    })
}
