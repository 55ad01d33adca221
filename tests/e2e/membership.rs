//! Membership changes on real processes: growing a cluster 1 → 3 → 5 and shrinking it
//! back under writes and watches (MemberAdd, joining with `--initial-cluster-state
//! existing`, MemberRemove of followers and of the leader), replacing a member whose
//! disk was wiped, and MoveLeader. Learners (kubeadm's join and reset, what a learner
//! refuses, etcdctl's member commands) are in `membership_learners.rs`, misuse of the
//! Cluster service in `membership_errors.rs`; `membership_support.rs` has the helpers
//! and the etcd 3.4 facts these tests lean on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{EventType, GetOptions, Member, WatchOptions};
use tokio::task::JoinHandle;
use tonic::Code;

use crate::harness::*;
use crate::membership_support::*;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

/// A member as MemberList shows it: (id, name, peer URLs, client URLs, learner).
pub(crate) type Listed = (u64, String, Vec<String>, Vec<String>, bool);

/// The member list as comparable rows, sorted by ID.
pub(crate) fn listing(members: &[Member]) -> Vec<Listed> {
    let mut rows: Vec<_> = members
        .iter()
        .map(|m| {
            (
                m.id(),
                m.name().to_owned(),
                m.peer_urls().to_vec(),
                m.client_urls().to_vec(),
                m.is_learner(),
            )
        })
        .collect();
    rows.sort();
    rows
}

/// One acknowledged put: key, value, the revision its answer carried, and when.
#[derive(Clone, Debug)]
struct Ack {
    key: String,
    value: String,
    revision: i64,
    at: Instant,
}

/// How long a writer waits for one put before it gives up on it and writes the next
/// key. A put in flight when the leader goes away is answered only after etcd's request
/// timeout (7 s with the default election timeout); giving up on it sooner lets the
/// writers measure how long the cluster really takes to accept writes again.
const PUT_TIMEOUT: Duration = Duration::from_secs(1);

/// Writers of unique keys under a prefix, one task per member written through, each
/// on its own connection to that member. A failed or abandoned put is not retried (its
/// key is never reused; it may still have been applied); every acknowledged put is
/// recorded.
struct Writers {
    prefix: String,
    running: BTreeMap<usize, (Arc<AtomicBool>, JoinHandle<Vec<Ack>>)>,
    stopped: Vec<Ack>,
    acked: Arc<AtomicUsize>,
    /// Writers started so far: a member written through twice (it was replaced) gets
    /// new keys the second time.
    started: usize,
}

impl Writers {
    fn new(prefix: &str) -> Writers {
        Writers {
            prefix: prefix.to_owned(),
            running: BTreeMap::new(),
            stopped: Vec::new(),
            acked: Arc::new(AtomicUsize::new(0)),
            started: 0,
        }
    }

    /// Starts writing through member `i`.
    async fn start(&mut self, cluster: &Cluster, i: usize) {
        assert!(!self.running.contains_key(&i), "writer on member {i} runs");
        let mut client = cluster.client(i).await;
        let stop = Arc::new(AtomicBool::new(false));
        let acked = self.acked.clone();
        let prefix = format!("{}m{i}-w{}-", self.prefix, self.started);
        self.started += 1;
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut acks = Vec::new();
            let mut seq = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let key = format!("{prefix}{seq:06}");
                let value = format!("value-{prefix}{seq}");
                seq += 1;
                let put =
                    tokio::time::timeout(PUT_TIMEOUT, client.put(key.clone(), value.clone(), None));
                match put.await {
                    Ok(Ok(resp)) => {
                        acks.push(Ack {
                            key,
                            value,
                            revision: header_rev(resp.header()),
                            at: Instant::now(),
                        });
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err(_)) => tokio::time::sleep(Duration::from_millis(20)).await,
                    Err(_elapsed) => {}
                }
            }
            acks
        });
        self.running.insert(i, (stop, task));
    }

    /// Stops the writer through member `i`, keeping what it acknowledged.
    async fn stop(&mut self, i: usize) {
        let (stop, task) = self.running.remove(&i).expect("a writer on that member");
        stop.store(true, Ordering::Relaxed);
        let acks = tokio::time::timeout(RPC_TIMEOUT + Duration::from_secs(5), task)
            .await
            .expect("writer stops within one RPC timeout")
            .expect("writer task");
        self.stopped.extend(acks);
    }

    fn acked(&self) -> usize {
        self.acked.load(Ordering::Relaxed)
    }

    /// Waits until `n` more puts than now have been acknowledged.
    async fn wait_more(&self, n: usize, what: &str) {
        let target = self.acked() + n;
        let deadline = Deadline::after(Duration::from_secs(30), format!("{n} more acks {what}"));
        while self.acked() < target {
            deadline.tick().await;
        }
    }

    /// Stops every writer and returns all acknowledged puts.
    async fn finish(mut self) -> Vec<Ack> {
        let members: Vec<usize> = self.running.keys().copied().collect();
        for i in members {
            self.stop(i).await;
        }
        self.stopped
    }
}

