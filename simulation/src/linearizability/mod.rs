//! Linearizability of the key-value history: is there one order of the clients'
//! operations, each taking effect at an instant between its invocation and its
//! completion, in which a single etcd store gives exactly the answers the clients got?
//!
//! This module owns the check ([`check`], [`analyze`]) and the translation of a
//! [`History`](crate::history::History)'s operations into the search's terms; the
//! sequential etcd model is in `model`, the search (Wing & Gong with Lowe's
//! memoisation, as porcupine runs it) in `search`. It judges recorded operations only:
//! it must never talk to the cluster and never excuse what it cannot decide (running
//! out of budget is its own outcome, [`Verdict::Inconclusive`], and a violation of
//! its own property for [`check`]).
//!
//! What is checked: Puts, linearizable Gets of one key, Deletes of one key, Txn
//! compare-and-swaps on one key's mod_revision and Compacts, against etcd's rules
//! including revisions: a Put answers with the store revision it made, a Get with the
//! store revision it read at and the key's value and mod_revision, a Delete with the
//! number it deleted (a delete of nothing leaves the revision alone), a Cas with
//! whether its compare held, a Compact with the unchanged store revision.
//!
//! The whole history is checked as one, not partitioned per key: revisions are global,
//! so every answer's revision relates it to writes on every other key (a Get of `a` at
//! revision 10 says which writes to `b` came before it), and a per-key check would
//! accept histories no single store could produce. The revisions in answers also make
//! the whole-history search cheap: an acknowledged write fits only where the store
//! revision is one below its own, so at most one acknowledged write can go next and
//! the search rarely branches except over operations with unknown outcomes.
//!
//! Operations with unknown outcomes (errors, timeouts) complete at +infinity with any
//! answer, as in porcupine: a write may take effect at any point after its invocation
//! (even long after the client gave up: it may sit in the Raft log) or never. Unknown
//! Gets and Compacts change nothing and are left out.
//!
//! Leases: a Put with a lease is a Put; a lease's keys (every key a recorded Put
//! attaches to it) get consecutive key ids, so that its revoke is one operation that
//! deletes whichever of them exist in one revision (and changes nothing if none does).
//! Its expiry, which no client sends, is such a revoke with an unknown outcome,
//! invoked when the first of its Puts was, or the last linearizable read that found
//! one of its keys if later: the leader may expire the lease at any point after (how
//! early is the lease checker's question, not this one's), or never within the
//! history. Grants and keepalives touch no key and no revision and are left
//! out.
//!
//! Not checked here: serializable Gets (the staleness checks in
//! the `checker` module cover them); whether a Compact really made older
//! revisions unreadable (nothing in the history reads at a revision); a key's
//! create_revision and version, which the model keeps but no recorded answer carries;
//! and compactions that failed for a definite reason (compacted or future revision),
//! which the workload records as unknown and the model treats as no-ops anyway.
//! Precondition: the recorded clients are the only writers of the keys they touch, and
//! those keys do not exist at `initial_revision`; a key put with a lease is only ever
//! put with that lease (a Put without it would detach it; such a history is refused).

mod model;
mod search;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use crate::history::{Op, Operation, Outcome};
use crate::violation::Violation;

use model::{Input, KeyId, Output, State, Step, ValueId, UNSEEN};
use search::{Call, Search};

/// Loop turns the search may take before [`check`] calls the history inconclusive.
/// Sound histories of a few thousand operations need far fewer. `QK_SIM_LIN_STEPS`
/// overrides it.
pub const DEFAULT_STEP_BUDGET: u64 = 2_000_000;

/// The outcome of [`analyze`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A linearization: indexes into the operations, in order of effect. Operations
    /// left out are serializable Gets, grants, keepalives and operations with unknown
    /// outcomes that did not take effect in this order. Lease expiries, which are no
    /// client's operations, are not listed.
    Linearizable { order: Vec<usize>, steps: u64 },
    /// No linearization exists; `detail` names the operation that could not be
    /// explained, the furthest partial linearization and the store it reached.
    Violated { detail: String, steps: u64 },
    /// The search used up its budget before deciding; `detail` describes the
    /// furthest dead end it had found, as for a violation, if it had found one.
    Inconclusive { steps: u64, detail: Option<String> },
}

