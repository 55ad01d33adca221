//! Watch: one stream with many watches, every create option, history replay, cancel,
//! progress, compaction, fragments and etcdctl watch, on three-member clusters, watching
//! on a follower while writes go through the other (`watch_load.rs` has the tests under
//! load and failures, and uses the helpers here). Each test runs against QuantyKube and,
//! with `QK_TEST_TARGET=etcd`, against etcd; the few places where etcd 3.4 (Debian's)
//! answers differently from the etcd 3.5 semantics we follow say so.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, EventType, Txn, TxnOp, WatchFilterType, WatchOptions, WatchResponse, WatchStream,
};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::harness::*;

/// How long a test waits for one watch response.
pub(crate) const RESPONSE_TIMEOUT: Duration = Duration::from_secs(15);

const DUPLICATE_ID: &str = "mvcc: duplicate watch ID provided on the WatchStream";
const EMPTY_RANGE: &str = "mvcc: watcher range is empty";
const COMPACTED: &str = "etcdserver: mvcc: required revision has been compacted";

/// An event as the tests compare them: put or delete, key, value, mod revision,
/// version, and the previous (value, mod revision) if sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Ev {
    pub(crate) put: bool,
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) revision: i64,
    pub(crate) version: i64,
    pub(crate) prev: Option<(String, i64)>,
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

pub(crate) fn events_of(response: &WatchResponse) -> Vec<Ev> {
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
pub(crate) async fn next(stream: &mut WatchStream) -> WatchResponse {
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
pub(crate) async fn collect(stream: &mut WatchStream, want: usize) -> BTreeMap<i64, Vec<Ev>> {
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
pub(crate) async fn on_a_follower(options: ClusterOptions) -> (Cluster, usize, Client, Client) {
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