/// Asserts that each acknowledged put has its own revision and that a linearizable
/// range on member `i` has every one exactly once (version 1, created and modified at
/// the acknowledged revision) with the value written.
async fn assert_acks_stored(cluster: &Cluster, i: usize, prefix: &str, acks: &[Ack]) {
    let revisions: BTreeSet<i64> = acks.iter().map(|a| a.revision).collect();
    assert_eq!(revisions.len(), acks.len(), "each put has its own revision");
    let mut client = cluster.client(i).await;
    let resp = client
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap_or_else(|e| panic!("range {prefix} on member {i}: {e}"));
    let stored: BTreeMap<String, (String, (i64, i64, i64))> = resp
        .kvs()
        .iter()
        .map(|kv| (lossy(kv.key()), (lossy(kv.value()), revs(kv))))
        .collect();
    for ack in acks {
        assert_eq!(
            stored.get(&ack.key),
            Some(&(ack.value.clone(), (ack.revision, ack.revision, 1))),
            "acknowledged put {} at revision {} on member {i}",
            ack.key,
            ack.revision
        );
    }
}

/// One watched event: revision, key, put (true) or delete.
type Seen = (i64, String, bool);

/// A watch on a prefix from revision 1 through one member, recording every event until
/// it sees `end_key`, the stream fails or ends, or it is dropped by the deadline.
struct Watcher {
    member: usize,
    task: JoinHandle<(Vec<Seen>, Result<(), String>)>,
}

impl Watcher {
    async fn start(cluster: &Cluster, i: usize, prefix: &str, end_key: &str) -> Watcher {
        let mut client = cluster.client(i).await;
        let options = WatchOptions::new().with_prefix().with_start_revision(1);
        let mut stream = client
            .watch(prefix, Some(options))
            .await
            .unwrap_or_else(|e| panic!("watch on member {i}: {e}"));
        let end_key = end_key.to_owned();
        let task = tokio::spawn(async move {
            let _client = client;
            let mut seen = Vec::new();
            loop {
                let resp = match stream.message().await {
                    Ok(Some(resp)) => resp,
                    Ok(None) => return (seen, Err("stream ended".to_owned())),
                    Err(e) => return (seen, Err(e.to_string())),
                };
                if resp.canceled() {
                    return (seen, Err(format!("cancelled: {}", resp.cancel_reason())));
                }
                for event in resp.events() {
                    let kv = event.kv().expect("an event carries its key");
                    let key = lossy(kv.key());
                    let done = key == end_key;
                    seen.push((kv.mod_revision(), key, event.event_type() == EventType::Put));
                    if done {
                        return (seen, Ok(()));
                    }
                }
            }
        });
        Watcher { member: i, task }
    }

