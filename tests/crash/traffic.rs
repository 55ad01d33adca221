//! Client traffic that runs while members lose power, and the record of what each
//! client was told.
//!
//! Writers put keys no one else writes (each key once, so that a key's value and
//! mod_revision name the one write that made it) and read their earlier keys back
//! linearizably; a lease client grants long leases and puts keys on them; a watcher
//! follows every key. Every answer goes into the simulation's [`History`] (the same
//! record the simulation's checkers judge), with times from one clock for the whole
//! test, so the history of several power losses is one history. A request that gets
//! no answer within [`OP_TIMEOUT`] is recorded with an unknown outcome: it may or may
//! not have taken effect.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, EventType, GetOptions, PutOptions, WatchOptions};
use quantykube_simulation::history::{History, Op, Operation, Outcome};
use tokio::task::JoinHandle;

/// How long a client waits for one answer before it records the outcome as unknown.
pub const OP_TIMEOUT: Duration = Duration::from_secs(3);

/// The TTL of the leases the lease client grants: far longer than any test, so that a
/// lease is never expired when the checks run.
pub const LEASE_TTL: i64 = 3600;

/// A put event one watcher received.
#[derive(Clone, Debug)]
pub struct Watched {
    pub key: String,
    pub value: String,
    pub mod_revision: i64,
}

/// Everything clients were told, across every round of traffic.
#[derive(Clone)]
pub struct Record {
    pub history: History,
    pub watched: Arc<Mutex<Vec<Watched>>>,
    /// Keys whose put was acknowledged, in any round: what writers read back.
    acked_keys: Arc<Mutex<Vec<String>>>,
    clock: Instant,
}

impl Record {
    pub fn new() -> Self {
        Record {
            history: History::new(),
            watched: Arc::new(Mutex::new(Vec::new())),
            acked_keys: Arc::new(Mutex::new(Vec::new())),
            clock: Instant::now(),
        }
    }

    /// The test's clock, as the history's times read it.
    pub fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    /// An acknowledged key, picked by `n`.
    fn acked_key(&self, n: u64) -> Option<String> {
        let keys = self.acked_keys.lock().unwrap_or_else(|p| p.into_inner());
        (!keys.is_empty()).then(|| keys[(n as usize).wrapping_mul(7919) % keys.len()].clone())
    }
}

/// One round of traffic: running clients, stopped by [`Traffic::stop`].
pub struct Traffic {
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    tasks: Vec<JoinHandle<()>>,
}

