//! The watch checker against hand-built watcher logs: each guarantee it judges, with a
//! log that keeps it and logs that break it.

use super::*;
use crate::history::Outcome;

fn op(op: Op, outcome: Outcome) -> Operation {
    Operation {
        client: "c1".into(),
        op,
        invoked: Duration::ZERO,
        completed: Duration::from_millis(10),
        outcome,
        member: None,
    }
}

fn put(key: &str, value: &str, revision: i64) -> Operation {
    op(
        Op::Put {
            key: key.into(),
            value: value.into(),
        },
        Outcome::Written { revision },
    )
}

/// The writes every test watches: k0 is created, updated, deleted and created
/// again; k1 gets a put of unknown outcome (it made revision 7) and a Cas.
fn writes() -> Vec<Operation> {
    vec![
        put("k0", "a", 2),
        put("k1", "b", 3),
        put("k0", "c", 4),
        op(
            Op::Delete { key: "k0".into() },
            Outcome::Deleted {
                revision: 5,
                deleted: 1,
            },
        ),
        put("k0", "d", 6),
        op(
            Op::Put {
                key: "k1".into(),
                value: "e".into(),
            },
            Outcome::Unknown("client deadline".into()),
        ),
        op(
            Op::Cas {
                key: "k1".into(),
                expected: 7,
                value: "f".into(),
            },
            Outcome::Swapped {
                revision: 8,
                succeeded: true,
            },
        ),
    ]
}

fn compact(revision: i64) -> Operation {
    op(Op::Compact { revision }, Outcome::Compacted { revision: 8 })
}

/// The event of revision `revision` in [`writes`], as a correct member sends it.
fn event(revision: i64) -> WatchEvent {
    let put =
        |key: &str, value: &str, create_revision, version, prev: Option<(&str, i64)>| WatchEvent {
            kind: EventKind::Put,
            key: key.into(),
            value: value.into(),
            create_revision,
            mod_revision: revision,
            version,
            prev: prev.map(|(v, r)| (v.to_owned(), r)),
        };
    match revision {
        2 => put("k0", "a", 2, 1, None),
        3 => put("k1", "b", 3, 1, None),
        4 => put("k0", "c", 2, 2, Some(("a", 2))),
        5 => WatchEvent {
            kind: EventKind::Delete,
            key: "k0".into(),
            value: String::new(),
            create_revision: 0,
            mod_revision: 5,
            version: 0,
            prev: Some(("c".into(), 4)),
        },
        6 => put("k0", "d", 6, 1, None),
        7 => put("k1", "e", 3, 2, Some(("b", 3))),
        8 => put("k1", "f", 3, 3, Some(("e", 7))),
        _ => put("k9", "?", revision, 1, None),
    }
}

/// Builds a watcher's log, one response per call, 10 ms apart.
struct Log {
    log: WatchLog,
    at: u64,
}

impl Log {
    fn new(name: &str) -> Self {
        Log {
            log: WatchLog::new(name, "k"),
            at: 0,
        }
    }

    fn tick(&mut self) -> Duration {
        self.at += 10;
        Duration::from_millis(self.at)
    }

    fn started(mut self, start_revision: i64) -> Self {
        let at = self.tick();
        self.log.record(WatchEntry::Started {
            member: "n1".into(),
            start_revision,
            at,
        });
        self
    }

    fn respond(mut self, edit: impl FnOnce(&mut WatchResponseRecord)) -> Self {
        let mut response = WatchResponseRecord {
            member: "n1".into(),
            at: self.tick(),
            header_revision: 8,
            watch_id: 0,
            created: false,
            canceled: false,
            compact_revision: 0,
            cancel_reason: String::new(),
            events: Vec::new(),
        };
        edit(&mut response);
        self.log.record(WatchEntry::Response(response));
        self
    }

    fn created(self, header_revision: i64) -> Self {
        self.respond(|r| {
            r.created = true;
            r.header_revision = header_revision;
        })
    }

