//! The lessor: times leases on the leader, and only there.
//!
//! Every member runs one; it acts only while its member leads. On becoming leader it
//! gives each live lease the remaining TTL last checkpointed, or its whole TTL (a
//! keepalive through the old leader resets the checkpoint to "whole", so no lease kept
//! alive within its TTL expires early after a failover). It follows the store's leases
//! each tick (new grants get their TTL from when it sees them, revoked ones go), turns
//! expired leases into `LeaseExpiry` commands through the log (at most
//! [`REVOKES_PER_SECOND`], as etcd), which apply as a revoke only in the term it led,
//! and checkpoints every lease's remaining TTL each checkpoint interval. It owns the
//! timers only; what it decides goes through raft, so every member's store agrees on which leases live. It must never read the wall
//! clock (tokio's clock, which the simulation controls) nor revoke a lease itself.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use crate::node::{Node, NodeError};
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_error::Kind;
use crate::proto::command::LeaseExpiry;
use crate::proto::etcdserverpb::{LeaseCheckpoint, LeaseCheckpointRequest};
use crate::store::LeaseRecord;

/// How often the lessor looks at its timers.
const TICK: Duration = Duration::from_millis(250);
/// etcd's shortest lease TTL: one and a half election timeouts, in whole seconds. A
/// grant asking for less gets this.
pub fn min_ttl(election_timeout: Duration) -> i64 {
    (election_timeout.as_secs_f64() * 1.5).ceil() as i64
}

/// etcd's rate limit on revoking expired leases.
pub const REVOKES_PER_SECOND: usize = 1000;
/// Leases per checkpoint command.
const CHECKPOINTS_PER_COMMAND: usize = 1000;

/// One lease's timer on the leader.
#[derive(Clone, Copy, Debug)]
struct Timer {
    ttl: i64,
    expires: Instant,
    /// A revoke for it is in the log; it is not timed again.
    revoking: bool,
}

#[derive(Debug, Default)]
struct Timers {
    /// The term these timers were started in; `None` while this member does not lead.
    /// Timers of another term are never reused: between them another leader may have
    /// renewed leases.
    term: Option<u64>,
    leases: BTreeMap<i64, Timer>,
}

/// The leader's lease timers (see the module docs).
#[derive(Debug, Default)]
pub struct Lessor {
    timers: Mutex<Timers>,
    /// Held while checkpoints are computed and until they are in the log, and by a
    /// keepalive that resets a checkpoint: so a checkpoint computed before a renewal
    /// is always followed in the log by that renewal's reset.
    log_order: tokio::sync::Mutex<()>,
}

impl Lessor {
    /// See the field: a keepalive takes it after renewing, before reading the
    /// checkpoint it may have to reset.
    pub fn log_order(&self) -> &tokio::sync::Mutex<()> {
        &self.log_order
    }

    fn timers(&self) -> MutexGuard<'_, Timers> {
        // A panic while holding the lock leaves plain data behind: keep using it.
        self.timers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Restarts `lease`'s TTL from now, as a keepalive does. False if this member does
    /// not lead, or the lease has expired and is being revoked.
    pub fn renew(&self, lease: &LeaseRecord) -> bool {
        let mut timers = self.timers();
        if timers.term.is_none() {
            return false;
        }
        let timer = timers.leases.entry(lease.id).or_insert(Timer {
            ttl: lease.ttl,
            expires: Instant::now(),
            revoking: false,
        });
        if timer.revoking {
            return false;
        }
        timer.expires = Instant::now() + secs(lease.ttl);
        crate::store::metrics::lease_renewed();
        true
    }

    /// Seconds lease `id` has left on this leader, rounded up; `None` if this member
    /// does not lead or does not time it (yet).
    pub fn remaining(&self, id: i64) -> Option<i64> {
        let timers = self.timers();
        timers.term?;
        let timer = timers.leases.get(&id)?;
        let left = timer.expires.saturating_duration_since(Instant::now());
        Some(left.as_secs_f64().ceil() as i64)
    }

    /// Makes a member that just became leader time its leases now, rather than at its
    /// lessor's next tick, so that no keepalive or TTL question in between is answered
    /// as if the lease were unknown. Returns false if `node` does not lead.
    pub async fn ensure_leading(&self, node: &Node) -> Result<bool, NodeError> {
        let Some(term) = node.leader_term() else {
            return Ok(false);
        };
        if self.timers().term != Some(term) {
            let leases = committed_leases(node).await?;
            self.follow_store(&leases, Some(term));
        }
        Ok(true)
    }

