//! etcd's watch guarantees, judged from what watch clients saw and what the other
//! clients wrote.
//!
//! This module owns [`check_watches`]: given every watcher's [`WatchLog`] and the
//! clients' operations, it reports, for each watcher (through every resume):
//! - ordered (`watch-ordered`): event revisions never go backwards;
//! - unique (`watch-unique`): no (revision, key) is delivered twice;
//! - reliable (`watch-reliable`): every acknowledged write within the revisions the
//!   watcher vouches for (from where it started to the last revision it knows
//!   delivered, less what a compaction cancel skipped) is delivered with its key,
//!   kind and value, and every event is a write a client sent (acknowledged at that
//!   revision, or of unknown outcome on that key and value);
//! - atomic (`watch-atomic`): a revision's events all come in one response;
//! - bookmarkable (`watch-bookmarkable`): after a progress notification (or the
//!   creation of a watch from "now") at revision R, no event at or below R follows,
//!   and every acknowledged write up to R was delivered before it;
//! - prev_kv (`watch-prev-kv`): an event's `prev_kv` is the previous event of its key
//!   the watcher saw (absent after a delete, and for a key's creation), and names a
//!   value some write put at that revision; versions (`watch-versions`): a put counts
//!   versions and keeps its creation revision as the key's earlier events say;
//! - compaction (`watch-compaction`): a cancel for compaction names a revision a Compact
//!   asked for, above the watch's start;
//! - liveness (`watch-liveness`): a watcher given a target revision delivered it;
//!
//! and across watchers (`watch-same-events`): on the revisions two watchers both vouch
//! for, possibly through different members, their events are identical.
//!
//! It reads logs only: it must never talk to the cluster, and never excuse a violation
//! it can decide. Where etcd allows a difference (a `prev_kv` a compaction may have
//! removed, a write of unknown outcome that may or may not exist) it accepts both.
//! It reports at most one violation per watcher and property (per pair of watchers for
//! `watch-same-events`), the first found, so that one bug does not bury the others.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::{compactable, Violation};
use crate::history::{
    EventKind, Op, Operation, WatchEntry, WatchEvent, WatchLog, WatchResponseRecord,
};

/// Every watch guarantee over every log in `logs`, against the clients' `operations`
/// (the only writers); see the module docs. Empty if they all hold.
pub fn check_watches(logs: &[WatchLog], operations: &[Operation]) -> Vec<Violation> {
    let writes = Writes::new(operations);
    let mut report = Report::default();
    let entries: Vec<Vec<WatchEntry>> = logs.iter().map(WatchLog::entries).collect();
    let watchers: Vec<Watcher<'_>> = logs
        .iter()
        .zip(&entries)
        .map(|(log, entries)| Watcher::walk(log, entries, &writes, &mut report))
        .collect();
    for watcher in &watchers {
        watcher.check_reliable(&writes, &mut report);
        watcher.check_events_were_written(&writes, &mut report);
        watcher.check_prev_kv(&writes, &mut report);
    }
    for (i, a) in watchers.iter().enumerate() {
        for b in &watchers[i + 1..] {
            check_same_events(a, b, &mut report);
        }
    }
    report.violations
}

/// What a client's write should look like as a watch event.
#[derive(Clone, Copy, Debug)]
struct Write<'a> {
    op: &'a Operation,
    key: &'a str,
    kind: EventKind,
    /// The value put; `None` for a delete.
    value: Option<&'a str>,
}

impl<'a> Write<'a> {
    fn of(op: &'a Operation) -> Option<Self> {
        let (key, kind, value) = match &op.op {
            Op::Put { key, value }
            | Op::PutWithLease { key, value, .. }
            | Op::Cas { key, value, .. } => (key, EventKind::Put, Some(value.as_str())),
            Op::Delete { key } => (key, EventKind::Delete, None),
            // A revoke deletes keys no request names; watchers never watch lease keys.
            Op::Get { .. }
            | Op::Compact { .. }
            | Op::LeaseGrant { .. }
            | Op::LeaseKeepAlive { .. }
            | Op::LeaseRevoke { .. } => return None,
        };
        Some(Write {
            op,
            key,
            kind,
            value,
        })
    }

