//! The load every chaos scenario runs under, and what it must find afterwards.
//!
//! A writer puts sequential keys (`load/00000042` = `v42`), one member at a time, moving
//! to the next member when a call fails or times out, and records every acknowledged
//! write with the revision in its response. A watcher watches every key from the
//! revision after the start and records every event; when its stream fails, stalls or
//! ends it reconnects to the next member from the last revision it saw plus one.
//!
//! The checks at the end: every acknowledged write is in the store with its value (at
//! the acknowledged revision or later), the watcher saw a gap-free, ordered run of
//! revisions from the start to the store's final revision, every acknowledged write is
//! among the watcher's events at its revision with its value, and every member converged
//! to the final revision.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, EventType, GetOptions, WatchOptions};

use crate::harness::{connect, eventually, secs, try_connect, Project};

const PREFIX: &str = "load/";

#[derive(Clone, Debug)]
pub struct Acked {
    pub key: String,
    pub value: String,
    pub revision: i64,
}

#[derive(Clone, Debug)]
pub struct Seen {
    pub revision: i64,
    pub key: String,
    pub value: String,
    pub put: bool,
}

#[derive(Default)]
struct Shared {
    stop: AtomicBool,
    attempts: AtomicU64,
    failures: AtomicU64,
    watch_reconnects: AtomicU64,
    /// The last revision the watcher has seen.
    watched: AtomicI64,
    acked: Mutex<Vec<Acked>>,
    seen: Mutex<Vec<Seen>>,
    /// Why the watcher gave up, if it did (a compacted start, a cancel).
    watch_fatal: Mutex<Option<String>>,
}

pub struct Load {
    shared: Arc<Shared>,
    start: i64,
    endpoints: Vec<String>,
    options: ConnectOptions,
    writer: tokio::task::JoinHandle<()>,
    watcher: tokio::task::JoinHandle<()>,
    started: Instant,
}

impl Load {
    /// Starts the writer and the watcher against `members` of `project`.
    pub async fn start(project: &Project, members: &[usize]) -> Load {
        let endpoints = project.endpoints(members);
        let options = project.connect_options();
        let mut client = connect(&endpoints[..1], options.clone()).await;
        let start = tokio::time::timeout(secs(10), client.get("load-start", None))
            .await
            .expect("first get timed out")
            .expect("first get")
            .header()
            .expect("header")
            .revision();
        let shared = Arc::new(Shared::default());
        shared.watched.store(start, Ordering::SeqCst);
        let writer = tokio::spawn(write_loop(
            shared.clone(),
            endpoints.clone(),
            options.clone(),
        ));
        let watcher = tokio::spawn(watch_loop(
            shared.clone(),
            endpoints.clone(),
            options.clone(),
            start + 1,
        ));
        Load {
            shared,
            start,
            endpoints,
            options,
            writer,
            watcher,
            started: Instant::now(),
        }
    }

    pub fn acked(&self) -> usize {
        self.shared.acked.lock().unwrap().len()
    }

    /// Waits until at least `more` further writes are acknowledged (the cluster takes
    /// writes again), for up to `deadline`.
    pub async fn wait_progress(&self, more: usize, deadline: Duration) {
        let from = self.acked();
        eventually("writes acknowledged again", deadline, || async {
            let now = self.acked();
            if now >= from + more {
                Ok(())
            } else {
                Err(format!(
                    "{} acknowledged since ({} failures so far)",
                    now - from,
                    self.shared.failures.load(Ordering::SeqCst)
                ))
            }
        })
        .await;
    }

