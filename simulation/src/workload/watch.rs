//! [`WatchClient`]: one etcd watch over the other clients' keys, held for the whole
//! run as a Kubernetes informer holds one: with `prev_kv` and progress notifications,
//! asking for progress now and then, and resuming elsewhere whenever the watch fails.
//!
//! The watch starts on a member the client's seed picks, from a given revision or from
//! "now". When the stream fails or ends, the member stops answering, the watch delivers
//! nothing new for a while (the member may be cut off from the others), or the member
//! cancels it, the client opens it again on the next member, from the revision after
//! the last one it knows delivered (events, and progress notifications, which vouch
//! for every revision up to theirs); after a cancel for compaction it resumes at the
//! compacted revision, as an etcd client does once it has re-listed. Every start and
//! every response goes into a [`WatchLog`], with the member it came from. It must never
//! judge what it sees (the watch checker does) and never inject faults.

use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, WatchOptions, WatchResponse, WatchStream};
use tokio::time::Instant;

use crate::client::{self, ClientOptions};
use crate::cluster::Directory;
use crate::error::SimError;
use crate::history::{self, EventKind, WatchEntry, WatchEvent, WatchLog, WatchResponseRecord};
use crate::rng::SimRng;

/// The revision watch clients must have delivered before they stop, once it is known
/// (when the writers are done). Cheap to clone; clones share the value.
#[derive(Clone, Debug)]
pub struct WatchTarget(Arc<AtomicI64>);

impl WatchTarget {
    /// A target not yet known.
    pub fn new() -> Self {
        WatchTarget(Arc::new(AtomicI64::new(-1)))
    }

    pub fn set(&self, revision: i64) {
        self.0.store(revision.max(0), Ordering::SeqCst);
    }

    /// The target, once [`WatchTarget::set`].
    pub fn get(&self) -> Option<i64> {
        let revision = self.0.load(Ordering::SeqCst);
        (revision >= 0).then_some(revision)
    }
}

impl Default for WatchTarget {
    fn default() -> Self {
        WatchTarget::new()
    }
}

/// A client holding one watch for a while; see the module docs.
#[derive(Clone, Debug)]
pub struct WatchClient {
    /// The client's name in its log (its turmoil host name, by convention).
    pub name: String,
    /// Every member's name and client URL; the seed picks the first, and each resume
    /// goes to the next.
    pub members: Vec<(String, String)>,
    /// If set, the members come from here instead, as they join (and stay after they
    /// leave, as in a client's stale list).
    pub directory: Option<Directory>,
    /// Watches every key starting with this.
    pub prefix: String,
    /// Seeds the client's choices: the first member, when to ask for progress.
    pub seed: u64,
    /// Wait this long before opening the watch.
    pub start_after: Duration,
    /// Where the first watch starts: a revision, or 0 for "now".
    pub start_revision: i64,
    /// Watch until this much simulated time has passed since `run` began (the wait
    /// before the start included).
    pub run_for: Duration,
    /// If set: after `run_for`, keep watching until every revision up to the target
    /// is delivered, for at most `drain_for` more.
    pub target: Option<WatchTarget>,
    pub drain_for: Duration,
    /// Pause between two progress requests, drawn from `[min, max)`.
    pub progress_every: (Duration, Duration),
    /// A watch that delivers no new revision for this long is given up for the next
    /// member: its member may be cut off from the others, or dead.
    pub stall: Duration,
    pub options: ClientOptions,
}

impl WatchClient {
    /// A client named `name` over `members` watching prefix `k` from revision 1 at
    /// once, for 10 simulated seconds, asking for progress every 0.3 to 1.5 s and moving
    /// on after 2 s without a new revision.
    pub fn new(name: impl Into<String>, members: Vec<(String, String)>, seed: u64) -> Self {
        WatchClient {
            name: name.into(),
            members,
            directory: None,
            prefix: "k".to_owned(),
            seed,
            start_after: Duration::ZERO,
            start_revision: 1,
            run_for: Duration::from_secs(10),
            target: None,
            drain_for: Duration::from_secs(30),
            progress_every: (Duration::from_millis(300), Duration::from_millis(1500)),
            stall: Duration::from_secs(2),
            options: ClientOptions::default(),
        }
    }

