//! Known bugs that the simulation plants on purpose, to prove that its checkers catch
//! them.
//!
//! Compiled only with the `planted-bugs` feature, which only the simulation's test
//! builds enable. Every switch is off until a test turns it on; the server consults
//! this module only behind the same feature, once for each bug, at the check the bug
//! removes (docs/simulation.md's inventory lists each check and its bug). The raft
//! layer's bugs (`quantykube_raft::planted`) are planted through it too. It must never
//! be enabled in a build that serves users.

use std::sync::Mutex;
use std::time::Duration;

/// How long [`PlantedBug::PausedExpiryProposals`] holds each expiry between the
/// lessor's decision and its proposal: longer than an election, so that a successor
/// can be elected and renew the lease meanwhile.
pub const EXPIRY_PAUSE: Duration = Duration::from_secs(6);

/// How long [`PlantedBug::PausedAfterConversion`] holds a member between converting
/// etcd's data dir and opening it: far longer than a test needs to cut the power.
pub const CONVERSION_PAUSE: Duration = Duration::from_secs(30);

/// How long [`PlantedBug::PausedSnapshotInstall`] holds an install with the store
/// emptied: long enough for a reader to come, far below the leader's install timeout.
pub const INSTALL_PAUSE: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Linearizable reads skip the read index and read local, possibly stale, state.
    LocalLinearizableReads,
    /// A Put is acknowledged at once with a guessed revision, before raft commits it.
    AckBeforeCommit,
    /// The member with this id applies every normal entry twice.
    DoubleApply { member: u64 },
    /// A watcher that catches up on history and rejoins the live feed loses the last
    /// event of the page that brings it back.
    WatchDropsEventOnRejoin,
    /// The leader times every lease for half its TTL.
    LeaseExpiresEarly,
    /// A removed member ignores its removal and goes on serving, answering
    /// linearizable reads from its own (no longer updated) state.
    RemovedMemberServes,
    /// The snapshot export leaves out one version: the one at the revision just
    /// before the store's current one (the file still ends with a valid SHA-256).
    SnapshotSkipsVersion,
    /// The member with this id applies every Put of a key ending in `0` to that key
    /// with `~` appended: it makes the same revision as the others, but the key
    /// silently keeps its old state (and a key nobody wrote appears).
    MemberMisplacesPuts { member: u64 },
    /// Members authorise requests against the auth store as it was before its last
    /// change, and applying a command skips the auth revision check: a write
    /// authorised before a revocation (a permission revoked, a user deleted) is applied
    /// anyway instead of being authorised again. (Skipping the check alone is real but
    /// needs a member that lags the revocation by the moment a request arrives, which
    /// the simulation's seeds rarely give.)
    StaleAuthRevision,
    /// The background physical compaction deletes up to the store's current revision
    /// instead of the compacted one: versions that reads above the compacted revision
    /// still reach go (as when a worker that runs behind the apply path mistakes how far
    /// the compaction asked it to go).
    CompactionOvershoots,
    /// A keepalive answered by the leader skips the quorum's confirmation that it still
    /// leads: a deposed leader that does not know it yet promises a TTL that its
    /// successor, timing the lease from its own election, does not honour.
    KeepaliveWithoutQuorum,
    /// A keepalive answered by the leader promises the whole TTL without resetting the
    /// lease's checkpoint through the log: a new leader resumes the lease from the
    /// checkpoint's shorter remainder and expires it before the promise runs out.
    KeepaliveKeepsCheckpoint,
    /// An expiry is applied whatever the term of the entry that carries it: a deposed
    /// leader's decision, forwarded to its successor, revokes a lease the successor
    /// keeps alive.
    ExpiryIgnoresTerm,
    /// A joining member takes the id its peers list under its peer URLs even when
    /// another peer reports that id removed: a replacement that asks a partitioned,
    /// stale peer first takes the removed member's id.
    JoinerIgnoresRemovals,
    /// A snapshot install runs without the store's install gate: readers (ranges,
    /// watch history, Maintenance.Snapshot) may read the store half rewritten.
    InstallWithoutGate,
    /// Not a bug but a condition, planted with `InstallWithoutGate` (and without it, to
    /// show the seed passes): a snapshot install pauses [`INSTALL_PAUSE`] between
    /// emptying the store and loading the file, as the real server's install, on the
    /// blocking pool, runs beside the readers (in the simulation it runs inline, and
    /// nothing can come between its steps).
    PausedSnapshotInstall,
    /// Not a bug but a condition that targeted scenarios plant with one (and without,
    /// to show the seed passes): the lessor proposes each expiry [`EXPIRY_PAUSE`] after
    /// deciding it, as a task descheduled that long would, so that the leader that
    /// decided it can be deposed in between.
    PausedExpiryProposals,
    /// `snapshot restore` closes the store it filled without syncing it: a power cut
    /// right after the restore leaves the restored member without its newest writes.
    RestoreWithoutSync,
    /// A restarted member serves clients as soon as it finds its attributes published,
    /// without first applying what was committed before it started: after a power cut
    /// its store reopens behind, and it answers reads below revisions it answered
    /// before.
    ServesBeforeCatchingUp,
    /// Raft snapshot transfer files are sent and installed without checking them
    /// against their trailer: a damaged file is installed as it reads.
    TransferFileUnchecked,
    /// A member converting etcd's data dir renames `member.json` in without having
    /// synced the store it built: a power cut right after leaves a converted member
    /// without etcd's keys.
    ConvertWithoutSync,
    /// Not a bug but a condition the conversion's power-loss scenario plants (with and
    /// without `ConvertWithoutSync`): the member waits [`CONVERSION_PAUSE`] once it has
    /// converted etcd's data dir, before anything opens it, so that the power can be cut
    /// exactly there.
    PausedAfterConversion,
    /// A data dir of a newer format is opened (for writing) before its format is
    /// checked: the refusal still comes, from the migration, but the newer build's
    /// files have been touched.
    OpensNewerFormat,
    /// A bug of the raft layer (`quantykube_raft::planted`).
    Raft(quantykube_raft::planted::RaftBug),
}

