//! [`Mixed`]: a client that does what a Kubernetes API server does to etcd, on a small
//! key set: Puts, linearizable and serializable Ranges, compare-and-swap updates (read
//! the key, then a Txn that puts only if its mod_revision is still the one read),
//! deletes and compactions at a revision seen a while ago.
//!
//! Each request goes to a member the client's seed picks; on an error it fails over to
//! another member as etcd's client does: a request that never reached a member (the
//! dial failed) and a read are retried elsewhere; a write that may have reached a
//! member is not, and its outcome is unknown. Every request goes into the
//! [`History`] once, with its invocation and completion times.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;

use super::{execute, never_executed};
use crate::client::{self, ClientOptions};
use crate::cluster::Directory;
use crate::error::SimError;
use crate::history::{self, History, Op, Operation, Outcome};
use crate::rng::SimRng;

/// How often a [`Mixed`] client picks each kind of request: weights, not percentages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    pub put: u64,
    pub get: u64,
    pub serializable_get: u64,
    /// A compare-and-swap update (preceded by a linearizable Get when the client does
    /// not know the key's current mod_revision).
    pub cas: u64,
    pub delete: u64,
    pub compact: u64,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            put: 25,
            get: 20,
            serializable_get: 10,
            cas: 30,
            delete: 10,
            compact: 3,
        }
    }
}

/// Writes (Put, Cas, Delete, Compact) that clients sharing this counter have sent and
/// not yet seen answered: a fault schedule waits on it to crash a leader in the middle
/// of a write. Cheap to clone; clones share the count.
#[derive(Clone, Debug, Default)]
pub struct WritesInFlight(Arc<AtomicUsize>);

impl WritesInFlight {
    pub fn new() -> Self {
        WritesInFlight::default()
    }

    /// How many writes are in flight now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        InFlightGuard(self.0.clone())
    }
}

/// Counts one write out when dropped, even if its client host is torn down.
struct InFlightGuard(Arc<AtomicUsize>);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A client doing a seeded mix of requests for a while; see the module docs.
#[derive(Clone, Debug)]
pub struct Mixed {
    /// The client's name in the history (its turmoil host name, by convention).
    pub name: String,
    /// Every member's client URL; the seed picks one per request.
    pub endpoints: Vec<String>,
    /// If set, the endpoints come from here instead, as members join (and stay after
    /// they leave, as in a client's stale list).
    pub directory: Option<Directory>,
    pub keys: Vec<String>,
    /// Seeds the client's choices: requests, keys, members, pauses.
    pub seed: u64,
    /// No request starts once this much simulated time has passed since `run` began.
    pub run_for: Duration,
    /// No request starts after this many.
    pub max_operations: usize,
    /// Pause before each request, drawn from `[min, max)`.
    pub pause: (Duration, Duration),
    pub mix: Mix,
    /// Members one request may be sent to (the first and the ones it fails over to).
    pub attempts: usize,
    pub options: ClientOptions,
    pub in_flight: WritesInFlight,
}

impl Mixed {
    /// A client named `name` over `endpoints` with keys `k0..k3`, the default mix, and
    /// pauses of 5 to 40 ms, for 10 simulated seconds.
    pub fn new(name: impl Into<String>, endpoints: Vec<String>, seed: u64) -> Self {
        Mixed {
            name: name.into(),
            endpoints,
            directory: None,
            keys: (0..4).map(|i| format!("k{i}")).collect(),
            seed,
            run_for: Duration::from_secs(10),
            max_operations: usize::MAX,
            pause: (Duration::from_millis(5), Duration::from_millis(40)),
            mix: Mix::default(),
            attempts: 3,
            options: ClientOptions::default(),
            in_flight: WritesInFlight::new(),
        }
    }

    /// Runs the workload, recording into `history`. Must run inside a turmoil host.
    /// The cluster's errors are recorded, not returned; only a workload that cannot run
    /// at all (no endpoints, no keys) fails.
    pub async fn run(self, history: History) -> Result<(), SimError> {
        if self.endpoints_now().is_empty() || self.keys.is_empty() {
            return Err(SimError::Invalid(
                "a mixed client needs endpoints and keys".into(),
            ));
        }
        let mut state = State {
            rng: SimRng::new(self.seed, 0),
            clients: (0..self.endpoints_now().len()).map(|_| None).collect(),
            known: BTreeMap::new(),
            seen: VecDeque::new(),
            compacted: 0,
            sent: 0,
        };
        let started = history::now();
        while state.sent < self.max_operations && history::now() - started < self.run_for {
            let (min, max) = self.pause;
            let pause = state
                .rng
                .millis(min.as_millis() as u64, max.as_millis() as u64);
            tokio::time::sleep(pause).await;
            self.step(&mut state, &history).await;
        }
        Ok(())
    }

