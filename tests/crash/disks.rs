//! Full, failing and stalling disks under a live cluster.
//!
//! - A disk that fills up (ENOSPC): its member stops, saying why in its log (etcd too
//!   exits when it cannot write its WAL); the others go on serving; once there is space
//!   again the member starts and catches up. Nothing acknowledged is lost.
//! - A disk whose store files fail to read (EIO): the member never answers with data it
//!   could not read; it fails the request or stops; with the disk replaced it catches
//!   up.
//! - A disk whose syncs stall for seconds, a follower's or the leader's: no election
//!   (heartbeats never wait behind the disk), writes go on, and the test reports what
//!   the stall did to latencies and terms.
//!
//! Each ends with the same verdict as the power-loss scenarios.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use etcd_client::GetOptions;
use quantykube_crashfs::{ErrorRule, FileMatch, Stall};
use quantykube_simulation::history::{Op, Outcome};

use crate::harness::{Cluster, Target, START_TIMEOUT};
use crate::power::Choices;
use crate::rig::{Rig, Server};
use crate::traffic::{Record, Traffic};
use crate::verdict;

/// Whether member `i` is the leader role the scenario wants.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Role {
    Leader,
    Follower,
}

async fn pick(cluster: &Cluster, role: Role) -> usize {
    let leader = cluster.leader_index().await;
    match role {
        Role::Leader => leader,
        Role::Follower => (leader + 1) % cluster.size(),
    }
}

fn endpoints_but(cluster: &Cluster, skip: usize) -> Vec<String> {
    (0..cluster.size())
        .filter(|&i| i != skip)
        .map(|i| cluster.endpoint(i))
        .collect()
}

/// The last lines of member `i`'s log.
fn log_of(cluster: &Cluster, i: usize) -> String {
    std::fs::read_to_string(cluster.log_path(i)).unwrap_or_default()
}

async fn disk_fills_up(role: Role) {
    let Some(mut rig) = Rig::start(3, Server::Shipped, |o| o).await else {
        return;
    };
    let record = Record::new();
    let initial = rig.revision().await;
    let victim = pick(&rig.cluster, role).await;
    let traffic = Traffic::start(&record, &endpoints_but(&rig.cluster, victim), 0, 4);
    traffic.wait_for_writes(50, Duration::from_secs(90)).await;
    rig.disks[victim].set_faults(|f| f.space_left = Some(0));
    let exited = rig.cluster.wait_exit(victim, START_TIMEOUT).await;
    let log = log_of(&rig.cluster, victim);
    assert!(
        exited.is_some(),
        "member {victim} ({role:?}) with a full disk still runs; its log:\n{}",
        tail_of(&log)
    );
    assert!(
        log.contains("No space left on device") || log.contains("no space left on device"),
        "member {victim} stopped ({exited:?}) without saying its disk is full:\n{}",
        tail_of(&log)
    );
    // The others serve on.
    let acked = traffic.acked();
    traffic
        .wait_for_writes(acked + 100, Duration::from_secs(90))
        .await;
    // Space again: the member starts and catches up.
    rig.disks[victim].set_faults(|f| f.space_left = None);
    rig.cluster.start_member(victim);
    rig.cluster.wait_ready_all().await;
    traffic.stop().await;
    verdict::judge(&rig, &record, 9, initial).await;
    eprintln!("member {victim} ({role:?}) stopped on a full disk: {exited:?}");
}

