//! One Watch stream: its watchers, the feed it follows, and what it sends.
//!
//! The stream runs as one task. Each turn it does one thing: take a client request,
//! take a batch from the change feed, read a page of history for the watchers behind,
//! or send progress notifications. A client that reads slowly fills the bounded queue
//! of responses; the task then waits, the feed drops batches this stream did not
//! take, and the next batch it takes shows the gap, so its watchers read history
//! until they are back. Memory per stream is the queue and one page, whatever the
//! client does.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use prost::Message;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::sync::{broadcast, mpsc};
use tokio::time::{Instant, MissedTickBehavior};
use tonic::Status;

use super::watcher::Watcher;
use crate::api::{authorized, status};
use crate::auth::{Action, Caller};
use crate::metrics::grpc::{self as grpc_metrics, StreamApi};
use crate::metrics::storage as metrics;
use crate::node::Node;
use crate::proto::etcdserverpb::watch_request::RequestUnion;
use crate::proto::etcdserverpb::{ResponseHeader, WatchCreateRequest, WatchRequest, WatchResponse};
use crate::proto::mvccpb::Event;
use crate::store::{Changes, Interest, StoreError};

/// Encoded bytes of events one read of history takes (a revision is never split, so a
/// page may hold more).
const PAGE_BYTES: usize = 1 << 20;

/// etcd's message for a client-chosen id already in use on the stream.
const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";

/// Watchers one stream may hold at once. etcd has no limit; this one is far above
/// what a client multiplexing all its watches on one stream (as etcd's clientv3 does
/// for watches with the same context metadata; kube-apiserver holds one per resource
/// type) uses, and bounds what each turn of the stream costs: a turn looks at every
/// watcher (the one behind, each batch of changes), so that filling a stream to the
/// limit costs in the order of the limit squared.
pub const MAX_WATCHERS_PER_STREAM: usize = 10_000;

/// Bytes of watched keys and range ends one stream may hold (each key may be as large
/// as a request): with [`MAX_WATCHERS_PER_STREAM`], what bounds a stream's memory.
pub const MAX_WATCHED_KEY_BYTES_PER_STREAM: usize = 64 << 20;

/// The cancel reason of a create beyond either limit.
pub const TOO_MANY_WATCHERS: &str = "quantykube: too many watchers on the WatchStream";

/// The id etcd gives responses that belong to no one watcher.
const NO_WATCHER: i64 = -1;

/// The responses a stream's client reads, in order.
pub type Responses = mpsc::Sender<Result<WatchResponse, Status>>;

/// Why a stream ends.
enum Stop {
    /// The client went away.
    Gone,
    /// This node cannot serve the stream; the client should go elsewhere.
    Failed(Status),
}

impl From<StoreError> for Stop {
    fn from(error: StoreError) -> Self {
        Stop::Failed(status::from_store(error))
    }
}

/// Sends responses on one stream, with this member's headers.
struct Outbox {
    node: Arc<Node>,
    out: Responses,
    /// A fragmenting watcher's responses stay under this many encoded bytes (when they
    /// hold more than one event), as etcd's do.
    fragment_bytes: usize,
}

impl Outbox {
    fn header(&self, revision: i64) -> Option<ResponseHeader> {
        Some(self.node.header_at(revision))
    }

    /// Sends one response, timed as etcd's send loop times it: how long the stream
    /// took it (a slow client's flow control shows here).
    async fn send(&self, response: WatchResponse) -> Result<(), Stop> {
        let kind = if !response.events.is_empty() {
            metrics::WatchSend::Events(response.events.len())
        } else if response.created || response.canceled {
            metrics::WatchSend::Control
        } else {
            metrics::WatchSend::Progress
        };
        let events = response.events.len();
        metrics::events_queued(events);
        let started = Instant::now();
        let sent = self.out.send(Ok(response)).await.map_err(|_| {
            // Never queued: the client's side is gone.
            metrics::events_taken(events);
            Stop::Gone
        });
        metrics::watch_sent(kind, started.elapsed());
        sent
    }

    /// A response with no events and only `watch_id` set.
    async fn notice(&self, revision: i64, watch_id: i64) -> Result<(), Stop> {
        self.send(WatchResponse {
            header: self.header(revision),
            watch_id,
            ..Default::default()
        })
        .await
    }

