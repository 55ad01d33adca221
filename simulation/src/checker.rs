//! End-of-run checks: members converge, revisions are sound, acknowledged writes last.
//!
//! This module owns [`Violation`] and the checks a simulation runs once its faults are
//! healed:
//! - convergence ([`await_convergence`]): every member reports the same store revision
//!   and the same digest of every key (key, value, create and mod revision, version,
//!   lease), read with serializable ranges from each member, as etcd's HashKV compares;
//! - revisions ([`check_revisions`]): each acknowledged write (Put, Cas that swapped,
//!   Delete that deleted) got a revision no other write got, a client's acknowledged
//!   writes got strictly increasing revisions, and no linearizable read returned a
//!   store or a key older than a write acknowledged before the read began;
//! - accounting ([`check_accounting`]): every revision the store reached was made by a
//!   write the clients sent, or by the revoke or expiry of a lease they attached keys
//!   to, one per lease (none skipped, none invented);
//! - linearizability (in [`linearizability`], run by [`check_healed_cluster`]): one
//!   order of all operations explains every answer a client got;
//! - HashKV agreement ([`await_hash_agreement`], in `hashkv`): once healed, every
//!   member answers `HashKV` alike (hash, hash revision, compact revision) at the
//!   current revision and at earlier ones, as etcd's corruption check compares them;
//! - snapshots ([`check_snapshots`], in `snapshot`): every snapshot file a client
//!   fetched has a valid SHA-256 trailer, opens as etcd's bbolt database and holds the
//!   key space at one revision, no older than the writes acknowledged before the call,
//!   with exactly the versions the clients' writes explain;
//! - durability ([`check_durability`]): reading at its revision, every acknowledged Put
//!   and Cas is there on every member, unless a Compact the clients sent removed that
//!   revision;
//! - read snapshots ([`check_read_snapshots`]): every read, serializable ones
//!   included, answered with its key's state at the revision in its own header;
//! - member reads ([`check_member_reads`], in `member_reads`): no member answers a read
//!   at an older revision than a read it answered before;
//! - watches ([`check_watches`], in `watch`): what watch clients saw keeps etcd's
//!   watch guarantees (ordered, unique, reliable, atomic, bookmarkable, correct
//!   `prev_kv`, the same events through every member), judged from their logs;
//! - leases ([`check_leases`], in `lease`): no key attached to a lease disappears
//!   before the lease's TTL has run out since a keepalive (or the grant) answered, and
//!   every key of a lease no longer kept alive is gone once the TTL (and a bound) has
//!   passed on a healed cluster, judged from the clients' operations;
//! - membership ([`check_membership`], in `membership`): the members still in the
//!   cluster agree on one member list that reflects every acknowledged change, and a
//!   removed member neither serves a linearizable read or a write sent after its
//!   removal was acknowledged nor keeps running;
//! - auth ([`check_auth`], in `auth`): no user request succeeded with a permission, a
//!   role or a user an administrator had taken away before it was sent (and nothing
//!   could have given back in time), and no linearizable read was refused a
//!   permission that surely held, judged from the auth workload's log.
//!
//! It must never change the cluster (reads only) and never excuse a violation: a check
//! that cannot decide (e.g. a member that does not answer) reports it as a violation.

mod auth;
mod hashkv;
mod lease;
mod member_reads;
mod membership;
mod snapshot;
mod watch;

pub use auth::{check_auth, check_entries as check_auth_entries};
pub use hashkv::await_hash_agreement;
pub use lease::{check_leases, LIVENESS_SLACK, SAFETY_SLACK};
pub use member_reads::check_member_reads;
pub use membership::{await_member_lists, check_membership, MembershipFacts};
pub use snapshot::check_snapshots;
pub use watch::check_watches;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use etcd_client::{Client, GetOptions};

use crate::fnv::Fnv;
use crate::history::{Op, Operation, Outcome};
pub use crate::violation::Violation;
use crate::{client, linearizability};