    /// Runs the watch, recording into `log`. Must run inside a turmoil host. The
    /// cluster's errors are recorded, not returned; only a client that cannot run at
    /// all (no members) fails.
    pub async fn run(self, log: WatchLog) -> Result<(), SimError> {
        if self.members_now().is_empty() {
            return Err(SimError::Invalid("a watch client needs members".into()));
        }
        let began = Instant::now();
        let mut rng = SimRng::new(self.seed, 0);
        tokio::time::sleep(self.start_after).await;
        let mut cursor = Cursor {
            next: (self.start_revision > 0).then_some(self.start_revision),
        };
        let mut member = rng.index(self.members_now().len());
        while !self.done(&cursor, began) {
            let members = self.members_now();
            let (name, url) = &members[member % members.len()];
            log.record(WatchEntry::Started {
                member: name.clone(),
                start_revision: cursor.start_revision(),
                at: history::now(),
            });
            let end = self
                .watch_on(name, url, &mut cursor, &mut rng, &log, began)
                .await;
            log.record(WatchEntry::Ended {
                member: name.clone(),
                reason: end.to_string(),
                at: history::now(),
            });
            if let End::Unsupported(_) = end {
                // No member will answer otherwise; retrying would only spin. Wait for
                // the target, though, so that the log says what went undelivered.
                self.await_target(began).await;
                break;
            }
            member = (member + 1) % self.members_now().len();
            // etcd's client backs off 25 ms (with jitter) between retries.
            tokio::time::sleep(rng.millis(20, 30)).await;
        }
        log.record(WatchEntry::Finished {
            delivered: cursor.delivered(),
            target: self.target.as_ref().and_then(WatchTarget::get),
            at: history::now(),
        });
        Ok(())
    }

    /// The members to choose from now: the directory's, if the client has one, else
    /// its own list.
    fn members_now(&self) -> Vec<(String, String)> {
        match &self.directory {
            Some(directory) => directory.all_members(),
            None => self.members.clone(),
        }
    }

