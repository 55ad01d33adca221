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

/// Power losses judged together: the linearizability search grows with the writes of
/// unknown outcome in one history, and a soak of hundreds of power losses would be one
/// search. Each segment records afresh from the store's revision at its start; keys are
/// unique per round, so no segment writes another's keys.
pub const SEGMENT: usize = 10;

/// The record of the current segment, judged every [`SEGMENT`] rounds.
pub struct Segments {
    pub record: Record,
    initial: i64,
    rounds: usize,
    judged: usize,
}

impl Segments {
    pub async fn start(rig: &Rig) -> Self {
        Segments {
            record: Record::new(),
            initial: rig.revision().await,
            rounds: 0,
            judged: 0,
        }
    }

    /// Counts a round; judges the segment once it is whole and starts the next.
    pub async fn round_done(&mut self, rig: &Rig) {
        self.rounds += 1;
        if self.rounds % SEGMENT == 0 {
            self.judge(rig).await;
            self.record = Record::new();
            self.initial = rig.revision().await;
        }
    }

    /// Judges what is left (after the last round).
    pub async fn finish(mut self, rig: &Rig) {
        if self.rounds % SEGMENT != 0 || self.rounds == 0 {
            self.judge(rig).await;
        }
    }

    async fn judge(&mut self, rig: &Rig) {
        self.judged += 1;
        // Round numbers of their own, for the keys of the judging rounds.
        let round = 1_000_000 + self.judged;
        verdict::judge(rig, &self.record, round, self.initial).await;
    }
}

/// All members lose power at one random instant under traffic, `rounds` times; then
/// every check. Panics with what it found.
pub async fn all_members_lose_power(server: Server, rounds: usize) {
    let Some(mut rig) = Rig::start(3, server, |o| o).await else {
        return;
    };
    let mut choices = Choices::new("all_members_lose_power_at_once");
    let mut segments = Segments::start(&rig).await;
    let everyone: Vec<usize> = (0..rig.cluster.size()).collect();
    for round in 0..rounds {
        let endpoints = rig.cluster.endpoints();
        let traffic =
            traffic_until_an_instant(&segments.record, round, &endpoints, &mut choices).await;
        let torn = choices.torn();
        rig.cut(&everyone, torn);
        traffic.stop().await;
        rig.cluster.start_all().await;
        segments.round_done(&rig).await;
    }
    segments.finish(&rig).await;
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
    let mut segments = Segments::start(&rig).await;
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
        let traffic =
            traffic_until_an_instant(&segments.record, round, &others, &mut choices).await;
        let torn = choices.torn();
        rig.power_loss(&[victim], torn).await;
        traffic.stop().await;
        segments.round_done(&rig).await;
    }
    segments.finish(&rig).await;
}
