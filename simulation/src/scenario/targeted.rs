//! Scenarios aimed at one safety check that random seeds cannot reach: each is a seed's
//! own scenario (its clients, keys and watchers) with the faults and the lease client
//! set for the case the check exists for, so that it is still a seeded simulation run.
//!
//! This module owns only how such scenarios are built; it must never change what a
//! seed's own scenario ([`Scenario::from_seed`]) is.

use std::time::Duration;

use super::{Scenario, LEASE_CHECKPOINT_INTERVAL_LONG, REPLACE_AFTER_ISOLATION};
use crate::faults::{Episode, Fault, FaultPlan};
use crate::workload::{Lapse, MembershipOp, MembershipStep};

/// The lapsing lease's TTL, in seconds; its client renews every third of it.
const LAPSE_TTL: i64 = 3;

/// When the lease client's keepalives stop, counted from its start.
const LAPSE_FROM: Duration = Duration::from_secs(4);

/// How long they stay stopped: the leader decides the expiry at most a TTL and a
/// lessor tick after the last renewal, is cut off half a second later, and a successor
/// is elected within the isolation; the client resumes after that election.
const LAPSE_LASTING: Duration = Duration::from_secs(6);

/// How long the deciding leader stays cut off: an election, and less than the pause
/// between its decision and its proposal, so that it proposes once healed and
/// deposed, forwarding the proposal to its successor.
const ISOLATION: Duration = Duration::from_secs(3);

impl Scenario {
    /// `seed`'s scenario aimed at an expiry decided by a leader that is deposed before
    /// it proposes it (the term check of `LeaseExpiry`, src/store/write.rs). One lease,
    /// kept on the leader without checkpoints; its client's keepalives lapse longer than
    /// its TTL, so the leader decides to expire it; the leader is then cut off, a
    /// successor is elected and times the lease from its election, the client resumes
    /// and the successor renews it. The deciding leader proposes its expiry once healed
    /// and deposed, `expiry_pause` after the decision (a pause that the caller plants;
    /// it must outlast the isolation by a second): forwarded to the successor, it
    /// arrives in the successor's term, and only the term check keeps it from revoking
    /// a lease just renewed.
    pub fn deposed_leaders_expiry(seed: u64, expiry_pause: Duration) -> Scenario {
        let ttl = Duration::from_secs(LAPSE_TTL.unsigned_abs());
        let plan = FaultPlan {
            nodes: 3,
            episodes: vec![Episode {
                gap: LAPSE_FROM + ttl + Duration::from_millis(500),
                faults: vec![Fault::IsolateLeader],
                outage: ISOLATION,
            }],
        };
        Scenario {
            plan,
            leases: 1,
            membership: Vec::new(),
            auth: None,
            raft_snapshot_count: None,
            lease_checkpoint_interval: LEASE_CHECKPOINT_INTERVAL_LONG,
            leases_on_leader: true,
            renew_every_thirds: 1,
            lease_ttl: (LAPSE_TTL, LAPSE_TTL),
            lease_lapse: Some(Lapse {
                from: LAPSE_FROM,
                lasting: LAPSE_LASTING,
            }),
            expiry_pause,
            ..Scenario::from_seed(seed)
        }
    }
}

/// When the leader is cut off (all but one follower), after the cluster first elects.
const PARTIAL_ISOLATION_AFTER: Duration = Duration::from_secs(2);

/// How long it stays cut off: the successor's election, the replacement (a removal, the
/// old process stopping, an addition) and the new process's questions to its peers.
const PARTIAL_ISOLATION: Duration = Duration::from_secs(16);

impl Scenario {
    /// `seed`'s scenario aimed at a replacement that asks a deposed leader who it is
    /// (the joiner's removed-id check, `membership::join::identity_among`). Five
    /// members; the leader is cut off from all but one follower, and writes piled on it
    /// meanwhile make its log the longest; the others elect a successor, which deposes
    /// the old leader through the spared follower; the membership client then replaces
    /// that follower (removal, wipe, MemberAdd with the same peer URL, which takes
    /// `--strict-reconfig-check=false`: etcd's check refuses any addition while a voter
    /// is out of reach). The new process asks every peer at once who it is: the deposed
    /// leader, still cut off from the others, lists the removed id at its peer URL with
    /// the longest log; the others list the new id and report the old one removed. Only
    /// the removed-id check keeps the joiner from taking the longest log's answer, the
    /// removed member's id, under which no member will ever talk to it: it never starts
    /// serving.
    pub fn replacement_beside_a_deposed_leader(seed: u64) -> Scenario {
        let plan = FaultPlan {
            nodes: 5,
            episodes: vec![Episode {
                gap: PARTIAL_ISOLATION_AFTER,
                faults: vec![Fault::IsolateLeaderButOne],
                outage: PARTIAL_ISOLATION,
            }],
        };
        Scenario {
            plan,
            membership: vec![MembershipStep {
                after: PARTIAL_ISOLATION_AFTER + REPLACE_AFTER_ISOLATION,
                op: MembershipOp::Replace,
            }],
            auth: None,
            raft_snapshot_count: None,
            strict_reconfig_check: false,
            ..Scenario::from_seed(seed)
        }
    }
}
