//! The search for a linearization: Wing & Gong's algorithm with Lowe's memoisation, as
//! porcupine runs it.
//!
//! This module owns [`search`]. The calls and returns of answered operations sit in one
//! list ordered by time (at equal instants calls first: ticks are coarse, so touching
//! operations count as concurrent); the search linearizes, one at a time, a call that
//! comes before every return still in the list (an operation that may take effect
//! next) if the model allows its answer, lifts it and its return out of the list and
//! starts over; when it reaches the return of an operation it has not linearized, that
//! path is dead and it backtracks. A set of (linearized operations, model state) pairs
//! already explored cuts repeated work. The search succeeds once every answered
//! operation is linearized.
//!
//! Operations whose outcome is unknown return at +infinity, as in porcupine: they may
//! take effect at any point after their call, or never. They wait in a pool of their
//! own, ordered by call, and are candidates wherever they were invoked before the first
//! pending return. Left as plain candidates, they would multiply the search by every
//! subset of them at every step; these cuts keep it near linear. An unknown operation
//! that would change nothing is never linearized (leaving it out is the same). And
//! revisions only grow, so an unknown write may go next only if the store stays at or
//! below the revision that every answered operation not yet linearized needs just
//! before it: it has to fill a gap in the answered revisions. Unknown operations with
//! the same request are interchangeable once invoked; only the earliest is tried.
//!
//! An operation without an answer that certainly took effect by some instant (a
//! lease's expiry, once a read found its key gone) is bounded: it sits in the timeline
//! with its call and that instant as its return, like an answered operation whose
//! answer the model does not check, and is never forced.
//!
//! An answered operation that changes nothing (a read, a failed compare, a delete of
//! nothing, a compaction) and fits goes next, and no alternative to it is tried at
//! that point: in any order that works from there, whatever precedes it changes
//! nothing either (each change bumps the revision it must see) and none of it
//! completed before it was invoked, so it could as well go first.
//!
//! It must never run unbounded: every loop turn counts against a budget, and running
//! out is [`Search::Inconclusive`], never a verdict. It never interprets operations
//! beyond asking the model.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::model::{Input, Output, State, Step};

/// One operation as the search sees it.
#[derive(Clone, Debug)]
pub(super) struct Call {
    pub input: Input,
    /// `None`: the client never learnt the answer.
    pub output: Option<Output>,
    pub invoked: Duration,
    /// When the answer arrived; ignored (+infinity) when `output` is `None`.
    pub completed: Duration,
    /// For an unknown write: the only revision it can have made, if it took effect.
    /// Other unknown writes may not make it.
    pub pin: Option<i64>,
    /// For an operation without an answer: it certainly took effect by `completed`
    /// (a lease's expiry that a later read proves). It then sits in the timeline like
    /// an answered operation, with any outcome the model allows.
    pub bounded: bool,
}

impl Call {
    /// Answered, or bounded: its return is in the timeline and must be reached with
    /// the operation linearized.
    fn in_timeline(&self) -> bool {
        self.output.is_some() || self.bounded
    }
}

/// How a search ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Search {
    /// A linearization: indexes of calls in their order of effect. Unknown operations
    /// left out did not take effect.
    Linearizable { order: Vec<usize>, steps: u64 },
    /// No linearization; the path that got furthest.
    Violated { furthest: Furthest, steps: u64 },
    /// The budget ran out first; the furthest dead end so far, if any.
    Inconclusive {
        steps: u64,
        furthest: Option<Furthest>,
    },
}

/// The dead end latest in time: after linearizing `linearized` (in order), nothing
/// could explain call `blocked` before it completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Furthest {
    pub blocked: usize,
    pub linearized: Vec<usize>,
}

/// A call or a return in the time-ordered list.
#[derive(Clone, Copy, Debug)]
struct Entry {
    op: usize,
    call: bool,
    /// The index of the entry's other half.
    partner: usize,
}

/// Where the search stands: at an entry of the timeline or at an unknown operation in
/// the pool.
#[derive(Clone, Copy, Debug)]
enum Cursor {
    Timeline(usize),
    Pool(usize),
}

/// A linearized operation: where it was found, and what to restore to undo it.
struct Frame {
    op: usize,
    at: Cursor,
    before: State,
    /// The first pending return when the operation was found in the pool.
    blocker: usize,
    /// An answered operation that left the state as it was: if nothing works after
    /// it, nothing works at the point where it went either.
    forced: bool,
}

/// What came of trying to linearize an operation.
enum Tried {
    Linearized,
    /// The model refuses it here, or the result was explored already.
    Refused,
    /// A forced operation (see [`Frame::forced`]) whose result was explored already:
    /// so was this point.
    Exhausted,
}