/// Checks that `operations` are linearizable, starting from a store at
/// `initial_revision` where none of their keys exists, within
/// [`DEFAULT_STEP_BUDGET`] or the budget `QK_SIM_LIN_STEPS` sets.
pub fn check(operations: &[Operation], initial_revision: i64) -> Result<(), Violation> {
    let budget = std::env::var("QK_SIM_LIN_STEPS")
        .ok()
        .and_then(|steps| steps.parse().ok())
        .unwrap_or(DEFAULT_STEP_BUDGET);
    check_within(operations, initial_revision, budget)
}

/// [`check`] with an explicit budget. A violation is property `linearizability`; a
/// search that runs out of budget is property `linearizability-inconclusive`.
pub fn check_within(
    operations: &[Operation],
    initial_revision: i64,
    step_budget: u64,
) -> Result<(), Violation> {
    match analyze(operations, initial_revision, step_budget) {
        Verdict::Linearizable { .. } => Ok(()),
        Verdict::Violated { detail, .. } => Err(Violation {
            property: "linearizability",
            detail,
        }),
        Verdict::Inconclusive { steps, detail } => {
            let unknown = operations
                .iter()
                .filter(|op| matches!(op.outcome, Outcome::Unknown(_)))
                .count();
            let mut message = format!(
                "no verdict after {steps} search steps over {} operations ({unknown} with \
                 unknown outcome); QK_SIM_LIN_STEPS raises the budget",
                operations.len(),
            );
            if let Some(detail) = detail {
                let _ = write!(message, "\nthe furthest dead end so far: {detail}");
            }
            Err(Violation {
                property: "linearizability-inconclusive",
                detail: message,
            })
        }
    }
}

/// Searches for a linearization of `operations` from a store at `initial_revision`
/// where none of their keys exists, taking at most `step_budget` steps.
pub fn analyze(operations: &[Operation], initial_revision: i64, step_budget: u64) -> Verdict {
    let prepared = match Prepared::new(operations) {
        Ok(prepared) => prepared,
        Err(detail) => return Verdict::Violated { detail, steps: 0 },
    };
    let initial = State::initial(initial_revision, prepared.keys.len());
    match search::search(&prepared.calls, initial, step_budget) {
        Search::Linearizable { order, steps } => Verdict::Linearizable {
            order: order
                .into_iter()
                .filter(|i| !prepared.expiry[*i])
                .map(|i| prepared.origin[i])
                .collect(),
            steps,
        },
        Search::Inconclusive { steps, furthest } => Verdict::Inconclusive {
            steps,
            detail: furthest
                .map(|furthest| prepared.explain(operations, initial_revision, &furthest)),
        },
        Search::Violated { furthest, steps } => Verdict::Violated {
            detail: prepared.explain(operations, initial_revision, &furthest),
            steps,
        },
    }
}

/// The operations the search checks, with keys and values as small numbers.
#[derive(Default)]
struct Prepared {
    calls: Vec<Call>,
    /// Each call's request with its own value, before [`Prepared::canonicalize`].
    requests: Vec<Input>,
    /// For each call, the index of its operation.
    origin: Vec<usize>,
    keys: Vec<String>,
    key_ids: HashMap<String, usize>,
    /// Value names; id 0 ([`UNSEEN`]) stands for every value no read returned.
    values: Vec<String>,
    value_ids: HashMap<String, ValueId>,
    /// For each value, how many Puts and Cases write it.
    writers: Vec<u32>,
    /// For each value, a mod_revision some read returned it with.
    seen_at: Vec<Option<i64>>,
    /// Each lease's keys, as the range of their key ids.
    lease_keys: BTreeMap<i64, (KeyId, KeyId)>,
    /// For each call, whether it stands for a lease's expiry (its origin is then the
    /// lease's first Put) rather than for a recorded operation.
    expiry: Vec<bool>,
}