    /// Chooses and performs one request (two for an update of a key the client does
    /// not know).
    async fn step(&self, state: &mut State, history: &History) {
        let key = match state.rng.pick(&self.keys) {
            Some(key) => key.clone(),
            None => return,
        };
        let mix = &self.mix;
        let choice = state.rng.weighted(&[
            mix.put,
            mix.get,
            mix.serializable_get,
            mix.cas,
            mix.delete,
            mix.compact,
        ]);
        let op = match choice {
            1 | 2 => Op::Get {
                key,
                serializable: choice == 2,
            },
            3 => {
                if !state.known.contains_key(&key) {
                    let read = Op::Get {
                        key: key.clone(),
                        serializable: false,
                    };
                    self.perform(state, history, read).await;
                }
                match state.known.get(&key) {
                    Some(expected) => Op::Cas {
                        expected: *expected,
                        value: self.value(state),
                        key,
                    },
                    // The read failed; an API server would give up this update too.
                    None => return,
                }
            }
            4 => Op::Delete { key },
            5 => match state.compaction_target() {
                Some(revision) => Op::Compact { revision },
                None => Op::Put {
                    value: self.value(state),
                    key,
                },
            },
            _ => Op::Put {
                value: self.value(state),
                key,
            },
        };
        self.perform(state, history, op).await;
    }

    /// A value no other request of any client writes.
    fn value(&self, state: &State) -> String {
        format!("{}.{}", self.name, state.sent)
    }

    /// Sends `op`, failing over as etcd's client does, and records it.
    async fn perform(&self, state: &mut State, history: &History, op: Op) {
        state.sent += 1;
        let _writing = (!matches!(op, Op::Get { .. })).then(|| self.in_flight.enter());
        let invoked = history::now();
        let budget = self.options.request_timeout + self.options.connect_timeout * 2;
        let (outcome, member) = match tokio::time::timeout(budget, self.attempts(state, &op)).await
        {
            Ok(answer) => answer,
            Err(_) => (Outcome::Unknown("client deadline".to_owned()), None),
        };
        state.learn(&op, &outcome);
        history.record(Operation {
            client: self.name.clone(),
            op,
            invoked,
            completed: history::now(),
            outcome,
            member,
        });
    }

    /// The endpoints to choose from now: the directory's, if the client has one (it
    /// grows as members join), else its own list.
    fn endpoints_now(&self) -> Vec<String> {
        match &self.directory {
            Some(directory) => directory.endpoints(),
            None => self.endpoints.clone(),
        }
    }

    async fn attempts(&self, state: &mut State, op: &Op) -> (Outcome, Option<u64>) {
        let endpoints = self.endpoints_now();
        let members = endpoints.len();
        if state.clients.len() < members {
            state.clients.resize_with(members, || None);
        }
        let mut member = state.rng.index(members);
        let mut failure = String::from("no attempt");
        for attempt in 0..self.attempts.max(1) {
            if attempt > 0 {
                // etcd's client backs off 25 ms (with jitter) between retries.
                let backoff = state.rng.millis(20, 30);
                tokio::time::sleep(backoff).await;
                // Another member, chosen by the seed.
                member = (member + 1 + state.rng.index(members.saturating_sub(1))) % members;
            }
            let url = &endpoints[member];
            let client = match state.client(member, url, &self.options).await {
                Ok(client) => client,
                Err(error) => {
                    // Never sent: safe to retry, write or not.
                    failure = format!("{url}: {error}");
                    continue;
                }
            };
            match execute(client, op).await {
                Ok((outcome, id)) => return (outcome, Some(id)),
                Err(error) => {
                    // Re-dial next time: the connection may be the one that hangs.
                    state.clients[member] = None;
                    failure = format!("{url}: {error}");
                    if !matches!(op, Op::Get { .. }) && !never_executed(&error) {
                        // A write may have reached the member: its outcome is unknown,
                        // and retrying it could apply it twice.
                        break;
                    }
                }
            }
        }
        (Outcome::Unknown(failure), None)
    }
}

/// What one [`Mixed`] client knows and holds while it runs.
struct State {
    rng: SimRng,
    /// A connection per member, dialled on first use and after an error.
    clients: Vec<Option<Client>>,
    /// The mod_revision each key had when this client last saw it (0: absent).
    known: BTreeMap<String, i64>,
    /// Store revisions of answers, oldest first (the last few dozen).
    seen: VecDeque<i64>,
    /// The highest revision this client asked to compact at.
    compacted: i64,
    /// Requests sent so far.
    sent: usize,
}

