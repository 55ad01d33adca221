//! Watch under load and failures: watches on every member across a leader kill and a
//! resume on another member, a slow reader (the member stays bounded and the reader
//! loses nothing), a lagging watcher canceled by compaction, and ten thousand watchers
//! on a stream with a thousand streams. Each test runs against QuantyKube and, with
//! `QK_TEST_TARGET=etcd`, against etcd (where etcd 3.4 differs, the test says so).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{WatchOptions, WatchStream};

use crate::harness::*;
use crate::watch::{collect, events_of, next, on_a_follower, Ev, RESPONSE_TIMEOUT};

/// Puts `writes` unique values from `writers` concurrent clients connected to all of
/// `endpoints`, retrying nothing; returns (revision, key, value) of every acknowledged
/// put. Stops early when `stop` is set.
async fn write_load(
    endpoints: Vec<String>,
    writers: usize,
    writes: usize,
    stop: Arc<AtomicBool>,
) -> Vec<(i64, String, String)> {
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (endpoints, acknowledged, stop) =
            (endpoints.clone(), acknowledged.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = connect(&endpoints).await;
            for i in (w..writes).step_by(writers) {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let (key, value) = (format!("load/{}", i % 17), format!("v{i}"));
                if let Ok(put) = client.put(key.clone(), value.clone(), None).await {
                    let revision = header_rev(put.header());
                    acknowledged.lock().unwrap().push((revision, key, value));
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut acknowledged = std::mem::take(&mut *acknowledged.lock().unwrap());
    acknowledged.sort();
    acknowledged
}

/// Reads events from `stream` until one at `revision` or later arrives (or the stream
/// breaks), returning them in order.
async fn events_through(stream: &mut WatchStream, revision: i64) -> (Vec<Ev>, bool) {
    let mut events = Vec::new();
    loop {
        match tokio::time::timeout(RESPONSE_TIMEOUT, stream.message()).await {
            Ok(Ok(Some(response))) => {
                assert!(!response.canceled(), "{response:?}");
                events.extend(events_of(&response));
                if events.last().is_some_and(|e| e.revision >= revision) {
                    return (events, true);
                }
            }
            Ok(Ok(None)) => return (events, false),
            Ok(Err(error)) => {
                eprintln!("watch stream broke: {error}");
                return (events, false);
            }
            Err(_) => panic!(
                "no event through {revision} in time; got {} events",
                events.len()
            ),
        }
    }
}

/// prev_kv: each event's previous version is its key's event before it in `events`
/// (a key's first event here is not checked: its previous version came earlier).
fn assert_prev_kv_is_the_event_before(events: &[Ev]) {
    let mut newest: BTreeMap<&str, (String, i64)> = BTreeMap::new();
    for e in events {
        if let Some(before) = newest.get(e.key.as_str()) {
            assert_eq!(e.prev.as_ref(), Some(before), "prev_kv of {e:?}");
        }
        newest.insert(&e.key, (e.value.clone(), e.revision));
    }
}

/// Ordered, unique, and holding every acknowledged put.
fn assert_complete(events: &[Ev], acknowledged: &[(i64, String, String)], who: &str) {
    for pair in events.windows(2) {
        assert!(
            pair[0].revision < pair[1].revision,
            "{who}: out of order or repeated: {pair:?}"
        );
    }
    let by_revision: BTreeMap<i64, &Ev> = events.iter().map(|e| (e.revision, e)).collect();
    for (revision, key, value) in acknowledged {
        let event = by_revision
            .get(revision)
            .unwrap_or_else(|| panic!("{who}: no event for acknowledged revision {revision}"));
        assert_eq!((&event.key, &event.value), (key, value), "{who}");
    }
}

#[tokio::test]
async fn every_member_sees_the_same_events_across_a_leader_kill_and_a_resume_elsewhere() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader_index().await;
    let mut client = cluster.client(leader).await;
    let start = current_revision(&mut client).await;
    let mut streams = Vec::new();
    for i in 0..3 {
        let options = WatchOptions::new()
            .with_prefix()
            .with_prev_key()
            .with_start_revision(start + 1);
        let mut stream = cluster
            .client(i)
            .await
            .watch("load/", Some(options))
            .await
            .unwrap();
        assert!(next(&mut stream).await.created());
        streams.push(stream);
    }

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(write_load(cluster.endpoints(), 4, 600, stop.clone()));
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.kill9(leader);
    let acknowledged = tokio::time::timeout(Duration::from_secs(90), load)
        .await
        .expect("the load finishes")
        .unwrap();
    assert!(
        acknowledged.len() > 100,
        "only {} writes acknowledged",
        acknowledged.len()
    );
    // A marker everyone must reach: the last revision of the run.
    let survivor = (leader + 1) % 3;
    let mut client = cluster.client(survivor).await;
    let deadline = Deadline::after(Duration::from_secs(30), "a put after the leader kill");
    let last = loop {
        // A timed-out attempt may still apply: the marker is only ever the last event.
        match client.put("load/zz-end", "end", None).await {
            Ok(put) => break header_rev(put.header()),
            Err(_) => deadline.tick().await,
        }
    };

    let mut lists = Vec::new();
    let mut killed_prefix = Vec::new();
    for (i, stream) in streams.iter_mut().enumerate() {
        if i == leader {
            // Its stream broke with its member: everything it sent is a prefix of the
            // others', and the client resumes on another member from where it got.
            let (events, alive) = events_through(stream, last).await;
            assert!(!alive || events.last().is_some_and(|e| e.revision >= last));
            killed_prefix = events;
            continue;
        }
        let (events, alive) = events_through(stream, last).await;
        assert!(alive, "the watch on surviving member {i} broke");
        assert_complete(&events, &acknowledged, &format!("member {i}"));
        lists.push(events);
    }
    assert_eq!(lists[0], lists[1], "followers and leader disagree");
    let everything = &lists[0];
    assert_eq!(
        killed_prefix[..],
        everything[..killed_prefix.len()],
        "the killed member sent events the others did not"
    );
    assert_prev_kv_is_the_event_before(everything);

    // Resume on another member from the last revision the killed one delivered.
    let resume_from = killed_prefix.last().map_or(start + 1, |e| e.revision + 1);
    let options = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_start_revision(resume_from);
    let mut resumed = cluster
        .client(survivor)
        .await
        .watch("load/", Some(options))
        .await
        .unwrap();
    assert!(next(&mut resumed).await.created());
    let (rest, _) = events_through(&mut resumed, last).await;
    let mut joined = killed_prefix.clone();
    joined.extend(rest);
    assert_eq!(
        &joined, everything,
        "resuming elsewhere lost or repeated events"
    );

    // The killed member, restarted, replays the same history from its own store.
    cluster.restart(leader).await;
    let options = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_start_revision(start + 1);
    let mut replay = cluster
        .client(leader)
        .await
        .watch("load/", Some(options))
        .await
        .unwrap();
    assert!(next(&mut replay).await.created());
    let (replayed, _) = events_through(&mut replay, last).await;
    assert_eq!(
        &replayed, everything,
        "the restarted member replays other events"
    );
}

#[tokio::test]
async fn a_slow_reader_keeps_the_node_bounded_and_loses_nothing() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader_index().await;
    let follower = (leader + 1) % 3;
    let mut client = cluster.client(follower).await;
    let start = current_revision(&mut client).await;
    let options = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_start_revision(start + 1);
    let mut slow = client.watch("big/", Some(options)).await.unwrap();
    assert!(next(&mut slow).await.created());
    // A healthy watcher on the same member (on a connection of its own) keeps up.
    let mut healthy = cluster
        .client(follower)
        .await
        .watch(
            "big/",
            Some(
                WatchOptions::new()
                    .with_prefix()
                    .with_start_revision(start + 1),
            ),
        )
        .await
        .unwrap();
    assert!(next(&mut healthy).await.created());
    let baseline = cluster.rss_bytes(follower).expect("the member's RSS");

    // 3 000 puts of 64 KiB (190 MiB, and as much again as prev_kv) while `slow` reads
    // nothing.
    let value = "x".repeat(64 * 1024);
    let writes = 3000;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (endpoint, value) = (cluster.endpoint(leader), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = connect(&[endpoint]).await;
            for i in (w..writes).step_by(8) {
                client
                    .put(format!("big/{:02}", i % 50), value.clone(), None)
                    .await
                    .unwrap();
            }
        }));
    }
    let mut healthy_events = 0;
    let mut peak = baseline;
    let last = start + writes as i64;
    while healthy_events < writes {
        let response = next(&mut healthy).await;
        healthy_events += response.events().len();
        peak = peak.max(cluster.rss_bytes(follower).unwrap_or(0));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let grown = peak.saturating_sub(baseline) >> 20;
    eprintln!(
        "slow reader: member RSS {} MiB -> peak {} MiB",
        baseline >> 20,
        peak >> 20
    );
    if cluster.target() != Target::Quantykube {
        // etcd 3.4 fails this test: its member grew from 27 to 435 MiB and the slow
        // reader's stream broke before it had every event.
        return;
    }
    {
        // The writes alone grow a member by about 110 MiB (memtables, caches); the slow
        // stream adds the feed's 32 batches (about 35 MiB here). Buffering its events
        // instead would add 380 MiB.
        assert!(
            grown < 250,
            "the member grew by {grown} MiB under a slow reader"
        );
    }

    // The slow reader still gets every event, in order, once each.
    let (events, alive) = events_through(&mut slow, last).await;
    assert!(alive);
    let revisions: Vec<i64> = events.iter().map(|e| e.revision).collect();
    assert_eq!(revisions, (start + 1..=last).collect::<Vec<_>>());
    assert_prev_kv_is_the_event_before(&events);
}