    /// The events seen and whether the watch saw the end key (`Ok`) or broke.
    async fn finish(self, timeout: Duration) -> (usize, Vec<Seen>, Result<(), String>) {
        let member = self.member;
        let abort = self.task.abort_handle();
        match tokio::time::timeout(timeout, self.task).await {
            Ok(result) => {
                let (seen, end) = result.expect("watcher task");
                (member, seen, end)
            }
            Err(_) => {
                abort.abort();
                panic!("watcher on member {member} saw no end key within {timeout:?}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Growing and shrinking under writes and watches
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn grow_and_shrink_under_writes() {
    const PREFIX: &str = "grow/";
    const END: &str = "grow/~end";
    let mut cluster = Cluster::start(1).await;
    let mut writers = Writers::new(PREFIX);
    let mut watchers = vec![Watcher::start(&cluster, 0, PREFIX, END).await];
    writers.start(&cluster, 0).await;
    writers.wait_more(50, "on one member").await;

    // Grow 1 → 5, one voter at a time; each new member writes and watches too.
    for size in 2..=5 {
        let via = cluster.leader_index().await;
        let i = cluster.add_member(via, false).await;
        cluster.wait_member_ready(i, JOIN_TIMEOUT).await;
        cluster.wait_started(via, i, JOIN_TIMEOUT).await;
        watchers.push(Watcher::start(&cluster, i, PREFIX, END).await);
        writers.start(&cluster, i).await;
        writers.wait_more(50, &format!("with {size} members")).await;
    }
    wait_members_agree(&cluster, Duration::from_secs(15)).await;
    assert_eq!(cluster.running().len(), 5);

    // Shrink 5 → 4 → 3: a follower (through the leader), then the leader (through a
    // follower). Their writers keep writing until the member is gone.
    let leader = cluster.leader_index().await;
    let follower = *cluster.running().iter().find(|&&i| i != leader).unwrap();
    let follower_id = cluster.member_id(follower);
    let resp = member_remove_retrying(&mut cluster.client(leader).await, follower_id).await;
    assert!(!ids_of(resp.members()).contains(&follower_id));
    let status = cluster.wait_exit(follower, EXIT_TIMEOUT).await;
    assert!(status.is_some(), "removed follower {follower} still runs");
    writers.stop(follower).await;
    writers.wait_more(50, "after removing a follower").await;

    let leader = cluster.leader_index().await;
    let leader_id = cluster.member_id(leader);
    let via = *cluster.running().iter().find(|&&i| i != leader).unwrap();
    let resp = member_remove_retrying(&mut cluster.client(via).await, leader_id).await;
    assert!(!ids_of(resp.members()).contains(&leader_id));
    let status = cluster.wait_exit(leader, EXIT_TIMEOUT).await;
    assert!(status.is_some(), "removed leader {leader} still runs");
    writers.stop(leader).await;
    let new_leader = cluster.wait_leader(Duration::from_secs(15)).await;
    assert_ne!(new_leader, leader);
    writers.wait_more(50, "after removing the leader").await;
    wait_members_agree(&cluster, Duration::from_secs(15)).await;
    assert_eq!(cluster.running().len(), 3);

    let acks = writers.finish().await;
    eprintln!("{} acknowledged puts", acks.len());
    let survivors = cluster.running();
    let end = cluster
        .client(survivors[0])
        .await
        .put(END, "end", None)
        .await
        .expect("put the end key");
    let end_rev = header_rev(end.header());
    for &i in &survivors {
        assert_acks_stored(&cluster, i, PREFIX, &acks).await;
    }

    // Watchers on the survivors saw the same events; those on removed members saw a
    // prefix of them. Every acknowledged put is in the sequence, each event once.
    let mut finished = Vec::new();
    for watcher in watchers {
        finished.push(watcher.finish(Duration::from_secs(30)).await);
    }
    let reference = finished
        .iter()
        .find(|(_, _, end)| end.is_ok())
        .map(|(_, seen, _)| seen.clone())
        .expect("a watcher that stayed up");
    assert_eq!(reference.last().map(|s| s.0), Some(end_rev));
    assert!(
        reference.windows(2).all(|w| w[0].0 < w[1].0),
        "one event per revision, in order"
    );
    let watched: BTreeMap<&str, i64> = reference.iter().map(|(r, k, _)| (k.as_str(), *r)).collect();
    for ack in &acks {
        assert_eq!(
            watched.get(ack.key.as_str()),
            Some(&ack.revision),
            "watch saw {}",
            ack.key
        );
    }
    for (member, seen, end) in &finished {
        match end {
            Ok(()) => assert!(
                *seen == reference,
                "watcher on member {member} saw another sequence"
            ),
            Err(why) => {
                eprintln!(
                    "watcher on removed member {member}: {} events, {why}",
                    seen.len()
                );
                assert!(
                    [follower, leader].contains(member),
                    "watcher on surviving member {member} broke: {why}"
                );
                assert!(
                    reference.starts_with(seen),
                    "watcher on removed member {member} saw events the others did not"
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------------
// Replacing a member whose disk was wiped
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn replace_member_with_wiped_disk() {
    const PREFIX: &str = "wipe/";
    let mut cluster = Cluster::start(3).await;
    let mut writers = Writers::new(PREFIX);
    for i in 0..3 {
        writers.start(&cluster, i).await;
    }
    writers.wait_more(100, "before the failure").await;

    let leader = cluster.leader_index().await;
    let victim = (leader + 1) % 3;
    let old_id = cluster.member_id(victim);
    writers.stop(victim).await;
    cluster.kill9(victim);
    writers.wait_more(50, "with the member down").await;

    let mut via = cluster.client(leader).await;
    let resp = member_remove_retrying(&mut via, old_id).await;
    assert!(!ids_of(resp.members()).contains(&old_id));
    cluster.wipe(victim);

    // From here on the old ID must never be listed again.
    let stop = Arc::new(AtomicBool::new(false));
    let watch_list = {
        let stop = stop.clone();
        let mut client = cluster.client(leader).await;
        tokio::spawn(async move {
            let mut polls = 0;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(list) = client.member_list().await {
                    assert!(
                        !ids_of(list.members()).contains(&old_id),
                        "removed ID {old_id:x} listed again"
                    );
                    polls += 1;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            polls
        })
    };
    writers.wait_more(50, "after the removal").await;

    let added = member_add_retrying(&mut via, &cluster.peer_url(victim), false).await;
    let new_id = added.member().expect("the new member").id();
    assert_ne!(new_id, old_id, "a new ID for the same peer URL");
    assert!(!ids_of(added.member_list()).contains(&old_id));
    cluster.set_member_id(victim, new_id);
    let initial_cluster = initial_cluster_for(added.member_list(), new_id, &cluster.name(victim));
    cluster.start_joining(victim, &initial_cluster);
    cluster.wait_member_ready(victim, JOIN_TIMEOUT).await;
    cluster.wait_started(leader, victim, JOIN_TIMEOUT).await;
    writers.start(&cluster, victim).await;
    writers.wait_more(50, "with the replacement").await;
    let acks = writers.finish().await;

    stop.store(true, Ordering::Relaxed);
    let polls = watch_list.await.expect("member list poller");
    assert!(polls > 0, "the member list was polled");

    // The replacement serves linearizable reads of what was written before, while it
    // was gone, and after; all members list the same three IDs.
    assert_acks_stored(&cluster, victim, PREFIX, &acks).await;
    wait_members_agree(&cluster, Duration::from_secs(15)).await;
    let expected = listing(&members_of(&cluster, leader).await);
    for i in 0..3 {
        let list = members_of(&cluster, i).await;
        assert!(
            !ids_of(&list).contains(&old_id),
            "member {i} lists the old ID"
        );
        assert_eq!(listing(&list), expected, "member {i}'s list");
    }
}

// ---------------------------------------------------------------------------------
// Removing the leader under writes
// ---------------------------------------------------------------------------------

#[tokio::test]
async fn remove_leader_under_writes() {
    const PREFIX: &str = "rml/";
    let mut cluster = Cluster::start(3).await;
    let mut writers = Writers::new(PREFIX);
    for i in 0..3 {
        writers.start(&cluster, i).await;
    }
    writers.wait_more(100, "before the removal").await;

    let leader = cluster.leader_index().await;
    let leader_id = cluster.member_id(leader);
    let via = (leader + 1) % 3;
    let removing = Instant::now();
    let resp = member_remove_retrying(&mut cluster.client(via).await, leader_id).await;
    eprintln!("MemberRemove of the leader took {:?}", removing.elapsed());
    assert!(!ids_of(resp.members()).contains(&leader_id));
    let status = cluster
        .wait_exit(leader, EXIT_TIMEOUT)
        .await
        .unwrap_or_else(|| panic!("removed leader still runs after {EXIT_TIMEOUT:?}"));
    eprintln!("removed leader exited with {status}");
    let new_leader = cluster.wait_leader(Duration::from_secs(15)).await;
    assert_ne!(new_leader, leader);
    writers.wait_more(100, "after the removal").await;
    let acks = writers.finish().await;

    // The longest time without an acknowledged write, from the removal on.
    let mut times: Vec<Instant> = acks
        .iter()
        .map(|a| a.at)
        .filter(|&t| t >= removing)
        .collect();
    times.sort();
    let mut longest = times.first().map_or(Duration::MAX, |&t| t - removing);
    for pair in times.windows(2) {
        longest = longest.max(pair[1] - pair[0]);
    }
    eprintln!(
        "longest gap between acknowledged writes after the removal: {longest:?} ({} acks after)",
        times.len()
    );
    assert!(
        longest < Duration::from_secs(5),
        "writes stalled for {longest:?}"
    );

    // Two members remain, list each other only, and hold the same data.
    wait_members_agree(&cluster, Duration::from_secs(15)).await;
    let survivors = cluster.running();
    assert_eq!(survivors.len(), 2);
    let mut reader = cluster.client(new_leader).await;
    let revision = current_revision(&mut reader).await;
    let mut contents = Vec::new();
    for &i in &survivors {
        wait_applied(&cluster, i, revision, Duration::from_secs(15)).await;
        assert_acks_stored(&cluster, i, PREFIX, &acks).await;
        // Serializable at the same revision: each member's own applied store.
        let options = GetOptions::new()
            .with_all_keys()
            .with_serializable()
            .with_revision(revision);
        let resp = cluster
            .client(i)
            .await
            .get("", Some(options))
            .await
            .unwrap_or_else(|e| panic!("range on member {i}: {e}"));
        let rows: Vec<_> = resp
            .kvs()
            .iter()
            .map(|kv| (lossy(kv.key()), lossy(kv.value()), revs(kv)))
            .collect();
        contents.push(rows);
    }
    assert!(
        contents[0] == contents[1],
        "the survivors' stores at revision {revision} differ"
    );
}

// ---------------------------------------------------------------------------------
// MoveLeader
// ---------------------------------------------------------------------------------

/// The leader every running voter agrees on is `i`.
async fn wait_leader_is(cluster: &Cluster, i: usize, timeout: Duration) {
    let deadline = Deadline::after(timeout, format!("member {i} leads"));
    while cluster.current_leader().await != Some(i) {
        deadline.tick().await;
    }
}

#[tokio::test]
async fn move_leader() {
    let mut cluster = Cluster::start(3).await;
    let leader = cluster.leader_index().await;
    let target = (leader + 1) % 3;
    let other = (leader + 2) % 3;

    // etcdctl move-leader against the leader's endpoint.
    let out = cluster
        .etcdctl_on(
            leader,
            &["move-leader", &format!("{:x}", cluster.member_id(target))],
        )
        .await;
    out.assert_success();
    assert_eq!(
        out.stdout.trim(),
        format!(
            "Leadership transferred from {:x} to {:x}",
            cluster.member_id(leader),
            cluster.member_id(target)
        )
    );
    wait_leader_is(&cluster, target, Duration::from_secs(10)).await;
    let leader = target;

    // etcdctl itself refuses when no endpoint it was given is the leader.
    let out = cluster
        .etcdctl_on(
            other,
            &["move-leader", &format!("{:x}", cluster.member_id(other))],
        )
        .await;
    assert!(!out.success());
    assert!(
        out.stderr.contains(&format!(
            "no leader endpoint given at [{}]",
            cluster.endpoint(other)
        )),
        "etcdctl move-leader on a follower: {}",
        out.stderr
    );

    // Unknown IDs and learners cannot lead.
    let mut on_leader = cluster.client(leader).await;
    let (_, learner_id) = add_unstarted_learner(&mut cluster, &mut on_leader).await;
    assert_grpc_error(
        on_leader.move_leader(0x1234_5678_9abc_def0).await,
        Code::FailedPrecondition,
        BAD_TRANSFEREE,
    );
    assert_grpc_error(
        on_leader.move_leader(learner_id).await,
        Code::FailedPrecondition,
        BAD_TRANSFEREE,
    );
    // Moving leadership to the leader itself is a success that changes nothing,
    // answered at once with an empty response: etcd sets no header on any MoveLeader
    // answer (v3rpc's maintenanceServer.MoveLeader returns `&pb.MoveLeaderResponse{}`).
    let to_itself = on_leader
        .move_leader(cluster.member_id(leader))
        .await
        .expect("MoveLeader to the leader itself");
    assert!(
        to_itself.header().is_none(),
        "MoveLeader to itself carries a header: {to_itself:?}"
    );
    wait_leader_is(&cluster, leader, Duration::from_secs(10)).await;

    // MoveLeader sent to a follower: etcd 3.4 refuses it; QuantyKube forwards it to the
    // leader (as it forwards every request a follower cannot serve).
    let mut on_follower = cluster.client(other).await;
    let answer = on_follower.move_leader(cluster.member_id(other)).await;
    match cluster.target() {
        Target::Etcd => {
            assert_grpc_error(answer, Code::FailedPrecondition, NOT_LEADER);
            wait_leader_is(&cluster, leader, Duration::from_secs(10)).await;
        }
        Target::Quantykube => {
            let moved = answer.expect("MoveLeader through a follower");
            assert!(
                moved.header().is_none(),
                "MoveLeader carries a header: {moved:?}"
            );
            wait_leader_is(&cluster, other, Duration::from_secs(10)).await;
        }
    }
}