    /// True if `event` is this write: same key, same kind, same value for a put.
    fn made(&self, event: &WatchEvent) -> bool {
        event.key == self.key
            && event.kind == self.kind
            && self.value.is_none_or(|value| value == event.value)
    }
}

/// The clients' writes, indexed for the checks.
struct Writes<'a> {
    /// Acknowledged writes by revision.
    acknowledged: BTreeMap<i64, Write<'a>>,
    /// Writes of unknown outcome: they may have made any revision.
    indefinite: Vec<Write<'a>>,
    /// The highest revision a Compact (answered or not) asked for.
    compactable: i64,
}

impl<'a> Writes<'a> {
    fn new(operations: &'a [Operation]) -> Self {
        let mut acknowledged = BTreeMap::new();
        let mut indefinite = Vec::new();
        for op in operations {
            let Some(write) = Write::of(op) else {
                continue;
            };
            if let Some(revision) = op.written_revision() {
                acknowledged.insert(revision, write);
            } else if op.is_indefinite_write() {
                indefinite.push(write);
            }
        }
        Writes {
            acknowledged,
            indefinite,
            compactable: compactable(operations),
        }
    }

    /// Acknowledged writes in `lo..=hi` on keys under `prefix`.
    fn watched<'s>(
        &'s self,
        prefix: &'s str,
        lo: i64,
        hi: i64,
    ) -> impl Iterator<Item = (i64, &'s Write<'a>)> + 's {
        // BTreeMap::range panics on a reversed range.
        let range = if lo <= hi {
            self.acknowledged.range(lo..=hi)
        } else {
            self.acknowledged.range(0..0)
        };
        range
            .filter(move |(_, write)| write.key.starts_with(prefix))
            .map(|(revision, write)| (*revision, write))
    }
}

/// Violations found so far, at most one per (who, property).
#[derive(Default)]
struct Report {
    violations: Vec<Violation>,
    reported: BTreeSet<(String, &'static str)>,
}

impl Report {
    fn add(&mut self, who: &str, property: &'static str, detail: impl FnOnce() -> String) {
        if self.reported.insert((who.to_owned(), property)) {
            self.violations
                .push(Violation::new(property, format!("{who}: {}", detail())));
        }
    }
}

/// One event a watcher got, and where from.
struct Delivered<'e> {
    event: &'e WatchEvent,
    member: &'e str,
    at: Duration,
    /// Compaction cancels before it: the events of one segment came with no revision
    /// skipped in between.
    segment: usize,
}

impl Delivered<'_> {
    fn revision(&self) -> i64 {
        self.event.mod_revision
    }
}

/// `event (from member at time)`, for violation details.
fn describe(delivered: &Delivered<'_>) -> String {
    format!(
        "{} (from {} at {:.3}s)",
        delivered.event,
        delivered.member,
        delivered.at.as_secs_f64()
    )
}

/// What one watcher's log shows, once walked.
struct Watcher<'e> {
    name: &'e str,
    prefix: &'e str,
    /// Every event, in the order it came.
    delivered: Vec<Delivered<'e>>,
    /// Index into `delivered` by (revision, key); the first if there were two.
    by_revision_key: BTreeMap<(i64, &'e str), usize>,
    /// Revision ranges (inclusive, ascending, disjoint) in which the watcher vouches
    /// it saw every event.
    spans: Vec<(i64, i64)>,
}

impl<'e> Watcher<'e> {
    /// Walks `entries` (of `log`) in order, checking on the way what depends on order:
    /// ordering, uniqueness, atomicity, bookmarks, compaction cancels, liveness.
    fn walk(
        log: &'e WatchLog,
        entries: &'e [WatchEntry],
        writes: &Writes<'_>,
        report: &mut Report,
    ) -> Self {
        let mut walk = Walk::new(log);
        for entry in entries {
            match entry {
                WatchEntry::Started { start_revision, .. } => walk.start(*start_revision),
                WatchEntry::Response(response) => walk.response(response, writes, report),
                WatchEntry::Ended { reason, .. } => walk.last_end = Some(reason),
                WatchEntry::Finished {
                    delivered,
                    target: Some(target),
                    at,
                } if delivered < target => {
                    let last_end = walk.last_end.unwrap_or("never opened");
                    report.add(walk.watcher.name, "watch-liveness", || {
                        format!(
                            "stopped at {:.3}s having delivered up to revision {delivered}, \
                             short of revision {target}, the last acknowledged write (its \
                             last watch ended: {last_end})",
                            at.as_secs_f64()
                        )
                    });
                }
                WatchEntry::Finished { .. } => {}
            }
        }
        walk.finish()
    }