/// Searches for an order of `calls`, starting from `initial`, that respects real
/// time and the model; gives up after `budget` loop turns.
pub(super) fn search(calls: &[Call], initial: State, budget: u64) -> Search {
    let mut searcher = Searcher::new(calls, initial);
    let mut steps = 0u64;
    let mut cursor = Cursor::Timeline(searcher.timeline.links.first());
    // The first pending return: unknown operations invoked after it cannot go next.
    let mut blocker = searcher.timeline.links.tail();
    loop {
        if searcher.definite_left == 0 {
            let order = searcher.stack.iter().map(|frame| frame.op).collect();
            return Search::Linearizable { order, steps };
        }
        if steps >= budget {
            let furthest = searcher.furthest.map(|(_, furthest)| furthest);
            return Search::Inconclusive { steps, furthest };
        }
        steps += 1;
        cursor = match cursor {
            Cursor::Timeline(entry) => match searcher.timeline.entries.get(entry) {
                Some(&Entry { op, call: true, .. }) => {
                    match searcher.linearize(op, cursor, blocker) {
                        Tried::Linearized => Cursor::Timeline(searcher.timeline.links.first()),
                        Tried::Refused => Cursor::Timeline(searcher.timeline.links.next(entry)),
                        Tried::Exhausted => match searcher.backtrack() {
                            Some((resume, at_blocker)) => {
                                blocker = at_blocker;
                                resume
                            }
                            None => return searcher.violated(steps),
                        },
                    }
                }
                // A return: every answered call before it was tried; now the pool.
                _ => {
                    blocker = entry;
                    Cursor::Pool(searcher.pool.first())
                }
            },
            Cursor::Pool(slot) => match searcher.unknown_candidate(slot, blocker) {
                Candidate::Op(op) => match searcher.linearize(op, cursor, blocker) {
                    Tried::Linearized => Cursor::Timeline(searcher.timeline.links.first()),
                    // Unknown operations are never forced.
                    Tried::Refused | Tried::Exhausted => Cursor::Pool(searcher.pool.next(slot)),
                },
                Candidate::Twin => Cursor::Pool(searcher.pool.next(slot)),
                Candidate::End => {
                    searcher.dead_end(blocker);
                    match searcher.backtrack() {
                        Some((resume, at_blocker)) => {
                            blocker = at_blocker;
                            resume
                        }
                        None => return searcher.violated(steps),
                    }
                }
            },
        };
    }
}

/// What the pool offers at a slot.
enum Candidate {
    /// An unknown operation that may go next.
    Op(usize),
    /// One just like an earlier one still in the pool, which is tried instead.
    Twin,
    /// Nothing more: no revision gap to fill, or the rest was invoked too late.
    End,
}

/// The search's state between loop turns.
struct Searcher<'a> {
    calls: &'a [Call],
    /// Calls and returns of answered operations.
    timeline: Timeline,
    /// Unknown operations by call time: `pool_ops[slot]` is the operation at `slot`.
    pool: Links,
    pool_ops: Vec<usize>,
    /// For each pool slot, the closest earlier slot with the same request.
    twins: Vec<Option<usize>>,
    /// The pins of unknown writes.
    reserved: HashSet<i64>,
    state: State,
    linearized: BitSet,
    stack: Vec<Frame>,
    seen: HashSet<(Vec<u64>, State)>,
    definite_left: usize,
    ceilings: Ceilings,
    furthest: Option<(Duration, Furthest)>,
}

