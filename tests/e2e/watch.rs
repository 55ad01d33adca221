//! Watch: one stream with many watches, every create option, history replay, cancel,
//! progress, compaction, fragments, slow readers, and watches on every member across a
//! leader kill and a resume on another member, all on three-member clusters, watching on
//! a follower while writes go through the other. Each test runs against QuantyKube and,
//! with `QK_TEST_TARGET=etcd`, against etcd; the few places where etcd 3.4 (Debian's)
//! answers differently from the etcd 3.5 semantics we follow say so.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, EventType, Txn, TxnOp, WatchFilterType, WatchOptions, WatchResponse, WatchStream,
};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::harness::*;

/// How long a test waits for one watch response.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(15);

const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";
const EMPTY_RANGE: &str = "mvcc: watcher range is empty";
const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";

/// An event as the tests compare them: put or delete, key, value, mod revision,
/// version, and the previous (value, mod revision) if sent.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ev {
    put: bool,
    key: String,
    value: String,
    revision: i64,
    version: i64,
    prev: Option<(String, i64)>,
}

fn ev(put: bool, key: &str, value: &str, revision: i64, prev: Option<(&str, i64)>) -> Ev {
    Ev {
        put,
        key: key.to_owned(),
        value: value.to_owned(),
        revision,
        version: 0,
        prev: prev.map(|(v, r)| (v.to_owned(), r)),
    }
}

/// Events without versions, for comparing with [`ev`].
fn unversioned(events: Vec<Ev>) -> Vec<Ev> {
    events.into_iter().map(|e| Ev { version: 0, ..e }).collect()
}

fn events_of(response: &WatchResponse) -> Vec<Ev> {
    response
        .events()
        .iter()
        .map(|e| {
            let kv = e.kv().expect("an event carries its key");
            Ev {
                put: e.event_type() == EventType::Put,
                key: lossy(kv.key()),
                value: lossy(kv.value()),
                revision: kv.mod_revision(),
                version: kv.version(),
                prev: e.prev_kv().map(|p| (lossy(p.value()), p.mod_revision())),
            }
        })
        .collect()
}

/// The next response on `stream`, failing the test if none comes in time.
async fn next(stream: &mut WatchStream) -> WatchResponse {
    tokio::time::timeout(RESPONSE_TIMEOUT, stream.message())
        .await
        .expect("a watch response in time")
        .expect("the watch stream works")
        .expect("the watch stream is open")
}

/// Asserts that nothing arrives on `stream` for `quiet`.
async fn assert_quiet(stream: &mut WatchStream, quiet: Duration) {
    if let Ok(got) = tokio::time::timeout(quiet, stream.message()).await {
        panic!("expected nothing on the stream, got {got:?}");
    }
}

/// Creates a watch on `stream` and returns its id (asserting it was created).
async fn create(stream: &mut WatchStream, key: &str, options: WatchOptions) -> i64 {
    stream.watch(key, Some(options)).await.expect("send create");
    let created = next(stream).await;
    assert!(
        created.created() && !created.canceled(),
        "created: {created:?}"
    );
    created.watch_id()
}

/// Events per watch id from responses on `stream` until `want` events have come.
async fn collect(stream: &mut WatchStream, want: usize) -> BTreeMap<i64, Vec<Ev>> {
    let mut got: BTreeMap<i64, Vec<Ev>> = BTreeMap::new();
    let mut count = 0;
    while count < want {
        let response = next(stream).await;
        let events = events_of(&response);
        count += events.len();
        got.entry(response.watch_id()).or_default().extend(events);
    }
    got
}

/// A three-member cluster, the index of a follower, a client of that follower (to
/// watch on) and a client of the other follower (to write through: its writes are
/// forwarded to the leader, and the watching member learns of them by replication).
async fn on_a_follower(options: ClusterOptions) -> (Cluster, usize, Client, Client) {
    let cluster = options.start().await;
    let leader = cluster.leader_index().await;
    let (watching, writing) = ((leader + 1) % 3, (leader + 2) % 3);
    let watch_client = cluster.client(watching).await;
    let writer = cluster.client(writing).await;
    (cluster, watching, watch_client, writer)
}