fn tail_of(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_disk_fills_up_stops_and_catches_up_once_there_is_space() {
    disk_fills_up(Role::Follower).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_disk_fills_up_stops_and_the_others_serve_on() {
    disk_fills_up(Role::Leader).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_store_files_fail_to_read_never_answers_with_what_it_could_not_read() {
    if Target::from_env() == Target::Etcd {
        // The faults below fail RocksDB's table files (`.sst`); etcd 3.4's store is one
        // bbolt file read through mmap, which this scenario does not reach.
        eprintln!("etcd 3.4 has no table files: nothing to fail");
        return;
    }
    let Some(mut rig) = Rig::start(3, Server::Shipped, |o| o).await else {
        return;
    };
    let record = Record::new();
    let initial = rig.revision().await;
    let victim = pick(&rig.cluster, Role::Follower).await;
    let traffic = Traffic::start(&record, &rig.cluster.endpoints(), 0, 4);
    traffic.wait_for_writes(300, Duration::from_secs(90)).await;
    traffic.stop().await;
    // What round 0 wrote, whatever its outcome: the only values its keys may have.
    let written: HashMap<String, String> = record
        .history
        .operations()
        .into_iter()
        .filter_map(|o| match o.op {
            Op::Put { key, value } | Op::PutWithLease { key, value, .. } => Some((key, value)),
            _ => None,
        })
        .collect();
    // Everything the store holds into its table files, then those files fail to read,
    // while the others take more writes that the victim must apply.
    rig.cluster
        .etcdctl_on(victim, &["defrag"])
        .await
        .assert_success();
    rig.disks[victim].set_faults(|f| {
        f.errors.push(ErrorRule {
            op: quantykube_crashfs::Op::Read,
            files: FileMatch::new(|p| {
                p.starts_with("data") && p.extension().is_some_and(|e| e == "sst")
            }),
            errno: libc::EIO,
            times: None,
        })
    });
    let traffic = Traffic::start(&record, &endpoints_but(&rig.cluster, victim), 1, 4);
    let (mut answered, mut refused) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut client = rig.cluster.client(victim).await;
    while Instant::now() < deadline && rig.cluster.is_running(victim) {
        let got = client
            .get(
                "r0",
                Some(GetOptions::new().with_prefix().with_serializable()),
            )
            .await;
        match got {
            Ok(got) => {
                answered += 1;
                for kv in got.kvs() {
                    let key = String::from_utf8_lossy(kv.key()).into_owned();
                    let value = String::from_utf8_lossy(kv.value()).into_owned();
                    assert_eq!(
                        written.get(&key),
                        Some(&value),
                        "member {victim} answered {key}={value}"
                    );
                }
            }
            Err(_) => refused += 1,
        }
        if rig
            .cluster
            .wait_exit(victim, Duration::from_millis(100))
            .await
            .is_some()
        {
            break;
        }
    }
    let faults = rig.disks[victim].stats().faults_injected;
    eprintln!(
        "member {victim}, its table files failing: {answered} reads answered, {refused} \
         refused, {faults} failed disk reads, running: {}",
        rig.cluster.is_running(victim)
    );
    // The disk replaced (the fault gone): the member (started again if it stopped)
    // catches up.
    rig.disks[victim].clear_faults();
    traffic.stop().await;
    if rig.cluster.is_running(victim) {
        rig.cluster.kill9(victim);
    }
    rig.cluster.start_member(victim);
    rig.cluster.wait_ready_all().await;
    verdict::judge(&rig, &record, 9, initial).await;
}

/// A `role`'s syncs stall for 2-10 s under traffic; no election may follow.
pub(crate) async fn syncs_stall(server: Server, role: Role) {
    let Some(rig) = Rig::start(3, server, |o| o).await else {
        return;
    };
    let mut choices = Choices::new("syncs_stall");
    let stall = Duration::from_millis(2000 + choices.below(8000));
    let record = Record::new();
    let initial = rig.revision().await;
    let victim = pick(&rig.cluster, role).await;
    let term_before = term(&rig.cluster, victim).await;
    let traffic = Traffic::start(&record, &rig.cluster.endpoints(), 0, 4);
    traffic.wait_for_writes(100, Duration::from_secs(90)).await;
    let started = record.now();
    rig.disks[victim].set_faults(|f| {
        f.stalls.push(Stall {
            files: FileMatch::any(),
            delay: stall,
        })
    });
    let answered = reads_answered_while_stalled(&rig, victim).await;
    // Bound by the mechanism: syncs stalled, and writes acknowledged meanwhile.
    let acked = traffic.acked();
    traffic
        .wait_for_writes(acked + 200, Duration::from_secs(90))
        .await;
    let stalled = rig.disks[victim].stats().syncs_stalled;
    rig.disks[victim].clear_faults();
    traffic
        .wait_for_writes(traffic.acked() + 100, Duration::from_secs(90))
        .await;
    let ended = record.now();
    traffic.stop().await;
    let term_after = term(&rig.cluster, victim).await;
    let mut latencies: Vec<Duration> = record
        .history
        .operations()
        .iter()
        .filter(|o| o.invoked >= started && o.invoked <= ended)
        .filter(|o| matches!(o.outcome, Outcome::Written { .. }))
        .map(|o| o.completed - o.invoked)
        .collect();
    latencies.sort();
    let p = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    eprintln!(
        "{role:?} member {victim}: syncs stalled {stall:?} ({stalled} stalled); \
         {answered} linearizable reads answered by it while a sync stalled; {} writes \
         during the stall and after, p50 {:?} p99 {:?} max {:?}; term {term_before} -> \
         {term_after}",
        latencies.len(),
        p(0.5),
        p(0.99),
        p(1.0)
    );
    assert!(stalled > 0, "no sync of member {victim} stalled");
    // The leader's raft core (read rounds, heartbeats) goes on while its disk stalls.
    // Counted, not timed: reads answered before the stalled sync returned. A core that
    // waited for the disk answers at most the one read it took before it blocked.
    // etcd 3.4's raft loop waits for its WAL, so against etcd this is only reported.
    if matches!(role, Role::Leader) && Target::from_env() == Target::Quantykube {
        assert!(
            answered >= READS_WHILE_STALLED,
            "the leader answered {answered} linearizable reads while its sync stalled, \
             want {READS_WHILE_STALLED}: its raft core waited for the disk"
        );
    }
    // Heartbeats never wait behind the disk: no election at all. The leader's raft
    // core never writes the log itself (raft/src/log_writer.rs), so a stalled fsync
    // holds its writer thread, and followers keep hearing from it. etcd 3.4's raft loop
    // saves each Ready to its WAL before it takes the next one, whose messages carry
    // the heartbeats: under the same stall it was replaced once in one of two runs
    // (docs/durability.md), so against etcd only a storm (a second election) fails.
    let elections_allowed = match Target::from_env() {
        Target::Quantykube => 0,
        Target::Etcd => 1,
    };
    assert!(
        term_after <= term_before + elections_allowed,
        "a {stall:?} stall of the {role:?}'s syncs caused an election: term {term_before} -> \
         {term_after}"
    );
    verdict::judge(&rig, &record, 9, initial).await;
}

/// Reads a leader must answer while one of its syncs stalls (a stall is 2 s or more; a
/// read takes milliseconds even on a loaded machine).
const READS_WHILE_STALLED: usize = 20;

/// Waits until a sync of member `i`'s disk stalls, then sends it linearizable reads one
/// after another while the stall lasts; returns how many it answered (up to
/// [`READS_WHILE_STALLED`]) before the stalled sync returned.
async fn reads_answered_while_stalled(rig: &Rig, i: usize) -> usize {
    let disk = &rig.disks[i];
    let deadline = Instant::now() + Duration::from_secs(60);
    while disk.stats().syncs_stalled == 0 {
        assert!(Instant::now() < deadline, "no sync of member {i} stalled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut client = rig.cluster.client(i).await;
    let mut answered = 0;
    while answered < READS_WHILE_STALLED {
        // The timeout only keeps a broken member from hanging the test: a member whose
        // core waits answers once the stall (10 s at most) is over.
        let read = tokio::time::timeout(Duration::from_secs(30), client.get("stall-probe", None));
        let ok = matches!(read.await, Ok(Ok(_)));
        if !ok || disk.stats().syncs_stalling == 0 {
            // Not answered, or answered once no sync stalled any more: done.
            break;
        }
        answered += 1;
    }
    answered
}

async fn term(cluster: &Cluster, i: usize) -> u64 {
    let mut client = cluster.client(i).await;
    client.status().await.expect("status").raft_term()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_syncs_stall_for_seconds_holds_nothing_up() {
    syncs_stall(Server::Shipped, Role::Follower).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_syncs_stall_for_seconds_keeps_leading_and_writes_go_on() {
    syncs_stall(Server::Shipped, Role::Leader).await;
}