/// One member's store as a serializable read sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreDigest {
    pub member: String,
    /// The store revision in the response header.
    pub revision: i64,
    pub keys: usize,
    /// FNV-1a over every key's key, value, create and mod revision, version and lease.
    pub hash: u64,
}

impl StoreDigest {
    fn same_store(&self, other: &StoreDigest) -> bool {
        (self.revision, self.keys, self.hash) == (other.revision, other.keys, other.hash)
    }
}

impl fmt::Display for StoreDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: rev {} keys {} hash {:016x}",
            self.member, self.revision, self.keys, self.hash
        )
    }
}

/// Reads every key from the member `client` is connected to, serializably.
pub async fn digest(client: &mut Client, member: &str) -> Result<StoreDigest, etcd_client::Error> {
    let response = client
        .get(
            "",
            Some(GetOptions::new().with_all_keys().with_serializable()),
        )
        .await?;
    let mut hash = Fnv::new();
    for kv in response.kvs() {
        hash.bytes(kv.key());
        hash.bytes(kv.value());
        for n in [
            kv.create_revision(),
            kv.mod_revision(),
            kv.version(),
            kv.lease(),
        ] {
            hash.bytes(&n.to_le_bytes());
        }
    }
    Ok(StoreDigest {
        member: member.to_owned(),
        revision: response.header().map_or(0, |h| h.revision()),
        keys: response.kvs().len(),
        hash: hash.finish(),
    })
}