    fn events(self, events: Vec<WatchEvent>) -> Self {
        self.respond(|r| r.events = events)
    }

    /// One response per revision.
    fn each(self, revisions: impl IntoIterator<Item = i64>) -> Self {
        revisions
            .into_iter()
            .fold(self, |log, revision| log.events(vec![event(revision)]))
    }

    fn progress(self, header_revision: i64) -> Self {
        self.respond(|r| r.header_revision = header_revision)
    }

    fn compacted(self, compact_revision: i64) -> Self {
        self.respond(|r| {
            r.canceled = true;
            r.compact_revision = compact_revision;
        })
    }

    fn finished(mut self, delivered: i64, target: i64) -> WatchLog {
        let at = self.tick();
        self.log.record(WatchEntry::Finished {
            delivered,
            target: Some(target),
            at,
        });
        self.log
    }
}

/// A watcher from revision 1 that sees every write, through a resume on another
/// member and a lagging member's progress notification.
fn clean_from_start(name: &str) -> WatchLog {
    Log::new(name)
        .started(1)
        // A watch from a revision: its creation's header vouches for nothing.
        .created(8)
        .each(2..=3)
        .progress(3)
        .started(4)
        .created(2)
        .progress(2)
        .each(4..=8)
        .finished(8, 8)
}

fn properties(logs: &[WatchLog], operations: &[Operation]) -> BTreeSet<&'static str> {
    check_watches(logs, operations)
        .into_iter()
        .map(|violation| violation.property)
        .collect()
}

fn assert_caught(logs: &[WatchLog], operations: &[Operation], property: &'static str) {
    let violations = check_watches(logs, operations);
    assert!(
        violations.iter().any(|v| v.property == property),
        "{property} not reported: {violations:?}"
    );
}

#[test]
fn clean_watchers_pass() {
    let from_now = Log::new("w2")
        .started(0)
        .created(4)
        .events(vec![event(5), event(6)])
        .progress(6)
        .each(7..=8)
        .finished(8, 8);
    let logs = [clean_from_start("w1"), from_now];
    assert_eq!(check_watches(&logs, &writes()), Vec::new());
}

#[test]
fn events_going_backwards_are_caught() {
    let log = Log::new("w1")
        .started(1)
        .each([2, 4, 3])
        .each(5..=8)
        .finished(8, 8);
    assert_caught(&[log], &writes(), "watch-ordered");
}

#[test]
fn an_event_delivered_twice_is_caught() {
    // Resumed at the revision it had already seen.
    let log = Log::new("w1")
        .started(1)
        .each(2..=4)
        .started(4)
        .each(4..=8)
        .finished(8, 8);
    assert_caught(&[log], &writes(), "watch-unique");
}

#[test]
fn gaps_and_invented_events_are_caught() {
    let gap = Log::new("w1")
        .started(1)
        .each([2, 3, 5, 6, 7, 8])
        .finished(8, 8);
    assert_caught(&[gap], &writes(), "watch-reliable");
    let mut wrong = event(3);
    wrong.value = "zzz".into();
    let invented = Log::new("w1")
        .started(1)
        .events(vec![event(2)])
        .events(vec![wrong])
        .each(4..=8)
        .finished(8, 8);
    assert_caught(&[invented], &writes(), "watch-reliable");
    let never_written = Log::new("w1").started(1).each(2..=9).finished(9, 8);
    assert_caught(&[never_written], &writes(), "watch-reliable");
}

#[test]
fn a_revision_split_across_responses_is_caught() {
    let split = Log::new("w1")
        .started(1)
        .each(2..=3)
        .events(vec![event(3)])
        .each(4..=8)
        .finished(8, 8);
    assert_caught(&[split], &writes(), "watch-atomic");
}