    /// Every acknowledged write in a span the watcher vouches for was delivered, as
    /// written.
    fn check_reliable(&self, writes: &Writes<'_>, report: &mut Report) {
        for (lo, hi) in &self.spans {
            for (revision, write) in writes.watched(self.prefix, *lo, *hi) {
                let found = self
                    .by_revision_key
                    .get(&(revision, write.key))
                    .map(|i| &self.delivered[*i]);
                match found {
                    Some(delivered) if write.made(delivered.event) => {}
                    Some(delivered) => report.add(self.name, "watch-reliable", || {
                        format!(
                            "{} is not {} (revision {revision})",
                            describe(delivered),
                            write.op
                        )
                    }),
                    None => report.add(self.name, "watch-reliable", || {
                        format!(
                            "{} (revision {revision}) was never delivered, though the watcher \
                             vouched for revisions {lo}..={hi}",
                            write.op
                        )
                    }),
                }
            }
        }
    }

    /// Every event is a write some client sent: the acknowledged one of its revision,
    /// or one of unknown outcome on its key with its value, sent before the event came;
    /// and no value is delivered at two revisions.
    fn check_events_were_written(&self, writes: &Writes<'_>, report: &mut Report) {
        let mut revision_of_value: BTreeMap<&str, i64> = BTreeMap::new();
        for delivered in &self.delivered {
            let event = delivered.event;
            let revision = delivered.revision();
            let written = if !event.key.starts_with(self.prefix) {
                false
            } else if let Some(write) = writes.acknowledged.get(&revision) {
                write.made(event)
            } else {
                writes
                    .indefinite
                    .iter()
                    .any(|write| write.made(event) && write.op.invoked <= delivered.at)
            };
            if !written {
                report.add(self.name, "watch-reliable", || {
                    match writes.acknowledged.get(&revision) {
                        Some(write) => format!(
                            "{}, but revision {revision} was {}",
                            describe(delivered),
                            write.op
                        ),
                        None => format!("{}: no client wrote it", describe(delivered)),
                    }
                });
            }
            if event.kind == EventKind::Put {
                let first = *revision_of_value.entry(&event.value).or_insert(revision);
                if first != revision {
                    report.add(self.name, "watch-reliable", || {
                        format!(
                            "{}: its value was delivered at revision {first} too",
                            describe(delivered)
                        )
                    });
                }
            }
        }
    }

    /// Each event's `prev_kv` and version against the previous event of its key that
    /// the watcher saw with nothing skipped in between, and against the clients' writes.
    fn check_prev_kv(&self, writes: &Writes<'_>, report: &mut Report) {
        let mut latest: BTreeMap<(usize, &str), &Delivered<'_>> = BTreeMap::new();
        for delivered in &self.delivered {
            let event = delivered.event;
            let revision = delivered.revision();
            let key = (delivered.segment, event.key.as_str());
            let latest_on_key = latest.get(&key).copied();
            let previous = latest_on_key.filter(|p| p.revision() < revision);
            if latest_on_key.is_none_or(|p| p.revision() < revision) {
                latest.insert(key, delivered);
            }
            let prev_problem = prev_kv_problem(delivered, previous, writes);
            if let Some(problem) = prev_problem {
                report.add(self.name, "watch-prev-kv", || {
                    format!("{}: {problem}", describe(delivered))
                });
            }
            if let Some(problem) = version_problem(event, previous.map(|p| p.event)) {
                report.add(self.name, "watch-versions", || {
                    format!("{}: {problem}", describe(delivered))
                });
            }
        }
    }
}