impl Traffic {
    /// Starts `writers` writers (spread over `endpoints`), a lease client and a
    /// watcher. `round` keeps this round's keys apart from other rounds'.
    pub fn start(record: &Record, endpoints: &[String], round: usize, writers: usize) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for w in 0..writers {
            let client = Clients {
                record: record.clone(),
                endpoint: endpoints[w % endpoints.len()].clone(),
                name: format!("r{round}w{w}"),
                stop: stop.clone(),
                acked: acked.clone(),
            };
            tasks.push(tokio::spawn(client.write_and_read()));
        }
        let leases = Clients {
            record: record.clone(),
            endpoint: endpoints[writers % endpoints.len()].clone(),
            name: format!("r{round}l"),
            stop: stop.clone(),
            acked: acked.clone(),
        };
        tasks.push(tokio::spawn(leases.grant_and_attach()));
        let watcher = Clients {
            record: record.clone(),
            endpoint: endpoints[(writers + 1) % endpoints.len()].clone(),
            name: format!("r{round}watch"),
            stop: stop.clone(),
            acked: acked.clone(),
        };
        tasks.push(tokio::spawn(watcher.watch_everything()));
        Traffic { stop, acked, tasks }
    }

    /// Writes acknowledged in this round so far.
    pub fn acked(&self) -> usize {
        self.acked.load(Ordering::SeqCst)
    }

    /// Waits until this round has `writes` acknowledged writes (bounded by `limit`, a
    /// generous bound for a loaded machine).
    pub async fn wait_for_writes(&self, writes: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.acked() < writes {
            assert!(
                Instant::now() < deadline,
                "only {} of {writes} writes acknowledged within {limit:?}",
                self.acked()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops every client; requests in flight end as unknown.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

struct Clients {
    record: Record,
    endpoint: String,
    name: String,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
}

impl Clients {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    async fn connect(&self) -> Option<Client> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(OP_TIMEOUT);
        while !self.stopped() {
            if let Ok(client) =
                Client::connect([self.endpoint.as_str()], Some(options.clone())).await
            {
                return Some(client);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    fn record(&self, op: Op, invoked: Duration, outcome: Outcome, member: Option<u64>) {
        if matches!(outcome, Outcome::Written { .. }) {
            self.acked.fetch_add(1, Ordering::SeqCst);
            if let Op::Put { key, .. } | Op::PutWithLease { key, .. } = &op {
                self.record
                    .acked_keys
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(key.clone());
            }
        }
        self.record.history.record(Operation {
            client: self.name.clone(),
            op,
            invoked,
            completed: self.record.now(),
            outcome,
            member,
        });
    }

    async fn write_and_read(self) {
        let Some(mut client) = self.connect().await else {
            return;
        };
        let mut n = 0u64;
        while !self.stopped() {
            n += 1;
            // Every fourth request reads back a key acknowledged earlier, in this
            // round or before a power loss.
            let failed = match self.record.acked_key(n).filter(|_| n % 4 == 0) {
                Some(key) => self.get(&mut client, key).await,
                None => {
                    let key = format!("{}/{n}", self.name);
                    let value = format!("{}.{n}", self.name);
                    self.put(&mut client, &key, &value, None).await
                }
            };
            if failed {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    /// A Put (on `lease`, if any); true if it got no answer.
    async fn put(&self, client: &mut Client, key: &str, value: &str, lease: Option<i64>) -> bool {
        let op = match lease {
            Some(lease) => Op::PutWithLease {
                key: key.into(),
                value: value.into(),
                lease,
            },
            None => Op::Put {
                key: key.into(),
                value: value.into(),
            },
        };
        let options = lease.map(|id| PutOptions::new().with_lease(id));
        let invoked = self.record.now();
        let answer = tokio::time::timeout(OP_TIMEOUT, client.put(key, value, options)).await;
        self.settle(op, invoked, answer, |put| {
            let (revision, member) = header(put.header());
            (Outcome::Written { revision }, member)
        })
        .is_none()
    }

    /// Records `op`'s answer, which `settled` turns into its outcome and the member that
    /// gave it; an error, or no answer within [`OP_TIMEOUT`], is an unknown outcome
    /// (`None`).
    fn settle<T>(
        &self,
        op: Op,
        invoked: Duration,
        answer: Result<Result<T, etcd_client::Error>, tokio::time::error::Elapsed>,
        settled: impl FnOnce(&T) -> (Outcome, u64),
    ) -> Option<T> {
        let (outcome, member, reply) = match answer {
            Ok(Ok(reply)) => {
                let (outcome, member) = settled(&reply);
                (outcome, Some(member), Some(reply))
            }
            Ok(Err(e)) => (Outcome::Unknown(e.to_string()), None, None),
            Err(_) => (Outcome::Unknown("timeout".into()), None, None),
        };
        self.record(op, invoked, outcome, member);
        reply
    }

    /// A linearizable Get; true if it got no answer.
    async fn get(&self, client: &mut Client, key: String) -> bool {
        let invoked = self.record.now();
        let answer = tokio::time::timeout(OP_TIMEOUT, client.get(key.as_str(), None)).await;
        let op = Op::Get {
            key,
            serializable: false,
        };
        self.settle(op, invoked, answer, |got| {
            let (revision, member) = header(got.header());
            let value = got.kvs().first().map(|kv| {
                (
                    String::from_utf8_lossy(kv.value()).into_owned(),
                    kv.mod_revision(),
                )
            });
            (Outcome::Read { revision, value }, member)
        })
        .is_none()
    }

    /// Grants a long lease and puts keys on it, again and again.
    async fn grant_and_attach(self) {
        let Some(mut client) = self.connect().await else {
            return;
        };
        let mut n = 0u64;
        while !self.stopped() {
            n += 1;
            let invoked = self.record.now();
            let answer =
                tokio::time::timeout(OP_TIMEOUT, client.lease_grant(LEASE_TTL, None)).await;
            let op = Op::LeaseGrant { ttl: LEASE_TTL };
            let granted = self.settle(op, invoked, answer, |granted| {
                let (revision, member) = header(granted.header());
                let outcome = Outcome::Granted {
                    id: granted.id(),
                    ttl: granted.ttl(),
                    revision,
                };
                (outcome, member)
            });
            let Some(id) = granted.map(|g| g.id()) else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            for k in 0..3 {
                if self.stopped() {
                    break;
                }
                let key = format!("{}/{n}/{k}", self.name);
                let value = format!("{}.{n}.{k}", self.name);
                if self.put(&mut client, &key, &value, Some(id)).await {
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Watches every key from now on, recording each put it is told of, until the
    /// stream ends (the member lost power) or the round stops.
    async fn watch_everything(self) {
        let Some(mut client) = self.connect().await else {
            return;
        };
        let Ok(mut stream) = client
            .watch("r", Some(WatchOptions::new().with_prefix()))
            .await
        else {
            return;
        };
        while !self.stopped() {
            let message = tokio::time::timeout(Duration::from_millis(200), stream.message()).await;
            let response = match message {
                Err(_) => continue,
                Ok(Ok(Some(response))) => response,
                Ok(_) => return,
            };
            let mut watched = self
                .record
                .watched
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for event in response.events() {
                if event.event_type() != EventType::Put {
                    continue;
                }
                if let Some(kv) = event.kv() {
                    watched.push(Watched {
                        key: String::from_utf8_lossy(kv.key()).into_owned(),
                        value: String::from_utf8_lossy(kv.value()).into_owned(),
                        mod_revision: kv.mod_revision(),
                    });
                }
            }
        }
    }
}

/// The revision and member id of an answer's header.
fn header(header: Option<&etcd_client::ResponseHeader>) -> (i64, u64) {
    header.map_or((0, 0), |h| (h.revision(), h.member_id()))
}

/// The traffic's keys, for reading them all back.
pub fn all_keys() -> (&'static str, GetOptions) {
    ("r", GetOptions::new().with_prefix())
}
