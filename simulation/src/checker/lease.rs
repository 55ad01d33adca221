//! etcd's lease guarantees, judged from the lease client's operations: what it was
//! granted, what its keepalives were answered, and what its linearizable reads found.
//!
//! This module owns [`check_leases`], which reports for each lease (by the id its grant
//! answered):
//! - safety (`lease-safety`): no key attached to the lease is deleted before the lease's
//!   TTL has run out since an acknowledgement promised it: the grant, or a keepalive
//!   answered with a TTL above 0. Exactly: a linearizable read that finds a key absent
//!   (its Put with the lease acknowledged before the read was invoked, so the key
//!   existed and only the lease's revoke or expiry deletes it), with no revoke of the
//!   lease invoked by the time the read completed, violates it if, for some such
//!   acknowledgement `a` invoked before the read completed,
//!   `read.completed + SAFETY_SLACK < a.invoked + a.ttl`;
//! - liveness (`lease-liveness`): a lease no longer kept alive goes, and its keys with
//!   it. Each key a Put attached to the lease (acknowledged or not) must be found
//!   absent by the last linearizable read of it, and by every one invoked at or after
//!   `max(stable_since, grant.completed, last keepalive invoked) + ttl + LIVENESS_SLACK`,
//!   where `stable_since` is when the caller knows the faults healed and the leader
//!   last changed.
//!
//! Why these bounds are sound. turmoil runs every host on one simulated clock: each
//! step advances every host's tokio clock by the same tick (1 ms), and the times in
//! the history are that clock. The leader restarts a lease's timer when a keepalive
//! reaches it (after the client sent it: no message arrives before it was sent), and
//! starts a new lease's timer when it first sees the grant applied (after the grant was
//! sent); it proposes the expiry only once `renewal + ttl` has passed on its own
//! clock, and a new leader resumes from a checkpoint rounded up, or from the whole TTL,
//! counted from its election. The read that finds the key gone completes after the
//! expiry was committed and applied on its member, so in a correct server
//! `read.completed >= a.invoked + a.ttl` exactly. [`SAFETY_SLACK`] (5 ms, five ticks)
//! only absorbs the order in which turmoil runs hosts within one tick; every hop of
//! the chain (client to member, relay to leader, raft, answer) takes at least one
//! tick of latency, so nothing legitimate comes close. A lease expiring even one
//! second early (a TTL floored instead of rounded up) is caught.
//!
//! For liveness, the leader's timer for the lease runs out by the later of the last
//! renewal (a keepalive sent by `last keepalive invoked`, arriving within the latency
//! of a healed network) and the current leader's election (before `stable_since`),
//! plus the TTL; [`LIVENESS_SLACK`] (2 s) covers the keepalive's trip, the lessor's
//! 250 ms tick and the expiry's way through the log. It assumes no leader change after
//! `stable_since`, which the caller vouches for.
//!
//! A revoked lease is excluded from safety once its revoke was invoked (the revoke
//! deletes the keys at once, legitimately). Reads of a key whose Put was not
//! acknowledged before the read prove nothing and are skipped. It reads operations
//! only: it must never talk to the cluster, and never excuse what it cannot decide (a
//! key never read again after its deadline is a violation, not a pass). It reports at
//! most one violation per lease and property, the first found.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::Violation;
use crate::history::{Op, Operation, Outcome};

/// How much earlier than its TTL allows a lease's key may be seen gone without a
/// `lease-safety` violation: five turmoil ticks (see the module docs).
pub const SAFETY_SLACK: Duration = Duration::from_millis(5);

/// How long after its TTL has run out (from the later of its last keepalive and the
/// cluster's healing) a lease's keys may still be there (see the module docs).
pub const LIVENESS_SLACK: Duration = Duration::from_secs(2);

