//! [`LeaseClient`]: what a controller does with etcd leases, on keys of its own: grant
//! short leases, attach one or two keys to each, keep some alive over a keepalive
//! stream for a while, revoke a few, and watch the keys go.
//!
//! The client's seed fixes, for each lease, when it is granted, its TTL, its keys, the
//! member it starts on, whether and for how long it is kept alive (at a third of its
//! TTL, as etcd's client does), and whether it is revoked and when. Each lease runs as
//! a task of its own, so that a slow member holds up only one lease. While a lease is
//! kept alive its keys are read now and then; once it is not, they are read often,
//! until they are gone: those linearizable reads are what the lease checker judges
//! an expiry by. A keepalive waits a second for its answer; on an error, a silent
//! stream or a stream's end it goes to the next member on a new stream (never two
//! requests outstanding on one stream, so each answer belongs to the request before
//! it). Grants and reads fail over as [`super::Mixed`]'s requests do; a Put or a
//! revoke that may have reached a member is not retried. A client that keeps its leases
//! on the leader (`pin_to_leader`) opens each stream on the member that the Status
//! answer of the newest term names leader, and stays there while it answers. A client
//! with a [`Lapse`] stops every keepalive for a while, as a paused process does, and
//! then resumes them.
//!
//! After `run_for` no lease is granted or kept alive; the client keeps reading the
//! keys still there until they are gone (or `drain_for` has passed). Every request,
//! every keepalive included, goes into the [`History`] once, with its invocation and
//! completion times. It must never judge what it sees (the lease checker does) and
//! never inject faults.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use tokio::task::JoinSet;

use super::execute;
use crate::client::{self, ClientOptions};
use crate::cluster::Directory;
use crate::error::SimError;
use crate::history::{self, History, Op, Operation, Outcome};
use crate::leaders;
use crate::rng::SimRng;

/// A pause in the keepalives of every lease: none is sent from `from` (counted from
/// the client's start) for `lasting`, then they resume. A lapsing client grants its
/// leases at once, keeps them alive for its whole run and never revokes one, so that
/// the lapse is the only gap in their renewals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lapse {
    pub from: Duration,
    pub lasting: Duration,
}

/// How many keepalives the lease client has seen answered with a TTL above 0: a fault
/// schedule waits on it to cut the leader off right after a renewal. Cheap to clone;
/// clones share the count.
#[derive(Clone, Debug, Default)]
pub struct Renewals(Arc<AtomicU64>);

impl Renewals {
    pub fn new() -> Self {
        Renewals::default()
    }

    /// Renewals answered so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }

