//! The sequential specification: etcd's key-value store on a few keys, with revisions.
//!
//! This module owns [`State`] (the store revision and every checked key's value,
//! create and mod revision and version), the operations as the search sees them
//! ([`Input`], [`Output`]) and [`State::step`], which says whether etcd, in a given
//! state, may answer an operation the way it was answered, and what state follows. It
//! follows etcd's rules: each write that changes a key bumps the store revision by one;
//! a Put creates a key at version 1 with create and mod revision set to the new
//! revision, or bumps its version and mod revision; a Delete of a missing key and a
//! Cas whose compare fails change nothing, not even the revision; Compact changes
//! neither keys nor revision. It must never look at time or at other operations: what
//! may run concurrently is the search's business.

use std::fmt;

/// A checked key, by its index in the history's key table.
pub(super) type KeyId = usize;

/// A value, by its index in the history's value table.
pub(super) type ValueId = u32;

/// The value id that stands for every value no read returned (see `Prepared`).
pub(super) const UNSEEN: ValueId = 0;

/// One key as etcd keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct KeyValue {
    pub value: ValueId,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
}

/// The store: its revision and each checked key, `None` while the key does not exist.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct State {
    pub revision: i64,
    pub keys: Vec<Option<KeyValue>>,
}

/// What a client asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Input {
    Put {
        key: KeyId,
        value: ValueId,
    },
    /// A linearizable Range of one key.
    Get {
        key: KeyId,
    },
    /// A DeleteRange of one key.
    Delete {
        key: KeyId,
    },
    /// Txn: if the key's mod_revision is `expected` (0 for a missing key, as etcd
    /// compares a missing key), put `value`.
    Cas {
        key: KeyId,
        expected: i64,
        value: ValueId,
    },
    Compact,
    /// A lease's revoke or expiry: every key in `first..end` (the lease's keys) that
    /// exists is deleted, in one revision; if none exists, nothing changes.
    Revoke {
        first: KeyId,
        end: KeyId,
    },
}

/// What etcd answered: the response header's revision and the operation's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Output {
    Written {
        revision: i64,
    },
    /// The key's value and mod_revision, or `None` for a missing key.
    Read {
        revision: i64,
        value: Option<(ValueId, i64)>,
    },
    Deleted {
        revision: i64,
        deleted: i64,
    },
    Swapped {
        revision: i64,
        succeeded: bool,
    },
    Compacted {
        revision: i64,
    },
    /// The store revision after the revoke (its own if it deleted keys).
    Revoked {
        revision: i64,
    },
}

/// The result of applying an operation to a state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// etcd could not have answered so in this state.
    Impossible,
    /// Possible, and the state stays as it is.
    Same,
    /// Possible, and this is the next state.
    Next(State),
}

impl Output {
    /// The store revision just before an operation answered so took effect: its
    /// header revision, less one if the answer says it wrote. Revisions never go
    /// down, so no state on the way to this operation may be past it.
    pub fn revision_before(self) -> i64 {
        match self {
            Output::Written { revision }
            | Output::Swapped {
                revision,
                succeeded: true,
            } => revision - 1,
            Output::Deleted { revision, deleted } if deleted > 0 => revision - 1,
            Output::Read { revision, .. }
            | Output::Deleted { revision, .. }
            | Output::Swapped { revision, .. }
            | Output::Compacted { revision } => revision,
            // Whether it deleted anything (and so made `revision`) depends on the
            // state; `revision` bounds the store before it either way.
            Output::Revoked { revision } => revision,
        }
    }
}

impl State {
    /// The store at `revision` with `keys` checked keys, none of which exists.
    pub fn initial(revision: i64, keys: usize) -> State {
        State {
            revision,
            keys: vec![None; keys],
        }
    }

    /// Applies `input` to this state. `output` is etcd's answer, or `None` if the
    /// client never learnt it; any answer is then possible.
    pub fn step(&self, input: Input, output: Option<Output>) -> Step {
        match input {
            Input::Put { key, value } => {
                let next = self.put(key, value);
                match output {
                    None => Step::Next(next),
                    Some(Output::Written { revision }) if revision == next.revision => {
                        Step::Next(next)
                    }
                    Some(_) => Step::Impossible,
                }
            }
            Input::Get { key } => {
                let current = self.get(key).map(|kv| (kv.value, kv.mod_revision));
                match output {
                    None => Step::Same,
                    Some(Output::Read { revision, value })
                        if revision == self.revision && value == current =>
                    {
                        Step::Same
                    }
                    Some(_) => Step::Impossible,
                }
            }
            Input::Delete { key } => {
                let (next, deleted) = match self.get(key) {
                    Some(_) => {
                        let mut next = self.clone();
                        next.revision += 1;
                        next.set(key, None);
                        (Some(next), 1)
                    }
                    None => (None, 0),
                };
                let revision = next.as_ref().map_or(self.revision, |n| n.revision);
                let answer = Output::Deleted { revision, deleted };
                self.answered(next, answer, output)
            }
            Input::Cas {
                key,
                expected,
                value,
            } => {
                let current = self.get(key).map_or(0, |kv| kv.mod_revision);
                let next = (current == expected).then(|| self.put(key, value));
                let answer = Output::Swapped {
                    revision: next.as_ref().map_or(self.revision, |n| n.revision),
                    succeeded: next.is_some(),
                };
                self.answered(next, answer, output)
            }
            Input::Compact => {
                let answer = Output::Compacted {
                    revision: self.revision,
                };
                self.answered(None, answer, output)
            }
            Input::Revoke { first, end } => {
                let next = (first..end).any(|key| self.get(key).is_some()).then(|| {
                    let mut next = self.clone();
                    next.revision += 1;
                    for key in first..end {
                        next.set(key, None);
                    }
                    next
                });
                let answer = Output::Revoked {
                    revision: next.as_ref().map_or(self.revision, |n| n.revision),
                };
                self.answered(next, answer, output)
            }
        }
    }

