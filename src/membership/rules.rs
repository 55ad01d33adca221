//! etcd's rules for membership changes, as pure functions over what the leader knows:
//! `ValidateConfigurationChange` (ids, peer URLs, learners) and, with
//! `--strict-reconfig-check`, the quorum protections of `mayAddMember`,
//! `mayRemoveMember` and `mayPromoteMember`, checked in etcd's order so that a request
//! breaking several rules gets etcd's first error. Nothing here touches raft or the
//! store; the simulation and unit tests call these directly.

use std::collections::{BTreeMap, BTreeSet};

use quantykube_raft::NodeId;

use super::MembershipError;

/// A promotion needs the learner's log this close to the leader's (etcd's readyPercent).
pub const PROMOTE_READY_FRACTION: f64 = 0.9;

/// A member's view of the applied membership when a change is asked for. Only the
/// leader knows whom it is connected to and how far each member's log matches; a
/// follower checks the rest before it relays a request, as etcd checks on the member
/// that received it.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    /// True on the leader: `connected`, `leader_index` and `matched`
    /// are known.
    pub leader: bool,
    pub voters: BTreeSet<NodeId>,
    pub learners: BTreeSet<NodeId>,
    pub peer_urls: BTreeMap<NodeId, Vec<String>>,
    /// Members that published their name (etcd's `IsStarted`).
    pub started: BTreeSet<NodeId>,
    /// Ids the cluster removed.
    pub removed: BTreeSet<NodeId>,
    /// Names members use: given when added, published, or held by the admin API's
    /// records.
    pub names: BTreeSet<String>,
    /// Voters the leader heard from recently (itself included).
    pub connected: BTreeSet<NodeId>,
    /// The leader's last log index, and each member's matched index.
    pub leader_index: u64,
    pub matched: BTreeMap<NodeId, u64>,
}

#[derive(Clone, Copy, Debug)]
pub struct Policy {
    /// `--strict-reconfig-check`.
    pub strict: bool,
    /// `--max-learners`.
    pub max_learners: usize,
}

/// One change etcd's Cluster service can ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Add {
        id: NodeId,
        peer_urls: Vec<String>,
        is_learner: bool,
        /// The name the new member will start with: empty from etcd's MemberAdd, the
        /// resource name from the admin API's CreateMember (which must be free).
        name: String,
    },
    Remove {
        id: NodeId,
    },
    Update {
        id: NodeId,
        peer_urls: Vec<String>,
    },
    Promote {
        id: NodeId,
    },
}

impl ClusterView {
    fn is_member(&self, id: NodeId) -> bool {
        self.voters.contains(&id) || self.learners.contains(&id)
    }

    fn started_voters(&self, except: Option<NodeId>) -> (usize, usize) {
        let voters = self.voters.iter().filter(|id| Some(**id) != except);
        let (mut members, mut started) = (0, 0);
        for id in voters {
            members += 1;
            if self.started.contains(id) {
                started += 1;
            }
        }
        (members, started)
    }

    fn urls_taken(&self, urls: &[String], except: Option<NodeId>) -> bool {
        self.peer_urls
            .iter()
            .filter(|(id, _)| Some(**id) != except)
            .any(|(_, taken)| urls.iter().any(|u| taken.contains(u)))
    }
}

/// Checks `change` against `view` as etcd does, before anything is proposed.
pub fn check(view: &ClusterView, change: &Change, policy: Policy) -> Result<(), MembershipError> {
    check_quorum(view, change, policy)?;
    match change {
        Change::Add {
            id,
            peer_urls,
            is_learner,
            name,
        } => {
            if view.removed.contains(id) {
                return Err(MembershipError::Removed);
            }
            if view.is_member(*id) {
                return Err(MembershipError::IdExists);
            }
            if !name.is_empty() && view.names.contains(name) {
                return Err(MembershipError::NameExists);
            }
            if view.urls_taken(peer_urls, None) {
                return Err(MembershipError::PeerUrlExists);
            }
            if *is_learner && view.learners.len() + 1 > policy.max_learners {
                return Err(MembershipError::TooManyLearners);
            }
            Ok(())
        }
        Change::Remove { id } => {
            if view.removed.contains(id) {
                return Err(MembershipError::Removed);
            }
            if !view.is_member(*id) {
                return Err(MembershipError::NotFound);
            }
            Ok(())
        }
        Change::Update { id, peer_urls } => {
            if view.removed.contains(id) {
                return Err(MembershipError::Removed);
            }
            if !view.is_member(*id) {
                return Err(MembershipError::NotFound);
            }
            if view.urls_taken(peer_urls, Some(*id)) {
                return Err(MembershipError::PeerUrlExists);
            }
            Ok(())
        }
        Change::Promote { id } => {
            // isLearnerReady first: the leader's progress for the member.
            let not_found = if view.removed.contains(id) {
                MembershipError::Removed
            } else {
                MembershipError::NotFound
            };
            if view.leader {
                let matched = view.matched.get(id).ok_or(not_found)?;
                if (*matched as f64) < (view.leader_index as f64) * PROMOTE_READY_FRACTION {
                    return Err(MembershipError::LearnerNotReady);
                }
            } else if !view.is_member(*id) {
                return Err(not_found);
            }
            if policy.strict {
                // IsReadyToPromoteMember: the learner counts, as started.
                let (members, started) = view.started_voters(None);
                if started + 1 < members.div_ceil(2) + 1 {
                    return Err(MembershipError::NotEnoughStarted);
                }
            }
            if !view.learners.contains(id) {
                return Err(if view.voters.contains(id) {
                    MembershipError::NotLearner
                } else {
                    MembershipError::NotFound
                });
            }
            Ok(())
        }
    }
}