    /// Takes the store's leases as the timers of `term` (`None`: not leading): in a new
    /// term every timer starts from the last checkpoint, afterwards only leases not
    /// seen before get one.
    fn follow_store(&self, leases: &[LeaseRecord], term: Option<u64>) {
        let mut timers = self.timers();
        if term.is_none() || timers.term != term {
            timers.leases.clear();
        }
        timers.term = term;
        if term.is_none() {
            return;
        }
        let now = Instant::now();
        let mut followed = BTreeMap::new();
        for lease in leases {
            let timer = timers.leases.get(&lease.id).copied().unwrap_or(Timer {
                ttl: lease.ttl,
                expires: now + secs(lease.starting_ttl()),
                revoking: false,
            });
            followed.insert(lease.id, timer);
        }
        timers.leases = followed;
    }

    /// Up to `limit` expired leases, now marked as being revoked.
    fn take_expired(&self, limit: usize) -> Vec<i64> {
        let now = Instant::now();
        let mut timers = self.timers();
        let mut expired: Vec<(Instant, i64)> = timers
            .leases
            .iter()
            .filter(|(_, t)| !t.revoking && t.expires <= now)
            .map(|(id, t)| (t.expires, *id))
            .collect();
        expired.sort();
        expired.truncate(limit);
        for (_, id) in &expired {
            if let Some(timer) = timers.leases.get_mut(id) {
                timer.revoking = true;
            }
        }
        expired.into_iter().map(|(_, id)| id).collect()
    }

    /// A revoke that did not make it into the log: time the lease again.
    fn revoke_failed(&self, id: i64) {
        if let Some(timer) = self.timers().leases.get_mut(&id) {
            timer.revoking = false;
        }
    }

    /// Every timed lease's remaining TTL, in whole seconds (at least 1).
    fn checkpoints(&self) -> Vec<LeaseCheckpoint> {
        let now = Instant::now();
        self.timers()
            .leases
            .iter()
            .filter(|(_, t)| !t.revoking)
            .map(|(id, t)| LeaseCheckpoint {
                id: *id,
                remaining_ttl: (t
                    .expires
                    .saturating_duration_since(now)
                    .as_secs_f64()
                    .ceil() as i64)
                    .clamp(1, t.ttl.max(1)),
            })
            .collect()
    }
}

/// The live leases, read once this member has applied everything committed so far (a
/// read index round): a new leader so starts from the last checkpoint, not an older
/// one it had not applied yet.
async fn committed_leases(node: &Node) -> Result<Vec<LeaseRecord>, NodeError> {
    node.read_barrier().await?;
    node.read_store(|store| store.leases()).await
}

fn secs(seconds: i64) -> Duration {
    let ttl = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    #[cfg(feature = "planted-bugs")]
    if crate::planted::is_planted(crate::planted::PlantedBug::LeaseExpiresEarly) {
        return ttl / 2;
    }
    ttl
}

