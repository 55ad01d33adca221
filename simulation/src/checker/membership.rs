//! The membership checker: what a seed's membership changes must leave behind, and
//! what a removed member must never do.
//!
//! From the [`MembershipLog`] of the membership client, the [`History`] of the other
//! clients (each operation names the member that answered it) and what the members
//! report at the end ([`MembershipFacts`], gathered by [`await_member_lists`] once the
//! run is over):
//!
//! | property | violated when |
//! |---|---|
//! | `member-list-agreement` | two members still in the cluster report different member lists (ids, peer URLs, learner flags), or one does not answer (a learner refuses MemberList, as in etcd: the others must list it as a learner) |
//! | `membership-settled` | the agreed list contradicts an acknowledged change (a member whose removal was acknowledged is still listed, one whose addition was acknowledged is missing, an acknowledged promotion left a learner, an acknowledged MemberUpdate's peer URL is not there), a listed member never started, or the list is not exactly the members the cluster counts: what a configuration left joint, or a change lost, shows through MemberList |
//! | `removed-member-served` | a member answered a linearizable read that was sent after its removal was acknowledged |
//! | `removed-member-acked` | a member acknowledged a write (Put, Delete, Txn, Compact, LeaseGrant, LeaseRevoke) that was sent after its removal was acknowledged |
//! | `removed-member-stops` | a removed member's process still ran at the end of the run, or when its host was wiped to replace it |
//!
//! It cannot see openraft's joint configuration itself: MemberList lists the union of
//! both halves of a joint configuration, so a configuration left joint shows only as a
//! member that should be gone (or a voter that should be one), which
//! `membership-settled` catches for acknowledged changes, not for changes whose
//! outcome the client never learnt.
//!
//! [`History`]: crate::history::History

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::Client;

use super::Violation;
use crate::client;
use crate::history::{
    ChangeOutcome, ListedMember, MemberChange, MembershipEntry, MembershipLog, Op, Operation,
    Outcome,
};

/// What the members report, and what the harness saw of removed members' processes,
/// once a run is over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipFacts {
    /// Each member still in the cluster (by host name) with the member list it
    /// reported, or why it did not.
    pub lists: Vec<(String, Result<Vec<ListedMember>, String>)>,
    /// Removed members whose process still ran when it should have stopped: at the
    /// end of the run, or when a replacement wiped the host. One line each.
    pub still_running: Vec<String>,
}

/// Every membership property over a run; see the module docs.
pub fn check_membership(
    log: &MembershipLog,
    operations: &[Operation],
    facts: &MembershipFacts,
) -> Vec<Violation> {
    let entries = log.entries();
    let mut violations = Vec::new();
    match agreed_list(facts) {
        Ok(list) => violations.extend(check_settled(&entries, &list, facts)),
        Err(violation) => violations.push(violation),
    }
    violations.extend(check_removed_served(&entries, operations));
    violations.extend(
        facts
            .still_running
            .iter()
            .map(|line| Violation::new("removed-member-stops", line.clone())),
    );
    violations
}