/// The checks etcd makes on the member a MemberAdd or MemberRemove reaches, before it
/// proposes: `--strict-reconfig-check`'s quorum protections (`mayAddMember`,
/// `mayRemoveMember`). The rest etcd checks as it applies the change, on a membership as
/// new as its leader's, so a member that does not lead leaves it to its leader: a
/// follower that has not yet applied a removal must not refuse the same peer URL's
/// addition as taken.
pub fn check_quorum(
    view: &ClusterView,
    change: &Change,
    policy: Policy,
) -> Result<(), MembershipError> {
    if !policy.strict {
        return Ok(());
    }
    match change {
        Change::Add { is_learner, .. } => {
            // IsReadyToAddVotingMember, for voters only: the new member counts, not as
            // started.
            let (members, started) = view.started_voters(None);
            let restoring_from_one = started == 1 && members == 1;
            if !is_learner && !restoring_from_one && started < members.div_ceil(2) + 1 {
                return Err(MembershipError::NotEnoughStarted);
            }
            // isConnectedFullySince, for learners too: nothing is added while a voter
            // is out of reach.
            if view.leader && !view.voters.iter().all(|v| view.connected.contains(v)) {
                return Err(MembershipError::Unhealthy);
            }
        }
        Change::Remove { id } if view.voters.contains(id) => {
            let (members, started) = view.started_voters(Some(*id));
            if started < members / 2 + 1 {
                return Err(MembershipError::NotEnoughStarted);
            }
            // A member that is down is not part of the active quorum: removing it is
            // safe (etcd's ActiveSince is zero for it).
            if view.leader && view.connected.contains(id) {
                let active = view.voters.intersection(&view.connected).count();
                if active.saturating_sub(1) < 1 + (view.voters.len() - 1) / 2 {
                    return Err(MembershipError::Unhealthy);
                }
            }
        }
        Change::Remove { .. } | Change::Update { .. } | Change::Promote { .. } => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STRICT: Policy = Policy {
        strict: true,
        max_learners: 1,
    };

    /// Voters 1, 2, 3 at `http://mN:2380`, all started and connected, in sync at 100.
    fn three() -> ClusterView {
        let ids = [1, 2, 3];
        ClusterView {
            leader: true,
            voters: ids.into(),
            peer_urls: ids
                .iter()
                .map(|id| (*id, vec![format!("http://m{id}:2380")]))
                .collect(),
            started: ids.into(),
            connected: ids.into(),
            leader_index: 100,
            matched: ids.iter().map(|id| (*id, 100)).collect(),
            ..Default::default()
        }
    }

    fn add(id: NodeId, url: &str, is_learner: bool) -> Change {
        Change::Add {
            id,
            peer_urls: vec![url.into()],
            is_learner,
            name: String::new(),
        }
    }

    #[test]
    fn adds_follow_etcds_rules_in_etcds_order() {
        let view = three();
        assert_eq!(
            check(&view, &add(4, "http://m4:2380", false), STRICT),
            Ok(())
        );
        assert_eq!(
            check(&view, &add(4, "http://m1:2380", true), STRICT),
            Err(MembershipError::PeerUrlExists)
        );
        assert_eq!(
            check(&view, &add(2, "http://m9:2380", true), STRICT),
            Err(MembershipError::IdExists)
        );
        let mut removed = three();
        removed.removed.insert(9);
        assert_eq!(
            check(&removed, &add(9, "http://m9:2380", true), STRICT),
            Err(MembershipError::Removed)
        );
        let mut one_learner = three();
        one_learner.learners.insert(5);
        assert_eq!(
            check(&one_learner, &add(6, "http://m6:2380", true), STRICT),
            Err(MembershipError::TooManyLearners)
        );
        let two_learners = Policy {
            max_learners: 2,
            ..STRICT
        };
        assert_eq!(
            check(&one_learner, &add(6, "http://m6:2380", true), two_learners),
            Ok(())
        );
    }

    #[test]
    fn strict_checks_protect_the_quorum() {
        let mut view = three();
        view.started = [1].into();
        // 1 of 3 started; with a fourth voter a quorum is 3.
        assert_eq!(
            check(&view, &add(4, "http://m4:2380", false), STRICT),
            Err(MembershipError::NotEnoughStarted)
        );
        // A learner needs no quorum, and without the strict check nothing is counted.
        assert_eq!(
            check(&view, &add(4, "http://m4:2380", true), STRICT),
            Ok(())
        );
        let lax = Policy {
            strict: false,
            ..STRICT
        };
        assert_eq!(check(&view, &add(4, "http://m4:2380", false), lax), Ok(()));
        // Removing a voter must leave a started quorum of the rest.
        assert_eq!(
            check(&view, &Change::Remove { id: 2 }, STRICT),
            Err(MembershipError::NotEnoughStarted)
        );
        let mut down = three();
        down.connected = [1, 2].into();
        for learner in [false, true] {
            assert_eq!(
                check(&down, &add(4, "http://m4:2380", learner), STRICT),
                Err(MembershipError::Unhealthy)
            );
        }
        // Removing the member that is down keeps the active quorum; removing another does not.
        assert_eq!(check(&down, &Change::Remove { id: 3 }, STRICT), Ok(()));
        assert_eq!(
            check(&down, &Change::Remove { id: 2 }, STRICT),
            Err(MembershipError::Unhealthy)
        );
        // The first voter added to a one-member cluster (a restore) is always allowed.
        let mut single = three();
        single.voters = [1].into();
        single.started = [1].into();
        assert_eq!(
            check(&single, &add(4, "http://m4:2380", false), STRICT),
            Ok(())
        );
    }

    #[test]
    fn a_follower_checks_only_the_quorum_and_leaves_the_rest_to_its_leader() {
        let mut follower = three();
        follower.leader = false;
        // The URL of a member whose removal this follower has not applied yet.
        let readd = add(4, "http://m3:2380", false);
        assert_eq!(
            check(&follower, &readd, STRICT),
            Err(MembershipError::PeerUrlExists)
        );
        assert_eq!(check_quorum(&follower, &readd, STRICT), Ok(()));
        assert_eq!(
            check_quorum(&follower, &Change::Remove { id: 9 }, STRICT),
            Ok(())
        );
        follower.started = [1].into();
        assert_eq!(
            check_quorum(&follower, &readd, STRICT),
            Err(MembershipError::NotEnoughStarted)
        );
    }

    #[test]
    fn promotion_needs_a_learner_in_sync() {
        let mut view = three();
        view.learners.insert(4);
        view.peer_urls.insert(4, vec!["http://m4:2380".into()]);
        view.matched.insert(4, 89);
        let promote = Change::Promote { id: 4 };
        assert_eq!(
            check(&view, &promote, STRICT),
            Err(MembershipError::LearnerNotReady)
        );
        view.matched.insert(4, 90);
        assert_eq!(check(&view, &promote, STRICT), Ok(()));
        assert_eq!(
            check(&view, &Change::Promote { id: 2 }, STRICT),
            Err(MembershipError::NotLearner)
        );
        assert_eq!(
            check(&view, &Change::Promote { id: 8 }, STRICT),
            Err(MembershipError::NotFound)
        );
    }

    #[test]
    fn updates_and_removals_name_known_members() {
        let view = three();
        let update = |id, url: &str| Change::Update {
            id,
            peer_urls: vec![url.into()],
        };
        assert_eq!(check(&view, &update(2, "http://m2b:2380"), STRICT), Ok(()));
        assert_eq!(check(&view, &update(2, "http://m2:2380"), STRICT), Ok(()));
        assert_eq!(
            check(&view, &update(2, "http://m3:2380"), STRICT),
            Err(MembershipError::PeerUrlExists)
        );
        assert_eq!(
            check(&view, &update(7, "http://m7:2380"), STRICT),
            Err(MembershipError::NotFound)
        );
        assert_eq!(
            check(&view, &Change::Remove { id: 7 }, STRICT),
            Err(MembershipError::NotFound)
        );
    }
}