/// The lessor's loop for `node` (see the module docs); runs until the task is dropped.
pub async fn run(node: Arc<Node>, lessor: Arc<Lessor>, checkpoint_interval: Duration) {
    // The expiries in flight, aborted with this loop.
    let mut expiring = tokio::task::JoinSet::new();
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_checkpoint = Instant::now();
    let per_tick = (REVOKES_PER_SECOND as f64 * TICK.as_secs_f64()).ceil() as usize;
    loop {
        ticks.tick().await;
        let Some(term) = node.leader_term() else {
            lessor.follow_store(&[], None);
            last_checkpoint = Instant::now();
            continue;
        };
        match committed_leases(&node).await {
            Ok(leases) => lessor.follow_store(&leases, Some(term)),
            Err(error) => {
                tracing::info!(%error, "lessor cannot read leases; will retry");
                continue;
            }
        }
        while expiring.try_join_next().is_some() {}
        for id in lessor.take_expired(per_tick) {
            let node = node.clone();
            let lessor = lessor.clone();
            expiring.spawn(async move {
                let expiry = CommandRequest::LeaseExpiry(LeaseExpiry {
                    id,
                    leader_term: term,
                });
                #[cfg(feature = "planted-bugs")]
                if crate::planted::is_planted(crate::planted::PlantedBug::PausedExpiryProposals) {
                    tokio::time::sleep(crate::planted::EXPIRY_PAUSE).await;
                }
                match node.propose(expiry).await {
                    Ok(_) => {
                        crate::metrics::server::lease_expired();
                        tracing::debug!(lease = id, "expired lease revoked");
                    }
                    // Revoked meanwhile by a client: nothing left to do.
                    Err(NodeError::Command(Kind::LeaseNotFound)) => {}
                    Err(error) => {
                        tracing::info!(lease = id, %error, "revoking an expired lease failed; will retry");
                        lessor.revoke_failed(id);
                    }
                }
            });
        }
        if last_checkpoint.elapsed() >= checkpoint_interval {
            last_checkpoint = Instant::now();
            let _in_order = lessor.log_order.lock().await;
            for chunk in lessor.checkpoints().chunks(CHECKPOINTS_PER_COMMAND) {
                let checkpoint = CommandRequest::LeaseCheckpoint(LeaseCheckpointRequest {
                    checkpoints: chunk.to_vec(),
                });
                if let Err(error) = node.propose(checkpoint).await {
                    tracing::info!(%error, "lease checkpoint failed");
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: i64, ttl: i64, remaining_ttl: i64) -> LeaseRecord {
        LeaseRecord {
            id,
            ttl,
            remaining_ttl,
        }
    }

    #[tokio::test]
    async fn a_new_term_starts_from_the_checkpoint_and_a_known_term_keeps_its_timers() {
        let lessor = Lessor::default();
        lessor.follow_store(&[lease(1, 30, 7), lease(2, 30, 0)], Some(4));
        assert_eq!(lessor.remaining(1), Some(7));
        assert_eq!(lessor.remaining(2), Some(30));
        // The same term: the store's newer checkpoint does not move a running timer.
        lessor.follow_store(&[lease(1, 30, 3), lease(2, 30, 0)], Some(4));
        assert_eq!(lessor.remaining(1), Some(7));
        // A lease gone from the store is no longer timed.
        lessor.follow_store(&[lease(1, 30, 3)], Some(4));
        assert_eq!(lessor.remaining(2), None);
        // Another term: timers start again from the store.
        lessor.follow_store(&[lease(1, 30, 3)], Some(6));
        assert_eq!(lessor.remaining(1), Some(3));
        // Not leading: nothing is timed, nothing renewed.
        lessor.follow_store(&[lease(1, 30, 3)], None);
        assert_eq!(lessor.remaining(1), None);
        assert!(!lessor.renew(&lease(1, 30, 3)));
    }

    #[tokio::test]
    async fn a_renewal_restarts_the_whole_ttl_unless_the_lease_is_being_revoked() {
        let lessor = Lessor::default();
        lessor.follow_store(&[lease(1, 30, 5), lease(2, 0, 0), lease(3, 0, 0)], Some(1));
        assert!(lessor.renew(&lease(1, 30, 5)));
        assert_eq!(lessor.remaining(1), Some(30));
        // Expired leases are taken oldest first, up to the limit, and then not renewed.
        let expired = lessor.take_expired(1);
        assert_eq!(expired.len(), 1);
        assert!(!lessor.renew(&lease(expired[0], 30, 0)));
        assert_eq!(lessor.take_expired(10).len(), 1, "the other expired lease");
        assert!(lessor.take_expired(10).is_empty(), "each is taken once");
        // A revoke that failed leaves the lease to be timed (and renewed) again.
        lessor.revoke_failed(expired[0]);
        assert!(lessor.renew(&lease(expired[0], 30, 0)));
    }

    #[tokio::test]
    async fn checkpoints_record_what_each_timed_lease_has_left() {
        let lessor = Lessor::default();
        lessor.follow_store(
            &[lease(1, 30, 12), lease(2, 10, 0), lease(3, 0, 0)],
            Some(1),
        );
        lessor.take_expired(10);
        let mut checkpoints: Vec<(i64, i64)> = lessor
            .checkpoints()
            .iter()
            .map(|c| (c.id, c.remaining_ttl))
            .collect();
        checkpoints.sort();
        // Lease 3 is being revoked: no checkpoint for it.
        assert_eq!(checkpoints, [(1, 12), (2, 10)]);
    }
}