/// When lease `lease` had certainly expired, if the history proves it: the earliest
/// completion of a linearizable read that found one of its keys absent, after a Put of
/// that key with the lease was acknowledged and before any revoke of the lease or
/// Delete of the key was sent (nothing else deletes the key: it went by expiry).
fn expired_by(operations: &[Operation], lease: i64) -> Option<std::time::Duration> {
    let mut put_done: HashMap<&str, std::time::Duration> = HashMap::new();
    for operation in operations {
        if let (Op::PutWithLease { key, lease: l, .. }, Some(_)) =
            (&operation.op, operation.written_revision())
        {
            if *l == lease {
                let done = put_done.entry(key).or_insert(operation.completed);
                *done = (*done).min(operation.completed);
            }
        }
    }
    let revoked = operations
        .iter()
        .filter(|operation| matches!(operation.op, Op::LeaseRevoke { id } if id == lease))
        .map(|operation| operation.invoked)
        .min();
    operations
        .iter()
        .filter_map(|operation| match (&operation.op, &operation.outcome) {
            (
                Op::Get {
                    key,
                    serializable: false,
                },
                Outcome::Read { value: None, .. },
            ) => {
                let put = put_done.get(key.as_str())?;
                let deleted = operations.iter().any(|other| {
                    matches!(&other.op, Op::Delete { key: k } if k == key)
                        && other.invoked <= operation.completed
                });
                (*put < operation.invoked
                    && !deleted
                    && revoked.is_none_or(|at| at > operation.completed))
                .then_some(operation.completed)
            }
            _ => None,
        })
        .min()
}

impl Prepared {
    /// Translates `operations`; an error names an operation whose outcome does not
    /// fit its request (a recording bug).
    fn new(operations: &[Operation]) -> Result<Prepared, String> {
        let mut prepared = Prepared::default();
        prepared
            .values
            .push("(a value no read returned)".to_owned());
        prepared.writers.push(0);
        prepared.seen_at.push(None);
        prepared.register_lease_keys(operations)?;
        for (index, operation) in operations.iter().enumerate() {
            let unknown = matches!(operation.outcome, Outcome::Unknown(_));
            let input = match &operation.op {
                Op::Get {
                    serializable: true, ..
                } => continue,
                Op::Get { .. } | Op::Compact { .. } if unknown => continue,
                Op::LeaseGrant { .. } | Op::LeaseKeepAlive { .. } => continue,
                Op::Put { key, value } | Op::PutWithLease { key, value, .. } => Input::Put {
                    key: prepared.key(key),
                    value: prepared.written(value),
                },
                Op::LeaseRevoke { id } => {
                    // A lease no Put names has no key of ours: its revoke changes
                    // nothing, and answers with the store revision as it is.
                    let (first, end) = prepared.lease_keys.get(id).copied().unwrap_or((0, 0));
                    Input::Revoke { first, end }
                }
                Op::Get { key, .. } => Input::Get {
                    key: prepared.key(key),
                },
                Op::Delete { key } => Input::Delete {
                    key: prepared.key(key),
                },
                Op::Cas {
                    key,
                    expected,
                    value,
                } => Input::Cas {
                    key: prepared.key(key),
                    expected: *expected,
                    value: prepared.written(value),
                },
                Op::Compact { .. } => Input::Compact,
            };
            let output = match (&operation.op, &operation.outcome) {
                (_, Outcome::Unknown(_)) => None,
                (Op::Put { .. } | Op::PutWithLease { .. }, Outcome::Written { revision }) => {
                    Some(Output::Written {
                        revision: *revision,
                    })
                }
                (Op::LeaseRevoke { .. }, Outcome::Revoked { revision }) => Some(Output::Revoked {
                    revision: *revision,
                }),
                (Op::Get { .. }, Outcome::Read { revision, value }) => Some(Output::Read {
                    revision: *revision,
                    value: value.as_ref().map(|(value, mod_revision)| {
                        (prepared.seen(value, *mod_revision), *mod_revision)
                    }),
                }),
                (Op::Delete { .. }, Outcome::Deleted { revision, deleted }) => {
                    Some(Output::Deleted {
                        revision: *revision,
                        deleted: *deleted,
                    })
                }
                (
                    Op::Cas { .. },
                    Outcome::Swapped {
                        revision,
                        succeeded,
                    },
                ) => Some(Output::Swapped {
                    revision: *revision,
                    succeeded: *succeeded,
                }),
                (Op::Compact { .. }, Outcome::Compacted { revision }) => Some(Output::Compacted {
                    revision: *revision,
                }),
                _ => {
                    return Err(format!(
                        "operation #{index} has an outcome of another kind: {operation}"
                    ))
                }
            };
            prepared.calls.push(Call {
                input,
                output,
                invoked: operation.invoked,
                completed: operation.completed,
                pin: None,
                bounded: false,
            });
            prepared.origin.push(index);
            prepared.expiry.push(false);
        }
        prepared.add_expiries(operations);
        prepared.canonicalize();
        Ok(prepared)
    }