    /// Returns once the target is known (or the drain is over); at once without one.
    async fn await_target(&self, began: Instant) {
        let Some(target) = &self.target else {
            return;
        };
        while target.get().is_none() && began.elapsed() < self.run_for + self.drain_for {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Past `run_for`, and (with a target) past the drain or with the target reached.
    fn done(&self, cursor: &Cursor, began: Instant) -> bool {
        let elapsed = began.elapsed();
        if elapsed < self.run_for {
            return false;
        }
        match &self.target {
            None => true,
            Some(target) => {
                elapsed >= self.run_for + self.drain_for
                    || target.get().is_some_and(|t| cursor.delivered() >= t)
            }
        }
    }

    /// Opens the watch on one member and follows it until it ends or the client is
    /// done, advancing `cursor` with every response.
    async fn watch_on(
        &self,
        member: &str,
        url: &str,
        cursor: &mut Cursor,
        rng: &mut SimRng,
        log: &WatchLog,
        began: Instant,
    ) -> End {
        let start_revision = cursor.start_revision();
        let from_now = start_revision == 0;
        let budget = self.options.request_timeout + self.options.connect_timeout * 2;
        // The client must outlive the stream: it holds the connection.
        let (_client, mut stream) =
            match tokio::time::timeout(budget, self.open(url, start_revision)).await {
                Ok(Ok(opened)) => opened,
                Ok(Err(error)) => return End::failure(error),
                Err(_) => return End::Failed("no watch stream within the deadline".into()),
            };
        let (min, max) = self.progress_every;
        let mut next_progress =
            Instant::now() + rng.millis(min.as_millis() as u64, max.as_millis() as u64);
        let mut last_advance = Instant::now();
        loop {
            if self.done(cursor, began) {
                return End::Done;
            }
            let now = Instant::now();
            let stalled_at = last_advance + self.stall;
            if now >= stalled_at {
                return End::Stalled(self.stall);
            }
            if now >= next_progress {
                // The member may ignore it: etcd answers only once every watcher of
                // the stream is synced.
                match tokio::time::timeout(self.options.request_timeout, stream.request_progress())
                    .await
                {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => return End::Failed(format!("progress request: {error}")),
                    Err(_) => return End::Failed("progress request not sent in time".into()),
                }
                next_progress =
                    Instant::now() + rng.millis(min.as_millis() as u64, max.as_millis() as u64);
                continue;
            }
            // Wake at least every 250 ms to see whether the client is done.
            let wait = (next_progress.min(stalled_at) - now).min(Duration::from_millis(250));
            match tokio::time::timeout(wait, stream.message()).await {
                Err(_) => {}
                Ok(Err(error)) => return End::Failed(error.to_string()),
                Ok(Ok(None)) => return End::Failed("the member ended the stream".into()),
                Ok(Ok(Some(response))) => {
                    let record = record_of(member, &response);
                    let canceled = record
                        .canceled
                        .then(|| (record.compact_revision, record.cancel_reason.clone()));
                    if cursor.absorb(&record, from_now) {
                        last_advance = Instant::now();
                    }
                    log.record(WatchEntry::Response(record));
                    if let Some((compact_revision, reason)) = canceled {
                        return End::Canceled {
                            compact_revision,
                            reason,
                        };
                    }
                }
            }
        }
    }

    /// Connects to `url` and opens the watch from `start_revision` (0: now).
    async fn open(
        &self,
        url: &str,
        start_revision: i64,
    ) -> Result<(Client, WatchStream), SimError> {
        let mut client = client::connect_with(url, &self.options).await?;
        let mut options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_progress_notify();
        if start_revision > 0 {
            options = options.with_start_revision(start_revision);
        }
        let stream = client.watch(self.prefix.as_str(), Some(options)).await?;
        Ok((client, stream))
    }
}

/// Where the watch stands.
#[derive(Debug)]
struct Cursor {
    /// The revision to resume at: one past the last known delivered. `None` while
    /// nothing is known (a watch from "now" not yet created).
    next: Option<i64>,
}

impl Cursor {
    /// Where to start the next watch (0: now).
    fn start_revision(&self) -> i64 {
        self.next.unwrap_or(0)
    }

    /// The highest revision up to which every event is known delivered (0: none).
    fn delivered(&self) -> i64 {
        self.next.map_or(0, |next| next - 1)
    }

    /// Takes in one response of a watch that started from now (`from_now`) or from a
    /// revision; true if the watch got further.
    fn absorb(&mut self, response: &WatchResponseRecord, from_now: bool) -> bool {
        if response.canceled {
            // The member no longer has the revisions before the compacted one: skip
            // them, as an etcd client does after re-listing. Never backwards, though.
            return response.compact_revision > 0 && self.resume_at(response.compact_revision);
        }
        let mut advanced = false;
        for event in &response.events {
            advanced |= self.resume_at(event.mod_revision + 1);
        }
        // A progress notification vouches for every revision up to its own; so does
        // the creation of a watch from now, which starts after the header's revision.
        if response.is_progress_notification() || (response.created && from_now) {
            advanced |= self.resume_at(response.header_revision + 1);
        }
        advanced
    }

    fn resume_at(&mut self, revision: i64) -> bool {
        let further = self.next.is_none_or(|next| revision > next);
        if further {
            self.next = Some(revision);
        }
        further
    }
}

/// Why one watch ended.
#[derive(Debug)]
enum End {
    /// The client is done.
    Done,
    /// No new revision for this long.
    Stalled(Duration),
    /// An error, or the stream's end.
    Failed(String),
    /// The member canceled the watch.
    Canceled {
        compact_revision: i64,
        reason: String,
    },
    /// The member does not serve watches at all.
    Unsupported(String),
}

impl End {
    fn failure(error: SimError) -> Self {
        match &error {
            SimError::Client(etcd_client::Error::GRpcStatus(status))
                if status.code() == tonic::Code::Unimplemented =>
            {
                End::Unsupported(status.message().to_owned())
            }
            _ => End::Failed(error.to_string()),
        }
    }
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            End::Done => write!(f, "done"),
            End::Stalled(after) => write!(f, "no new revision for {after:?}"),
            End::Failed(reason) => write!(f, "{reason}"),
            End::Canceled {
                compact_revision,
                reason,
            } => write!(
                f,
                "canceled at compact revision {compact_revision} ({reason:?})"
            ),
            End::Unsupported(reason) => write!(f, "watch unsupported: {reason}"),
        }
    }
}