    /// Stops the writer, waits for the watcher to reach the final revision, checks
    /// everything the module comment lists on `members`, and returns a one-line summary.
    pub async fn finish(self, project: &Project, members: &[usize]) -> String {
        self.shared.stop.store(true, Ordering::SeqCst);
        tokio::time::timeout(secs(20), self.writer)
            .await
            .expect("the writer did not stop")
            .expect("writer task");
        // The store's final state, read through a member that answers.
        let mut endpoints_order = self.endpoints.clone();
        let (revision, stored) = eventually("a final linearizable read", secs(30), || {
            endpoints_order.rotate_left(1);
            let endpoint = endpoints_order[0].clone();
            let options = self.options.clone();
            async move {
                let mut client = try_connect(std::slice::from_ref(&endpoint), options).await?;
                let response = tokio::time::timeout(
                    secs(10),
                    client.get(PREFIX, Some(GetOptions::new().with_prefix())),
                )
                .await
                .map_err(|_| format!("{endpoint}: timed out"))?
                .map_err(|e| format!("{endpoint}: {e}"))?;
                let revision = response.header().map(|h| h.revision()).unwrap_or(0);
                let kvs: std::collections::HashMap<String, (String, i64)> = response
                    .kvs()
                    .iter()
                    .map(|kv| {
                        (
                            String::from_utf8_lossy(kv.key()).into_owned(),
                            (
                                String::from_utf8_lossy(kv.value()).into_owned(),
                                kv.mod_revision(),
                            ),
                        )
                    })
                    .collect();
                Ok((revision, kvs))
            }
        })
        .await;
        // The watcher catches up with it.
        let shared = self.shared.clone();
        eventually(
            &format!("the watcher reaching revision {revision}"),
            secs(60),
            || {
                let shared = shared.clone();
                async move {
                    if let Some(fatal) = shared.watch_fatal.lock().unwrap().clone() {
                        panic!("the watcher gave up: {fatal}");
                    }
                    let watched = shared.watched.load(Ordering::SeqCst);
                    if watched >= revision {
                        Ok(())
                    } else {
                        Err(format!("at {watched}"))
                    }
                }
            },
        )
        .await;
        self.watcher.abort();
        let acked = self.shared.acked.lock().unwrap().clone();
        let seen = self.shared.seen.lock().unwrap().clone();
        let attempts = self.shared.attempts.load(Ordering::SeqCst);
        let failures = self.shared.failures.load(Ordering::SeqCst);
        let reconnects = self.shared.watch_reconnects.load(Ordering::SeqCst);

        assert!(
            acked.len() >= 20,
            "only {} writes acknowledged out of {attempts}",
            acked.len()
        );
        // 1. Every acknowledged write is stored with its value, at its revision or later.
        for write in &acked {
            match stored.get(&write.key) {
                None => panic!(
                    "acknowledged write lost: {} = {} at revision {} is not in the store (final revision {revision})",
                    write.key, write.value, write.revision
                ),
                Some((value, mod_revision)) => {
                    assert_eq!(
                        value, &write.value,
                        "{} holds another value than the acknowledged one",
                        write.key
                    );
                    assert!(
                        *mod_revision >= write.revision,
                        "{} was acknowledged at revision {} but is stored at {mod_revision}",
                        write.key,
                        write.revision
                    );
                }
            }
        }
        // 2. The watcher's revisions: ordered, gap-free, from start+1 to the final one.
        let mut expected = self.start + 1;
        let mut last = self.start;
        for event in &seen {
            if event.revision == last && last > self.start {
                continue; // another event of the same revision (a transaction)
            }
            assert_eq!(
                event.revision, expected,
                "the watcher's revisions are not gap-free and ordered: expected {expected}, got {} (after {last})",
                event.revision
            );
            last = event.revision;
            expected += 1;
        }
        assert!(
            last >= revision,
            "the watcher stopped at revision {last}, the store is at {revision}"
        );
        // 3. Every acknowledged write is among the watcher's events, as acknowledged.
        let by_revision: std::collections::HashMap<i64, &Seen> =
            seen.iter().map(|event| (event.revision, event)).collect();
        for write in &acked {
            let event = by_revision.get(&write.revision).unwrap_or_else(|| {
                panic!(
                    "the watcher has no event at revision {} ({} = {})",
                    write.revision, write.key, write.value
                )
            });
            assert!(
                event.put && event.key == write.key && event.value == write.value,
                "the watcher's event at revision {} is {:?}, the acknowledged write {:?}",
                write.revision,
                event,
                write
            );
        }
        // 4. Every member converged to the final revision (a serializable read of its
        // own applied state).
        for &member in members {
            let endpoint = project.endpoint(member);
            let options = self.options.clone();
            eventually(
                &format!("member qk-{member} applying revision {revision}"),
                secs(60),
                || {
                    let endpoint = endpoint.clone();
                    let options = options.clone();
                    async move {
                        let mut client =
                            try_connect(std::slice::from_ref(&endpoint), options).await?;
                        let response = tokio::time::timeout(
                            secs(5),
                            client.get("load-end", Some(GetOptions::new().with_serializable())),
                        )
                        .await
                        .map_err(|_| "timed out".to_owned())?
                        .map_err(|e| e.to_string())?;
                        let at = response.header().map(|h| h.revision()).unwrap_or(0);
                        if at >= revision {
                            Ok(())
                        } else {
                            Err(format!("at revision {at}"))
                        }
                    }
                },
            )
            .await;
        }
        let unacked_applied = seen.len().saturating_sub(acked.len());
        format!(
            "{} writes acknowledged of {attempts} attempts ({failures} failed or timed out, {unacked_applied} applied without an acknowledgement), watch revisions {}..={last} gap-free over {reconnects} reconnects, {:.1?} of load",
            acked.len(),
            self.start + 1,
            self.started.elapsed()
        )
    }
}

