//! Watches: etcd's Watch streams, served from this node's applied state.
//!
//! A [`WatchStream`] serves one gRPC Watch stream and every watcher on it. It follows
//! the store's change feed for watchers that are *synced* and reads `history` for
//! watchers that are *behind* (started in the past, or left behind when the stream's
//! client read too slowly for the feed to keep its batches). One rule moves events for
//! both: a run of events from `since` to `through` goes to each watcher that has
//! everything through `since`, and a watcher without that waits for history to bring
//! it there. This module owns watch semantics (ids, filters, `prev_kv`, fragments,
//! progress, compaction); it must never write to the store, and never let one stream
//! hold up the feed or another stream.

mod stream;
mod watcher;

pub use stream::WatchStream;