    /// Gives each lease's keys consecutive key ids, before any other key; an error if
    /// a key is attached to two leases, or also put without its lease.
    fn register_lease_keys(&mut self, operations: &[Operation]) -> Result<(), String> {
        let mut by_lease: BTreeMap<i64, Vec<&str>> = BTreeMap::new();
        let mut lease_of: HashMap<&str, i64> = HashMap::new();
        for operation in operations {
            if let Op::PutWithLease { key, lease, .. } = &operation.op {
                if *lease_of.entry(key).or_insert(*lease) != *lease {
                    return Err(format!(
                        "{key} is put with two leases; the model gives a key one lease"
                    ));
                }
                let keys = by_lease.entry(*lease).or_default();
                if !keys.contains(&key.as_str()) {
                    keys.push(key);
                }
            }
        }
        if let Some(operation) = operations.iter().find(|operation| {
            matches!(&operation.op, Op::Put { key, .. } | Op::Cas { key, .. }
                if lease_of.contains_key(key.as_str()))
        }) {
            return Err(format!(
                "{operation} puts a key without the lease other puts attach it to; the \
                 model keeps a key on its lease"
            ));
        }
        for (lease, keys) in by_lease {
            let first = self.keys.len();
            for key in keys {
                self.key(key);
            }
            self.lease_keys.insert(lease, (first, self.keys.len()));
        }
        Ok(())
    }

    /// One unknown revoke per lease with keys: its expiry, which may happen at any
    /// point after its first Put was sent, or not at all. It cannot come before a
    /// linearizable read that found one of the lease's keys (keys are put once and go
    /// only with their lease), so it is invoked when the last such read was; and if a
    /// read proves it happened (see [`expired_by`]), it is bounded by that read's
    /// completion. The same verdicts, but the search neither tries the expiry in every
    /// revision gap while the lease is plainly alive nor puts it off past every gap
    /// other unknown writes could fill.
    fn add_expiries(&mut self, operations: &[Operation]) {
        for (lease, (first, end)) in &self.lease_keys {
            let first_put = operations.iter().enumerate().find(|(_, operation)| {
                matches!(operation.op, Op::PutWithLease { lease: l, .. } if l == *lease)
            });
            let Some((index, put)) = first_put else {
                continue;
            };
            let last_found = operations
                .iter()
                .filter(|operation| match (&operation.op, &operation.outcome) {
                    (
                        Op::Get {
                            key,
                            serializable: false,
                        },
                        Outcome::Read { value: Some(_), .. },
                    ) => self
                        .key_ids
                        .get(key)
                        .is_some_and(|id| (*first..*end).contains(id)),
                    _ => false,
                })
                .map(|operation| operation.invoked)
                .max();
            let invoked = last_found.map_or(put.invoked, |found| found.max(put.invoked));
            let deadline = expired_by(operations, *lease);
            self.calls.push(Call {
                input: Input::Revoke {
                    first: *first,
                    end: *end,
                },
                output: None,
                invoked,
                completed: deadline.unwrap_or(invoked).max(invoked),
                pin: None,
                bounded: deadline.is_some(),
            });
            self.origin.push(index);
            self.expiry.push(true);
        }
    }

    /// A call as the violation report shows it.
    fn describe(&self, operations: &[Operation], call: usize) -> String {
        let operation = &operations[self.origin[call]];
        if self.expiry[call] {
            format!("expiry of the lease of #{} {operation}", self.origin[call])
        } else {
            format!("#{} {operation}", self.origin[call])
        }
    }

    /// Two rewrites that shrink the search without changing its verdict. A value no
    /// read returned cannot be told from another such value, so all of them become
    /// [`UNSEEN`] and states that differ only there merge. A value only one operation
    /// writes, returned by a read with mod_revision `m`, was written at revision `m`:
    /// if that operation's outcome is unknown, it may take effect only as revision `m`
    /// (its pin), and no other unknown operation may make `m`.
    fn canonicalize(&mut self) {
        self.requests = self.calls.iter().map(|call| call.input).collect();
        for call in &mut self.calls {
            let (Input::Put { value, .. } | Input::Cas { value, .. }) = &mut call.input else {
                continue;
            };
            let seen_at = self.seen_at.get(*value as usize).copied().flatten();
            let only_writer = self.writers.get(*value as usize) == Some(&1);
            match seen_at {
                None => *value = UNSEEN,
                Some(revision) if only_writer && call.output.is_none() => {
                    call.pin = Some(revision);
                }
                Some(_) => {}
            }
        }
    }

