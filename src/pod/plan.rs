//! The one decision `pod start` makes, as a pure function: from what the data dir
//! holds and what the other pods answer, the next step toward serving.
//!
//! The invariant it keeps: **a process with an empty data dir never takes the identity
//! of a voter that may have held data.** An empty pod bootstraps only when every other
//! founder answers that it is as new as itself; it joins a cluster only as a member the
//! cluster has never heard from (a learner MemberAdd made for it, or a founder that
//! never started); and a member that did start and lost its volume is removed and added
//! back as a learner, so that it catches up before it counts toward any quorum.
//! Nothing here decides from a flag the user must flip, and nothing removes a member
//! because its pod stopped.

use crate::membership::join::Identity;

/// What the data dir holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    /// Nothing: a new volume, or one wiped.
    Empty,
    /// A member's data and its identity.
    Known(Identity),
    /// Data without a readable identity (a damaged or missing `member.json`).
    Unknown(String),
}

/// One member, as MemberList reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listed {
    pub id: u64,
    /// Empty until the member has started and published itself, as in etcd.
    pub name: String,
    pub peer_urls: Vec<String>,
    pub is_learner: bool,
}

/// The cluster, as a member that answered sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cluster {
    pub cluster_id: u64,
    pub members: Vec<Listed>,
    pub removed_ids: Vec<u64>,
}

/// What the other pods answered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// The cluster, if any member answered.
    pub cluster: Option<Cluster>,
    /// Ordinals of the pods that await their bootstrap with this pod's token.
    pub awaiting: Vec<u32>,
    /// Pods that await their bootstrap with another token: (ordinal, token).
    pub foreign: Vec<(u32, String)>,
    /// Founders that already founded this pod's founding cluster (its id, computed
    /// from the founders' peer URLs and the token) and have never had a leader since:
    /// as new as this pod, they only wait for its vote.
    pub founded: Vec<u32>,
}

/// The next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Serve as the member the data dir holds.
    Restart,
    /// Found a new cluster with every founder.
    Bootstrap,
    /// Serve as a member the cluster lists but never heard from, joining the members
    /// listed (`name`, peer URL).
    Join { members: Vec<(String, String)> },
    /// Ask the cluster to add this pod as a learner.
    AddLearner,
    /// Remove a member this pod's empty volume can no longer be.
    RemoveStale { id: u64, reason: String },
    /// Delete the data dir's contents: they belong to a member the cluster no longer has.
    Wipe { reason: String },
    /// Record the identity the cluster has for this pod's peer URL.
    Adopt(Identity),
    /// Nothing can be decided yet; look again.
    Wait { reason: String },
}

/// This pod, as the plan needs it.
#[derive(Clone, Debug)]
pub struct Me<'a> {
    pub name: &'a str,
    pub ordinal: u32,
    pub peer_url: &'a str,
    /// The desired member count: ordinals `0..replicas` are wanted, and found a new
    /// cluster together.
    pub replicas: u32,
}

impl Me<'_> {
    fn wanted(&self) -> bool {
        self.ordinal < self.replicas
    }

    fn find<'c>(&self, cluster: &'c Cluster) -> Option<&'c Listed> {
        cluster
            .members
            .iter()
            .find(|m| m.peer_urls.iter().any(|u| u == self.peer_url))
    }
}

/// Decides the next step.
pub fn decide(me: &Me, local: &Local, view: &View) -> Step {
    match local {
        Local::Known(identity) => known(me, *identity, view.cluster.as_ref()),
        Local::Unknown(why) => match &view.cluster {
            None => Step::Wait {
                reason: format!(
                    "the data dir holds data but no readable identity ({why}); waiting for a member to answer"
                ),
            },
            Some(cluster) => match me.find(cluster) {
                Some(listed) => Step::Adopt(Identity {
                    member_id: listed.id,
                    cluster_id: cluster.cluster_id,
                }),
                None if me.wanted() => Step::Wipe {
                    reason: format!(
                        "the data dir has no readable identity ({why}) and the cluster has no member at {}",
                        me.peer_url
                    ),
                },
                None => not_wanted(me),
            },
        },
        Local::Empty => match &view.cluster {
            Some(cluster) => empty_with_cluster(me, cluster),
            None => empty_without_cluster(me, view),
        },
    }
}

fn known(me: &Me, identity: Identity, cluster: Option<&Cluster>) -> Step {
    let Some(cluster) = cluster else {
        // A full restart: nobody else is up yet, and a member with data needs no one's
        // word to start as itself.
        return Step::Restart;
    };
    if cluster.cluster_id != identity.cluster_id {
        return Step::Wait {
            reason: format!(
                "the data dir belongs to cluster {:x} but the other pods serve cluster {:x}; refusing to start (see docs/operations.md, Kubernetes)",
                identity.cluster_id, cluster.cluster_id
            ),
        };
    }
    if cluster.removed_ids.contains(&identity.member_id) {
        if !me.wanted() {
            return not_wanted(me);
        }
        return Step::Wipe {
            reason: format!(
                "member {:x} was removed from the cluster (a scale down); this pod joins again as a new member",
                identity.member_id
            ),
        };
    }
    Step::Restart
}