/// What the log keeps of one response from `member`.
fn record_of(member: &str, response: &WatchResponse) -> WatchResponseRecord {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let events = response
        .events()
        .iter()
        .map(|event| {
            let kv = event.kv();
            WatchEvent {
                kind: match event.event_type() {
                    EventType::Put => EventKind::Put,
                    EventType::Delete => EventKind::Delete,
                },
                key: kv.map(|kv| text(kv.key())).unwrap_or_default(),
                value: kv.map(|kv| text(kv.value())).unwrap_or_default(),
                create_revision: kv.map_or(0, |kv| kv.create_revision()),
                mod_revision: kv.map_or(0, |kv| kv.mod_revision()),
                version: kv.map_or(0, |kv| kv.version()),
                prev: event
                    .prev_kv()
                    .map(|prev| (text(prev.value()), prev.mod_revision())),
            }
        })
        .collect();
    WatchResponseRecord {
        member: member.to_owned(),
        at: history::now(),
        header_revision: response.header().map_or(0, |h| h.revision()),
        watch_id: response.watch_id(),
        created: response.created(),
        canceled: response.canceled(),
        compact_revision: response.compact_revision(),
        cancel_reason: response.cancel_reason().to_owned(),
        events,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(header_revision: i64, events: &[i64]) -> WatchResponseRecord {
        WatchResponseRecord {
            member: "n1".into(),
            at: Duration::ZERO,
            header_revision,
            watch_id: 0,
            created: false,
            canceled: false,
            compact_revision: 0,
            cancel_reason: String::new(),
            events: events
                .iter()
                .map(|r| WatchEvent {
                    kind: EventKind::Put,
                    key: "k0".into(),
                    value: format!("v{r}"),
                    create_revision: *r,
                    mod_revision: *r,
                    version: 1,
                    prev: None,
                })
                .collect(),
        }
    }

    #[test]
    fn a_watch_from_now_resumes_after_its_creation_and_its_events() {
        let mut cursor = Cursor { next: None };
        assert_eq!(cursor.start_revision(), 0);
        let created = WatchResponseRecord {
            created: true,
            ..response(7, &[])
        };
        assert!(cursor.absorb(&created, true));
        assert_eq!((cursor.start_revision(), cursor.delivered()), (8, 7));
        assert!(cursor.absorb(&response(9, &[8, 9]), true));
        assert_eq!(cursor.start_revision(), 10);
        // A lagging member's progress never moves the watch back.
        assert!(!cursor.absorb(&response(5, &[]), false));
        assert!(cursor.absorb(&response(12, &[]), false));
        assert_eq!(cursor.delivered(), 12);
    }

    #[test]
    fn a_watch_from_a_revision_trusts_progress_but_not_its_creation() {
        let mut cursor = Cursor { next: Some(1) };
        let created = WatchResponseRecord {
            created: true,
            ..response(40, &[])
        };
        assert!(!cursor.absorb(&created, false));
        assert_eq!(cursor.start_revision(), 1);
        let compacted = WatchResponseRecord {
            canceled: true,
            compact_revision: 30,
            ..response(40, &[])
        };
        assert!(cursor.absorb(&compacted, false));
        assert_eq!(
            cursor.start_revision(),
            30,
            "resumes at the compacted revision"
        );
        let stale_cancel = WatchResponseRecord {
            canceled: true,
            compact_revision: 3,
            ..response(40, &[])
        };
        assert!(!cursor.absorb(&stale_cancel, false));
        assert_eq!(cursor.start_revision(), 30);
    }

    #[test]
    fn a_watch_target_is_unknown_until_set() {
        let target = WatchTarget::new();
        assert_eq!(target.get(), None);
        target.clone().set(0);
        assert_eq!(target.get(), Some(0));
        target.set(42);
        assert_eq!(target.get(), Some(42));
    }
}