/// The one list every member reports.
fn agreed_list(facts: &MembershipFacts) -> Result<Vec<ListedMember>, Violation> {
    let mut agreed: Option<(&str, Vec<Compared>)> = None;
    let mut learners = Vec::new();
    for (name, list) in &facts.lists {
        if list.as_ref().is_err_and(|e| refused_as_learner(e)) {
            // A learner serves no MemberList (etcd's rule): the others' lists must
            // show it as a learner, checked below.
            learners.push(name);
            continue;
        }
        let list = list.as_ref().map_err(|error| {
            Violation::new(
                "member-list-agreement",
                format!("{name} did not answer MemberList: {error}"),
            )
        })?;
        let compared = compared(list);
        match &agreed {
            None => agreed = Some((name, compared)),
            Some((first, theirs)) if *theirs != compared => {
                return Err(Violation::new(
                    "member-list-agreement",
                    format!(
                        "{first} lists {} but {name} lists {}",
                        describe(theirs),
                        describe(&compared)
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    let Some((name, _)) = agreed else {
        return Err(Violation::new(
            "member-list-agreement",
            "no member is left to ask",
        ));
    };
    let list = facts
        .lists
        .iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, l)| l.as_ref().ok())
        .cloned()
        .unwrap_or_default();
    for learner in learners {
        if !list.iter().any(|m| &m.name == learner && m.is_learner) {
            return Err(Violation::new(
                "member-list-agreement",
                format!(
                    "{learner} refused MemberList as a learner, but {name} does not list it as one"
                ),
            ));
        }
    }
    Ok(list)
}

/// What members must agree on: ids, peer URLs, learner flags.
type Compared = (u64, Vec<String>, bool);

fn compared(list: &[ListedMember]) -> Vec<Compared> {
    let mut compared: Vec<Compared> = list
        .iter()
        .map(|m| {
            let mut urls = m.peer_urls.clone();
            urls.sort();
            (m.id, urls, m.is_learner)
        })
        .collect();
    compared.sort();
    compared
}

fn describe(list: &[Compared]) -> String {
    let members: Vec<String> = list
        .iter()
        .map(|(id, urls, learner)| {
            format!(
                "{id:x} {}{}",
                urls.join(","),
                if *learner { " learner" } else { "" }
            )
        })
        .collect();
    format!("[{}]", members.join("; "))
}

/// The agreed list against the acknowledged changes and the members the cluster
/// counts.
fn check_settled(
    entries: &[MembershipEntry],
    list: &[ListedMember],
    facts: &MembershipFacts,
) -> Vec<Violation> {
    let mut violations = Vec::new();
    let settled = |detail: String| Violation::new("membership-settled", detail);
    let listed = |id: u64| list.iter().find(|m| m.id == id);
    let changes: Vec<(&MemberChange, &ChangeOutcome)> = entries
        .iter()
        .filter_map(|e| match e {
            MembershipEntry::Change {
                change, outcome, ..
            } => Some((change, outcome)),
            MembershipEntry::Note { .. } => None,
        })
        .collect();
    // Whether a change about `id` of the given kind was sent after change `i`.
    let later = |i: usize, id: u64, kind: fn(&MemberChange) -> Option<u64>| {
        changes[i + 1..].iter().any(|(c, _)| kind(c) == Some(id))
    };
    let removal = |c: &MemberChange| match c {
        MemberChange::Remove { id, .. } => Some(*id),
        _ => None,
    };
    let update = |c: &MemberChange| match c {
        MemberChange::Update { id, .. } => Some(*id),
        _ => None,
    };
    for (i, (change, outcome)) in changes.iter().enumerate() {
        let ChangeOutcome::Done { id, .. } = outcome else {
            continue;
        };
        let id = *id;
        let problem = match change {
            MemberChange::Remove { name, .. } => listed(id).map(|member| {
                format!("{name}'s removal was acknowledged, yet the members list {member}")
            }),
            MemberChange::Add { name, learner, .. }
                if !later(i, id, removal) && listed(id).is_none() =>
            {
                Some(format!(
                    "{name} ({id:x}) was added{}, yet the members do not list it",
                    if *learner { " as a learner" } else { "" }
                ))
            }
            MemberChange::Promote { name, .. }
                if !later(i, id, removal) && listed(id).is_some_and(|m| m.is_learner) =>
            {
                Some(format!(
                    "{name} ({id:x}) was promoted, yet the members list it as a learner"
                ))
            }
            MemberChange::Update { name, peer_url, .. }
                if !later(i, id, removal) && !later(i, id, update) =>
            {
                listed(id)
                    .filter(|m| !m.peer_urls.contains(peer_url))
                    .map(|member| {
                        format!(
                            "{name}'s peer URL became {peer_url}, yet the members list {member}"
                        )
                    })
            }
            _ => None,
        };
        violations.extend(problem.map(settled));
    }
    for member in list.iter().filter(|m| m.name.is_empty()) {
        violations.push(settled(format!("{member} is listed but never started")));
    }
    let mut counted: Vec<&str> = facts.lists.iter().map(|(n, _)| n.as_str()).collect();
    counted.sort_unstable();
    let mut names: Vec<&str> = list
        .iter()
        .filter(|m| !m.name.is_empty())
        .map(|m| m.name.as_str())
        .collect();
    names.sort_unstable();
    if !list.iter().any(|m| m.name.is_empty()) && names != counted {
        violations.push(settled(format!(
            "the members list {names:?}, but the cluster counts {counted:?}"
        )));
    }
    violations
}

/// No member answers a linearizable read, or acknowledges a write, sent after its
/// removal was acknowledged.
fn check_removed_served(entries: &[MembershipEntry], operations: &[Operation]) -> Vec<Violation> {
    let removed: BTreeMap<u64, (&str, Duration)> = entries
        .iter()
        .filter_map(|e| match e {
            MembershipEntry::Change {
                change: MemberChange::Remove { name, id },
                completed,
                outcome: ChangeOutcome::Done { .. },
                ..
            } => Some((*id, (name.as_str(), *completed))),
            _ => None,
        })
        .collect();
    let mut violations = Vec::new();
    for op in operations {
        let Some((name, removed_at)) = op.member.and_then(|m| removed.get(&m)) else {
            continue;
        };
        if op.invoked <= *removed_at || !served(op) {
            continue;
        }
        let property = if matches!(op.op, Op::Get { .. }) {
            "removed-member-served"
        } else {
            "removed-member-acked"
        };
        violations.push(Violation::new(
            property,
            format!(
                "{op}: {name} answered it, {:.3}s after its removal was acknowledged at {:.3}s",
                (op.invoked - *removed_at).as_secs_f64(),
                removed_at.as_secs_f64()
            ),
        ));
    }
    violations
}

/// A linearizable read answered, or a write acknowledged.
fn served(op: &Operation) -> bool {
    match (&op.op, &op.outcome) {
        (_, Outcome::Unknown(_)) => false,
        (Op::Get { serializable, .. }, Outcome::Read { .. }) => !serializable,
        (Op::LeaseKeepAlive { .. }, _) => false,
        (Op::Get { .. }, _) => false,
        _ => true,
    }
}

/// Reads the member list of every member in `members` (name and client URL), until
/// they all answer the same list or `within` passes; the last answers. Must run inside
/// a turmoil host, once the run is over.
pub async fn await_member_lists(
    members: &[(String, String)],
    within: Duration,
) -> Vec<(String, Result<Vec<ListedMember>, String>)> {
    let deadline = tokio::time::Instant::now() + within;
    let mut clients: BTreeMap<String, Client> = BTreeMap::new();
    loop {
        let mut lists = Vec::with_capacity(members.len());
        for (name, url) in members {
            lists.push((name.clone(), member_list(&mut clients, name, url).await));
        }
        // Learners answer no MemberList; the voters' lists must agree.
        let answered: Vec<&Vec<ListedMember>> =
            lists.iter().filter_map(|(_, l)| l.as_ref().ok()).collect();
        let agreed = lists.iter().all(|(_, l)| match l {
            Ok(_) => true,
            Err(error) => refused_as_learner(error),
        }) && answered
            .windows(2)
            .all(|w| compared(w[0]) == compared(w[1]));
        if agreed || tokio::time::Instant::now() >= deadline {
            return lists;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// etcd's refusal of an RPC a learner does not serve.
fn refused_as_learner(error: &str) -> bool {
    error.contains("rpc not supported for learner")
}

async fn member_list(
    clients: &mut BTreeMap<String, Client>,
    name: &str,
    url: &str,
) -> Result<Vec<ListedMember>, String> {
    if !clients.contains_key(name) {
        let client = client::connect(url).await.map_err(|e| e.to_string())?;
        clients.insert(name.to_owned(), client);
    }
    let client = clients
        .get_mut(name)
        .ok_or_else(|| format!("no client for {name}"))?;
    match client.member_list().await {
        Ok(response) => {
            let mut list: Vec<ListedMember> = response
                .members()
                .iter()
                .map(ListedMember::from_member)
                .collect();
            list.sort();
            Ok(list)
        }
        Err(error) => {
            clients.remove(name);
            Err(error.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::MembershipEntry;

    fn member(id: u64, learner: bool) -> ListedMember {
        ListedMember::fixture(id, learner)
    }

    fn facts(lists: Vec<Vec<ListedMember>>) -> MembershipFacts {
        MembershipFacts {
            lists: lists
                .into_iter()
                .enumerate()
                .map(|(i, list)| (format!("n{}", i + 1), Ok(list)))
                .collect(),
            still_running: Vec::new(),
        }
    }

    fn change(change: MemberChange, at: (u64, u64), outcome: ChangeOutcome) -> MembershipEntry {
        MembershipEntry::Change {
            change,
            asked: "n1".into(),
            invoked: Duration::from_millis(at.0),
            completed: Duration::from_millis(at.1),
            outcome,
        }
    }

    fn done(id: u64) -> ChangeOutcome {
        ChangeOutcome::Done {
            id,
            members: Vec::new(),
        }
    }

    fn remove(id: u64, at: (u64, u64), outcome: ChangeOutcome) -> MembershipEntry {
        change(
            MemberChange::Remove {
                name: format!("n{id}"),
                id,
            },
            at,
            outcome,
        )
    }

    fn log(entries: Vec<MembershipEntry>) -> MembershipLog {
        let log = MembershipLog::new("m");
        for entry in entries {
            log.record(entry);
        }
        log
    }

    fn read(member: u64, at: (u64, u64), serializable: bool) -> Operation {
        Operation {
            client: "c1".into(),
            op: Op::Get {
                key: "k".into(),
                serializable,
            },
            invoked: Duration::from_millis(at.0),
            completed: Duration::from_millis(at.1),
            outcome: Outcome::Read {
                revision: 3,
                value: None,
            },
            member: Some(member),
        }
    }

    fn properties(violations: &[Violation]) -> Vec<&'static str> {
        violations.iter().map(|v| v.property).collect()
    }

    #[test]
    fn agreeing_members_after_a_removal_pass() {
        let list = vec![member(1, false), member(2, false)];
        let log = log(vec![remove(3, (100, 200), done(3))]);
        let reads = vec![read(3, (150, 160), false), read(1, (300, 310), false)];
        let facts = facts(vec![list.clone(), list]);
        assert_eq!(check_membership(&log, &reads, &facts), vec![]);
    }

    #[test]
    fn members_that_disagree_or_do_not_answer_are_caught() {
        let facts = facts(vec![
            vec![member(1, false), member(2, false)],
            vec![member(1, false), member(2, true)],
        ]);
        assert_eq!(
            properties(&check_membership(&log(vec![]), &[], &facts)),
            vec!["member-list-agreement"]
        );
        let silent = MembershipFacts {
            lists: vec![("n1".into(), Err("deadline".into()))],
            still_running: Vec::new(),
        };
        assert_eq!(
            properties(&check_membership(&log(vec![]), &[], &silent)),
            vec!["member-list-agreement"]
        );
    }

    #[test]
    fn a_learner_refusing_member_list_is_checked_against_the_others_lists() {
        let refused =
            || Err("status: FailedPrecondition, etcdserver: rpc not supported for learner".into());
        let as_learner = vec![member(1, false), member(2, false), member(3, true)];
        let facts = MembershipFacts {
            lists: vec![
                ("n1".into(), Ok(as_learner.clone())),
                ("n2".into(), Ok(as_learner)),
                ("n3".into(), refused()),
            ],
            still_running: Vec::new(),
        };
        assert_eq!(check_membership(&log(vec![]), &[], &facts), vec![]);
        let as_voter = vec![member(1, false), member(2, false), member(3, false)];
        let facts = MembershipFacts {
            lists: vec![("n1".into(), Ok(as_voter)), ("n3".into(), refused())],
            still_running: Vec::new(),
        };
        assert_eq!(
            properties(&check_membership(&log(vec![]), &[], &facts)),
            vec!["member-list-agreement"]
        );
    }

    #[test]
    fn a_list_contradicting_acknowledged_changes_is_caught() {
        let list = vec![member(1, false), member(2, false), member(3, true)];
        let facts = facts(vec![list.clone(), list.clone(), list]);
        // The removal of 2 was acknowledged: still listed (a joint configuration).
        let removed = log(vec![remove(2, (0, 10), done(2))]);
        assert_eq!(
            properties(&check_membership(&removed, &[], &facts)),
            vec!["membership-settled"]
        );
        // 3's promotion was acknowledged: still a learner.
        let promoted = log(vec![change(
            MemberChange::Promote {
                name: "n3".into(),
                id: 3,
            },
            (0, 10),
            done(3),
        )]);
        assert_eq!(
            properties(&check_membership(&promoted, &[], &facts)),
            vec!["membership-settled"]
        );
        // 4 was added and never removed: missing.
        let added = log(vec![change(
            MemberChange::Add {
                name: "n4".into(),
                peer_url: "http://n4:2380".into(),
                learner: false,
            },
            (0, 10),
            done(4),
        )]);
        assert_eq!(
            properties(&check_membership(&added, &[], &facts)),
            vec!["membership-settled"]
        );
        // A removal of unknown outcome proves nothing either way.
        let unknown = log(vec![remove(
            2,
            (0, 10),
            ChangeOutcome::Unknown("deadline".into()),
        )]);
        assert_eq!(check_membership(&unknown, &[], &facts), vec![]);
    }

    #[test]
    fn a_list_that_is_not_the_counted_members_is_caught() {
        let list = vec![member(1, false), member(2, false), member(3, false)];
        // Only n1 and n2 are counted as members, but n3 is listed too.
        let facts = facts(vec![list.clone(), list]);
        assert_eq!(
            properties(&check_membership(&log(vec![]), &[], &facts)),
            vec!["membership-settled"]
        );
    }

    #[test]
    fn a_removed_member_serving_reads_or_writes_is_caught() {
        let list = vec![member(1, false), member(2, false)];
        let facts = facts(vec![list.clone(), list]);
        let log = log(vec![remove(3, (100, 200), done(3))]);
        // A linearizable read sent after the removal's acknowledgement, answered by 3.
        let stale = vec![read(3, (201, 220), false)];
        assert_eq!(
            properties(&check_membership(&log, &stale, &facts)),
            vec!["removed-member-served"]
        );
        // Serializable reads may be served by anyone (they may be stale by design).
        let serializable = vec![read(3, (201, 220), true)];
        assert_eq!(check_membership(&log, &serializable, &facts), vec![]);
        // A write it acknowledged.
        let write = Operation {
            client: "c1".into(),
            op: Op::Put {
                key: "k".into(),
                value: "v".into(),
            },
            invoked: Duration::from_millis(300),
            completed: Duration::from_millis(310),
            outcome: Outcome::Written { revision: 9 },
            member: Some(3),
        };
        assert_eq!(
            properties(&check_membership(&log, &[write], &facts)),
            vec!["removed-member-acked"]
        );
        // A removal that was refused removed nothing.
        let refused = self::log(vec![remove(
            3,
            (100, 200),
            ChangeOutcome::Refused {
                code: "FailedPrecondition".into(),
                message: "etcdserver: re-configuration failed".into(),
            },
        )]);
        assert_eq!(check_membership(&refused, &stale, &facts), vec![]);
    }

    #[test]
    fn a_removed_member_still_running_is_caught() {
        let list = vec![member(1, false)];
        let mut facts = facts(vec![list]);
        facts.still_running = vec!["n2 (removed at 3.0s) still runs at the end".into()];
        assert_eq!(
            properties(&check_membership(&log(vec![]), &[], &facts)),
            vec!["removed-member-stops"]
        );
    }
}