    /// Sends `events` to watcher `watch_id` at `revision`: one response, or, for a
    /// watcher that allows it and a response too large, etcd's fragments.
    async fn events(
        &self,
        revision: i64,
        watch_id: i64,
        fragment: bool,
        events: Vec<Event>,
    ) -> Result<(), Stop> {
        metrics::events_sent(events.len());
        let response = WatchResponse {
            header: self.header(revision),
            watch_id,
            events,
            ..Default::default()
        };
        if !fragment || response.events.len() < 2 || response.encoded_len() < self.fragment_bytes {
            return self.send(response).await;
        }
        let empty = WatchResponse {
            events: Vec::new(),
            ..response.clone()
        };
        let mut part = empty.clone();
        let mut size = empty.encoded_len();
        for event in response.events {
            let len = event.encoded_len();
            // Field tag, length prefix, message.
            let field = 1 + prost::length_delimiter_len(len) + len;
            if !part.events.is_empty() && size + field >= self.fragment_bytes {
                part.fragment = true;
                self.send(std::mem::replace(&mut part, empty.clone()))
                    .await?;
                size = empty.encoded_len();
            }
            part.events.push(event);
            size += field;
        }
        self.send(part).await
    }
}

/// A Watch stream being served (see the module docs).
pub struct WatchStream {
    outbox: Outbox,
    feed: broadcast::Receiver<Arc<Changes>>,
    /// The feed has been followed through this revision: a watcher with everything
    /// through it is synced, one with less is behind.
    position: i64,
    watchers: BTreeMap<i64, Watcher>,
    /// What `watchers` hold of keys: [`Watcher::held_bytes`] summed.
    held_bytes: usize,
    /// The next id the stream assigns; ids only count up.
    next_id: i64,
    /// A progress request waits for every watcher to be synced.
    progress_requested: bool,
    /// Counts this stream in etcd's watch stream gauge while it lives.
    _counted: metrics::WatchStreamGauge,
    /// This stream's share of etcd's slow watcher gauge: its watchers behind the feed
    /// when last counted.
    slow_counted: i64,
    /// Who opened the stream: each watch is authorised for them when it is created.
    caller: Caller,
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        metrics::watchers_changed(-(self.watchers.len() as i64));
        metrics::slow_watchers_changed(-self.slow_counted);
    }
}

impl WatchStream {
    /// A stream of `node` that sends on `out` and follows the feed from now on.
    pub fn new(
        node: Arc<Node>,
        out: Responses,
        fragment_bytes: usize,
        caller: Caller,
    ) -> Result<Self, Status> {
        let feed = node.store().subscribe();
        // Only after subscribing: every change after this revision reaches `feed`.
        let position = node
            .store()
            .current_revision()
            .map_err(status::from_store)?;
        Ok(WatchStream {
            outbox: Outbox {
                node,
                out,
                fragment_bytes,
            },
            feed,
            position,
            watchers: BTreeMap::new(),
            held_bytes: 0,
            next_id: 0,
            progress_requested: false,
            _counted: metrics::WatchStreamGauge::open(),
            slow_counted: 0,
            caller,
        })
    }

    /// Serves the stream until its client goes away or this node cannot serve it.
    pub async fn run(mut self, requests: impl Stream<Item = Result<WatchRequest, Status>> + Unpin) {
        if let Err(Stop::Failed(status)) = self.serve(requests).await {
            tracing::info!(%status, "watch stream ended by the server");
            let _ = self.outbox.out.send(Err(status)).await;
        }
    }

