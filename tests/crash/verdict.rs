//! What must hold after power losses, judged against the record of what clients were
//! told: nothing acknowledged is lost, nothing is served twice or out of order.
//!
//! - Every member holds the same keys, and every acknowledged write is there with its
//!   value at the revision it was acknowledged with; a write whose outcome is unknown
//!   is there with its own value or not at all; no two writes share a revision.
//! - The whole history, across the power losses, is linearizable (the simulation's
//!   checker: a write that took effect can never be taken back by a power loss, since
//!   a later read would not linearize).
//! - Every put a watcher was told of is in the store as it was told.
//! - Every lease granted is still there with the keys put on it.
//! - Members' HashKV agree at one revision.
//! - A write after the power losses takes a revision above every acknowledged one.

use std::collections::{BTreeMap, HashMap};

use etcd_client::{LeaseTimeToLiveOptions, PutOptions};
use quantykube_simulation::history::{Op, Outcome};
use quantykube_simulation::linearizability;

use crate::harness::Cluster;
use crate::rig::Rig;
use crate::traffic::{all_keys, Record, Traffic};

/// What the checks covered, for the test's report.
#[derive(Debug, Default)]
pub struct Checked {
    pub acknowledged_writes: usize,
    pub unknown_writes: usize,
    pub unknown_writes_applied: usize,
    pub reads: usize,
    pub watched_events: usize,
    pub leases: usize,
    pub final_revision: i64,
}

/// A key as one member holds it: value, mod_revision, lease.
type Held = BTreeMap<String, (String, i64, i64)>;

async fn held(cluster: &Cluster, i: usize) -> (Held, i64) {
    let mut client = cluster.client(i).await;
    let (prefix, options) = all_keys();
    let got = client
        .get(prefix, Some(options))
        .await
        .unwrap_or_else(|e| panic!("read every key from member {i}: {e}"));
    let revision = got.header().map(|h| h.revision()).unwrap_or_default();
    let keys = got
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                (
                    String::from_utf8_lossy(kv.value()).into_owned(),
                    kv.mod_revision(),
                    kv.lease(),
                ),
            )
        })
        .collect();
    (keys, revision)
}

/// A last round of traffic on the running members (its reads of earlier keys judged
/// too: after power losses, they must find what was acknowledged), then every check;
/// prints what was checked.
pub async fn judge(rig: &Rig, record: &Record, round: usize, initial: i64) -> Checked {
    let endpoints: Vec<String> = rig
        .cluster
        .running()
        .into_iter()
        .map(|i| rig.cluster.endpoint(i))
        .collect();
    let traffic = Traffic::start(record, &endpoints, round, 4);
    traffic
        .wait_for_writes(40, std::time::Duration::from_secs(90))
        .await;
    traffic.stop().await;
    let checked = check(&rig.cluster, record, initial).await;
    eprintln!("{} power losses: {checked:?}", rig.power_losses);
    checked
}