    fn count(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A client granting and keeping leases; see the module docs.
#[derive(Clone, Debug)]
pub struct LeaseClient {
    /// The client's name in the history (its turmoil host name, by convention).
    pub name: String,
    /// Every member's client URL.
    pub endpoints: Vec<String>,
    /// If set, the endpoints come from here instead, as members join (and stay after
    /// they leave, as in a client's stale list).
    pub directory: Option<Directory>,
    /// Every key it writes starts with this; nothing else may write there.
    pub prefix: String,
    /// Seeds the client's choices.
    pub seed: u64,
    /// Leases granted over the run.
    pub leases: usize,
    /// TTLs asked for, in seconds, drawn from `[min, max]`.
    pub ttl: (i64, i64),
    /// No lease is granted or kept alive once this much simulated time has passed
    /// since `run` began.
    pub run_for: Duration,
    /// After `run_for`, how long it keeps reading keys that are still there.
    pub drain_for: Duration,
    /// How long a keepalive waits for its answer before the stream is given up.
    pub keepalive_wait: Duration,
    /// Members a grant or read may be sent to (the first and the ones it fails over to).
    pub attempts: usize,
    /// If set, every keepalive stream is opened on the leader, as the Status answer of
    /// the newest term names it (as a client that keeps its leases on the leader does),
    /// instead of on the lease's current member; the stream stays there while it is
    /// answered, through a partition that deposes that leader too.
    pub pin_to_leader: bool,
    /// A keepalive is sent every this many thirds of the TTL: 1 as etcd's client does,
    /// 2 for a client that renews late (a checkpoint may then record much less than
    /// the TTL between two renewals).
    pub renew_every_thirds: u64,
    /// Counts the renewals answered, for a fault schedule.
    pub renewals: Renewals,
    /// If set, every lease's keepalives stop for a while (see [`Lapse`]).
    pub lapse: Option<Lapse>,
    pub options: ClientOptions,
}

impl LeaseClient {
    /// A client named `name` over `endpoints` with prefix `lease/`, six leases of 3 to
    /// 5 s over 10 simulated seconds, draining for at most 30 s.
    pub fn new(name: impl Into<String>, endpoints: Vec<String>, seed: u64) -> Self {
        LeaseClient {
            name: name.into(),
            endpoints,
            directory: None,
            prefix: "lease/".to_owned(),
            seed,
            leases: 6,
            ttl: (3, 5),
            run_for: Duration::from_secs(10),
            drain_for: Duration::from_secs(30),
            keepalive_wait: Duration::from_secs(1),
            attempts: 3,
            pin_to_leader: false,
            renew_every_thirds: 1,
            renewals: Renewals::new(),
            lapse: None,
            options: ClientOptions::default(),
        }
    }

    /// Runs the workload, recording into `history`. Must run inside a turmoil host.
    /// The cluster's errors are recorded, not returned; only a workload that cannot run
    /// at all (no endpoints) fails.
    pub async fn run(self, history: History) -> Result<(), SimError> {
        if self.endpoints_now().is_empty() {
            return Err(SimError::Invalid("a lease client needs endpoints".into()));
        }
        let started = history::now();
        let mut rng = SimRng::new(self.seed, 0);
        let mut tasks = JoinSet::new();
        for n in 0..self.leases {
            let plan = Plan::draw(&mut rng, n, &self);
            let worker = Worker {
                client: self.clone(),
                rng: SimRng::new(self.seed, 1 + n as u64),
                history: history.clone(),
                member: plan.member,
                clients: Vec::new(),
                probes: Vec::new(),
                end: started + self.run_for,
            };
            tasks.spawn(worker.lease(plan));
        }
        while tasks.join_next().await.is_some() {}
        Ok(())
    }

    /// The endpoints to choose from now: the directory's, if the client has one (it
    /// grows as members join), else its own list.
    fn endpoints_now(&self) -> Vec<String> {
        match &self.directory {
            Some(directory) => directory.endpoints(),
            None => self.endpoints.clone(),
        }
    }
}

/// What the seed chose for one lease.
#[derive(Clone, Debug)]
struct Plan {
    /// Its number: its keys are `{prefix}{n}/k{j}`.
    n: usize,
    start_after: Duration,
    ttl: i64,
    keys: usize,
    member: usize,
    /// Kept alive for this long after the grant; `None`: never.
    keep_alive_for: Option<Duration>,
    /// Revoked this long after the grant, if at all.
    revoke_after: Option<Duration>,
}

impl Plan {
    fn draw(rng: &mut SimRng, n: usize, client: &LeaseClient) -> Plan {
        let run_ms = client.run_for.as_millis() as u64;
        let (min, max) = client.ttl;
        let plan = Plan {
            n,
            // Granted in the first 70% of the run: most expire within it.
            start_after: rng.millis(0, run_ms * 7 / 10),
            ttl: min + rng.below(0..(max - min + 1).max(1) as u64) as i64,
            keys: 1 + rng.below(0..2) as usize,
            member: rng.index(client.endpoints_now().len()),
            keep_alive_for: (!rng.percent(25)).then(|| rng.millis(1_000, run_ms.max(1_001))),
            revoke_after: rng.percent(15).then(|| rng.millis(500, 4_000)),
        };
        match client.lapse {
            Some(_) => Plan {
                start_after: Duration::ZERO,
                keep_alive_for: Some(client.run_for),
                revoke_after: None,
                ..plan
            },
            None => plan,
        }
    }
}

/// One lease's task: its connections, its member, its record.
struct Worker {
    client: LeaseClient,
    rng: SimRng,
    history: History,
    /// The member the next request goes to.
    member: usize,
    /// A connection per member, dialled on first use and after an error.
    clients: Vec<Option<Client>>,
    /// Connections for finding the leader, with short deadlines of their own.
    probes: Vec<Option<Client>>,
    /// `run_for` after the client started: no keepalive after it.
    end: Duration,
}

/// An open keepalive stream; the client holds the connection.
struct Stream {
    _client: Client,
    keeper: LeaseKeeper,
    answers: LeaseKeepAliveStream,
}

impl Worker {
    async fn lease(mut self, plan: Plan) {
        tokio::time::sleep(plan.start_after).await;
        let Some((id, ttl)) = self.grant(plan.ttl).await else {
            return;
        };
        let granted = history::now();
        let keys: Vec<String> = (0..plan.keys)
            .map(|j| format!("{}{}/k{j}", self.client.prefix, plan.n))
            .collect();
        for (j, key) in keys.iter().enumerate() {
            let op = Op::PutWithLease {
                key: key.clone(),
                value: format!("{}.{}.{j}", self.client.name, plan.n),
                lease: id,
            };
            self.once(op).await;
        }
        let keep_until = plan
            .keep_alive_for
            .map_or(granted, |d| granted + d)
            .min(self.end);
        let revoke_at = plan.revoke_after.map(|d| granted + d);
        // etcd's client sends a keepalive every third of the TTL; a late renewer every
        // two thirds.
        let thirds = self.client.renew_every_thirds.clamp(1, 2);
        let every =
            Duration::from_millis(u64::try_from(ttl).unwrap_or(1).max(1) * 1000 * thirds / 3);
        let lapse = self.client.lapse.map(|lapse| {
            let from = self.end.saturating_sub(self.client.run_for) + lapse.from;
            from..from + lapse.lasting
        });
        let mut stream: Option<Stream> = None;
        let mut next_keepalive = history::now();
        let mut next_read = history::now() + self.rng.millis(500, 1_000);
        let mut alive = true;
        let mut left = keys.clone();
        let drain_end = self.end + self.client.drain_for;
        while !left.is_empty() && history::now() < drain_end {
            let now = history::now();
            if revoke_at.is_some_and(|at| alive && now >= at) {
                alive = false;
                stream = None;
                self.once(Op::LeaseRevoke { id }).await;
                continue;
            }
            let lapsed = lapse.as_ref().is_some_and(|lapse| lapse.contains(&now));
            let keeping = alive && now < keep_until && !lapsed;
            if !keeping {
                stream = None;
            }
            if keeping && now >= next_keepalive {
                next_keepalive = match self.keep_alive(id, ttl, &mut stream).await {
                    Answer::Alive => history::now() + every,
                    Answer::Gone => {
                        alive = false;
                        history::now()
                    }
                    // etcd's client backs off 25 ms (with jitter) between retries.
                    Answer::Failed => history::now() + self.rng.millis(20, 30),
                };
                continue;
            }
            if now >= next_read {
                let mut still = Vec::with_capacity(left.len());
                for key in left {
                    if self.read(&key).await != Some(false) {
                        still.push(key);
                    }
                }
                left = still;
                // Seldom while kept alive; often once not, to see the expiry early.
                next_read = history::now()
                    + if keeping {
                        self.rng.millis(800, 1_600)
                    } else {
                        self.rng.millis(200, 500)
                    };
                continue;
            }
            let mut wake = next_read;
            if keeping {
                wake = wake.min(next_keepalive).min(keep_until);
            }
            if let Some(at) = revoke_at.filter(|_| alive) {
                wake = wake.min(at);
            }
            if let Some(lapse) = lapse.as_ref().filter(|_| alive && lapsed) {
                wake = wake.min(lapse.end);
            }
            tokio::time::sleep(wake.saturating_sub(now).max(Duration::from_millis(1))).await;
        }
    }

    /// Grants a lease, failing over to other members; its id and granted TTL.
    async fn grant(&mut self, ttl: i64) -> Option<(i64, i64)> {
        for attempt in 0..self.client.attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(self.rng.millis(20, 30)).await;
            }
            match self.once(Op::LeaseGrant { ttl }).await {
                Outcome::Granted { id, ttl, .. } => return Some((id, ttl)),
                // A grant that may have happened leaves a lease nobody knows; it
                // expires on its own with no key attached. Ask again elsewhere.
                _ => self.next_member(),
            }
        }
        None
    }

