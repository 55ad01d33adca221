//! Who leads, as the simulation's clients and fault injector learn it: every member
//! asked for its leader and term (`ask_all`, `newest_leader`), a client host's running
//! view of it (`LeaderWatch`), and which leader a partial isolation cut off
//! (`PartialIsolation`). It only observes; it never injects a fault nor sends a write.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::Client;

use crate::client::{self, ClientOptions};
use crate::cluster::Directory;

/// The last `Fault::IsolateLeaderButOne`: the leader it cut off and the follower
/// it spared, for the clients of a scenario aimed at it. Written by the injector, read
/// by client hosts.
#[derive(Clone, Debug, Default)]
pub struct PartialIsolation(Arc<Mutex<Option<(String, String)>>>);

impl PartialIsolation {
    pub fn new() -> Self {
        PartialIsolation::default()
    }

    pub(crate) fn note(&self, leader: &str, spared: &str) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((leader.to_owned(), spared.to_owned()));
    }

    /// The leader cut off and the follower it still reaches, once the fault is in.
    pub fn get(&self) -> Option<(String, String)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// Who leads, as a client host keeps asking every member: the leader reported with
/// the highest term. Cheap to clone; clones share what the host learns.
#[derive(Clone, Debug, Default)]
pub struct LeaderWatch {
    state: Rc<WatchState>,
}

#[derive(Debug, Default)]
struct WatchState {
    leader: RefCell<Option<(String, u64)>>,
    /// When a poll first saw the current leader and term (simulated time).
    changed: Cell<Duration>,
    polls: Cell<u64>,
    stop: Cell<bool>,
}

impl LeaderWatch {
    /// Adds a client host named `host` that asks every member in `members` (name and
    /// client URL) for its Status every `every`, until [`LeaderWatch::stop`].
    pub fn start(
        sim: &mut turmoil::Sim<'_>,
        host: &str,
        members: Vec<(String, String)>,
        every: Duration,
    ) -> Self {
        Self::start_with(sim, host, Members::Fixed(members), every)
    }

    /// [`LeaderWatch::start`] over every member the [`Directory`] knows, as members
    /// join (removed members still answer until they stop; they never lead).
    pub fn start_in(
        sim: &mut turmoil::Sim<'_>,
        host: &str,
        directory: Directory,
        every: Duration,
    ) -> Self {
        Self::start_with(sim, host, Members::Directory(directory), every)
    }

    fn start_with(
        sim: &mut turmoil::Sim<'_>,
        host: &str,
        members: Members,
        every: Duration,
    ) -> Self {
        let watch = LeaderWatch::default();
        let state = watch.state.clone();
        sim.client(host, async move {
            let options = ClientOptions {
                request_timeout: Duration::from_millis(500),
                connect_timeout: Duration::from_millis(300),
                keepalive: Duration::from_secs(1),
            };
            let mut clients: Vec<Option<Client>> = Vec::new();
            let mut ids: Vec<Option<u64>> = Vec::new();
            while !state.stop.get() {
                let members = members.now();
                clients.resize_with(members.len(), || None);
                ids.resize(members.len(), None);
                let urls: Vec<String> = members.iter().map(|(_, url)| url.clone()).collect();
                let answers = ask_all(&mut clients, &urls, &options).await;
                for (id, answer) in ids.iter_mut().zip(&answers) {
                    if let Some((member, _, _)) = answer {
                        *id = Some(*member);
                    }
                }
                let named = newest_leader(&answers).and_then(|(leader, term)| {
                    let i = ids.iter().position(|id| *id == Some(leader))?;
                    Some((members[i].0.clone(), term))
                });
                if named.is_some() {
                    let mut leader = state.leader.borrow_mut();
                    if *leader != named {
                        state.changed.set(crate::history::now());
                    }
                    *leader = named;
                }
                state.polls.set(state.polls.get() + 1);
                tokio::time::sleep(every).await;
            }
            Ok(())
        });
        watch
    }

    /// The leader with the highest term seen so far, if any.
    pub fn leader(&self) -> Option<String> {
        self.state.leader.borrow().as_ref().map(|(l, _)| l.clone())
    }

    /// When a poll first saw the current leader in its term (simulated time since the
    /// simulation started): at or after its election (within a poll of it), so the
    /// leader timed every lease from no later than then.
    pub fn last_change(&self) -> Duration {
        self.state.changed.get()
    }

    /// Completed polls of every member.
    pub fn polls(&self) -> u64 {
        self.state.polls.get()
    }

    /// Ends the watch's host after its current poll.
    pub fn stop(&self) {
        self.state.stop.set(true);
    }
}

/// Whom a [`LeaderWatch`] asks.
enum Members {
    Fixed(Vec<(String, String)>),
    Directory(Directory),
}

impl Members {
    fn now(&self) -> Vec<(String, String)> {
        match self {
            Members::Fixed(members) => members.clone(),
            Members::Directory(directory) => directory.all_members(),
        }
    }
}

/// Every member's `(member id, leader id, term)` as its Status answers, asked side by
/// side over the connections in `clients` (one slot per URL, dialled on first use and
/// again after a failure); `None` where a member does not answer.
pub(crate) async fn ask_all(
    clients: &mut Vec<Option<Client>>,
    urls: &[String],
    options: &ClientOptions,
) -> Vec<Option<(u64, u64, u64)>> {
    if clients.len() < urls.len() {
        clients.resize_with(urls.len(), || None);
    }
    futures::future::join_all(
        clients
            .iter_mut()
            .zip(urls)
            .map(|(slot, url)| ask(slot, url, options)),
    )
    .await
}

/// The leader that the answer of the highest term names, with that term: a member
/// deposed without knowing it still names itself, in its older term.
pub(crate) fn newest_leader(answers: &[Option<(u64, u64, u64)>]) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    for (_, leader, term) in answers.iter().flatten() {
        if *leader != 0 && best.is_none_or(|(_, t)| *term > t) {
            best = Some((*leader, *term));
        }
    }
    best
}

/// One member's `(member id, leader id, term)`, or `None` if it does not answer.
async fn ask(
    slot: &mut Option<Client>,
    url: &str,
    options: &ClientOptions,
) -> Option<(u64, u64, u64)> {
    let bound = options.request_timeout + options.connect_timeout * 2;
    let answer = tokio::time::timeout(bound, async {
        let client = match slot {
            Some(client) => client,
            None => slot.insert(client::connect_with(url, options).await.ok()?),
        };
        let status = client.status().await.ok()?;
        let id = status.header().map_or(0, |h| h.member_id());
        Some((id, status.leader(), status.raft_term()))
    })
    .await
    .ok()
    .flatten();
    if answer.is_none() {
        *slot = None;
    }
    answer
}