async fn write_loop(shared: Arc<Shared>, endpoints: Vec<String>, options: ConnectOptions) {
    let mut clients: Vec<Option<Client>> = vec![None; endpoints.len()];
    let mut at = 0usize;
    let mut seq = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let key = format!("{PREFIX}{seq:08}");
        let value = format!("v{seq}");
        seq += 1;
        shared.attempts.fetch_add(1, Ordering::SeqCst);
        if clients[at].is_none() {
            clients[at] = try_connect(&endpoints[at..=at], options.clone()).await.ok();
        }
        let Some(client) = clients[at].as_mut() else {
            shared.failures.fetch_add(1, Ordering::SeqCst);
            at = (at + 1) % endpoints.len();
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        match tokio::time::timeout(secs(5), client.put(key.as_str(), value.as_str(), None)).await {
            Ok(Ok(response)) => {
                let revision = response.header().map(|h| h.revision()).unwrap_or(0);
                shared.acked.lock().unwrap().push(Acked {
                    key,
                    value,
                    revision,
                });
                // About 50 writes a second: enough to catch a loss, little enough to
                // leave the two cores to the members.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(Err(_)) | Err(_) => {
                shared.failures.fetch_add(1, Ordering::SeqCst);
                // A fresh connection next time: the old one may be to a dead socket.
                clients[at] = None;
                at = (at + 1) % endpoints.len();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn watch_loop(
    shared: Arc<Shared>,
    endpoints: Vec<String>,
    options: ConnectOptions,
    first: i64,
) {
    let mut at = 0usize;
    let mut next = first;
    loop {
        let endpoint = endpoints[at].clone();
        at = (at + 1) % endpoints.len();
        let Ok(mut client) = try_connect(&[endpoint], options.clone()).await else {
            shared.watch_reconnects.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let watch = tokio::time::timeout(
            secs(5),
            client.watch(
                "",
                Some(
                    WatchOptions::new()
                        .with_all_keys()
                        .with_start_revision(next),
                ),
            ),
        )
        .await;
        let mut stream = match watch {
            Ok(Ok(stream)) => stream,
            _ => {
                shared.watch_reconnects.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        loop {
            // A stream silent for 10 s while the writer writes is stuck (a partitioned
            // member that still holds the connection): start again elsewhere.
            let message = match tokio::time::timeout(secs(10), stream.message()).await {
                Ok(Ok(Some(message))) => message,
                _ => break,
            };
            if message.canceled() {
                let reason = format!(
                    "watch from {next} canceled: {:?} (compact revision {})",
                    message.cancel_reason(),
                    message.compact_revision()
                );
                if message.compact_revision() > 0 {
                    *shared.watch_fatal.lock().unwrap() = Some(reason);
                    return;
                }
                break;
            }
            let events = message.events();
            if events.is_empty() {
                continue;
            }
            let mut seen = shared.seen.lock().unwrap();
            for event in events {
                let Some(kv) = event.kv() else { continue };
                let revision = kv.mod_revision();
                seen.push(Seen {
                    revision,
                    key: String::from_utf8_lossy(kv.key()).into_owned(),
                    value: String::from_utf8_lossy(kv.value()).into_owned(),
                    put: event.event_type() == EventType::Put,
                });
                next = next.max(revision + 1);
            }
            shared.watched.store(next - 1, Ordering::SeqCst);
        }
        shared.watch_reconnects.fetch_add(1, Ordering::SeqCst);
    }
}