/// Runs every check on the running members of `cluster`, panicking with every
/// violation found. `initial_revision` is the store's revision before the first
/// traffic (the recorded clients are the only writers of their keys).
pub async fn check(cluster: &Cluster, record: &Record, initial_revision: i64) -> Checked {
    let mut violations = Vec::new();
    let mut checked = Checked::default();
    let members = cluster.running();
    let operations = record.history.operations();

    // A write after everything: above every acknowledged revision.
    let max_acked = operations
        .iter()
        .filter_map(|o| o.written_revision())
        .max()
        .unwrap_or(0);
    let mut client = cluster.client(members[0]).await;
    let after = client
        .put("after-the-power-losses", "x", None::<PutOptions>)
        .await
        .expect("a write after the power losses");
    let after_revision = after.header().map(|h| h.revision()).unwrap_or_default();
    if after_revision <= max_acked {
        violations.push(format!(
            "a write after the power losses took revision {after_revision}, not above the \
             acknowledged {max_acked}: revisions were reused"
        ));
    }

    // Every member holds the same keys.
    let (first, _) = held(cluster, members[0]).await;
    for &i in &members[1..] {
        let (other, _) = held(cluster, i).await;
        if other != first {
            let differing: Vec<&String> = first
                .keys()
                .chain(other.keys())
                .filter(|k| first.get(*k) != other.get(*k))
                .take(5)
                .collect();
            violations.push(format!(
                "members {} and {i} hold different keys (first: {differing:?})",
                members[0]
            ));
        }
    }

    // Acknowledged writes are there; unknown ones are there as written or absent.
    let mut revision_owner: HashMap<i64, String> = HashMap::new();
    for (key, (_, mod_revision, _)) in &first {
        if let Some(other) = revision_owner.insert(*mod_revision, key.clone()) {
            violations.push(format!("{key} and {other} share revision {mod_revision}"));
        }
    }
    for op in &operations {
        let (key, value) = match &op.op {
            Op::Put { key, value } | Op::PutWithLease { key, value, .. } => (key, value),
            Op::Get { .. } => {
                if matches!(op.outcome, Outcome::Read { .. }) {
                    checked.reads += 1;
                }
                continue;
            }
            _ => continue,
        };
        match (&op.outcome, first.get(key)) {
            (Outcome::Written { revision }, Some((v, r, _))) if v == value && r == revision => {
                checked.acknowledged_writes += 1;
            }
            (Outcome::Written { revision }, held) => violations.push(format!(
                "acknowledged {op} (revision {revision}) is lost: the store holds {held:?}"
            )),
            (Outcome::Unknown(_), None) => checked.unknown_writes += 1,
            (Outcome::Unknown(_), Some((v, _, _))) if v == value => {
                checked.unknown_writes += 1;
                checked.unknown_writes_applied += 1;
            }
            (_, held) => violations.push(format!("{op}: the store holds {held:?}")),
        }
    }

    // Watched puts are in the store as the watcher was told.
    let watched = record
        .watched
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    for event in &watched {
        match first.get(&event.key) {
            Some((v, r, _)) if *v == event.value && *r == event.mod_revision => {}
            held => violations.push(format!(
                "a watcher was told {}={} at revision {}, the store holds {held:?}",
                event.key, event.value, event.mod_revision
            )),
        }
    }
    checked.watched_events = watched.len();

    // Granted leases are there, with the keys acknowledged on them.
    for op in &operations {
        let Outcome::Granted { id, .. } = op.outcome else {
            continue;
        };
        checked.leases += 1;
        let alive = client
            .lease_time_to_live(id, Some(LeaseTimeToLiveOptions::new().with_keys()))
            .await
            .expect("lease TimeToLive");
        if alive.ttl() <= 0 {
            violations.push(format!("lease {id:x}, granted by {op}, is gone"));
            continue;
        }
        let keys: Vec<String> = alive
            .keys()
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        for put in &operations {
            if let (Op::PutWithLease { key, lease, .. }, Outcome::Written { .. }) =
                (&put.op, &put.outcome)
            {
                if *lease == id && !keys.contains(key) {
                    violations.push(format!("lease {id:x} lost its key {key}"));
                }
            }
        }
    }

    // HashKV agrees at one revision every member has applied.
    let mut hashes = Vec::new();
    for &i in &members {
        let mut member = cluster.client(i).await;
        // A linearizable read first: the member has applied `after_revision`.
        member
            .get("after-the-power-losses", None)
            .await
            .expect("read barrier");
        let hash = member.hash_kv(after_revision).await.expect("HashKV");
        hashes.push((i, hash.hash(), hash.compact_version()));
    }
    if hashes
        .windows(2)
        .any(|w| (w[0].1, w[0].2) != (w[1].1, w[1].2))
    {
        violations.push(format!("HashKV at {after_revision} differs: {hashes:?}"));
    }

    // The history as a whole.
    if let Err(violation) = linearizability::check(&operations, initial_revision) {
        violations.push(format!("not linearizable: {violation}"));
    }

    checked.final_revision = after_revision;
    assert!(
        violations.is_empty(),
        "{} violations after power losses:\n{}",
        violations.len(),
        violations.join("\n")
    );
    checked
}