/// Polls every member in `members` (name and client URL) until all report the same
/// store, and returns their digests; a [`Violation`] if they still differ (or some
/// member does not answer) after `within`. Must run inside a turmoil host, once faults
/// are healed.
pub async fn await_convergence(
    members: &[(String, String)],
    within: Duration,
) -> Result<Vec<StoreDigest>, Violation> {
    let deadline = tokio::time::Instant::now() + within;
    let mut clients: BTreeMap<String, Client> = BTreeMap::new();
    loop {
        let mut digests = Vec::with_capacity(members.len());
        let mut failures = Vec::new();
        for (name, url) in members {
            match read_digest(&mut clients, name, url).await {
                Ok(digest) => digests.push(digest),
                Err(error) => failures.push(format!("{name}: {error}")),
            }
        }
        let agreed = failures.is_empty()
            && digests
                .first()
                .is_some_and(|first| digests.iter().all(|d| d.same_store(first)));
        if agreed {
            return Ok(digests);
        }
        if tokio::time::Instant::now() >= deadline {
            let mut seen: Vec<String> = digests.iter().map(ToString::to_string).collect();
            seen.extend(failures);
            return Err(Violation::new(
                "convergence",
                format!("members still differ after {within:?}: {}", seen.join("; ")),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn read_digest(
    clients: &mut BTreeMap<String, Client>,
    name: &str,
    url: &str,
) -> Result<StoreDigest, String> {
    let client = match clients.get_mut(name) {
        Some(client) => client,
        None => {
            let client = client::connect(url).await.map_err(|e| e.to_string())?;
            clients.entry(name.to_owned()).or_insert(client)
        }
    };
    match digest(client, name).await {
        Ok(digest) => Ok(digest),
        Err(error) => {
            // Re-dial next time: the connection may be the one that hangs.
            clients.remove(name);
            Err(error.to_string())
        }
    }
}

/// Checks the revisions clients saw: unique and per client increasing for acknowledged
/// Puts, and never older than an earlier acknowledged Put for linearizable reads.
pub fn check_revisions(operations: &[Operation]) -> Result<(), Violation> {
    let mut owner: BTreeMap<i64, &Operation> = BTreeMap::new();
    let mut last_by_client: BTreeMap<&str, &Operation> = BTreeMap::new();
    for op in operations {
        let Some(revision) = op.written_revision() else {
            continue;
        };
        if let Some(other) = owner.insert(revision, op) {
            return Err(Violation::new(
                "unique-revisions",
                format!("two acknowledged puts got revision {revision}: {other} and {op}"),
            ));
        }
        if let Some(previous) = last_by_client.insert(&op.client, op) {
            let before = previous.written_revision().unwrap_or(0);
            if previous.completed <= op.invoked && before >= revision {
                return Err(Violation::new(
                    "monotonic-revisions",
                    format!("{op} follows {previous} from the same client"),
                ));
            }
        }
    }
    check_stale_reads(operations)
}

/// No linearizable read may miss a write acknowledged before it was invoked: neither
/// in the store revision of its header nor in the key it read. A read that finds the
/// key absent after a Put or Cas is stale only if no Delete of the key (acknowledged
/// or not) may have come in between; after a Put with a lease, never: the lease's
/// revoke or expiry may delete the key at any time (the lease checker bounds when).
fn check_stale_reads(operations: &[Operation]) -> Result<(), Violation> {
    // Acknowledged writes (Put, Cas that swapped, Delete that deleted) by completion.
    let mut writes: Vec<(&Operation, &str, i64)> = operations
        .iter()
        .filter_map(|op| Some((op, op.written_key()?, op.written_revision()?)))
        .collect();
    writes.sort_by_key(|(op, _, _)| op.completed);
    let deletes: Vec<(&Operation, &str)> = operations
        .iter()
        .filter_map(|op| match &op.op {
            Op::Delete { key } => Some((op, key.as_str())),
            _ => None,
        })
        .collect();
    for read in operations {
        let (
            Op::Get {
                key,
                serializable: false,
            },
            Outcome::Read { revision, value },
        ) = (&read.op, &read.outcome)
        else {
            continue;
        };
        // Completion times are tick-granular: only strictly earlier writes count.
        for (write, write_key, write_revision) in writes
            .iter()
            .take_while(|(write, _, _)| write.completed < read.invoked)
        {
            if *revision < *write_revision {
                return Err(Violation::new(
                    "stale-read",
                    format!("{read} answered at a revision before {write}"),
                ));
            }
            if *write_key != key {
                continue;
            }
            let stale = match value {
                Some((_, mod_revision)) => mod_revision < write_revision,
                None => {
                    !matches!(write.op, Op::Delete { .. } | Op::PutWithLease { .. })
                        && !deletes.iter().any(|(delete, k)| {
                            k == write_key
                                && delete.completed >= write.invoked
                                && delete.invoked <= read.completed
                        })
                }
            };
            if stale {
                return Err(Violation::new(
                    "stale-read",
                    format!("{read} missed {write}"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks that the store went from `initial_revision` to `final_revision` by the
/// clients' writes alone: at least one revision per acknowledged write, at most one
/// per write that may have taken effect, and every acknowledged revision in between.
///
/// Leases make revisions no client request answers for: a lease's revoke, or its
/// expiry (which the leader sends through the log), deletes every key attached to it
/// in one revision, and a lease goes only once. So each lease some recorded Put was
/// sent with (answered or not) may account for exactly one more revision; a lease no
/// recorded Put names has no key of ours to delete, and a revoke or expiry of a lease
/// without keys makes no revision. Only sound when the recorded clients are the only
/// writers.
pub fn check_accounting(
    operations: &[Operation],
    initial_revision: i64,
    final_revision: i64,
) -> Result<(), Violation> {
    let acknowledged = operations
        .iter()
        .filter(|op| op.written_revision().is_some())
        .count();
    let leases_with_keys = operations
        .iter()
        .filter_map(|op| match op.op {
            Op::PutWithLease { lease, .. } => Some(lease),
            _ => None,
        })
        .collect::<std::collections::BTreeSet<i64>>()
        .len();
    let indefinite = operations
        .iter()
        .filter(|op| op.is_indefinite_write())
        .count()
        + leases_with_keys;
    let made = usize::try_from(final_revision - initial_revision).map_err(|_| {
        Violation::new(
            "revision-accounting",
            format!("final revision {final_revision} is below the initial {initial_revision}"),
        )
    })?;
    if made < acknowledged || made > acknowledged + indefinite {
        return Err(Violation::new(
            "revision-accounting",
            format!(
                "the store made {made} revisions for {acknowledged} acknowledged writes and \
                 {indefinite} that may have happened (writes of unknown outcome, and one \
                 revoke or expiry for each of {leases_with_keys} leases with keys)"
            ),
        ));
    }
    if let Some(op) = operations.iter().find(|op| {
        op.written_revision()
            .is_some_and(|r| r <= initial_revision || r > final_revision)
    }) {
        return Err(Violation::new(
            "revision-accounting",
            format!("{op} is outside ({initial_revision}, {final_revision}]"),
        ));
    }
    Ok(())
}

/// Reads every acknowledged Put (with a lease or not, and Cas that swapped) back at its own revision from
/// the member `client` is connected to: the key must hold the write's value, modified
/// at that revision. A revision a Compact in the history (answered or not) may have
/// compacted away is skipped; a compacted one no Compact asked for is a violation.
pub async fn check_durability(
    client: &mut Client,
    member: &str,
    operations: &[Operation],
) -> Result<(), Violation> {
    let compactable = compactable(operations);
    for op in operations {
        let (
            Op::Put { key, value }
            | Op::PutWithLease { key, value, .. }
            | Op::Cas { key, value, .. },
            Some(revision),
        ) = (&op.op, op.written_revision())
        else {
            continue;
        };
        let found = match state_at(client, key, revision, compactable).await {
            Ok(Some(found)) => found,
            Ok(None) => continue,
            Err(error) => {
                return Err(Violation::new(
                    "durability",
                    format!("{member} could not read back {op}: {error}"),
                ))
            }
        };
        if found.as_ref() != Some(&(value.clone(), revision)) {
            return Err(Violation::new(
                "durability",
                format!("{member} lost {op}: at revision {revision} it has {found:?}"),
            ));
        }
    }
    Ok(())
}

/// Re-reads every key a client read (serializable or linearizable) at the store
/// revision of the read's own header, from the member `client` is connected to once
/// the members converged: the answer must be the key's state at that revision. That
/// is the whole of etcd's promise for a serializable read (a member may serve one
/// arbitrarily stale, but always from one applied revision); a linearizable read is
/// held to it too, and to more by [`check_revisions`] and [`linearizability`]. A
/// revision a Compact in the history may have removed is skipped.
pub async fn check_read_snapshots(
    client: &mut Client,
    member: &str,
    operations: &[Operation],
) -> Result<(), Violation> {
    let compactable = compactable(operations);
    for op in operations {
        let (Op::Get { key, .. }, Outcome::Read { revision, value }) = (&op.op, &op.outcome) else {
            continue;
        };
        if value
            .as_ref()
            .is_some_and(|(_, modified)| modified > revision)
        {
            return Err(Violation::new(
                "read-snapshot",
                format!("{op} returned a key modified after the read's revision"),
            ));
        }
        let found = match state_at(client, key, *revision, compactable).await {
            Ok(Some(found)) => found,
            Ok(None) => continue,
            Err(error) => {
                return Err(Violation::new(
                    "read-snapshot",
                    format!("{member} could not re-read {op}: {error}"),
                ))
            }
        };
        if found != *value {
            return Err(Violation::new(
                "read-snapshot",
                format!("{op}, but at revision {revision} {member} has {found:?}"),
            ));
        }
    }
    Ok(())
}

/// `key`'s state at `revision` (its value and mod revision, or `None` if absent), read
/// serializably from the member `client` is connected to; `Ok(None)` if the revision
/// is compacted and a Compact in the history (up to `compactable`) may have done it.
async fn state_at(
    client: &mut Client,
    key: &str,
    revision: i64,
    compactable: i64,
) -> Result<Option<Option<(String, i64)>>, etcd_client::Error> {
    let options = GetOptions::new()
        .with_revision(revision)
        .with_serializable();
    match client.get(key, Some(options)).await {
        Ok(response) => Ok(Some(response.kvs().first().map(|kv| {
            (
                String::from_utf8_lossy(kv.value()).into_owned(),
                kv.mod_revision(),
            )
        }))),
        Err(error) if is_compacted(&error) && revision <= compactable => Ok(None),
        Err(error) => Err(error),
    }
}

/// The highest revision a Compact in the history (answered or not) asked for: reads
/// at or below it may fail as compacted.
fn compactable(operations: &[Operation]) -> i64 {
    operations
        .iter()
        .filter_map(|op| match op.op {
            Op::Compact { revision } => Some(revision),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

/// etcd's "required revision has been compacted".
fn is_compacted(error: &etcd_client::Error) -> bool {
    matches!(error, etcd_client::Error::GRpcStatus(status)
        if status.code() == tonic::Code::OutOfRange && status.message().contains("compacted"))
}

/// How long members may take, once converged, to agree on `HashKV` (a compaction
/// may still be applying on one).
const HASH_AGREEMENT: Duration = Duration::from_secs(10);

/// Every check once faults are healed, each reporting on its own, in this order: the
/// members converge (within `within`), they agree on `HashKV`, the clients' revisions are sound, the history
/// is linearizable ([`linearizability::check`]), every revision after
/// `initial_revision` is accounted for by the clients' writes, every member still has
/// every acknowledged Put, and every read answered from one revision's state. Returns
/// the members' digests and every violation. Must run inside a turmoil host; the
/// accounting is only sound when the recorded clients are the only writers.
pub async fn check_all(
    members: &[(String, String)],
    operations: &[Operation],
    initial_revision: i64,
    within: Duration,
) -> (Vec<StoreDigest>, Vec<Violation>) {
    let mut violations = Vec::new();
    let digests = await_convergence(members, within)
        .await
        .unwrap_or_else(|violation| {
            violations.push(violation);
            Vec::new()
        });
    violations.extend(await_hash_agreement(members, HASH_AGREEMENT).await.err());
    violations.extend(check_revisions(operations).err());
    violations.extend(check_member_reads(operations).err());
    violations.extend(linearizability::check(operations, initial_revision).err());
    if let Some(first) = digests.first() {
        violations.extend(check_accounting(operations, initial_revision, first.revision).err());
    }
    for (name, url) in members {
        violations.extend(on_member(name, url, "durability", operations, check_durability).await);
    }
    if let Some((name, url)) = members.first() {
        violations
            .extend(on_member(name, url, "read-snapshot", operations, check_read_snapshots).await);
    }
    (digests, violations)
}

/// [`check_all`], stopping at its first violation.
pub async fn check_healed_cluster(
    members: &[(String, String)],
    operations: &[Operation],
    initial_revision: i64,
    within: Duration,
) -> Result<Vec<StoreDigest>, Violation> {
    let (digests, violations) = check_all(members, operations, initial_revision, within).await;
    match violations.into_iter().next() {
        Some(violation) => Err(violation),
        None => Ok(digests),
    }
}

/// Runs a per-member check on a fresh connection to `url`; a member that does not
/// answer violates `property`.
async fn on_member<F>(
    name: &str,
    url: &str,
    property: &'static str,
    operations: &[Operation],
    check: F,
) -> Option<Violation>
where
    F: AsyncFnOnce(&mut Client, &str, &[Operation]) -> Result<(), Violation>,
{
    match client::connect(url).await {
        Ok(mut etcd) => check(&mut etcd, name, operations).await.err(),
        Err(error) => Some(Violation::new(
            property,
            format!("{name} does not answer: {error}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(client: &str, op: Op, invoked: u64, completed: u64, outcome: Outcome) -> Operation {
        Operation {
            client: client.to_owned(),
            op,
            invoked: Duration::from_millis(invoked),
            completed: Duration::from_millis(completed),
            outcome,
            member: None,
        }
    }

    fn put(client: &str, key: &str, t: (u64, u64), revision: i64) -> Operation {
        op(
            client,
            Op::Put {
                key: key.into(),
                value: format!("{client}@{revision}"),
            },
            t.0,
            t.1,
            Outcome::Written { revision },
        )
    }

    fn get(key: &str, t: (u64, u64), revision: i64, mod_revision: Option<i64>) -> Operation {
        op(
            "r",
            Op::Get {
                key: key.into(),
                serializable: false,
            },
            t.0,
            t.1,
            Outcome::Read {
                revision,
                value: mod_revision.map(|m| ("v".to_owned(), m)),
            },
        )
    }

    #[test]
    fn sound_history_passes() {
        let ops = vec![
            put("a", "k", (0, 10), 2),
            put("b", "j", (5, 12), 3),
            get("k", (11, 15), 3, Some(2)),
            put("a", "k", (20, 30), 4),
            // Concurrent with the put of revision 4: may miss it.
            get("k", (25, 35), 3, Some(2)),
        ];
        assert_eq!(check_revisions(&ops), Ok(()));
        assert_eq!(check_accounting(&ops, 1, 4), Ok(()));
    }

    #[test]
    fn duplicate_and_decreasing_revisions_are_caught() {
        let dup = vec![put("a", "k", (0, 10), 2), put("b", "k", (0, 10), 2)];
        assert_eq!(
            check_revisions(&dup).map_err(|v| v.property),
            Err("unique-revisions")
        );
        let back = vec![put("a", "k", (0, 10), 3), put("a", "k", (11, 20), 2)];
        assert_eq!(
            check_revisions(&back).map_err(|v| v.property),
            Err("monotonic-revisions")
        );
    }

    #[test]
    fn stale_reads_are_caught() {
        let old_store = vec![put("a", "k", (0, 10), 5), get("x", (11, 12), 4, None)];
        assert_eq!(
            check_revisions(&old_store).map_err(|v| v.property),
            Err("stale-read")
        );
        let old_key = vec![put("a", "k", (0, 10), 5), get("k", (11, 12), 6, Some(3))];
        assert_eq!(
            check_revisions(&old_key).map_err(|v| v.property),
            Err("stale-read")
        );
    }

    #[test]
    fn accounting_bounds_revisions_by_puts() {
        let unknown = op(
            "a",
            Op::Put {
                key: "k".into(),
                value: "v".into(),
            },
            0,
            10,
            Outcome::Unknown("timeout".into()),
        );
        let ops = vec![put("a", "k", (0, 10), 2), unknown];
        assert_eq!(check_accounting(&ops, 1, 2), Ok(()));
        assert_eq!(check_accounting(&ops, 1, 3), Ok(()));
        assert_eq!(
            check_accounting(&ops, 1, 4).map_err(|v| v.property),
            Err("revision-accounting")
        );
        assert_eq!(
            check_accounting(&ops[..1], 2, 3).map_err(|v| v.property),
            Err("revision-accounting")
        );
    }

    #[test]
    fn accounting_allows_one_revision_per_lease_with_keys() {
        let lease_put = |key: &str, lease, t: u64, revision| {
            op(
                "l",
                Op::PutWithLease {
                    key: key.into(),
                    value: "v".into(),
                    lease,
                },
                t,
                t,
                Outcome::Written { revision },
            )
        };
        let ops = vec![
            put("a", "k", (0, 10), 2),
            lease_put("l/a", 7, 11, 3),
            lease_put("l/b", 7, 12, 4),
            lease_put("l/c", 8, 13, 5),
        ];
        // Leases 7 and 8 may each have gone, deleting their keys: one revision each.
        assert_eq!(check_accounting(&ops, 1, 7), Ok(()));
        assert_eq!(
            check_accounting(&ops, 1, 8).map_err(|v| v.property),
            Err("revision-accounting")
        );
        // A lease no put names deletes nothing and makes no revision.
        let grant = op(
            "l",
            Op::LeaseGrant { ttl: 3 },
            14,
            15,
            Outcome::Granted {
                id: 9,
                ttl: 3,
                revision: 5,
            },
        );
        let with_grant = [ops.clone(), vec![grant]].concat();
        assert_eq!(
            check_accounting(&with_grant, 1, 8).map_err(|v| v.property),
            Err("revision-accounting")
        );
    }

    #[test]
    fn fnv_separates_fields() {
        let mut a = Fnv::new();
        a.bytes(b"ab");
        a.bytes(b"c");
        let mut b = Fnv::new();
        b.bytes(b"a");
        b.bytes(b"bc");
        assert_ne!(a.finish(), b.finish());
    }
}