    /// For operations whose answer follows from the state: possible if the client
    /// got `answer` or nothing, leading to `next` (`None`: no change).
    fn answered(&self, next: Option<State>, answer: Output, output: Option<Output>) -> Step {
        match output {
            Some(output) if output != answer => Step::Impossible,
            _ => next.map_or(Step::Same, Step::Next),
        }
    }

    fn get(&self, key: KeyId) -> Option<KeyValue> {
        self.keys.get(key).copied().flatten()
    }

    fn set(&mut self, key: KeyId, kv: Option<KeyValue>) {
        if let Some(slot) = self.keys.get_mut(key) {
            *slot = kv;
        }
    }

    fn put(&self, key: KeyId, value: ValueId) -> State {
        let mut next = self.clone();
        next.revision += 1;
        let kv = match self.get(key) {
            Some(kv) => KeyValue {
                value,
                mod_revision: next.revision,
                version: kv.version + 1,
                ..kv
            },
            None => KeyValue {
                value,
                create_revision: next.revision,
                mod_revision: next.revision,
                version: 1,
            },
        };
        next.set(key, Some(kv));
        next
    }

    /// This state with key and value names from the history's tables.
    pub fn display<'a>(
        &'a self,
        keys: &'a [String],
        values: &'a [String],
    ) -> impl fmt::Display + 'a {
        StateDisplay {
            state: self,
            keys,
            values,
        }
    }
}

struct StateDisplay<'a> {
    state: &'a State,
    keys: &'a [String],
    values: &'a [String],
}

impl fmt::Display for StateDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rev {}", self.state.revision)?;
        for (key, kv) in self.keys.iter().zip(&self.state.keys) {
            match kv {
                Some(kv) => {
                    let value = self
                        .values
                        .get(kv.value as usize)
                        .map_or("?", String::as_str);
                    write!(
                        f,
                        ", {key}={value}@{} (created {}, version {})",
                        kv.mod_revision, kv.create_revision, kv.version
                    )?;
                }
                None => write!(f, ", {key} absent")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn puts_follow_etcd_revision_rules() {
        let s = State::initial(1, 2);
        let Step::Next(s) = s.step(
            Input::Put { key: 0, value: 7 },
            Some(Output::Written { revision: 2 }),
        ) else {
            panic!("first put");
        };
        assert_eq!(
            s.keys[0],
            Some(KeyValue {
                value: 7,
                create_revision: 2,
                mod_revision: 2,
                version: 1
            })
        );
        let Step::Next(s) = s.step(Input::Put { key: 0, value: 8 }, None) else {
            panic!("second put");
        };
        assert_eq!(
            s.keys[0],
            Some(KeyValue {
                value: 8,
                create_revision: 2,
                mod_revision: 3,
                version: 2
            })
        );
        // A put must answer with the next revision.
        let put = Input::Put { key: 1, value: 9 };
        assert_eq!(
            s.step(put, Some(Output::Written { revision: 3 })),
            Step::Impossible
        );
        assert_eq!(
            s.step(put, Some(Output::Written { revision: 5 })),
            Step::Impossible
        );
    }

    #[test]
    fn deletes_of_nothing_and_failed_compares_change_nothing() {
        let s = State::initial(1, 1);
        let delete = Input::Delete { key: 0 };
        assert_eq!(
            s.step(
                delete,
                Some(Output::Deleted {
                    revision: 1,
                    deleted: 0
                })
            ),
            Step::Same
        );
        assert_eq!(
            s.step(
                delete,
                Some(Output::Deleted {
                    revision: 2,
                    deleted: 1
                })
            ),
            Step::Impossible
        );
        let cas = Input::Cas {
            key: 0,
            expected: 5,
            value: 1,
        };
        assert_eq!(
            s.step(
                cas,
                Some(Output::Swapped {
                    revision: 1,
                    succeeded: false
                })
            ),
            Step::Same
        );
        // A missing key compares as mod_revision 0.
        let create = Input::Cas {
            key: 0,
            expected: 0,
            value: 1,
        };
        let Step::Next(s) = s.step(
            create,
            Some(Output::Swapped {
                revision: 2,
                succeeded: true,
            }),
        ) else {
            panic!("create by cas");
        };
        let Step::Next(s) = s.step(
            delete,
            Some(Output::Deleted {
                revision: 3,
                deleted: 1,
            }),
        ) else {
            panic!("delete");
        };
        assert_eq!(s, State::initial(3, 1));
        assert_eq!(
            s.step(Input::Compact, Some(Output::Compacted { revision: 3 })),
            Step::Same
        );
        // A revoke deletes its lease's keys in one revision; with none, it changes
        // nothing.
        let Step::Next(two) = s.step(Input::Put { key: 0, value: 3 }, None) else {
            panic!("put before revoke");
        };
        let revoke = Input::Revoke { first: 0, end: 1 };
        assert_eq!(
            two.step(revoke, Some(Output::Revoked { revision: 5 })),
            Step::Next(State::initial(5, 1))
        );
        assert_eq!(
            two.step(revoke, Some(Output::Revoked { revision: 4 })),
            Step::Impossible
        );
        assert_eq!(
            s.step(revoke, Some(Output::Revoked { revision: 3 })),
            Step::Same
        );
        // A put after a delete recreates the key at version 1.
        let Step::Next(s) = s.step(Input::Put { key: 0, value: 2 }, None) else {
            panic!("recreate");
        };
        assert_eq!(
            s.keys[0].map(|kv| (kv.create_revision, kv.version)),
            Some((4, 1))
        );
    }
}