/// Every lease guarantee over `operations`; see the module docs. `stable_since`: from
/// then on the faults are healed and the leader does not change. `expiry_pause`: how
/// long the members hold an expiry between deciding and proposing it (zero but in a
/// targeted scenario), added to the liveness bound. Empty if they hold.
pub fn check_leases(
    operations: &[Operation],
    stable_since: Duration,
    expiry_pause: Duration,
) -> Vec<Violation> {
    let leases = Lease::gather(operations);
    let mut reported = BTreeSet::new();
    let mut violations = Vec::new();
    let mut report = |lease: i64, property: &'static str, detail: String| {
        if reported.insert((lease, property)) {
            violations.push(Violation::new(property, detail));
        }
    };
    for lease in leases.values() {
        if let Some(detail) = lease.safety_violation() {
            report(lease.id, "lease-safety", detail);
        }
        if let Some(detail) = lease.liveness_violation(stable_since, expiry_pause) {
            report(lease.id, "lease-liveness", detail);
        }
    }
    violations
}

/// One lease the history knows the id of, and everything done with it.
struct Lease<'a> {
    id: i64,
    grant: &'a Operation,
    /// The TTL the grant answered, in seconds.
    ttl: i64,
    /// The grant and every keepalive answered with a TTL above 0, with that TTL.
    acks: Vec<(&'a Operation, i64)>,
    /// Every keepalive sent, answered or not.
    keepalives: Vec<&'a Operation>,
    revokes: Vec<&'a Operation>,
    /// Each key Puts attached to the lease, with those Puts.
    keys: BTreeMap<&'a str, Vec<&'a Operation>>,
    /// The answered linearizable reads of each of those keys, in history order, and
    /// whether each found the key.
    reads: BTreeMap<&'a str, Vec<(&'a Operation, bool)>>,
}

