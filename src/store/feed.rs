//! The change feed: what each write to the store made, handed to whoever watches.
//!
//! Every flushed apply batch publishes one [`Changes`]: its events in revision order,
//! each with the key's previous version (the apply path has it at hand), after the
//! batch is written, so that anything a subscriber missed on the feed is already in
//! `history`. A store that jumps (a snapshot installed) publishes an empty
//! [`Changes`] that starts at its new revision, which tells every subscriber behind it
//! to read `history` instead. The feed holds a bounded number of batches: a subscriber
//! that falls further behind is told so (tokio's `Lagged`) and reads `history` too.
//! This module owns only the hand-off; it must never block a write, and never decide
//! which watcher gets what (the watch module does).

use std::sync::Arc;

use tokio::sync::broadcast;

use super::RevisionStore;
use crate::proto::mvccpb::Event;

/// Batches the feed holds for its slowest subscriber. A batch is what the apply path
/// writes at once: up to its flush size (4 MiB) of changes, more only when one command
/// changes more (a DeleteRange of many keys), plus each key's previous version. A batch
/// every subscriber has read is freed at once, so a node holds about 32 x 8 MiB of
/// watch events at worst, and a few batches in practice (docs/architecture.md).
const FEED_BATCHES: usize = 32;

/// What one write to the store made.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Changes {
    /// The store's revision before these changes: a reader that has every event
    /// through it misses nothing by reading on from `events`.
    pub since: i64,
    /// The store's revision after them.
    pub through: i64,
    /// The events of revisions `since + 1..=through`, in order, each with `prev_kv` set
    /// when the key had a live version before.
    pub events: Vec<Event>,
}

/// The sending half, owned by the store.
pub(crate) struct ChangeFeed {
    sender: broadcast::Sender<Arc<Changes>>,
}

impl ChangeFeed {
    pub(crate) fn new() -> Self {
        ChangeFeed {
            sender: broadcast::channel(FEED_BATCHES).0,
        }
    }

    /// Hands `changes` to every subscriber; never waits.
    pub(crate) fn publish(&self, changes: Changes) {
        if self.sender.receiver_count() > 0 {
            // An error means nobody subscribes any more: nothing to do.
            let _ = self.sender.send(Arc::new(changes));
        }
    }
}

impl RevisionStore {
    /// Subscribes to the changes written from now on. Read the store's revision only
    /// after subscribing: then every change after that revision reaches the receiver.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Changes>> {
        self.feed.sender.subscribe()
    }
}