/// A watcher's log being walked in order: what it has shown so far.
struct Walk<'e> {
    watcher: Watcher<'e>,
    /// The highest event revision so far.
    high_event: i64,
    /// The highest revision a progress notification (or the creation of a watch from
    /// now) vouched for.
    mark: i64,
    /// Where the span being walked began; `None` before the first one.
    open: Option<i64>,
    /// Every write up to this revision was checked delivered at a bookmark.
    bookmarked: i64,
    /// Where the watch being walked started (0: from now).
    start_revision: i64,
    /// Compaction cancels so far.
    segment: usize,
    /// Responses so far.
    responses: usize,
    /// The response that brought each revision's first event.
    response_of_revision: BTreeMap<i64, usize>,
    /// Why the last watch ended, for a liveness violation.
    last_end: Option<&'e str>,
}

impl<'e> Walk<'e> {
    fn new(log: &'e WatchLog) -> Self {
        Walk {
            watcher: Watcher {
                name: log.watcher(),
                prefix: log.prefix(),
                delivered: Vec::new(),
                by_revision_key: BTreeMap::new(),
                spans: Vec::new(),
            },
            high_event: 0,
            mark: 0,
            open: None,
            bookmarked: 0,
            start_revision: 0,
            segment: 0,
            responses: 0,
            response_of_revision: BTreeMap::new(),
            last_end: None,
        }
    }

    /// The highest revision known delivered.
    fn last(&self) -> i64 {
        self.high_event.max(self.mark)
    }

    /// A watch (re)started from `start_revision` (0: now). The first one from a
    /// revision vouches for everything from there on; later ones resume where the
    /// watcher was, which the walk checks, not trusts.
    fn start(&mut self, start_revision: i64) {
        self.start_revision = start_revision;
        if self.open.is_none() && self.watcher.spans.is_empty() && start_revision > 0 {
            self.open = Some(start_revision);
        }
    }

    fn response(
        &mut self,
        response: &'e WatchResponseRecord,
        writes: &Writes<'_>,
        report: &mut Report,
    ) {
        let index = self.responses;
        self.responses += 1;
        if response.canceled && response.compact_revision > 0 {
            self.compaction_cancel(response, writes, report);
        }
        // Events must follow every earlier response's, and each other.
        let mut floor = self.high_event;
        for event in &response.events {
            let delivered = Delivered {
                event,
                member: &response.member,
                at: response.at,
                segment: self.segment,
            };
            self.event(delivered, index, floor, report);
            floor = floor.max(event.mod_revision);
        }
        let vouches = response.is_progress_notification()
            || (response.created && !response.canceled && self.start_revision == 0);
        if vouches {
            self.bookmark(response, writes, report);
        }
    }

    /// A cancel because the member no longer has the revisions the watch needs: the
    /// watcher resumes at the compacted revision and vouches for nothing before it.
    fn compaction_cancel(
        &mut self,
        response: &WatchResponseRecord,
        writes: &Writes<'_>,
        report: &mut Report,
    ) {
        let (name, compacted, start) = (
            self.watcher.name,
            response.compact_revision,
            self.start_revision,
        );
        if compacted > writes.compactable {
            report.add(name, "watch-compaction", || {
                format!(
                    "{} canceled the watch at compact revision {compacted}, but no Compact \
                     asked for more than {}",
                    where_from(response),
                    writes.compactable
                )
            });
        }
        if compacted <= start || start == 0 {
            report.add(name, "watch-compaction", || {
                format!(
                    "{} canceled a watch from revision {start} as compacted at {compacted}: \
                     its start was not compacted",
                    where_from(response)
                )
            });
        }
        let last = self.last();
        if compacted > last + 1 {
            // Revisions last+1..compacted are gone. Revision `compacted` itself may
            // come or not (etcd keeps a put there, not a delete).
            if let Some(lo) = self.open.take() {
                if last >= lo {
                    self.watcher.spans.push((lo, last));
                }
            }
            self.open = Some(compacted + 1);
            self.segment += 1;
        }
    }