impl<'a> Lease<'a> {
    /// The leases whose grants were answered, by id, with their operations.
    fn gather(operations: &'a [Operation]) -> BTreeMap<i64, Lease<'a>> {
        let mut leases = BTreeMap::new();
        for op in operations {
            if let (Op::LeaseGrant { .. }, Outcome::Granted { id, ttl, .. }) = (&op.op, &op.outcome)
            {
                leases.insert(
                    *id,
                    Lease {
                        id: *id,
                        grant: op,
                        ttl: *ttl,
                        acks: vec![(op, *ttl)],
                        keepalives: Vec::new(),
                        revokes: Vec::new(),
                        keys: BTreeMap::new(),
                        reads: BTreeMap::new(),
                    },
                );
            }
        }
        for op in operations {
            match &op.op {
                Op::LeaseKeepAlive { id } => {
                    if let Some(lease) = leases.get_mut(id) {
                        lease.keepalives.push(op);
                        if let Outcome::KeptAlive { ttl } = op.outcome {
                            if ttl > 0 {
                                lease.acks.push((op, ttl));
                            }
                        }
                    }
                }
                Op::LeaseRevoke { id } => {
                    if let Some(lease) = leases.get_mut(id) {
                        lease.revokes.push(op);
                    }
                }
                Op::PutWithLease { key, lease, .. } => {
                    if let Some(lease) = leases.get_mut(lease) {
                        lease.keys.entry(key.as_str()).or_default().push(op);
                    }
                }
                _ => {}
            }
        }
        // Reads need the keys first: a second pass.
        let lease_of: BTreeMap<&str, i64> = leases
            .values()
            .flat_map(|lease| lease.keys.keys().map(move |key| (*key, lease.id)))
            .collect();
        for op in operations {
            let (
                Op::Get {
                    key,
                    serializable: false,
                },
                Outcome::Read { value, .. },
            ) = (&op.op, &op.outcome)
            else {
                continue;
            };
            if let Some(lease) = lease_of.get(key.as_str()).and_then(|id| leases.get_mut(id)) {
                lease
                    .reads
                    .entry(key.as_str())
                    .or_default()
                    .push((op, value.is_some()));
            }
        }
        leases
    }

    fn key_reads(&self, key: &str) -> &[(&'a Operation, bool)] {
        self.reads.get(key).map_or(&[], Vec::as_slice)
    }

    fn safety_violation(&self) -> Option<String> {
        for (key, puts) in &self.keys {
            let Some(put) = puts
                .iter()
                .filter(|put| put.written_revision().is_some())
                .min_by_key(|put| put.completed)
            else {
                continue;
            };
            for &(read, present) in self.key_reads(key) {
                // Only strictly later reads: completion times are tick-granular.
                if present || read.invoked <= put.completed {
                    continue;
                }
                if self.revokes.iter().any(|r| r.invoked <= read.completed) {
                    continue;
                }
                let promised = self
                    .acks
                    .iter()
                    .filter(|(ack, _)| ack.invoked < read.completed)
                    .map(|(ack, ttl)| (*ack, ack.invoked + secs(*ttl)))
                    .max_by_key(|(_, until)| *until);
                if let Some((ack, until)) = promised {
                    if read.completed + SAFETY_SLACK < until {
                        return Some(format!(
                            "lease {:x}: {read} found {key} gone {:.3}s before the lease's TTL \
                             ran out at {:.3}s, promised by {ack} (the key was put by {put})",
                            self.id,
                            (until - read.completed).as_secs_f64(),
                            until.as_secs_f64(),
                        ));
                    }
                }
            }
        }
        None
    }

    fn liveness_violation(&self, stable_since: Duration, expiry_pause: Duration) -> Option<String> {
        if self.keys.is_empty() {
            return None;
        }
        let last_keepalive = self
            .keepalives
            .iter()
            .map(|op| op.invoked)
            .max()
            .unwrap_or_default();
        let ttl = self
            .acks
            .iter()
            .map(|(_, ttl)| *ttl)
            .max()
            .unwrap_or(self.ttl);
        let from = stable_since.max(self.grant.completed).max(last_keepalive);
        let deadline = from + secs(ttl) + LIVENESS_SLACK + expiry_pause;
        for key in self.keys.keys() {
            let reads = self.key_reads(key);
            if let Some((read, _)) = reads
                .iter()
                .find(|(read, present)| *present && read.invoked >= deadline)
            {
                return Some(format!(
                    "lease {:x}: {read} still found {key}, though the lease's TTL of {ttl}s \
                     ran out by {:.3}s (last keepalive sent at {:.3}s, stable since {:.3}s) and \
                     the deadline was {:.3}s",
                    self.id,
                    (from + secs(ttl)).as_secs_f64(),
                    last_keepalive.as_secs_f64(),
                    stable_since.as_secs_f64(),
                    deadline.as_secs_f64(),
                ));
            }
            match reads.last() {
                None => {
                    return Some(format!(
                        "lease {:x}: {key} was never read: whether it went is not known",
                        self.id
                    ))
                }
                Some((read, true)) => {
                    return Some(format!(
                        "lease {:x}: the last read of {key}, {read}, still found it, before the \
                         deadline of {:.3}s; nothing read it after: whether it went is not known",
                        self.id,
                        deadline.as_secs_f64(),
                    ))
                }
                Some((_, false)) => {}
            }
        }
        None
    }
}

fn secs(seconds: i64) -> Duration {
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: i64 = 0x42;

    fn op(op: Op, t: (u64, u64), outcome: Outcome) -> Operation {
        Operation {
            client: "lease1".into(),
            op,
            invoked: Duration::from_millis(t.0),
            completed: Duration::from_millis(t.1),
            outcome,
            member: None,
        }
    }

    fn grant(t: (u64, u64), ttl: i64) -> Operation {
        op(
            Op::LeaseGrant { ttl },
            t,
            Outcome::Granted {
                id: LEASE,
                ttl,
                revision: 1,
            },
        )
    }

    fn put(t: (u64, u64), revision: i64) -> Operation {
        op(
            Op::PutWithLease {
                key: "lease/0/k0".into(),
                value: "v".into(),
                lease: LEASE,
            },
            t,
            Outcome::Written { revision },
        )
    }

    fn keepalive(t: (u64, u64), ttl: i64) -> Operation {
        op(
            Op::LeaseKeepAlive { id: LEASE },
            t,
            Outcome::KeptAlive { ttl },
        )
    }

    fn read(t: (u64, u64), present: bool) -> Operation {
        op(
            Op::Get {
                key: "lease/0/k0".into(),
                serializable: false,
            },
            t,
            Outcome::Read {
                revision: 9,
                value: present.then(|| ("v".to_owned(), 2)),
            },
        )
    }

    /// Granted at 0 with a TTL of 3 s, kept alive at 1 s, its key read gone at 4.1 s
    /// and at 6.5 s (past 1 s + 3 s + the 2 s slack).
    fn clean() -> Vec<Operation> {
        vec![
            grant((0, 10), 3),
            put((10, 20), 2),
            keepalive((1_000, 1_010), 3),
            read((2_000, 2_010), true),
            read((4_000, 4_010), true),
            read((4_100, 4_110), false),
            read((6_500, 6_510), false),
        ]
    }

    fn properties(operations: &[Operation], stable_since: u64) -> Vec<&'static str> {
        check_leases(
            operations,
            Duration::from_millis(stable_since),
            Duration::ZERO,
        )
        .iter()
        .map(|v| v.property)
        .collect()
    }

    #[test]
    fn a_clean_history_passes() {
        assert_eq!(properties(&clean(), 0), Vec::<&str>::new());
    }

    #[test]
    fn a_key_gone_before_the_ttl_since_a_keepalive_is_caught() {
        let mut ops = clean();
        // Gone at 3.5 s: the keepalive sent at 1 s promised the lease until 4 s.
        ops.insert(4, read((3_490, 3_500), false));
        assert_eq!(properties(&ops, 0), ["lease-safety"]);
        // Within the slack of the promise: fine.
        let mut ops = clean();
        ops.insert(4, read((3_990, 3_996), false));
        assert_eq!(properties(&ops, 0), Vec::<&str>::new());
    }

    #[test]
    fn a_key_gone_before_the_ttl_since_the_grant_is_caught() {
        let ops = vec![
            grant((0, 10), 3),
            put((10, 20), 2),
            read((1_500, 1_510), false),
            read((6_500, 6_510), false),
        ];
        assert_eq!(properties(&ops, 0), ["lease-safety"]);
    }

    #[test]
    fn revoked_leases_dead_keepalives_and_unacknowledged_puts_promise_nothing() {
        // A revoke deletes the keys at once.
        let mut revoked = clean();
        revoked.insert(
            3,
            op(
                Op::LeaseRevoke { id: LEASE },
                (1_500, 1_520),
                Outcome::Revoked { revision: 3 },
            ),
        );
        revoked.insert(4, read((1_600, 1_610), false));
        assert_eq!(properties(&revoked, 0), Vec::<&str>::new());
        // A keepalive answered with TTL 0 (or not at all) renews nothing.
        let mut dead = clean();
        dead.insert(3, keepalive((3_000, 3_010), 0));
        dead.insert(
            4,
            op(
                Op::LeaseKeepAlive { id: LEASE },
                (3_100, 4_100),
                Outcome::Unknown("timeout".into()),
            ),
        );
        assert_eq!(properties(&dead, 0), Vec::<&str>::new());
        // A key whose put was not acknowledged may never have existed.
        let mut unknown = clean();
        unknown[1].outcome = Outcome::Unknown("timeout".into());
        unknown.insert(2, read((500, 510), false));
        assert_eq!(properties(&unknown, 0), Vec::<&str>::new());
    }

    #[test]
    fn a_key_still_there_after_its_deadline_is_caught() {
        let mut ops = clean()[..5].to_vec();
        // Read after the deadline of 1 s + 3 s + 2 s, and still there.
        ops.push(read((6_100, 6_110), true));
        ops.push(read((6_500, 6_510), false));
        assert_eq!(properties(&ops, 0), ["lease-liveness"]);
        // The same read is within the bound if the leader changed at 2 s.
        assert_eq!(properties(&ops, 2_000), Vec::<&str>::new());
    }

    #[test]
    fn a_key_never_seen_gone_is_caught() {
        let ops = clean()[..5].to_vec();
        assert_eq!(properties(&ops, 0), ["lease-liveness"]);
        let never_read = clean()[..3].to_vec();
        assert_eq!(properties(&never_read, 0), ["lease-liveness"]);
    }

    #[test]
    fn a_keepalive_without_an_answer_still_delays_the_deadline() {
        let mut ops = clean()[..5].to_vec();
        // It may have renewed the lease at 5 s: the key may stay until 5 + 3 + 2 s.
        ops.push(op(
            Op::LeaseKeepAlive { id: LEASE },
            (5_000, 6_000),
            Outcome::Unknown("timeout".into()),
        ));
        ops.push(read((7_000, 7_010), true));
        ops.push(read((8_000, 8_010), false));
        assert_eq!(properties(&ops, 0), Vec::<&str>::new());
        ops.push(read((10_100, 10_110), true));
        assert_eq!(properties(&ops, 0), ["lease-liveness"]);
    }
}