static PLANTED: Mutex<Vec<PlantedBug>> = Mutex::new(Vec::new());

/// Turns `bug` on for every member in this process.
pub fn plant(bug: PlantedBug) {
    if let PlantedBug::Raft(raft_bug) = bug {
        quantykube_raft::planted::plant(raft_bug);
    }
    if let Ok(mut planted) = PLANTED.lock() {
        planted.push(bug);
    }
}

/// The bugs a real process can be started with, by name (`QK_PLANTED_BUGS`): those
/// whose check a crash test on real processes stands behind.
const BY_NAME: &[(&str, PlantedBug)] = &[
    ("RestoreWithoutSync", PlantedBug::RestoreWithoutSync),
    ("OpensNewerFormat", PlantedBug::OpensNewerFormat),
    ("ConvertWithoutSync", PlantedBug::ConvertWithoutSync),
    ("PausedAfterConversion", PlantedBug::PausedAfterConversion),
    ("ServesBeforeCatchingUp", PlantedBug::ServesBeforeCatchingUp),
    ("TransferFileUnchecked", PlantedBug::TransferFileUnchecked),
];

/// Plants the bugs `QK_PLANTED_BUGS` names (comma-separated; the raft layer's by their
/// own names), for `quantykube-planted`. A name may end in `@<member name>` to plant
/// the bug only in the member started with that `--name`. The unknown name, if any.
pub fn plant_from_env() -> Result<(), String> {
    let Ok(names) = std::env::var("QK_PLANTED_BUGS") else {
        return Ok(());
    };
    let own_name = own_member_name();
    for entry in names.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let (name, member) = match entry.split_once('@') {
            Some((name, member)) => (name, Some(member)),
            None => (entry, None),
        };
        let bug = BY_NAME
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, bug)| *bug)
            .or_else(|| {
                quantykube_raft::planted::RaftBug::BY_NAME
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, bug)| PlantedBug::Raft(*bug))
            })
            .ok_or_else(|| format!("QK_PLANTED_BUGS: no planted bug {name:?}"))?;
        if member.is_none() || member == own_name.as_deref() {
            tracing::warn!(bug = name, "planted bug on");
            plant(bug);
        }
    }
    Ok(())
}

/// The `--name` this process was started with (etcd's default, `default`, if none).
fn own_member_name() -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if let Some(name) = arg.strip_prefix("--name=") {
            return Some(name.to_owned());
        }
        if arg == "--name" {
            return args.next();
        }
    }
    std::env::var("ETCD_NAME").ok().or(Some("default".into()))
}

/// Turns every planted bug off, the raft layer's too.
pub fn clear() {
    quantykube_raft::planted::clear();
    if let Ok(mut planted) = PLANTED.lock() {
        planted.clear();
    }
}

pub fn is_planted(bug: PlantedBug) -> bool {
    PLANTED.lock().is_ok_and(|planted| planted.contains(&bug))
}

/// The `MemberMisplacesPuts` rewrite of `command` for `member`, if planted and it
/// applies (a Put of a key ending in `0`).
pub fn misplaced_put(
    member: u64,
    command: &crate::proto::command::Command,
) -> Option<crate::proto::command::Command> {
    use crate::proto::command::command::Request;
    if !is_planted(PlantedBug::MemberMisplacesPuts { member }) {
        return None;
    }
    let Some(Request::Put(put)) = &command.request else {
        return None;
    };
    if !put.key.ends_with(b"0") {
        return None;
    }
    let mut put = put.clone();
    put.key = [&put.key[..], b"~"].concat().into();
    Some(crate::proto::command::Command {
        auth_revision: 0,
        auth_checked: false,
        request: Some(Request::Put(put)),
    })
}