impl<'a> Searcher<'a> {
    fn new(calls: &'a [Call], initial: State) -> Searcher<'a> {
        let mut pool_ops: Vec<usize> = (0..calls.len())
            .filter(|&op| !calls[op].in_timeline())
            .collect();
        pool_ops.sort_by_key(|&op| (calls[op].invoked, op));
        let mut twins = vec![None; pool_ops.len()];
        for (slot, &op) in pool_ops.iter().enumerate() {
            twins[slot] = (0..slot)
                .rev()
                .find(|&earlier| calls[pool_ops[earlier]].input == calls[op].input);
        }
        Searcher {
            calls,
            timeline: Timeline::new(calls),
            pool: Links::new(pool_ops.len()),
            pool_ops,
            twins,
            reserved: calls.iter().filter_map(|c| c.pin).collect(),
            state: initial,
            linearized: BitSet::new(calls.len()),
            stack: Vec::new(),
            seen: HashSet::new(),
            definite_left: calls.iter().filter(|c| c.in_timeline()).count(),
            ceilings: Ceilings::new(calls),
            furthest: None,
        }
    }

    /// The unknown operation at `slot` if it may go next: invoked by the time of the
    /// first pending return `blocker`, with a revision gap left to fill. Of unknown
    /// operations with the same request only the earliest left is tried: once
    /// invoked, they are interchangeable (same effect, candidates from now on).
    fn unknown_candidate(&self, slot: usize, blocker: usize) -> Candidate {
        let Some(&op) = self.pool_ops.get(slot) else {
            return Candidate::End;
        };
        let horizon = self.timeline.time(blocker, self.calls);
        if self.state.revision >= self.ceilings.lowest() || self.calls[op].invoked > horizon {
            return Candidate::End;
        }
        let mut twin = self.twins[slot];
        while let Some(earlier) = twin {
            if !self.linearized.get(self.pool_ops[earlier]) {
                return Candidate::Twin;
            }
            twin = self.twins[earlier];
        }
        Candidate::Op(op)
    }

    /// The verdict once every path is dead.
    fn violated(self, steps: u64) -> Search {
        match self.furthest {
            Some((_, furthest)) => Search::Violated { furthest, steps },
            // Every path ends at a recorded dead end; say so rather than panic.
            None => Search::Inconclusive {
                steps,
                furthest: None,
            },
        }
    }

    /// Makes `op` (found at `at`) the next operation if the model allows it and the
    /// result is new.
    fn linearize(&mut self, op: usize, at: Cursor, blocker: usize) -> Tried {
        let call = &self.calls[op];
        let next = match (self.state.step(call.input, call.output), call.output) {
            (Step::Impossible, _) => None,
            // An unknown operation that changes nothing may as well not have happened:
            // leaving it out covers this branch.
            (Step::Same, None) if !call.bounded => None,
            (Step::Same, _) => Some(self.state.clone()),
            // An unknown write past a revision that an answered operation still needs
            // is a dead end, however late that operation comes; and it must make its
            // pinned revision, or one no other unknown write is pinned to.
            (Step::Next(next), None)
                if next.revision > self.ceilings.lowest()
                    || call
                        .pin
                        .map_or(self.reserved.contains(&next.revision), |pin| {
                            pin != next.revision
                        }) =>
            {
                None
            }
            (Step::Next(next), _) => Some(next),
        };
        let Some(next) = next else {
            return Tried::Refused;
        };
        // An answered operation that changes nothing can go first of everything that
        // fits here: in any order that works from here, the operations before it
        // change nothing either (each change bumps the revision it answers with) and
        // none completed before it was invoked (it is a candidate). So no other
        // choice needs trying here.
        let forced = call.output.is_some() && next == self.state;
        self.linearized.set(op, true);
        if !self
            .seen
            .insert((self.linearized.words.clone(), next.clone()))
        {
            self.linearized.set(op, false);
            return if forced {
                Tried::Exhausted
            } else {
                Tried::Refused
            };
        }
        let before = std::mem::replace(&mut self.state, next);
        self.stack.push(Frame {
            op,
            at,
            before,
            blocker,
            forced,
        });
        if call.in_timeline() {
            self.definite_left -= 1;
        }
        if let Some(output) = call.output {
            self.ceilings.remove(output.revision_before());
        }
        match at {
            Cursor::Timeline(entry) => self.timeline.lift(entry),
            Cursor::Pool(slot) => self.pool.unlink(slot),
        }
        Tried::Linearized
    }

    /// Undoes the latest linearization, and the one before while the undone one was
    /// forced; where to resume and the blocker there, or `None` if nothing is left
    /// to undo.
    fn backtrack(&mut self) -> Option<(Cursor, usize)> {
        loop {
            let frame = self.stack.pop()?;
            self.state = frame.before;
            self.linearized.set(frame.op, false);
            if self.calls[frame.op].in_timeline() {
                self.definite_left += 1;
            }
            if let Some(output) = self.calls[frame.op].output {
                self.ceilings.add(output.revision_before());
            }
            let resume = match frame.at {
                Cursor::Timeline(entry) => {
                    self.timeline.unlift(entry);
                    Cursor::Timeline(self.timeline.links.next(entry))
                }
                Cursor::Pool(slot) => {
                    self.pool.relink(slot);
                    Cursor::Pool(self.pool.next(slot))
                }
            };
            if !frame.forced {
                return Some((resume, frame.blocker));
            }
        }
    }

    /// Records the path ending at the pending return `blocker` if it got further in
    /// time than any before.
    fn dead_end(&mut self, blocker: usize) {
        let Some(entry) = self.timeline.entries.get(blocker) else {
            return;
        };
        let at = self.calls[entry.op].completed;
        if self.furthest.as_ref().is_none_or(|(t, _)| at > *t) {
            let furthest = Furthest {
                blocked: entry.op,
                linearized: self.stack.iter().map(|frame| frame.op).collect(),
            };
            self.furthest = Some((at, furthest));
        }
    }
}

/// The revisions just before each answered operation not yet linearized, as a
/// multiset: the store may not pass the lowest of them.
struct Ceilings(BTreeMap<i64, usize>);

impl Ceilings {
    fn new(calls: &[Call]) -> Ceilings {
        let mut ceilings = Ceilings(BTreeMap::new());
        for output in calls.iter().filter_map(|c| c.output) {
            ceilings.add(output.revision_before());
        }
        ceilings
    }