fn empty_with_cluster(me: &Me, cluster: &Cluster) -> Step {
    match me.find(cluster) {
        Some(listed) if !listed.name.is_empty() => Step::RemoveStale {
            id: listed.id,
            reason: format!(
                "member {:x} ({}) has started before, but this pod's data dir is empty: its volume was lost",
                listed.id, listed.name
            ),
        },
        Some(listed) if !me.wanted() => Step::RemoveStale {
            id: listed.id,
            reason: format!(
                "member {:x} never started and ordinal {} is beyond the {} replicas wanted",
                listed.id, me.ordinal, me.replicas
            ),
        },
        Some(_) => Step::Join {
            members: cluster
                .members
                .iter()
                .flat_map(|m| {
                    let name = if m.peer_urls.iter().any(|u| u == me.peer_url) {
                        me.name.to_string()
                    } else if m.name.is_empty() {
                        format!("{:x}", m.id)
                    } else {
                        m.name.clone()
                    };
                    m.peer_urls.iter().map(move |u| (name.clone(), u.clone()))
                })
                .collect(),
        },
        None if me.wanted() => Step::AddLearner,
        None => not_wanted(me),
    }
}

fn empty_without_cluster(me: &Me, view: &View) -> Step {
    if !me.wanted() {
        return not_wanted(me);
    }
    let missing: Vec<u32> = (0..me.replicas)
        .filter(|i| *i != me.ordinal && !view.awaiting.contains(i) && !view.founded.contains(i))
        .collect();
    if missing.is_empty() {
        return Step::Bootstrap;
    }
    if let Some((ordinal, token)) = view.foreign.first() {
        return Step::Wait {
            reason: format!(
                "pod {ordinal} awaits its bootstrap with cluster token {token:?}, not this pod's; founders must share one token"
            ),
        };
    }
    Step::Wait {
        reason: format!(
            "no cluster answers yet; a new cluster starts once every founder awaits it (not yet: ordinals {missing:?})"
        ),
    }
}

fn not_wanted(me: &Me) -> Step {
    Step::Wait {
        reason: format!(
            "ordinal {} is beyond the {} replicas wanted: not joining",
            me.ordinal, me.replicas
        ),
    }
}

#[cfg(test)]
mod tests {
    //! One test per scenario of docs/operations.md's table, named after it.
    use super::*;

    const ME: &str = "http://qk-1:2380";