#[tokio::test]
async fn a_lagging_watcher_is_canceled_when_compaction_passes_it() {
    let cluster = Cluster::start(3).await;
    let mut client = cluster.client_all().await;
    let start = current_revision(&mut client).await;
    let options = WatchOptions::new()
        .with_prefix()
        .with_start_revision(start + 1);
    let mut lagging = cluster
        .client(1)
        .await
        .watch("lag/", Some(options))
        .await
        .unwrap();
    let created = next(&mut lagging).await;
    assert!(created.created());
    // More than the transport and the stream hold, while it reads nothing.
    let value = "y".repeat(32 * 1024);
    for i in 0..400 {
        client
            .put(format!("lag/{}", i % 10), value.clone(), None)
            .await
            .unwrap();
    }
    let compact_at = current_revision(&mut client).await;
    client.compact(compact_at, None).await.unwrap();
    let mut delivered = start;
    loop {
        let response = next(&mut lagging).await;
        if response.canceled() {
            assert_eq!(response.compact_revision(), compact_at, "{response:?}");
            assert_eq!(response.watch_id(), created.watch_id());
            assert!(
                delivered < compact_at - 1,
                "canceled though nothing was lost"
            );
            break;
        }
        for e in events_of(&response) {
            assert_eq!(e.revision, delivered + 1, "a gap before the cancel");
            delivered = e.revision;
        }
        assert!(
            delivered < compact_at + 1,
            "got everything: nothing to cancel"
        );
    }
}