    /// One event, in response `index`, after events up to revision `floor`.
    fn event(&mut self, delivered: Delivered<'e>, index: usize, floor: i64, report: &mut Report) {
        let name = self.watcher.name;
        let (revision, key) = (delivered.revision(), delivered.event.key.as_str());
        if revision < floor {
            report.add(name, "watch-ordered", || {
                format!(
                    "{} came after an event at revision {floor}",
                    describe(&delivered)
                )
            });
        }
        let mark = self.mark;
        if revision <= mark {
            report.add(name, "watch-bookmarkable", || {
                format!(
                    "{} came after a progress notification at revision {mark}",
                    describe(&delivered)
                )
            });
        }
        match self.watcher.by_revision_key.get(&(revision, key)) {
            Some(first) => {
                let first = &self.watcher.delivered[*first];
                report.add(name, "watch-unique", || {
                    format!(
                        "{} was delivered twice, first as {}",
                        describe(&delivered),
                        describe(first)
                    )
                });
            }
            None => {
                let at = self.watcher.delivered.len();
                self.watcher.by_revision_key.insert((revision, key), at);
            }
        }
        let first_response = *self.response_of_revision.entry(revision).or_insert(index);
        if first_response != index {
            report.add(name, "watch-atomic", || {
                format!(
                    "{} came in response {index}, but revision {revision} already had events \
                     in response {first_response}",
                    describe(&delivered)
                )
            });
        }
        // A watch from now that sent an event before its creation: the watcher vouches
        // for everything from that event on.
        self.open.get_or_insert(revision);
        self.high_event = self.high_event.max(revision);
        self.watcher.delivered.push(delivered);
    }

    /// A progress notification, or the creation of a watch from now: every event up
    /// to its revision was delivered, and none may follow.
    fn bookmark(
        &mut self,
        response: &WatchResponseRecord,
        writes: &Writes<'_>,
        report: &mut Report,
    ) {
        let revision = response.header_revision;
        let lo = *self.open.get_or_insert(revision + 1);
        let from = lo.max(self.bookmarked + 1);
        for (written, write) in writes.watched(self.watcher.prefix, from, revision) {
            if !self
                .watcher
                .by_revision_key
                .contains_key(&(written, write.key))
            {
                report.add(self.watcher.name, "watch-bookmarkable", || {
                    format!(
                        "{} vouched for revision {revision}, but {} (revision {written}) had \
                         not been delivered",
                        where_from(response),
                        write.op
                    )
                });
            }
        }
        self.bookmarked = self.bookmarked.max(revision);
        self.mark = self.mark.max(revision);
    }

    /// The watcher as walked, its last span closed at the last revision it knows
    /// delivered.
    fn finish(mut self) -> Watcher<'e> {
        let last = self.last();
        if let Some(lo) = self.open {
            if last >= lo {
                self.watcher.spans.push((lo, last));
            }
        }
        self.watcher
    }
}

/// What is wrong with `delivered`'s `prev_kv`, given the previous event of its key the
/// watcher saw (if it saw one with nothing skipped in between).
fn prev_kv_problem(
    delivered: &Delivered<'_>,
    previous: Option<&Delivered<'_>>,
    writes: &Writes<'_>,
) -> Option<String> {
    let event = delivered.event;
    let revision = delivered.revision();
    if let Some((value, prev_revision)) = &event.prev {
        if event.kind == EventKind::Put && event.version == 1 {
            return Some("a key's creation carries a prev_kv".into());
        }
        if *prev_revision >= revision {
            return Some(format!("prev_kv is from revision {prev_revision}"));
        }
        if let Some(write) = writes.acknowledged.get(prev_revision) {
            if write.key != event.key || write.value != Some(value.as_str()) {
                return Some(format!(
                    "prev_kv {value}@{prev_revision}, but that revision was {}",
                    write.op
                ));
            }
        }
    }
    let previous = previous?;
    match (previous.event.kind, &event.prev) {
        (EventKind::Delete, None) => None,
        (EventKind::Delete, Some(_)) => Some(format!(
            "has a prev_kv, but the key's previous event was {}",
            describe(previous)
        )),
        (EventKind::Put, Some((value, prev_revision)))
            if *value == previous.event.value && *prev_revision == previous.revision() =>
        {
            None
        }
        // etcd reads prev_kv at the revision before; a Compact at or past the event's
        // revision may have removed that version.
        (EventKind::Put, None) if writes.compactable >= revision => None,
        (EventKind::Put, _) => Some(format!(
            "the key's previous event was {}",
            describe(previous)
        )),
    }
}