#[test]
fn events_behind_a_bookmark_are_caught() {
    let early_progress = Log::new("w1")
        .started(1)
        .each(2..=3)
        .progress(4)
        .each(4..=8)
        .finished(8, 8);
    assert_caught(&[early_progress], &writes(), "watch-bookmarkable");
    // A watch from now vouches for its creation's revision.
    let before_creation = Log::new("w1")
        .started(0)
        .created(5)
        .each(5..=8)
        .finished(8, 8);
    assert_caught(&[before_creation], &writes(), "watch-bookmarkable");
    // Every write up to the bookmark came before it, even if they came later.
    let skipped = Log::new("w1")
        .started(1)
        .each([2])
        .progress(3)
        .each(3..=8)
        .finished(8, 8);
    assert_caught(&[skipped], &writes(), "watch-bookmarkable");
}

#[test]
fn watchers_that_disagree_are_caught() {
    // w2 misses revision 7, a write of unknown outcome: only w1 shows it was made.
    let w2 = Log::new("w2")
        .started(1)
        .each([2, 3, 4, 5, 6, 8])
        .finished(8, 8);
    // On its own, w2 cannot be faulted for missing 7, only for revision 8's prev_kv
    // and version, which follow 7.
    assert_eq!(
        properties(std::slice::from_ref(&w2), &writes()),
        BTreeSet::from(["watch-prev-kv", "watch-versions"])
    );
    assert_caught(
        &[clean_from_start("w1"), w2],
        &writes(),
        "watch-same-events",
    );
}

#[test]
fn wrong_prev_kvs_are_caught() {
    let mut lost_prev = event(4);
    lost_prev.prev = None;
    let log = |e: WatchEvent| {
        Log::new("w1")
            .started(1)
            .each(2..=3)
            .events(vec![e])
            .each(5..=8)
            .finished(8, 8)
    };
    assert_caught(&[log(lost_prev.clone())], &writes(), "watch-prev-kv");
    // A Compact at or past revision 4 may have removed the version before it.
    let mut compacted = writes();
    compacted.push(compact(4));
    assert_eq!(properties(&[log(lost_prev)], &compacted), BTreeSet::new());
    let mut stale_prev = event(4);
    stale_prev.prev = Some(("b".into(), 3));
    assert_caught(&[log(stale_prev)], &writes(), "watch-prev-kv");
    let mut created_with_prev = event(6);
    created_with_prev.prev = Some(("c".into(), 4));
    let after_delete = Log::new("w1")
        .started(1)
        .each(2..=5)
        .events(vec![created_with_prev])
        .each(7..=8)
        .finished(8, 8);
    assert_caught(&[after_delete], &writes(), "watch-prev-kv");
}

#[test]
fn versions_that_do_not_count_are_caught() {
    let mut skipped_version = event(4);
    skipped_version.version = 3;
    let log = Log::new("w1")
        .started(1)
        .each(2..=3)
        .events(vec![skipped_version])
        .each(5..=8)
        .finished(8, 8);
    assert_caught(&[log], &writes(), "watch-versions");
}

#[test]
fn compaction_cancels_skip_revisions_only_when_a_compact_asked() {
    // Canceled at 6: revisions 2..=5 are gone; 6 may come or not.
    let log = || {
        Log::new("w1")
            .started(1)
            .compacted(6)
            .started(6)
            .each(7..=8)
            .finished(8, 8)
    };
    let mut compacted = writes();
    compacted.push(compact(6));
    assert_eq!(properties(&[log()], &compacted), BTreeSet::new());
    assert_caught(&[log()], &writes(), "watch-compaction");
    // Only the revisions before the compacted one are excused.
    let gap_after = Log::new("w1")
        .started(1)
        .compacted(4)
        .started(4)
        .each([4, 5, 7, 8])
        .finished(8, 8);
    assert_caught(&[gap_after], &compacted, "watch-reliable");
}

#[test]
fn a_watcher_short_of_its_target_is_caught() {
    let short = Log::new("w1").started(1).each(2..=6).finished(6, 8);
    assert_eq!(
        properties(&[short], &writes()),
        BTreeSet::from(["watch-liveness"])
    );
}