    fn key(&mut self, key: &str) -> KeyId {
        if let Some(id) = self.key_ids.get(key) {
            return *id;
        }
        self.keys.push(key.to_owned());
        self.key_ids.insert(key.to_owned(), self.keys.len() - 1);
        self.keys.len() - 1
    }

    /// The id of a value some Put or Cas writes.
    fn written(&mut self, value: &str) -> ValueId {
        let id = self.value(value);
        if let Some(writers) = self.writers.get_mut(id as usize) {
            *writers += 1;
        }
        id
    }

    /// The id of a value a read returned with `mod_revision`.
    fn seen(&mut self, value: &str, mod_revision: i64) -> ValueId {
        let id = self.value(value);
        if let Some(seen_at) = self.seen_at.get_mut(id as usize) {
            seen_at.get_or_insert(mod_revision);
        }
        id
    }

    fn value(&mut self, value: &str) -> ValueId {
        if let Some(id) = self.value_ids.get(value) {
            return *id;
        }
        // More distinct values than u32 holds would not fit in memory anyway.
        let id = ValueId::try_from(self.values.len()).unwrap_or(ValueId::MAX);
        self.values.push(value.to_owned());
        self.writers.push(0);
        self.seen_at.push(None);
        self.value_ids.insert(value.to_owned(), id);
        id
    }

    /// The violation report: the operation no order explains, the furthest partial
    /// linearization's tail, the store it reached and the operations that were still
    /// free to go next.
    fn explain(
        &self,
        operations: &[Operation],
        initial_revision: i64,
        furthest: &search::Furthest,
    ) -> String {
        const SHOWN: usize = 8;
        let op = |call: usize| -> &Operation { &operations[self.origin[call]] };
        let blocked = op(furthest.blocked);
        let mut out = format!(
            "no order of the operations explains #{} {blocked}",
            self.origin[furthest.blocked]
        );
        if let Some(Output::Read {
            value: Some((value, _)),
            ..
        }) = self.calls[furthest.blocked].output
        {
            if self.writers.get(value as usize) == Some(&0) {
                out.push_str(" (no operation wrote that value)");
            }
        }
        let done = &furthest.linearized;
        let mut linearized = vec![false; self.calls.len()];
        for &call in done {
            linearized[call] = true;
        }
        let _ = write!(
            out,
            "\n  the furthest order linearized {} of {} checked operations",
            done.len(),
            self.calls.len()
        );
        if !done.is_empty() {
            let _ = write!(out, ", ending with:");
            for &call in &done[done.len().saturating_sub(SHOWN)..] {
                let _ = write!(out, "\n    {}", self.describe(operations, call));
            }
        }
        // The store it reached, replayed with every value as written.
        let mut state = State::initial(initial_revision, self.keys.len());
        for &call in done {
            if let Step::Next(next) = state.step(self.requests[call], None) {
                state = next;
            }
        }
        let _ = write!(
            out,
            "\n  and reached: {}",
            state.display(&self.keys, &self.values)
        );
        // What was still free to go there: operations invoked before the blocked one
        // completed and not linearized, answered ones first.
        let (answered, unknown): (Vec<usize>, Vec<usize>) = (0..self.calls.len())
            .filter(|&call| {
                call != furthest.blocked
                    && !linearized[call]
                    && self.calls[call].invoked <= blocked.completed
            })
            .partition(|&call| self.calls[call].output.is_some());
        let free: Vec<usize> = answered
            .into_iter()
            .chain(unknown.into_iter().rev())
            .collect();
        if !free.is_empty() {
            let _ = write!(out, "\n  not linearized there, invoked by then:");
            for &call in free.iter().take(SHOWN) {
                let _ = write!(out, "\n    {}", self.describe(operations, call));
            }
            if free.len() > SHOWN {
                let _ = write!(out, "\n    ... and {} more", free.len() - SHOWN);
            }
        }
        out
    }
}
