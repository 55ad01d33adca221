//! One watcher: what it watches, how it wants its events, and how far it has got. It
//! only chooses events; sending them is the stream's.

use bytes::Bytes;

use crate::proto::etcdserverpb::watch_create_request::FilterType;
use crate::proto::etcdserverpb::WatchCreateRequest;
use crate::proto::mvccpb::event::EventType;
use crate::proto::mvccpb::Event;
use crate::store::{in_range, Interest};

/// etcd's message for a create whose range holds no key.
pub const EMPTY_RANGE: &str = "mvcc: watcher range is empty";

/// A watcher of one stream.
#[derive(Clone, Debug)]
pub struct Watcher {
    pub id: i64,
    key: Bytes,
    /// As the store reads it: empty for one key, `[0]` for every key from `key` on.
    range_end: Bytes,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    pub fragment: bool,
    pub progress_notify: bool,
    /// Every event of a revision up to this one has been sent, or came before the
    /// watcher's start.
    pub through: i64,
    /// Nothing was sent since the last progress tick.
    pub idle: bool,
}

impl Watcher {
    /// The watcher `request` asks for, with `id`, having everything through `through`;
    /// or etcd's reason for refusing it.
    pub fn new(id: i64, request: &WatchCreateRequest, through: i64) -> Result<Self, &'static str> {
        // etcd's normalisation: no key means the smallest key, "\0" as the range end
        // means every key from `key` on.
        // Copied, not sliced: a slice would keep the whole request's buffer alive, and
        // the stream's limit counts what a watcher holds.
        let key = if request.key.is_empty() {
            Bytes::from_static(&[0])
        } else {
            Bytes::copy_from_slice(&request.key)
        };
        let range_end = Bytes::copy_from_slice(&request.range_end);
        if !range_end.is_empty() && range_end[..] != [0] && key >= range_end {
            return Err(EMPTY_RANGE);
        }
        let filtered = |filter: FilterType| request.filters.contains(&(filter as i32));
        Ok(Watcher {
            id,
            key,
            range_end,
            no_put: filtered(FilterType::Noput),
            no_delete: filtered(FilterType::Nodelete),
            prev_kv: request.prev_kv,
            fragment: request.fragment,
            progress_notify: request.progress_notify,
            through,
            idle: true,
        })
    }

    /// The bytes of keys this watcher holds, as the stream's limit counts them.
    pub fn held_bytes(&self) -> usize {
        self.key.len() + self.range_end.len()
    }

    /// How a read of history should serve this watcher for `key`.
    pub fn interest(&self, key: &[u8]) -> Interest {
        if !in_range(key, &self.key, &self.range_end) {
            Interest::Ignore
        } else if self.prev_kv {
            Interest::EventsWithPrevious
        } else {
            Interest::Events
        }
    }

    /// The events of `events` this watcher has not had, as it wants them.
    pub fn select(&self, events: &[Event]) -> Vec<Event> {
        events
            .iter()
            .filter(|event| {
                let Some(kv) = &event.kv else { return false };
                let filtered = match EventType::try_from(event.r#type) {
                    Ok(EventType::Put) => self.no_put,
                    Ok(EventType::Delete) => self.no_delete,
                    Err(_) => true,
                };
                kv.mod_revision > self.through
                    && !filtered
                    && in_range(&kv.key, &self.key, &self.range_end)
            })
            .map(|event| {
                let mut event = event.clone();
                if !self.prev_kv {
                    event.prev_kv = None;
                }
                event
            })
            .collect()
    }
}