#[tokio::test]
async fn one_stream_carries_many_watches_with_their_ranges_filters_and_ids() {
    let (_cluster, _, mut client, mut writer) = on_a_follower(ClusterOptions::new(3)).await;
    let mut stream = client.watch("a", None).await.expect("watch");
    let created = next(&mut stream).await;
    assert!(created.created());
    // Assigned ids count up from 0 on each stream.
    assert_eq!(created.watch_id(), 0);
    let prefix = create(&mut stream, "b", WatchOptions::new().with_prefix()).await;
    assert_eq!(prefix, 1);
    let deletes_from_c = WatchOptions::new()
        .with_from_key()
        .with_filters([WatchFilterType::NoPut]);
    assert_eq!(create(&mut stream, "c", deletes_from_c).await, 2);
    let puts_d_to_f = WatchOptions::new()
        .with_range("f")
        .with_filters([WatchFilterType::NoDelete])
        .with_prev_key();
    assert_eq!(create(&mut stream, "d", puts_d_to_f).await, 3);
    let chosen = WatchOptions::new().with_watch_id(100);
    assert_eq!(create(&mut stream, "x", chosen).await, 100);

    // A duplicate client id and an empty range are refused as etcd refuses them.
    for (key, options, reason) in [
        ("y", WatchOptions::new().with_watch_id(100), DUPLICATE_ID),
        ("z", WatchOptions::new().with_range("a"), EMPTY_RANGE),
        ("z", WatchOptions::new().with_range("z"), EMPTY_RANGE),
    ] {
        stream.watch(key, Some(options)).await.expect("send create");
        let refused = next(&mut stream).await;
        assert!(refused.created() && refused.canceled(), "{refused:?}");
        assert_eq!(
            (refused.watch_id(), refused.cancel_reason()),
            (-1, reason),
            "{refused:?}"
        );
    }

    // A canceled id is never assigned again on the stream.
    stream.cancel(prefix).await.expect("send cancel");
    let canceled = next(&mut stream).await;
    assert!(canceled.canceled() && !canceled.created(), "{canceled:?}");
    assert_eq!(canceled.watch_id(), prefix);
    let prefix_again = create(&mut stream, "b", WatchOptions::new().with_prefix()).await;
    assert_eq!(prefix_again, 4);

    let base = current_revision(&mut writer).await;
    for (key, value) in [
        ("a", "1"),
        ("b1", "1"),
        ("c", "1"),
        ("d", "1"),
        ("e", "1"),
        ("e", "2"),
        ("x", "1"),
        ("f", "1"),
    ] {
        writer.put(key, value, None).await.expect("put");
    }
    writer.delete("c", None).await.expect("delete");
    writer.delete("e", None).await.expect("delete");
    let r = |n: i64| base + n;
    let got = collect(&mut stream, 8).await;
    let expected: BTreeMap<i64, Vec<Ev>> = [
        (0, vec![ev(true, "a", "1", r(1), None)]),
        (4, vec![ev(true, "b1", "1", r(2), None)]),
        (
            2,
            vec![
                ev(false, "c", "", r(9), None),
                ev(false, "e", "", r(10), None),
            ],
        ),
        (
            3,
            vec![
                ev(true, "d", "1", r(4), None),
                ev(true, "e", "1", r(5), None),
                ev(true, "e", "2", r(6), Some(("1", r(5)))),
            ],
        ),
        (100, vec![ev(true, "x", "1", r(7), None)]),
    ]
    .into_iter()
    .collect();
    let got: BTreeMap<i64, Vec<Ev>> = got.into_iter().map(|(k, v)| (k, unversioned(v))).collect();
    assert_eq!(got, expected);
    assert_quiet(&mut stream, Duration::from_millis(300)).await;
}

