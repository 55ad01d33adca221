//! Members losing power under traffic: all at once, and one again and again while the
//! others serve.

use std::time::Duration;

use quantykube_crashfs::Torn;

use crate::rig::{Rig, Server};
use crate::traffic::{Record, Traffic};
use crate::verdict;

/// Writers per round of traffic.
const WRITERS: usize = 4;

/// How long a round may take to get its first writes acknowledged: generous, for a
/// loaded two-core machine with three members starting.
const WRITES_WITHIN: Duration = Duration::from_secs(90);

/// Power losses per scenario: `QK_CRASH_ROUNDS`, else `default` (CI's bounded set).
pub fn rounds(default: usize) -> usize {
    std::env::var("QK_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(default)
}

/// The run's choices (instants, victims, torn cuts): `QK_CRASH_SEED`, else the clock.
pub struct Choices(u64);

impl Choices {
    pub fn new(test: &str) -> Self {
        let seed = std::env::var("QK_CRASH_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("{test}: QK_CRASH_SEED={seed}");
        Choices(seed)
    }

    /// splitmix64.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Half the cuts are torn: a prefix of each file's unsynced pages survives.
    pub fn torn(&mut self) -> Torn {
        if self.below(2) == 0 {
            Torn::No
        } else {
            Torn::Prefix { seed: self.next() }
        }
    }
}

/// The store's revision now, as member 0 reports it.
async fn revision(rig: &Rig) -> i64 {
    let mut client = rig.cluster.client(0).await;
    let got = client.get("any", None).await.expect("read the revision");
    got.header().map(|h| h.revision()).unwrap_or_default()
}

/// A round of traffic that gets some writes acknowledged, then runs on for a random
/// instant before returning (still running).
async fn traffic_until_an_instant(
    record: &Record,
    round: usize,
    endpoints: &[String],
    choices: &mut Choices,
) -> Traffic {
    let traffic = Traffic::start(record, endpoints, round, WRITERS);
    traffic.wait_for_writes(10, WRITES_WITHIN).await;
    tokio::time::sleep(Duration::from_millis(choices.below(1500))).await;
    traffic
}

/// A last round after the power losses, whose reads of earlier keys the verdict
/// judges too, then every check.
async fn last_round_and_verdict(rig: &Rig, record: &Record, round: usize, initial: i64) {
    let traffic = Traffic::start(record, &rig.cluster.endpoints(), round, WRITERS);
    traffic.wait_for_writes(40, WRITES_WITHIN).await;
    traffic.stop().await;
    let checked = verdict::check(&rig.cluster, record, initial).await;
    eprintln!("{} power losses: {checked:?}", rig.power_losses);
}

/// All members lose power at one random instant under traffic, `rounds` times; then
/// every check. Panics with what it found.
pub async fn all_members_lose_power(server: Server, rounds: usize) {
    let Some(mut rig) = Rig::start(3, server, |o| o).await else {
        return;
    };
    let mut choices = Choices::new("all_members_lose_power_at_once");
    let record = Record::new();
    let initial = revision(&rig).await;
    let everyone: Vec<usize> = (0..rig.cluster.size()).collect();
    for round in 0..rounds {
        let endpoints = rig.cluster.endpoints();
        let traffic = traffic_until_an_instant(&record, round, &endpoints, &mut choices).await;
        let torn = choices.torn();
        rig.cut(&everyone, torn);
        traffic.stop().await;
        rig.cluster.start_all().await;
    }
    last_round_and_verdict(&rig, &record, rounds, initial).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_members_lose_power_at_once_under_writes_watches_and_leases() {
    all_members_lose_power(Server::Shipped, rounds(3)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_loses_power_again_and_again_while_the_others_serve() {
    let Some(mut rig) = Rig::start(3, Server::Shipped, |o| o).await else {
        return;
    };
    let mut choices = Choices::new("one_member_loses_power_again_and_again");
    let record = Record::new();
    let initial = revision(&rig).await;
    let rounds = rounds(3);
    for round in 0..rounds {
        // The leader half the time, else a follower.
        let leader = rig.cluster.leader_index().await;
        let victim = if choices.below(2) == 0 {
            leader
        } else {
            (leader + 1 + choices.below(2) as usize) % 3
        };
        let others: Vec<String> = (0..3)
            .filter(|&i| i != victim)
            .map(|i| rig.cluster.endpoint(i))
            .collect();
        let traffic = traffic_until_an_instant(&record, round, &others, &mut choices).await;
        let torn = choices.torn();
        rig.power_loss(&[victim], torn).await;
        traffic.stop().await;
    }
    last_round_and_verdict(&rig, &record, rounds, initial).await;
}