#[tokio::test]
async fn ten_thousand_watchers_on_a_stream_and_a_thousand_streams_stay_cheap() {
    const WATCHERS: usize = 10_000;
    const STREAMS: usize = 1_000;
    const PUTS: usize = 200;
    if Target::from_env() == Target::Etcd {
        // Against etcd 3.4 every stream breaks: etcd-client's HTTP/2 library (h2) ends
        // the connection with ENHANCE_YOUR_CALM ("too_many_data_frames") for the many
        // small DATA frames etcd sends.
        eprintln!("skipped against etcd");
        return;
    }
    let (cluster, watching, mut client, mut writer) = on_a_follower(ClusterOptions::new(3)).await;
    let before = cluster.rss_bytes(watching);

    // One stream, one watcher per key.
    let mut many = client.watch("s/00000", None).await.unwrap();
    assert_eq!(next(&mut many).await.watch_id(), 0);
    for i in 1..WATCHERS {
        many.watch(format!("s/{i:05}"), None).await.unwrap();
    }
    for i in 1..WATCHERS {
        let created = next(&mut many).await;
        assert!(created.created(), "{created:?}");
        assert_eq!(created.watch_id(), i as i64);
    }
    // Many streams on one connection, each watching every key.
    let mut streams = Vec::with_capacity(STREAMS);
    for _ in 0..STREAMS {
        let mut stream = client
            .watch("s/", Some(WatchOptions::new().with_prefix()))
            .await
            .unwrap();
        assert!(next(&mut stream).await.created());
        streams.push(stream);
    }
    let with_watchers = cluster.rss_bytes(watching);

    // Read every stream while writing, as a real client does (h2 refuses to buffer
    // unbounded small frames for a reader that does not read).
    let base = current_revision(&mut writer).await;
    let last = base + PUTS as i64;
    let readers: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                let (events, alive) = events_through(&mut stream, last).await;
                assert!(alive);
                assert_eq!(events.len(), PUTS);
            })
        })
        .collect();
    let per_key = tokio::spawn(async move { collect(&mut many, PUTS).await });
    let key_of = |n: usize| (n * 7919) % WATCHERS;
    for n in 0..PUTS {
        writer
            .put(format!("s/{:05}", key_of(n)), n.to_string(), None)
            .await
            .unwrap();
    }
    let peak = cluster.rss_bytes(watching);
    // Every per-key watcher gets exactly its key's events.
    for (id, events) in per_key.await.unwrap() {
        for e in events {
            let n: usize = e.value.parse().unwrap();
            assert_eq!(key_of(n) as i64, id, "{e:?} went to watcher {id}");
            assert_eq!(e.revision, base + 1 + n as i64);
        }
    }
    // And every stream gets every event, in order.
    for reader in readers {
        reader.await.unwrap();
    }
    if let (Some(before), Some(with_watchers), Some(peak)) = (before, with_watchers, peak) {
        eprintln!(
            "{WATCHERS} watchers on a stream and {STREAMS} streams: RSS {} -> {} MiB, {} MiB \
             after {PUTS} puts",
            before >> 20,
            with_watchers >> 20,
            peak >> 20
        );
        if cluster.target() == Target::Quantykube {
            assert!(
                (with_watchers.saturating_sub(before) >> 20) < 100,
                "the watchers alone cost more than 100 MiB"
            );
        }
    }
}