    fn me(replicas: u32) -> Me<'static> {
        Me {
            name: "qk-1",
            ordinal: 1,
            peer_url: ME,
            replicas,
        }
    }

    fn member(id: u64, name: &str, url: &str, is_learner: bool) -> Listed {
        Listed {
            id,
            name: name.into(),
            peer_urls: vec![url.into()],
            is_learner,
        }
    }

    fn cluster(members: Vec<Listed>, removed_ids: Vec<u64>) -> View {
        View {
            cluster: Some(Cluster {
                cluster_id: 7,
                members,
                removed_ids,
            }),
            ..View::default()
        }
    }

    fn three_started() -> Vec<Listed> {
        vec![
            member(10, "qk-0", "http://qk-0:2380", false),
            member(11, "qk-1", ME, false),
            member(12, "qk-2", "http://qk-2:2380", false),
        ]
    }

    fn known(member_id: u64) -> Local {
        Local::Known(Identity {
            member_id,
            cluster_id: 7,
        })
    }

    fn is_wait(step: &Step) -> bool {
        matches!(step, Step::Wait { .. })
    }

    #[test]
    fn first_install_bootstraps_only_when_every_founder_awaits() {
        let some = View {
            awaiting: vec![0],
            ..View::default()
        };
        assert!(is_wait(&decide(&me(3), &Local::Empty, &some)));
        let all = View {
            awaiting: vec![0, 2],
            ..View::default()
        };
        assert_eq!(decide(&me(3), &Local::Empty, &all), Step::Bootstrap);
        // One replica: no one else to wait for.
        let alone = Me {
            ordinal: 0,
            ..me(1)
        };
        assert_eq!(
            decide(&alone, &Local::Empty, &View::default()),
            Step::Bootstrap
        );
    }

    #[test]
    fn a_founder_joins_founders_that_went_ahead_but_never_elected_a_leader() {
        // Pod 0 saw the others awaiting and founded the cluster; it cannot elect a
        // leader alone, and its MemberList fails without a quorum.
        let view = View {
            awaiting: vec![2],
            founded: vec![0],
            ..View::default()
        };
        assert_eq!(decide(&me(3), &Local::Empty, &view), Step::Bootstrap);
    }

    #[test]
    fn founders_with_different_tokens_never_bootstrap_together() {
        let view = View {
            awaiting: vec![0],
            foreign: vec![(2, "other".into())],
            ..View::default()
        };
        let step = decide(&me(3), &Local::Empty, &view);
        assert!(matches!(&step, Step::Wait { reason } if reason.contains("token")));
    }

    #[test]
    fn a_founder_that_never_started_joins_the_cluster_its_peers_founded() {
        let mut members = three_started();
        members[1].name.clear();
        match decide(&me(3), &Local::Empty, &cluster(members, vec![])) {
            Step::Join { members } => {
                assert!(members.contains(&("qk-1".into(), ME.into())));
                assert!(members.contains(&("qk-0".into(), "http://qk-0:2380".into())));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pod_restart_with_its_volume_rejoins_as_itself_bitnami_1640_16069() {
        assert_eq!(
            decide(&me(3), &known(11), &cluster(three_started(), vec![])),
            Step::Restart
        );
    }

    #[test]
    fn full_restart_of_every_pod_needs_no_peer() {
        assert_eq!(decide(&me(3), &known(11), &View::default()), Step::Restart);
    }

    #[test]
    fn reinstall_over_old_volumes_restarts_bitnami_5443() {
        // The token is the release's, so a reinstall finds the same cluster id.
        assert_eq!(
            decide(&me(3), &known(11), &cluster(three_started(), vec![])),
            Step::Restart
        );
        // Volumes of another cluster are never served, nor wiped.
        let other = Local::Known(Identity {
            member_id: 11,
            cluster_id: 8,
        });
        assert!(is_wait(&decide(
            &me(3),
            &other,
            &cluster(three_started(), vec![])
        )));
    }

    #[test]
    fn lost_volume_removes_the_stale_member_then_adds_a_learner_bitnami_9950_15783() {
        let step = decide(&me(3), &Local::Empty, &cluster(three_started(), vec![]));
        assert!(matches!(step, Step::RemoveStale { id: 11, .. }), "{step:?}");
        // Once removed, the pod is not listed: it asks to be added as a learner.
        let mut members = three_started();
        members.remove(1);
        assert_eq!(
            decide(&me(3), &Local::Empty, &cluster(members, vec![11])),
            Step::AddLearner
        );
    }

    #[test]
    fn a_lost_volume_never_bootstraps_while_its_peers_are_down() {
        // Peers with data answer nothing while they start; they never await.
        assert!(is_wait(&decide(&me(3), &Local::Empty, &View::default())));
    }

    #[test]
    fn scale_up_adds_a_learner_then_joins_as_it_bitnami_9511_14393() {
        let four = Me {
            name: "qk-3",
            ordinal: 3,
            peer_url: "http://qk-3:2380",
            replicas: 5,
        };
        let view = cluster(three_started(), vec![]);
        assert_eq!(decide(&four, &Local::Empty, &view), Step::AddLearner);
        let mut members = three_started();
        members.push(member(20, "", "http://qk-3:2380", true));
        let step = decide(&four, &Local::Empty, &cluster(members, vec![]));
        match step {
            Step::Join { members } => {
                assert_eq!(members.len(), 4);
                assert!(members.contains(&("qk-3".into(), "http://qk-3:2380".into())));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_pod_beyond_the_replicas_never_joins() {
        let mut members = three_started();
        members.remove(1);
        let view = cluster(members, vec![]);
        assert!(is_wait(&decide(&me(1), &Local::Empty, &view)));
        assert!(is_wait(&decide(&me(1), &Local::Empty, &View::default())));
        // An unstarted learner left behind by a pod that is no longer wanted goes.
        let mut members = three_started();
        members[1] = member(11, "", ME, true);
        assert!(matches!(
            decide(&me(1), &Local::Empty, &cluster(members, vec![])),
            Step::RemoveStale { id: 11, .. }
        ));
    }

    #[test]
    fn scale_three_one_three_wipes_the_removed_members_retained_volume_bitnami_10009() {
        let mut members = three_started();
        members.remove(1);
        let view = cluster(members, vec![11]);
        assert!(matches!(
            decide(&me(3), &known(11), &view),
            Step::Wipe { .. }
        ));
        // While the set is still scaled down, the volume is left alone.
        assert!(is_wait(&decide(&me(1), &known(11), &view)));
    }

    #[test]
    fn an_unreadable_identity_file_is_recovered_from_the_cluster_bitnami_6251_7048() {
        let broken = Local::Unknown("member.json: EOF while parsing".into());
        assert_eq!(
            decide(&me(3), &broken, &cluster(three_started(), vec![])),
            Step::Adopt(Identity {
                member_id: 11,
                cluster_id: 7
            })
        );
        assert!(is_wait(&decide(&me(3), &broken, &View::default())));
        let mut members = three_started();
        members.remove(1);
        assert!(matches!(
            decide(&me(3), &broken, &cluster(members, vec![11])),
            Step::Wipe { .. }
        ));
    }
}