    /// A linearizable read of `key`, failing over: whether it found the key, or
    /// `None` if no member answered.
    async fn read(&mut self, key: &str) -> Option<bool> {
        for attempt in 0..self.client.attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(self.rng.millis(20, 30)).await;
                self.next_member();
            }
            let op = Op::Get {
                key: key.to_owned(),
                serializable: false,
            };
            if let Outcome::Read { value, .. } = self.once(op).await {
                return Some(value.is_some());
            }
        }
        None
    }

    /// Sends `op` once to the current member (moving on after an error) and records
    /// it.
    async fn once(&mut self, op: Op) -> Outcome {
        let invoked = history::now();
        let options = self.client.options.clone();
        let budget = options.request_timeout + options.connect_timeout * 2;
        let member = self.member;
        let url = self.url(member);
        let attempt = async {
            let client = match &mut self.clients[member] {
                Some(client) => client,
                None => self.clients[member].insert(client::connect_with(&url, &options).await?),
            };
            execute(client, &op).await
        };
        let (outcome, answered_by) = match tokio::time::timeout(budget, attempt).await {
            Ok(Ok((outcome, id))) => (outcome, Some(id)),
            Ok(Err(error)) => (Outcome::Unknown(format!("{url}: {error}")), None),
            Err(_) => (Outcome::Unknown(format!("{url}: client deadline")), None),
        };
        if matches!(outcome, Outcome::Unknown(_)) {
            // Re-dial next time: the connection may be the one that hangs.
            self.clients[member] = None;
            self.next_member();
        }
        self.record(op, invoked, outcome.clone(), answered_by);
        outcome
    }

    /// The client URL of endpoint `member` (the list may have grown: a connection slot
    /// for every endpoint).
    fn url(&mut self, member: usize) -> String {
        let endpoints = self.client.endpoints_now();
        if self.clients.len() < endpoints.len() {
            self.clients.resize_with(endpoints.len(), || None);
        }
        endpoints[member % endpoints.len()].clone()
    }

    /// One keepalive on the open stream, or on a new one to the current member (whose
    /// opening sends the first keepalive); recorded with its answer.
    async fn keep_alive(&mut self, id: i64, ttl: i64, stream: &mut Option<Stream>) -> Answer {
        let invoked = history::now();
        let wait = self.client.keepalive_wait;
        let mut answered_by = None;
        let outcome =
            match stream {
                Some(open) => {
                    let exchange = async {
                        open.keeper.keep_alive().await?;
                        open.answers.message().await
                    };
                    match tokio::time::timeout(wait, exchange).await {
                        Ok(Ok(Some(answer))) => {
                            answered_by = answer.header().map(|h| h.member_id());
                            Outcome::KeptAlive { ttl: answer.ttl() }
                        }
                        Ok(Ok(None)) => Outcome::Unknown("the member ended the stream".into()),
                        Ok(Err(error)) => Outcome::Unknown(error.to_string()),
                        Err(_) => Outcome::Unknown(format!("no answer within {wait:?}")),
                    }
                }
                None => {
                    if self.client.pin_to_leader {
                        if let Some(leader) = self.leader().await {
                            self.member = leader;
                        }
                    }
                    let url = self.url(self.member);
                    let options = self.client.options.clone();
                    let open = async {
                        let mut client = client::connect_with(&url, &options).await?;
                        let (keeper, answers) = client.lease_keep_alive(id).await?;
                        Ok::<_, SimError>(Stream {
                            _client: client,
                            keeper,
                            answers,
                        })
                    };
                    match tokio::time::timeout(wait + options.connect_timeout, open).await {
                        Ok(Ok(open)) => {
                            *stream = Some(open);
                            // The client library takes the first answer (a TTL above 0,
                            // or it fails): the server answers the granted TTL.
                            Outcome::KeptAlive { ttl }
                        }
                        Ok(Err(SimError::Client(etcd_client::Error::LeaseKeepAliveError(
                            message,
                        )))) if message.contains("not found") => Outcome::KeptAlive { ttl: 0 },
                        Ok(Err(error)) => Outcome::Unknown(format!("{url}: {error}")),
                        Err(_) => Outcome::Unknown(format!("{url}: no stream within the deadline")),
                    }
                }
            };
        let answer = match outcome {
            Outcome::KeptAlive { ttl } if ttl > 0 => {
                self.client.renewals.count();
                Answer::Alive
            }
            Outcome::KeptAlive { .. } => Answer::Gone,
            _ => {
                *stream = None;
                self.next_member();
                Answer::Failed
            }
        };
        self.record(Op::LeaseKeepAlive { id }, invoked, outcome, answered_by);
        answer
    }

    /// The endpoint of the leader that the newest term's Status answer names, if any
    /// member answers with one.
    async fn leader(&mut self) -> Option<usize> {
        let urls = self.client.endpoints_now();
        let options = ClientOptions {
            request_timeout: Duration::from_millis(500),
            connect_timeout: Duration::from_millis(300),
            ..self.client.options.clone()
        };
        let answers = leaders::ask_all(&mut self.probes, &urls, &options).await;
        let (leader, _) = leaders::newest_leader(&answers)?;
        answers
            .iter()
            .position(|answer| matches!(answer, Some((id, _, _)) if *id == leader))
    }

    fn next_member(&mut self) {
        let members = self.client.endpoints_now().len();
        self.member = (self.member + 1 + self.rng.index(members.saturating_sub(1))) % members;
    }

    fn record(&self, op: Op, invoked: Duration, outcome: Outcome, member: Option<u64>) {
        self.history.record(Operation {
            client: self.client.name.clone(),
            op,
            invoked,
            completed: history::now(),
            outcome,
            member,
        });
    }
}

/// What a keepalive learnt.
enum Answer {
    /// Answered with a TTL: the lease lives.
    Alive,
    /// Answered with TTL 0: the lease is gone.
    Gone,
    /// No answer.
    Failed,
}
