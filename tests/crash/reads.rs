//! What a member answers right after a power loss: never a revision below one it
//! answered before.
//!
//! A member's store does not sync its writes (the raft log holds them), so after a
//! power cut it opens at an older revision and catches up from its log and its leader.
//! etcd 3.4 answers no client request, serializable reads included, until it has
//! published itself through raft, by which time it has applied everything committed
//! before the cut; a client that read at revision R from a member is never sent back
//! below R by that member. The promise is the same here (docs/durability.md).

use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions};
use quantykube_crashfs::Torn;

use crate::harness::{ClusterOptions, START_TIMEOUT};
use crate::power::Choices;
use crate::rig::{Rig, Server};
use crate::traffic::{Record, Traffic};

/// Members whose stores sync every 100 entries (a raft snapshot each): at a power cut
/// a store keeps what it had at its last snapshot, its member's published attributes
/// among them, and loses the writes since.
fn syncing_stores(options: ClusterOptions) -> ClusterOptions {
    options.args(["--snapshot-count", "100"])
}

/// A serializable read of member `endpoint`'s revision, if it answers within a moment.
async fn serializable_revision(endpoint: &str) -> Option<i64> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(300))
        .with_timeout(Duration::from_millis(500));
    let mut client = Client::connect([endpoint], Some(options)).await.ok()?;
    let got = client
        .get("any", Some(GetOptions::new().with_serializable()))
        .await
        .ok()?;
    got.header().map(|h| h.revision())
}

/// Cuts the power of `victims` under traffic, restarts them, and answers, for each,
/// the revision it served last before the cut and the first it served after.
async fn first_reads_after_power_loss(
    rig: &mut Rig,
    victims: &[usize],
    round: usize,
) -> Vec<(usize, i64, i64)> {
    let mut choices = Choices::new("first_reads_after_power_loss");
    let record = Record::new();
    let traffic = Traffic::start(&record, &rig.cluster.endpoints(), round, 4);
    traffic.wait_for_writes(200, Duration::from_secs(90)).await;
    tokio::time::sleep(Duration::from_millis(choices.below(500))).await;
    let mut before = Vec::new();
    for &i in victims {
        let revision = serializable_revision(&rig.cluster.endpoint(i))
            .await
            .expect("a serializable read before the power loss");
        before.push(revision);
    }
    rig.cut(victims, Torn::No);
    traffic.stop().await;
    for &i in victims {
        rig.cluster.start_member(i);
    }
    let mut after = vec![None; victims.len()];
    let deadline = Instant::now() + START_TIMEOUT;
    while after.iter().any(Option::is_none) {
        assert!(
            Instant::now() < deadline,
            "members {victims:?} answered no read after the power loss: {after:?}"
        );
        for (k, &i) in victims.iter().enumerate() {
            if after[k].is_none() {
                after[k] = serializable_revision(&rig.cluster.endpoint(i)).await;
            }
        }
    }
    victims
        .iter()
        .zip(before)
        .zip(after)
        .map(|((&i, before), after)| (i, before, after.unwrap_or_default()))
        .collect()
}

fn assert_never_lower(reads: &[(usize, i64, i64)]) {
    for &(member, before, after) in reads {
        assert!(
            after >= before,
            "member {member} answered a serializable read at revision {after} after the power \
             loss, below the {before} it answered before it"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_never_answers_below_a_revision_it_answered_before_a_power_loss() {
    let Some(mut rig) = Rig::start(3, Server::Shipped, syncing_stores).await else {
        return;
    };
    let leader = rig.cluster.leader_index().await;
    let follower = (leader + 1) % 3;
    let reads = first_reads_after_power_loss(&mut rig, &[follower], 0).await;
    eprintln!("(member, before, first after): {reads:?}");
    assert_never_lower(&reads);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_member_answers_below_a_revision_it_answered_before_all_lost_power() {
    no_member_reads_lower_after_all_lose_power(Server::Shipped).await;
}

/// The scenario of the test above, for `server`; panics with what it found.
pub async fn no_member_reads_lower_after_all_lose_power(server: Server) {
    let Some(mut rig) = Rig::start(3, server, syncing_stores).await else {
        return;
    };
    // Three cuts: a cut right after the stores synced (a raft snapshot) loses nothing,
    // and could hide a member that serves too early. A member that does serve too early
    // is seen only when its synced committed index lags what it had applied (a cut
    // between the two), about one cut in five in 2026-12-07's runs (three cuts missed it
    // once); with the guard removed, up to forty cuts look for one (a cut takes a
    // second or two, and the first violation ends the scenario).
    let rounds = match server {
        Server::Shipped => 3,
        Server::Planted(_) => 40,
    };
    for round in 0..rounds {
        let reads = first_reads_after_power_loss(&mut rig, &[0, 1, 2], round).await;
        eprintln!("(member, before, first after): {reads:?}");
        assert_never_lower(&reads);
    }
}