#[tokio::test]
async fn a_watch_from_a_past_revision_replays_history_atomically_with_prev_kv() {
    let (_cluster, _, mut client, mut writer) = on_a_follower(ClusterOptions::new(3)).await;
    let base = current_revision(&mut writer).await;
    writer.put("k1", "a", None).await.unwrap(); // base + 1
    writer.put("k2", "a", None).await.unwrap(); // base + 2
    let txn = Txn::new().and_then([TxnOp::put("k1", "b", None), TxnOp::delete("k2", None)]);
    writer.txn(txn).await.unwrap(); // base + 3
    writer.put("k1", "c", None).await.unwrap(); // base + 4
    let r = |n: i64| base + n;
    // A linearizable read on the watching member: it has applied everything so far.
    assert_eq!(current_revision(&mut client).await, r(4));

    let options = WatchOptions::new()
        .with_prefix()
        .with_prev_key()
        .with_start_revision(r(2));
    let mut stream = client.watch("k", Some(options)).await.unwrap();
    let created = next(&mut stream).await;
    assert!(created.created());
    assert_eq!(header_rev(created.header()), r(4));
    let mut got = Vec::new();
    while got.len() < 4 {
        let response = next(&mut stream).await;
        let events = events_of(&response);
        // Atomic: a revision's events are never split across responses.
        if events.iter().any(|e| e.revision == r(3)) {
            assert_eq!(
                events.iter().filter(|e| e.revision == r(3)).count(),
                2,
                "{events:?}"
            );
        }
        got.extend(events);
    }
    assert_eq!(
        unversioned(got.clone()),
        vec![
            ev(true, "k2", "a", r(2), None),
            ev(true, "k1", "b", r(3), Some(("a", r(1)))),
            ev(false, "k2", "", r(3), Some(("a", r(2)))),
            ev(true, "k1", "c", r(4), Some(("b", r(3)))),
        ]
    );
    assert_eq!(got[3].version, 3, "{got:?}");
    // Live events follow history without a gap.
    writer.put("k3", "a", None).await.unwrap();
    let live = events_of(&next(&mut stream).await);
    assert_eq!(unversioned(live), vec![ev(true, "k3", "a", r(5), None)]);

    // From "now" (0): the created header says where it starts; only later events come.
    assert_eq!(current_revision(&mut client).await, r(5));
    let mut from_now = client
        .watch("k", Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    let created = next(&mut from_now).await;
    assert_eq!(header_rev(created.header()), r(5));
    writer.put("k1", "d", None).await.unwrap();
    assert_eq!(
        unversioned(events_of(&next(&mut from_now).await)),
        vec![ev(true, "k1", "d", r(6), None)]
    );

    // A start revision in the future: nothing until the store gets there.
    let future = WatchOptions::new().with_prefix().with_start_revision(r(8));
    let mut later = client.watch("k", Some(future)).await.unwrap();
    assert!(next(&mut later).await.created());
    writer.put("k1", "e", None).await.unwrap(); // r(7)
    writer.put("k1", "f", None).await.unwrap(); // r(8)
    assert_eq!(
        unversioned(events_of(&next(&mut later).await)),
        vec![ev(true, "k1", "f", r(8), None)]
    );
}

#[tokio::test]
async fn create_request_edge_cases_are_answered_as_etcd_answers_them() {
    let (cluster, _, mut client, mut writer) = on_a_follower(ClusterOptions::new(3)).await;
    // No key with range end "\0" is every key.
    let mut all = client
        .watch("", Some(WatchOptions::new().with_all_keys()))
        .await
        .unwrap();
    assert!(next(&mut all).await.created());
    // Both filters: nothing is ever sent.
    let both = WatchOptions::new()
        .with_prefix()
        .with_filters([WatchFilterType::NoPut, WatchFilterType::NoDelete]);
    let mut nothing = client.watch("", Some(both)).await.unwrap();
    assert!(next(&mut nothing).await.created());
    let base = current_revision(&mut writer).await;
    writer.put("\u{1}", "low", None).await.unwrap();
    writer.put("zzz", "high", None).await.unwrap();
    writer.delete("zzz", None).await.unwrap();
    let got = collect(&mut all, 3).await.remove(&0).unwrap_or_default();
    assert_eq!(
        unversioned(got),
        vec![
            ev(true, "\u{1}", "low", base + 1, None),
            ev(true, "zzz", "high", base + 2, None),
            ev(false, "zzz", "", base + 3, None),
        ]
    );
    assert_quiet(&mut nothing, Duration::from_millis(300)).await;

    // Canceling an id the stream does not know is answered with nothing.
    all.cancel(12345).await.unwrap();
    assert_quiet(&mut all, Duration::from_millis(300)).await;

    if cluster.target() == Target::Quantykube {
        // etcd 3.5 refuses a negative start revision as compacted; etcd 3.4 (Debian's)
        // accepts it as a watch from revision 1.
        let negative = WatchOptions::new().with_start_revision(-5);
        all.watch("k", Some(negative)).await.unwrap();
        let refused = next(&mut all).await;
        assert!(refused.created() && refused.canceled(), "{refused:?}");
        assert_eq!(
            (refused.watch_id(), refused.cancel_reason()),
            (-1, COMPACTED)
        );
    }
}

#[tokio::test]
async fn progress_is_reported_on_request_and_to_idle_watchers_that_ask() {
    let options = ClusterOptions::new(3).arg("--experimental-watch-progress-notify-interval=500ms");
    let (cluster, _, mut client, mut writer) = on_a_follower(options).await;
    let options = WatchOptions::new().with_prefix().with_progress_notify();
    let mut stream = client.watch("p", Some(options)).await.unwrap();
    let id = next(&mut stream).await.watch_id();
    writer.put("other", "1", None).await.unwrap();
    let current = current_revision(&mut client).await;

    // An idle watcher that asked for progress hears the revision within the interval.
    let started = Instant::now();
    let progress = next(&mut stream).await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(progress.watch_id(), id, "{progress:?}");
    assert!(progress.events().is_empty() && !progress.created() && !progress.canceled());
    assert_eq!(header_rev(progress.header()), current);

    // A progress request is answered for the whole stream, with watch id -1.
    let mut plain = client.watch("q", None).await.unwrap();
    assert!(next(&mut plain).await.created());
    plain.request_progress().await.unwrap();
    let answer = next(&mut plain).await;
    assert_eq!(answer.watch_id(), -1, "{answer:?}");
    assert!(answer.events().is_empty());
    assert_eq!(header_rev(answer.header()), current);

    if cluster.target() == Target::Quantykube {
        // Bookmarkable (etcd 3.5's rule; etcd 3.4 answers at once): a watcher replaying
        // history holds the answer back until everything up to its revision was sent.
        let base = current_revision(&mut writer).await;
        for i in 0..300 {
            writer.put(format!("h{i:03}"), "v", None).await.unwrap();
        }
        assert_eq!(current_revision(&mut client).await, base + 300);
        let history = WatchOptions::new()
            .with_prefix()
            .with_start_revision(base + 1);
        plain.watch("h", Some(history)).await.unwrap();
        plain.request_progress().await.unwrap();
        let mut seen = 0;
        loop {
            let response = next(&mut plain).await;
            if response.watch_id() == -1 {
                assert_eq!(header_rev(response.header()), base + 300);
                assert_eq!(seen, 300, "progress came before the history it vouches for");
                break;
            }
            seen += response.events().len();
        }
    }
}

#[tokio::test]
async fn compaction_cancels_watches_that_need_removed_history() {
    let (_cluster, _, mut client, mut writer) = on_a_follower(ClusterOptions::new(3)).await;
    let base = current_revision(&mut writer).await;
    for i in 0..10 {
        writer.put("c", format!("{i}"), None).await.unwrap();
    }
    let compact_at = base + 6;
    writer.compact(compact_at, None).await.unwrap();
    // The watching member has applied the compaction.
    current_revision(&mut client).await;

    let old = WatchOptions::new().with_start_revision(base + 3);
    let mut stream = client.watch("c", Some(old)).await.unwrap();
    let created = next(&mut stream).await;
    assert!(created.created() && !created.canceled(), "{created:?}");
    let canceled = next(&mut stream).await;
    assert!(canceled.canceled(), "{canceled:?}");
    assert_eq!(canceled.watch_id(), created.watch_id());
    assert_eq!(canceled.compact_revision(), compact_at);

    // The compacted revision itself is still there to start from.
    let at = WatchOptions::new().with_start_revision(compact_at);
    let mut stream = client.watch("c", Some(at)).await.unwrap();
    assert!(next(&mut stream).await.created());
    let got = collect(&mut stream, 5).await.remove(&0).unwrap_or_default();
    let revisions: Vec<i64> = got.iter().map(|e| e.revision).collect();
    assert_eq!(revisions, (compact_at..=base + 10).collect::<Vec<_>>());
}

#[tokio::test]
async fn large_responses_are_fragmented_for_watchers_that_allow_it() {
    let max_request = 64 * 1024;
    let options = ClusterOptions::new(3).arg(format!("--max-request-bytes={max_request}"));
    let (_cluster, _, mut client, mut writer) = on_a_follower(options).await;
    let base = current_revision(&mut writer).await;
    let value = "v".repeat(60 * 1024);
    for i in 0..40 {
        client
            .put(format!("f{i:02}"), value.clone(), None)
            .await
            .unwrap();
    }
    // etcd's limit on a fragment: the request limit plus gRPC's overhead.
    let limit = max_request + 512 * 1024;
    for fragment in [true, false] {
        let mut options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(base + 1);
        if fragment {
            options = options.with_fragment();
        }
        let mut stream = client.watch("f", Some(options)).await.unwrap();
        assert!(next(&mut stream).await.created());
        let (mut events, mut fragments) = (Vec::new(), 0);
        while events.len() < 40 {
            let response = next(&mut stream).await;
            let got = events_of(&response);
            // etcd-client shows the raw response (its `build-server` feature).
            if response.0.fragment {
                fragments += 1;
            }
            if fragment && got.len() > 1 {
                let bytes = prost::Message::encoded_len(&response.0);
                assert!(bytes < limit, "a fragment of {bytes} bytes");
            }
            events.extend(got);
        }
        let revisions: Vec<i64> = events.iter().map(|e| e.revision).collect();
        assert_eq!(revisions, (base + 1..=base + 40).collect::<Vec<_>>());
        assert_eq!(fragments > 0, fragment, "fragments: {fragments}");
    }
}

#[tokio::test]
async fn etcdctl_watch_prints_history_and_live_events() {
    let cluster = Cluster::start(3).await;
    let mut client = cluster.client_all().await;
    let base = current_revision(&mut client).await;
    client.put("w1", "a", None).await.unwrap();
    let mut child = tokio::process::Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.endpoint(1)))
        .args(["watch", "--prefix", "w", "--rev"])
        .arg((base + 1).to_string())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn etcdctl watch");
    let stdout = child.stdout.take().expect("etcdctl stdout");
    let mut lines = BufReader::new(stdout).lines();
    // Write while it watches: a live put and a delete after the replayed put.
    let writer = cluster.endpoint(0);
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut client = connect(&[writer]).await;
        client.put("w2", "b", None).await.unwrap();
        client.delete("w1", None).await.unwrap();
    });
    let mut got = Vec::new();
    while got.len() < 8 {
        let line = tokio::time::timeout(RESPONSE_TIMEOUT, lines.next_line())
            .await
            .expect("etcdctl prints in time")
            .expect("read etcdctl output")
            .expect("etcdctl still runs");
        got.push(line);
    }
    assert_eq!(got, ["PUT", "w1", "a", "PUT", "w2", "b", "DELETE", "w1"]);
    child.kill().await.ok();
}

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