/// What is wrong with `event`'s version or creation revision, given the previous
/// event of its key the watcher saw (if it saw one with nothing skipped in between).
fn version_problem(event: &WatchEvent, previous: Option<&WatchEvent>) -> Option<String> {
    if event.kind == EventKind::Delete {
        return match previous {
            Some(previous) if previous.kind == EventKind::Delete => Some(format!(
                "deletes a key already deleted at revision {}",
                previous.mod_revision
            )),
            _ => None,
        };
    }
    if event.version < 1 || event.create_revision > event.mod_revision {
        return Some("impossible version or creation revision".into());
    }
    if (event.version == 1) != (event.create_revision == event.mod_revision) {
        return Some("version 1 if and only if created at this revision".into());
    }
    match previous {
        Some(previous) if previous.kind == EventKind::Delete && event.version != 1 => {
            Some(format!(
                "version {} right after the delete at revision {}",
                event.version, previous.mod_revision
            ))
        }
        Some(previous)
            if previous.kind == EventKind::Put
                && (event.version != previous.version + 1
                    || event.create_revision != previous.create_revision) =>
        {
            Some(format!("does not follow {previous}"))
        }
        _ => None,
    }
}

/// `member at time`, for violation details.
fn where_from(response: &WatchResponseRecord) -> String {
    format!("{} at {:.3}s", response.member, response.at.as_secs_f64())
}

/// On the revisions both vouch for, `a` and `b` got the same events (key, kind,
/// value, creation revision, version; `prev_kv` aside, which a compaction may remove
/// on one member and not yet on another).
fn check_same_events(a: &Watcher<'_>, b: &Watcher<'_>, report: &mut Report) {
    let both = intersect(&a.spans, &b.spans);
    let shared = |key: &str| key.starts_with(a.prefix) && key.starts_with(b.prefix);
    for (lo, hi) in both {
        let events = |watcher: &Watcher<'_>| -> Vec<(i64, String, EventKind, String, i64, i64)> {
            watcher
                .by_revision_key
                .range((lo, "")..)
                .take_while(|((revision, _), _)| *revision <= hi)
                .filter(|((_, key), _)| shared(key))
                .map(|(_, i)| {
                    let e = watcher.delivered[*i].event;
                    (
                        e.mod_revision,
                        e.key.clone(),
                        e.kind,
                        e.value.clone(),
                        e.create_revision,
                        e.version,
                    )
                })
                .collect()
        };
        let (seen_by_a, seen_by_b) = (events(a), events(b));
        if seen_by_a == seen_by_b {
            continue;
        }
        let differs = seen_by_a
            .iter()
            .zip(&seen_by_b)
            .position(|(x, y)| x != y)
            .unwrap_or(seen_by_a.len().min(seen_by_b.len()));
        let who = format!("{} and {}", a.name, b.name);
        report.add(&who, "watch-same-events", || {
            format!(
                "over revisions {lo}..={hi}, both vouched for, they differ at event {differs}: \
                 {} got {:?}, {} got {:?}",
                a.name,
                seen_by_a.get(differs),
                b.name,
                seen_by_b.get(differs)
            )
        });
        return;
    }
}

/// The revisions in both lists of ascending, disjoint, inclusive ranges.
fn intersect(a: &[(i64, i64)], b: &[(i64, i64)]) -> Vec<(i64, i64)> {
    let mut both = Vec::new();
    for (a_lo, a_hi) in a {
        for (b_lo, b_hi) in b {
            let (lo, hi) = ((*a_lo).max(*b_lo), (*a_hi).min(*b_hi));
            if lo <= hi {
                both.push((lo, hi));
            }
        }
    }
    both.sort_unstable();
    both
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