impl State {
    async fn client(
        &mut self,
        member: usize,
        url: &str,
        options: &ClientOptions,
    ) -> Result<&mut Client, SimError> {
        let slot = &mut self.clients[member];
        match slot {
            Some(client) => Ok(client),
            None => Ok(slot.insert(client::connect_with(url, options).await?)),
        }
    }

    /// Compacts, as an API server does, at a revision seen a while ago (twenty answers
    /// back here), if it is above the last one this client compacted at.
    fn compaction_target(&mut self) -> Option<i64> {
        let revision = *self.seen.front()?;
        if self.seen.len() < 20 || revision <= self.compacted {
            return None;
        }
        self.compacted = revision;
        Some(revision)
    }

    fn learn(&mut self, op: &Op, outcome: &Outcome) {
        let revision = match outcome {
            Outcome::Written { revision }
            | Outcome::Read { revision, .. }
            | Outcome::Deleted { revision, .. }
            | Outcome::Swapped { revision, .. }
            | Outcome::Compacted { revision }
            | Outcome::Granted { revision, .. }
            | Outcome::Revoked { revision } => *revision,
            Outcome::KeptAlive { .. } | Outcome::Unknown(_) => 0,
        };
        if revision > 0 {
            self.seen.push_back(revision);
            if self.seen.len() > 20 {
                self.seen.pop_front();
            }
        }
        let (key, now) = match (op, outcome) {
            (Op::Put { key, .. }, Outcome::Written { revision }) => (key, Some(*revision)),
            (Op::Get { key, .. }, Outcome::Read { value, .. }) => {
                (key, Some(value.as_ref().map_or(0, |(_, m)| *m)))
            }
            (Op::Delete { key }, Outcome::Deleted { .. }) => (key, Some(0)),
            (
                Op::Cas { key, .. },
                Outcome::Swapped {
                    revision,
                    succeeded: true,
                },
            ) => (key, Some(*revision)),
            // A conflict or an unknown outcome: re-read before the next update.
            (Op::Put { key, .. } | Op::Delete { key } | Op::Cas { key, .. }, _) => (key, None),
            _ => return,
        };
        match now {
            Some(revision) => self.known.insert(key.clone(), revision),
            None => self.known.remove(key),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            rng: SimRng::new(1, 0),
            clients: Vec::new(),
            known: BTreeMap::new(),
            seen: VecDeque::new(),
            compacted: 0,
            sent: 0,
        }
    }

    #[test]
    fn learns_mod_revisions_and_forgets_them_on_doubt() {
        let mut state = state();
        let put = Op::Put {
            key: "k".into(),
            value: "v".into(),
        };
        state.learn(&put, &Outcome::Written { revision: 5 });
        assert_eq!(state.known.get("k"), Some(&5));
        let cas = Op::Cas {
            key: "k".into(),
            expected: 5,
            value: "w".into(),
        };
        state.learn(
            &cas,
            &Outcome::Swapped {
                revision: 6,
                succeeded: true,
            },
        );
        assert_eq!(state.known.get("k"), Some(&6));
        state.learn(
            &cas,
            &Outcome::Swapped {
                revision: 7,
                succeeded: false,
            },
        );
        assert_eq!(state.known.get("k"), None, "a conflict means re-read");
        let delete = Op::Delete { key: "k".into() };
        state.learn(
            &delete,
            &Outcome::Deleted {
                revision: 8,
                deleted: 1,
            },
        );
        assert_eq!(state.known.get("k"), Some(&0));
        state.learn(&put, &Outcome::Unknown("timeout".into()));
        assert_eq!(state.known.get("k"), None);
    }

    #[test]
    fn compacts_only_at_old_and_new_revisions() {
        let mut state = state();
        let get = Op::Get {
            key: "k".into(),
            serializable: false,
        };
        for revision in 1..=19 {
            state.learn(
                &get,
                &Outcome::Read {
                    revision,
                    value: None,
                },
            );
        }
        assert_eq!(state.compaction_target(), None, "too few answers yet");
        state.learn(
            &get,
            &Outcome::Read {
                revision: 20,
                value: None,
            },
        );
        assert_eq!(state.compaction_target(), Some(1));
        assert_eq!(state.compaction_target(), None, "not twice at one revision");
        state.learn(
            &get,
            &Outcome::Read {
                revision: 21,
                value: None,
            },
        );
        assert_eq!(state.compaction_target(), Some(2));
    }

    #[test]
    fn writes_in_flight_count_down_when_dropped() {
        let writes = WritesInFlight::new();
        let guard = writes.enter();
        let second = writes.clone().enter();
        assert_eq!(writes.get(), 2);
        drop(guard);
        drop(second);
        assert_eq!(writes.get(), 0);
    }
}