    fn lowest(&self) -> i64 {
        self.0.keys().next().copied().unwrap_or(i64::MAX)
    }

    fn add(&mut self, revision: i64) {
        *self.0.entry(revision).or_insert(0) += 1;
    }

    fn remove(&mut self, revision: i64) {
        if let Some(count) = self.0.get_mut(&revision) {
            *count -= 1;
            if *count == 0 {
                self.0.remove(&revision);
            }
        }
    }
}

/// The calls and returns of answered (and bounded) operations in time order.
struct Timeline {
    entries: Vec<Entry>,
    links: Links,
}

impl Timeline {
    fn new(calls: &[Call]) -> Timeline {
        let mut keyed: Vec<(Duration, bool, usize)> = Vec::new();
        for (op, call) in calls.iter().enumerate() {
            if call.in_timeline() {
                keyed.push((call.invoked, false, op));
                keyed.push((call.completed, true, op));
            }
        }
        // At equal instants calls go first: the operations count as concurrent.
        keyed.sort_unstable();
        let mut entries: Vec<Entry> = keyed
            .iter()
            .map(|&(_, is_return, op)| Entry {
                op,
                call: !is_return,
                partner: usize::MAX,
            })
            .collect();
        let mut call_at = vec![usize::MAX; calls.len()];
        for (i, entry) in entries.iter().enumerate() {
            if entry.call {
                call_at[entry.op] = i;
            }
        }
        for i in 0..entries.len() {
            if !entries[i].call {
                let call = call_at[entries[i].op];
                entries[i].partner = call;
                entries[call].partner = i;
            }
        }
        let links = Links::new(entries.len());
        Timeline { entries, links }
    }

    /// When the entry at `index` happens; +infinity for the tail.
    fn time(&self, index: usize, calls: &[Call]) -> Duration {
        self.entries.get(index).map_or(Duration::MAX, |entry| {
            let call = &calls[entry.op];
            if entry.call {
                call.invoked
            } else {
                call.completed
            }
        })
    }

    /// Takes a call and its return out of the list.
    fn lift(&mut self, call: usize) {
        let ret = self.entries[call].partner;
        self.links.unlink(call);
        self.links.unlink(ret);
    }

    /// Undoes the latest [`Timeline::lift`], which must have lifted `call`.
    fn unlift(&mut self, call: usize) {
        let ret = self.entries[call].partner;
        self.links.relink(ret);
        self.links.relink(call);
    }
}

/// A doubly linked list over `0..len` in order, with a head sentinel at `len` and a
/// tail at `len + 1`; unlinked items keep their links, so undoing unlinks in reverse
/// order restores it (dancing links).
struct Links {
    next: Vec<usize>,
    prev: Vec<usize>,
}

impl Links {
    fn new(len: usize) -> Links {
        let (head, tail) = (len, len + 1);
        let order: Vec<usize> = std::iter::once(head)
            .chain(0..len)
            .chain(std::iter::once(tail))
            .collect();
        let mut links = Links {
            next: vec![tail; len + 2],
            prev: vec![head; len + 2],
        };
        for pair in order.windows(2) {
            links.next[pair[0]] = pair[1];
            links.prev[pair[1]] = pair[0];
        }
        links
    }

    fn first(&self) -> usize {
        self.next[self.next.len() - 2]
    }

    fn tail(&self) -> usize {
        self.next.len() - 1
    }

    fn next(&self, item: usize) -> usize {
        self.next[item]
    }

    fn unlink(&mut self, item: usize) {
        let (p, n) = (self.prev[item], self.next[item]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    fn relink(&mut self, item: usize) {
        let (p, n) = (self.prev[item], self.next[item]);
        self.next[p] = item;
        self.prev[n] = item;
    }
}

struct BitSet {
    words: Vec<u64>,
}

impl BitSet {
    fn new(bits: usize) -> BitSet {
        BitSet {
            words: vec![0; bits.div_ceil(64)],
        }
    }

    fn get(&self, bit: usize) -> bool {
        self.words
            .get(bit / 64)
            .is_some_and(|word| word & (1u64 << (bit % 64)) != 0)
    }

    fn set(&mut self, bit: usize, on: bool) {
        let (word, mask) = (bit / 64, 1u64 << (bit % 64));
        if let Some(word) = self.words.get_mut(word) {
            if on {
                *word |= mask;
            } else {
                *word &= !mask;
            }
        }
    }
}