    async fn serve(
        &mut self,
        mut requests: impl Stream<Item = Result<WatchRequest, Status>> + Unpin,
    ) -> Result<(), Stop> {
        let interval = self.outbox.node.watch_progress_interval();
        let mut ticks = tokio::time::interval_at(Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut requests_open = true;
        loop {
            let behind = self.first_behind();
            tokio::select! {
                request = requests.next(), if requests_open => match request {
                    Some(Ok(request)) => self.handle(request).await?,
                    // As etcd, a client that closed its side still gets its events.
                    None => requests_open = false,
                    // A request that did not decode ends the stream with its status.
                    Some(Err(status)) => {
                        return Err(if grpc_metrics::stream_receive_failed(StreamApi::Watch, &status) {
                            Stop::Failed(status)
                        } else {
                            Stop::Gone
                        });
                    }
                },
                changes = self.feed.recv() => match changes {
                    Ok(changes) => self.follow(&changes).await?,
                    // The next batch shows the gap; history fills it.
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "watch stream fell behind the feed");
                    }
                    Err(RecvError::Closed) => return Err(Stop::Failed(status::stopped())),
                },
                () = std::future::ready(()), if behind.is_some() => {
                    if let Some(through) = behind {
                        self.catch_up(through).await?;
                    }
                }
                _ = ticks.tick() => self.progress_tick().await?,
                () = self.outbox.out.closed() => return Err(Stop::Gone),
            }
            self.answer_progress_request().await?;
            self.count_slow_watchers();
        }
    }

    /// Brings this stream's share of the slow watcher gauge up to date.
    fn count_slow_watchers(&mut self) {
        let behind = self
            .watchers
            .values()
            .filter(|w| w.through < self.position)
            .count() as i64;
        if behind != self.slow_counted {
            metrics::slow_watchers_changed(behind - self.slow_counted);
            self.slow_counted = behind;
        }
    }

    /// The least revision through which a watcher behind the feed has everything.
    fn first_behind(&self) -> Option<i64> {
        self.watchers
            .values()
            .map(|w| w.through)
            .filter(|through| *through < self.position)
            .min()
    }

    async fn handle(&mut self, request: WatchRequest) -> Result<(), Stop> {
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(&create).await,
            Some(RequestUnion::CancelRequest(cancel)) => self.cancel(cancel.watch_id).await,
            Some(RequestUnion::ProgressRequest(_)) => {
                // Answer with what the store has now, not with what this stream had
                // taken from the feed when the request came.
                self.drain_feed().await?;
                self.progress_requested = true;
                Ok(())
            }
            // etcd ignores a request of no known kind.
            None => Ok(()),
        }
    }

    async fn create(&mut self, create: &WatchCreateRequest) -> Result<(), Stop> {
        // "Now" is where the stream has followed the feed to, once it has taken every
        // batch published so far: a watch from now is synced from the start, and its
        // created revision is one every later progress report is at or above.
        self.drain_feed().await?;
        let current = self.position;
        // etcd's isWatchPermitted: read permission over the whole range, decided once,
        // at creation. etcd asks about `\0` for an empty key.
        let key: &[u8] = if create.key.is_empty() {
            &[0]
        } else {
            &create.key
        };
        let read = Action::Read {
            key,
            range_end: &create.range_end,
        };
        if let Err(refusal) = authorized::check(&self.outbox.node, &self.caller, &[read]).await {
            // Go's status text, as etcd puts it in the cancel reason.
            let reason = format!(
                "rpc error: code = {:?} desc = {}",
                refusal.code(),
                refusal.message()
            );
            return self.refuse(current, &reason).await;
        }
        if create.start_revision < 0 {
            return self.refuse(current, status::COMPACTED).await;
        }
        // Everything up to `through` is before the watch: "now" or its start revision.
        let through = if create.start_revision == 0 {
            current
        } else {
            create.start_revision - 1
        };
        let mut watcher = match Watcher::new(create.watch_id, create, through) {
            Ok(watcher) => watcher,
            Err(reason) => return self.refuse(current, reason).await,
        };
        if create.watch_id == 0 {
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            watcher.id = self.next_id;
            self.next_id += 1;
        } else if self.watchers.contains_key(&create.watch_id) {
            return self.refuse(current, DUPLICATE_ID).await;
        }
        if self.watchers.len() >= MAX_WATCHERS_PER_STREAM
            || self.held_bytes.saturating_add(watcher.held_bytes())
                > MAX_WATCHED_KEY_BYTES_PER_STREAM
        {
            tracing::debug!(
                watchers = self.watchers.len(),
                held_bytes = self.held_bytes,
                "watch create refused: the stream holds too many watchers"
            );
            return self.refuse(current, TOO_MANY_WATCHERS).await;
        }
        let id = watcher.id;
        self.held_bytes += watcher.held_bytes();
        self.watchers.insert(id, watcher);
        metrics::watchers_changed(1);
        self.outbox
            .send(WatchResponse {
                header: self.outbox.header(current),
                watch_id: id,
                created: true,
                ..Default::default()
            })
            .await
    }

    /// etcd's answer to a create it cannot serve: created and canceled at once.
    async fn refuse(&self, current: i64, reason: &str) -> Result<(), Stop> {
        self.outbox
            .send(WatchResponse {
                header: self.outbox.header(current),
                watch_id: NO_WATCHER,
                created: true,
                canceled: true,
                cancel_reason: reason.to_owned(),
                ..Default::default()
            })
            .await
    }

    async fn cancel(&mut self, watch_id: i64) -> Result<(), Stop> {
        // etcd answers nothing for an id it does not know.
        let Some(removed) = self.watchers.remove(&watch_id) else {
            return Ok(());
        };
        self.held_bytes = self.held_bytes.saturating_sub(removed.held_bytes());
        metrics::watchers_changed(-1);
        let current = self.outbox.node.store().current_revision()?;
        self.outbox
            .send(WatchResponse {
                header: self.outbox.header(current),
                watch_id,
                canceled: true,
                ..Default::default()
            })
            .await
    }

    /// Takes one batch of the feed.
    async fn follow(&mut self, changes: &Changes) -> Result<(), Stop> {
        if changes.through <= self.position {
            // Already in the store when this stream started following.
            return Ok(());
        }
        self.position = changes.through;
        self.deliver(changes).await
    }

    /// Takes every batch the feed holds now.
    async fn drain_feed(&mut self) -> Result<(), Stop> {
        loop {
            match self.feed.try_recv() {
                Ok(changes) => self.follow(&changes).await?,
                Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Closed) => return Err(Stop::Failed(status::stopped())),
            }
        }
    }

    /// The one rule (module docs): `changes` goes to every watcher that has everything
    /// through `changes.since` and not yet through `changes.through`.
    async fn deliver(&mut self, changes: &Changes) -> Result<(), Stop> {
        for watcher in self.watchers.values_mut() {
            if watcher.through >= changes.through || watcher.through < changes.since {
                continue;
            }
            let events = watcher.select(&changes.events);
            watcher.through = changes.through;
            if !events.is_empty() {
                watcher.idle = false;
                self.outbox
                    .events(changes.through, watcher.id, watcher.fragment, events)
                    .await?;
            }
        }
        Ok(())
    }

    /// Reads one page of history for the watchers behind, the first of which has
    /// everything through `through`.
    async fn catch_up(&mut self, through: i64) -> Result<(), Stop> {
        metrics::watch_caught_up();
        let behind: Vec<Watcher> = self
            .watchers
            .values()
            .filter(|w| w.through < self.position)
            .cloned()
            .collect();
        let store = self.outbox.node.store().clone();
        let to = self.position;
        let readable = store.readable().await;
        let page = self
            .outbox
            .node
            .offload()
            .run(move || {
                let interest = |key: &[u8]| {
                    behind
                        .iter()
                        .map(|w| w.interest(key))
                        .max()
                        .unwrap_or(Interest::Ignore)
                };
                store.events(through + 1, to, &interest, PAGE_BYTES)
            })
            .await
            .map_err(|error| Stop::Failed(status::internal("watch", &error)))?;
        drop(readable);
        let page = match page {
            Ok(page) => page,
            Err(StoreError::Compacted) => return self.cancel_compacted().await,
            Err(error) => return Err(error.into()),
        };
        if page.through <= through {
            // The store is behind what the feed announced: never so while it runs.
            return Err(Stop::Failed(status::internal(
                "watch",
                &"history ends before the feed",
            )));
        }
        #[allow(unused_mut)]
        let mut events = page.events;
        #[cfg(feature = "planted-bugs")]
        if page.through >= self.position
            && crate::planted::is_planted(crate::planted::PlantedBug::WatchDropsEventOnRejoin)
        {
            events.pop();
        }
        self.deliver(&Changes {
            since: through,
            through: page.through,
            events,
        })
        .await
    }

    /// Cancels every watcher that needs history compaction removed, as etcd does:
    /// with the compacted revision, so that its client knows to read afresh.
    async fn cancel_compacted(&mut self) -> Result<(), Stop> {
        let store = self.outbox.node.store();
        let compacted = store.compacted_revision()?;
        let current = store.current_revision()?;
        let lost: Vec<i64> = self
            .watchers
            .values()
            .filter(|w| w.through + 1 < compacted)
            .map(|w| w.id)
            .collect();
        for watch_id in lost {
            if let Some(removed) = self.watchers.remove(&watch_id) {
                self.held_bytes = self.held_bytes.saturating_sub(removed.held_bytes());
                metrics::watchers_changed(-1);
            }
            self.outbox
                .send(WatchResponse {
                    header: self.outbox.header(current),
                    watch_id,
                    canceled: true,
                    compact_revision: compacted,
                    ..Default::default()
                })
                .await?;
        }
        Ok(())
    }

    /// etcd's periodic progress: a watcher that asked for it, is synced and was sent
    /// nothing since the last tick hears the revision it has everything through.
    async fn progress_tick(&mut self) -> Result<(), Stop> {
        for watcher in self.watchers.values_mut() {
            if !watcher.progress_notify {
                continue;
            }
            if watcher.idle && watcher.through >= self.position {
                self.outbox.notice(self.position, watcher.id).await?;
            }
            watcher.idle = true;
        }
        Ok(())
    }

    /// Answers a progress request once every watcher is synced: everything up to the
    /// revision it names has then been sent to every watcher of the stream.
    async fn answer_progress_request(&mut self) -> Result<(), Stop> {
        if self.progress_requested && self.first_behind().is_none() {
            self.progress_requested = false;
            self.outbox.notice(self.position, NO_WATCHER).await?;
        }
        Ok(())
    }
}
