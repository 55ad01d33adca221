//! The Lock service (v3lockpb, issue 18): keys `name/<lease hex>` attached to the
//! caller's lease, held by the oldest key, waiters granted in create-revision order as
//! soon as the key ahead is deleted (Unlock, a lease's expiry or revoke), a waiter that
//! gives up removing its key, etcd's errors (code Unknown: etcd's lock server returns
//! its client's errors as plain Go errors), three members, auth, and etcdctl 3.4's
//! `lock`, which locks on the client side with the same keys.
//!
//! Written against etcd 3.4.23 first (`QK_TEST_TARGET=etcd`). Where QuantyKube follows
//! etcd 3.5+ or fixes what etcd leaves behind, the test says so and checks each side as
//! it behaves.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, LeaseTimeToLiveOptions, LockOptions,
    Permission, Txn, TxnOp, WatchOptions, WatchStream,
};
use tonic::Code;

use crate::auth_support::{connect_as, enable_auth, root_client};
use crate::harness::*;
use crate::support::connect::Connect;

/// How long a Lock may wait in these tests before the client gives up.
const LOCK_WAIT: Duration = Duration::from_secs(60);
/// How long after the event that frees a lock (an Unlock answered, a lease's TTL
/// over) the next waiter must hold it: expiry is timed every 500 ms by etcd 3.4 and
/// every 250 ms by QuantyKube, and a waiter then needs a read and a watch event.
pub const HANDOVER_BOUND: Duration = Duration::from_secs(3);
/// A TTL short enough to wait for, and above both servers' minimum.
pub const SHORT_TTL: i64 = 3;

/// A client of `endpoints` whose calls may wait [`LOCK_WAIT`].
pub async fn waiting_client(endpoints: &[String]) -> Client {
    Connect::new().rpc_timeout(LOCK_WAIT).to(endpoints).await
}

pub fn with_lease(lease: i64) -> Option<LockOptions> {
    Some(LockOptions::new().with_lease(lease))
}

/// The key etcd gives a holder under `lease`: the lease id in lowercase hex.
pub fn holder_key(name: &str, lease: i64) -> String {
    format!("{name}/{lease:x}")
}

/// A watch on every key under `prefix`, from the revision after `after`.
pub struct PrefixWatch {
    stream: WatchStream,
    pending: Vec<(EventType, String)>,
}

impl PrefixWatch {
    pub async fn open(client: &mut Client, prefix: &str, after: i64) -> PrefixWatch {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(after + 1);
        let stream = client.watch(prefix, Some(options)).await.expect("watch");
        PrefixWatch {
            stream,
            pending: Vec::new(),
        }
    }

    /// The key of the next put (within `within`), skipping other events.
    pub async fn next_put(&mut self, within: Duration) -> String {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(at) = self.pending.iter().position(|(k, _)| *k == EventType::Put) {
                let (_, key) = self.pending.remove(at);
                self.pending.drain(..at);
                return key;
            }
            self.receive(deadline, "a put").await;
        }
    }

    async fn receive(&mut self, deadline: tokio::time::Instant, what: &str) {
        let message = tokio::time::timeout_at(deadline, self.stream.message())
            .await
            .unwrap_or_else(|_| panic!("no {what} in time"))
            .expect("watch stream")
            .expect("watch stream open");
        for event in message.events() {
            let kv = event.kv().expect("event kv");
            let name = String::from_utf8_lossy(kv.key()).into_owned();
            self.pending.push((event.event_type(), name));
        }
    }

    /// Waits (at most `within`) for `kind` on `key`, skipping other events.
    pub async fn wait_for(&mut self, kind: EventType, key: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(at) = self
                .pending
                .iter()
                .position(|(k, key_)| *k == kind && key_ == key)
            {
                self.pending.drain(..=at);
                return;
            }
            self.receive(deadline, &format!("{kind:?} of {key} within {within:?}"))
                .await;
        }
    }
}

/// The keys under `prefix`.
pub async fn keys_under(client: &mut Client, prefix: &str) -> Vec<String> {
    let got = client
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .expect("get prefix");
    got.kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).into_owned())
        .collect()
}

#[tokio::test]
async fn lock_and_unlock_hold_a_key_of_the_lease() {
    let cluster = Cluster::start(1).await;
    let mut client = waiting_client(&cluster.endpoints()).await;
    let lease = client.lease_grant(60, None).await.expect("grant").id();

    let locked = client
        .lock("the-lock", with_lease(lease))
        .await
        .expect("lock");
    let key = holder_key("the-lock", lease);
    assert_eq!(locked.key(), key.as_bytes());
    let revision = header_rev(locked.header());
    let got = client.get(key.as_str(), None).await.expect("get key");
    let kv = &got.kvs()[0];
    assert_eq!(
        (kv.create_revision(), kv.lease(), kv.value()),
        (revision, lease, &b""[..]),
        "the key is put in the revision Lock answers, empty, with the lease"
    );

    // Locking again with the same lease is the same acquisition: answered at once, with
    // the same key and no new revision.
    let again = client
        .lock("the-lock", with_lease(lease))
        .await
        .expect("lock again");
    assert_eq!(again.key(), key.as_bytes());
    assert_eq!(header_rev(again.header()), revision);

    // Unlock deletes the key, and answers the same for a key that is gone.
    let unlocked = client.unlock(key.as_str()).await.expect("unlock");
    assert_eq!(header_rev(unlocked.header()), revision + 1);
    assert!(keys_under(&mut client, "the-lock/").await.is_empty());
    let nothing = client.unlock(key.as_str()).await.expect("unlock again");
    assert_eq!(header_rev(nothing.header()), revision + 1);

    // Without a lease, the server grants one of 60 seconds that nobody keeps alive.
    let unleased = client.lock("the-lock", None).await.expect("lock, no lease");
    let key = String::from_utf8(unleased.key().to_vec()).expect("utf-8 key");
    let hex = key.strip_prefix("the-lock/").expect("key under the name");
    let granted = i64::from_str_radix(hex, 16).expect("hex lease id");
    let ttl = client
        .lease_time_to_live(granted, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .expect("time to live");
    assert_eq!(ttl.granted_ttl(), 60);
    assert_eq!(ttl.keys(), [key.as_bytes().to_vec()]);
}

#[tokio::test]
async fn lock_errors_are_etcds() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    // A lease that does not exist fails the put, and nothing is left.
    assert_grpc_error(
        client.lock("l", with_lease(0x1234)).await,
        Code::Unknown,
        "etcdserver: requested lease not found",
    );
    assert!(keys_under(&mut client, "l/").await.is_empty());
    // Unlock's delete is checked as any DeleteRange is.
    assert_grpc_error(
        client.unlock("").await,
        Code::Unknown,
        "etcdserver: key is not provided",
    );
}

/// Twenty clients, spread over three members, contend for one lock: at most one holds
/// it at any time (each holder creates a marker only if none exists, and removes only
/// its own), and they hold it in the order of their keys' create revisions.
#[tokio::test]
async fn contending_clients_hold_the_lock_one_at_a_time_in_create_revision_order() {
    const CLIENTS: usize = 20;
    let cluster = Cluster::start(3).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    // Every client connects and gets its lease first (a failure fails the test here),
    // then all ask for the lock at once.
    let (go, ready) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for i in 0..CLIENTS {
        let mut client = waiting_client(&[cluster.endpoint(i % 3)]).await;
        let lease = client.lease_grant(60, None).await.expect("grant").id();
        let order = order.clone();
        let mut ready = ready.clone();
        tasks.push(tokio::spawn(async move {
            ready.wait_for(|go| *go).await.expect("start signal");
            let locked = client
                .lock("contended", with_lease(lease))
                .await
                .expect("lock");
            let me = format!("holder-{i}");
            let enter = Txn::new()
                .when([Compare::version("marker", CompareOp::Equal, 0)])
                .and_then([TxnOp::put("marker", me.as_str(), None)]);
            assert!(
                client.txn(enter).await.expect("enter").succeeded(),
                "{me} holds the lock while another holder's marker exists"
            );
            let mine = client.get(locked.key(), None).await.expect("own key");
            let created = mine.kvs()[0].create_revision();
            order.lock().expect("order").push(created);
            let leave = Txn::new()
                .when([Compare::value("marker", CompareOp::Equal, me.as_str())])
                .and_then([TxnOp::delete("marker", None)]);
            assert!(
                client.txn(leave).await.expect("leave").succeeded(),
                "{me}'s marker was replaced while it held the lock"
            );
            client.unlock(locked.key()).await.expect("unlock");
        }));
    }
    go.send(true).expect("contenders wait");
    for task in tasks {
        // Each lock waits at most LOCK_WAIT; this bounds a test that would hang.
        tokio::time::timeout(LOCK_WAIT * 2, task)
            .await
            .expect("contenders finish")
            .expect("contender");
    }
    let order = order.lock().expect("order").clone();
    assert_eq!(order.len(), CLIENTS);
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "holders in create-revision order: {order:?}"
    );
    let mut client = cluster.client(0).await;
    assert!(keys_under(&mut client, "contended/").await.is_empty());
}

/// A holder whose lease expires loses the lock; the next waiter holds it within the
/// TTL and a bound, and only once the holder's key is gone.
#[tokio::test]
async fn an_expired_holder_hands_the_lock_to_the_next_waiter() {
    let cluster = Cluster::start(1).await;
    let mut client = waiting_client(&cluster.endpoints()).await;
    let granted_at = Instant::now();
    let short = client
        .lease_grant(SHORT_TTL, None)
        .await
        .expect("grant")
        .id();
    let long = client.lease_grant(60, None).await.expect("grant").id();
    client
        .lock("expiring", with_lease(short))
        .await
        .expect("holder locks");
    let locked = client
        .lock("expiring", with_lease(long))
        .await
        .expect("waiter locks");
    let waited = granted_at.elapsed();
    assert_eq!(locked.key(), holder_key("expiring", long).as_bytes());
    assert_eq!(
        keys_under(&mut client, "expiring/").await,
        [holder_key("expiring", long)],
        "the holder's key went with its lease"
    );
    let bound = Duration::from_secs(SHORT_TTL as u64) + HANDOVER_BOUND;
    assert!(waited <= bound, "waited {waited:?}, more than {bound:?}");
}

/// A waiter whose client gives up has its key removed (etcd's Mutex.Lock unlocks when
/// its wait fails), so that it blocks nobody after it.
#[tokio::test]
async fn a_cancelled_waiter_removes_its_key() {
    let cluster = Cluster::start(1).await;
    let mut client = waiting_client(&cluster.endpoints()).await;
    let holder = client.lease_grant(60, None).await.expect("grant").id();
    let waiter = client.lease_grant(60, None).await.expect("grant").id();
    let held = client
        .lock("cancelled", with_lease(holder))
        .await
        .expect("holder locks");
    let mut watch = PrefixWatch::open(&mut client, "cancelled/", header_rev(held.header())).await;
    let waiter_key = holder_key("cancelled", waiter);
    let mut waiting = waiting_client(&cluster.endpoints()).await;
    let wait = tokio::spawn(async move { waiting.lock("cancelled", with_lease(waiter)).await });
    watch
        .wait_for(EventType::Put, &waiter_key, RPC_TIMEOUT)
        .await;
    // The client goes away mid-wait (the call's stream is reset).
    wait.abort();
    watch
        .wait_for(EventType::Delete, &waiter_key, RPC_TIMEOUT)
        .await;

    client.unlock(held.key()).await.expect("unlock");
    let next = client.lease_grant(60, None).await.expect("grant").id();
    let locked = tokio::time::timeout(RPC_TIMEOUT, client.lock("cancelled", with_lease(next)))
        .await
        .expect("the lock is free: nobody waits ahead")
        .expect("lock");
    assert_eq!(locked.key(), holder_key("cancelled", next).as_bytes());
}

/// A waiter whose own lease expires while it waits: etcd 3.5+ (and QuantyKube) checks
/// its key once its turn comes and answers "mutex: session is expired"; etcd 3.4
/// answered success with the key its lease had already deleted.
#[tokio::test]
async fn a_waiter_whose_lease_expired_is_told_its_session_expired() {
    let cluster = Cluster::start(1).await;
    let mut client = waiting_client(&cluster.endpoints()).await;
    let holder = client.lease_grant(60, None).await.expect("grant").id();
    let short = client
        .lease_grant(SHORT_TTL, None)
        .await
        .expect("grant")
        .id();
    let held = client
        .lock("session", with_lease(holder))
        .await
        .expect("holder locks");
    let mut watch = PrefixWatch::open(&mut client, "session/", header_rev(held.header())).await;
    let waiter_key = holder_key("session", short);
    let mut waiting = waiting_client(&cluster.endpoints()).await;
    let wait = tokio::spawn(async move { waiting.lock("session", with_lease(short)).await });
    watch
        .wait_for(EventType::Put, &waiter_key, RPC_TIMEOUT)
        .await;
    let ttl = Duration::from_secs(SHORT_TTL as u64);
    watch
        .wait_for(EventType::Delete, &waiter_key, ttl + HANDOVER_BOUND)
        .await;
    client.unlock(held.key()).await.expect("unlock");
    let answer = tokio::time::timeout(RPC_TIMEOUT, wait)
        .await
        .expect("the waiter is answered once its turn comes")
        .expect("waiter task");
    match cluster.target() {
        Target::Etcd => {
            let locked = answer.expect("etcd 3.4 answers success");
            assert_eq!(locked.key(), waiter_key.as_bytes());
        }
        Target::Quantykube => {
            assert_grpc_error(answer, Code::Unknown, "mutex: session is expired");
        }
    }
    assert!(keys_under(&mut client, "session/").await.is_empty());
}

/// Over three members: the lock is taken through one member while waiters wait on the
/// others; each Unlock or lease revoke, through any member, hands it to the next
/// waiter in line at once.
#[tokio::test]
async fn three_members_hand_the_lock_over_between_members() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader_index().await;
    let [f1, f2] = [(leader + 1) % 3, (leader + 2) % 3];
    let mut on_f1 = waiting_client(&[cluster.endpoint(f1)]).await;
    let leases: Vec<i64> = {
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(on_f1.lease_grant(60, None).await.expect("grant").id());
        }
        ids
    };
    let held = on_f1
        .lock("spread", with_lease(leases[0]))
        .await
        .expect("lock through a follower");
    let mut watch = PrefixWatch::open(&mut on_f1, "spread/", header_rev(held.header())).await;
    // Two waiters, in this order: on the leader, then on the other follower.
    let mut waiters = Vec::new();
    for (member, lease) in [(leader, leases[1]), (f2, leases[2])] {
        let mut client = waiting_client(&[cluster.endpoint(member)]).await;
        waiters.push(tokio::spawn(async move {
            let locked = client.lock("spread", with_lease(lease)).await;
            (locked, Instant::now())
        }));
        watch
            .wait_for(EventType::Put, &holder_key("spread", lease), RPC_TIMEOUT)
            .await;
    }
    let mut waiters = waiters.into_iter();
    let (first, second) = (
        waiters.next().expect("first"),
        waiters.next().expect("second"),
    );

    on_f1.unlock(held.key()).await.expect("unlock");
    let unlocked_at = Instant::now();
    let (locked, at) = first.await.expect("waiter on the leader");
    let locked = locked.expect("lock on the leader");
    assert_eq!(locked.key(), holder_key("spread", leases[1]).as_bytes());
    assert!(at - unlocked_at <= HANDOVER_BOUND, "{:?}", at - unlocked_at);
    assert!(
        !second.is_finished(),
        "the second waiter waits for the first"
    );

    // The holder's lease revoked through the other follower frees it as well.
    let mut on_f2 = cluster.client(f2).await;
    on_f2.lease_revoke(leases[1]).await.expect("revoke");
    let revoked_at = Instant::now();
    let (locked, at) = second.await.expect("waiter on the follower");
    let locked = locked.expect("lock on the follower");
    assert_eq!(locked.key(), holder_key("spread", leases[2]).as_bytes());
    assert!(at - revoked_at <= HANDOVER_BOUND, "{:?}", at - revoked_at);
}

/// With auth on, every read and write of a lock is the caller's: a user without write
/// permission on the lock's prefix is refused with etcd's error, as is a caller with no
/// token. A waiter that gives up has its key removed by its own delete here; etcd 3.4
/// removes it without the caller's credentials, which auth refuses, so the key stays
/// until its lease ends.
#[tokio::test]
async fn with_auth_the_lock_acts_as_its_caller() {
    let cluster = Cluster::start(1).await;
    enable_auth(&cluster).await;
    let mut root = root_client(&cluster, 0).await;
    let mut auth = root.auth_client();
    auth.role_add("locker").await.expect("role add");
    for perm in [
        Permission::read_write("allowed/").with_prefix(),
        Permission::read("ro/").with_prefix(),
    ] {
        auth.role_grant_permission("locker", perm)
            .await
            .expect("grant permission");
    }
    auth.user_add("alice", "alice-pw", None)
        .await
        .expect("user add");
    auth.user_grant_role("alice", "locker")
        .await
        .expect("grant role");
    let mut alice = connect_as(&cluster, 0, "alice", "alice-pw").await;
    let lease = alice.lease_grant(60, None).await.expect("grant").id();

    for name in ["denied", "ro"] {
        assert_grpc_error(
            alice.lock(name, with_lease(lease)).await,
            Code::Unknown,
            "etcdserver: permission denied",
        );
    }
    assert_grpc_error(
        alice.unlock("denied/1").await,
        Code::Unknown,
        "etcdserver: permission denied",
    );
    let mut anonymous = cluster.client(0).await;
    assert_grpc_error(
        anonymous.lock("allowed", with_lease(lease)).await,
        Code::Unknown,
        "etcdserver: user name is empty",
    );

    let held = alice
        .lock("allowed", with_lease(lease))
        .await
        .expect("lock where alice may write");
    let waiter = alice.lease_grant(60, None).await.expect("grant").id();
    let waiter_key = holder_key("allowed", waiter);
    let mut watch = PrefixWatch::open(&mut root, "allowed/", header_rev(held.header())).await;
    let endpoints = cluster.endpoints();
    let wait = tokio::spawn(async move {
        let mut waiting = connect_as_waiting(&endpoints, "alice", "alice-pw").await;
        waiting.lock("allowed", with_lease(waiter)).await
    });
    watch
        .wait_for(EventType::Put, &waiter_key, RPC_TIMEOUT)
        .await;
    wait.abort();
    if cluster.target() == Target::Quantykube {
        watch
            .wait_for(EventType::Delete, &waiter_key, RPC_TIMEOUT)
            .await;
    }
    alice.unlock(held.key()).await.expect("unlock");
    let next = alice.lease_grant(60, None).await.expect("grant").id();
    let locked = tokio::time::timeout(
        Duration::from_secs(2),
        alice.lock("allowed", with_lease(next)),
    )
    .await;
    match cluster.target() {
        Target::Quantykube => {
            let locked = locked.expect("nobody waits ahead").expect("lock");
            assert_eq!(locked.key(), holder_key("allowed", next).as_bytes());
        }
        Target::Etcd => {
            assert!(
                locked.is_err(),
                "etcd 3.4: the abandoned key is still ahead"
            );
            assert!(keys_under(&mut root, "allowed/")
                .await
                .contains(&waiter_key));
        }
    }
}

/// An etcd-client logged in as `name` whose calls may wait [`LOCK_WAIT`].
async fn connect_as_waiting(endpoints: &[String], name: &str, password: &str) -> Client {
    Connect::new()
        .rpc_timeout(LOCK_WAIT)
        .user(name, password)
        .try_to(endpoints)
        .await
        .unwrap_or_else(|e| panic!("log in as {name}: {e}"))
}

/// etcdctl 3.4's `lock` locks on the client side (its own Mutex) with the same keys, so
/// it excludes and is excluded by the Lock service: `etcdctl lock name` holds until it
/// is signalled; `etcdctl lock name -- cmd` runs `cmd` once it holds, with the key in
/// `ETCD_LOCK_KEY`; a Lock RPC waits behind both.
#[tokio::test]
async fn etcdctl_lock_excludes_and_is_excluded_by_the_lock_service() {
    let cluster = Cluster::start(1).await;
    let mut client = waiting_client(&cluster.endpoints()).await;
    let mut holder = etcdctl_process(&cluster, &["lock", "shared"]);
    // etcdctl prints the key and its (empty) value once it holds the lock.
    let held_key = holder.line().await;
    assert!(held_key.starts_with("shared/"), "{held_key}");
    let start = client
        .get("shared/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    let mut watch = PrefixWatch::open(&mut client, "shared/", header_rev(start.header())).await;

    // A Lock RPC and an etcdctl command wait behind the holder.
    let lease = client.lease_grant(60, None).await.expect("grant").id();
    let mut rpc_client = waiting_client(&cluster.endpoints()).await;
    let rpc_wait = tokio::spawn(async move { rpc_client.lock("shared", with_lease(lease)).await });
    watch
        .wait_for(EventType::Put, &holder_key("shared", lease), RPC_TIMEOUT)
        .await;
    let mut command = etcdctl_process(
        &cluster,
        &[
            "lock",
            "shared",
            "--",
            "sh",
            "-c",
            "echo \"ran with $ETCD_LOCK_KEY\"",
        ],
    );

    // The holder lets go when signalled; the RPC, first in line, holds next.
    holder.terminate();
    let locked = tokio::time::timeout(RPC_TIMEOUT, rpc_wait)
        .await
        .expect("the Lock RPC holds once etcdctl let go")
        .expect("rpc task")
        .expect("lock");
    watch
        .wait_for(EventType::Delete, &held_key, RPC_TIMEOUT)
        .await;
    assert!(
        !command.has_exited(),
        "etcdctl's command waits behind the Lock RPC"
    );
    client.unlock(locked.key()).await.expect("unlock");
    let ran = command.line().await;
    let ran_key = ran.strip_prefix("ran with ").expect("the command's output");
    assert!(ran_key.starts_with("shared/"), "{ran}");
    assert!(command.wait_success().await, "etcdctl lock -- cmd succeeds");
    watch
        .wait_for(EventType::Delete, ran_key, RPC_TIMEOUT)
        .await;
}

/// A running etcdctl whose stdout is read line by line.
pub struct EtcdctlProcess {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
}

/// Starts etcdctl (API v3) on every member of `cluster` with `args`.
pub fn etcdctl_process(cluster: &Cluster, args: &[&str]) -> EtcdctlProcess {
    let mut child = tokio::process::Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", cluster.endpoints().join(",")))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn etcdctl");
    let stdout = child.stdout.take().expect("etcdctl stdout");
    EtcdctlProcess {
        child,
        lines: tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout)),
    }
}

impl EtcdctlProcess {
    /// The next line etcdctl prints (within [`ETCDCTL_TIMEOUT`]).
    pub async fn line(&mut self) -> String {
        tokio::time::timeout(ETCDCTL_TIMEOUT, self.lines.next_line())
            .await
            .expect("etcdctl prints in time")
            .expect("read etcdctl output")
            .expect("etcdctl still prints")
    }

    /// SIGTERM, which etcdctl's lock and elect handle by unlocking or resigning.
    pub fn terminate(&mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) with a pid of our own child and a valid signal.
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
        }
    }

    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub async fn wait_success(&mut self) -> bool {
        tokio::time::timeout(ETCDCTL_TIMEOUT, self.child.wait())
            .await
            .expect("etcdctl exits in time")
            .expect("wait for etcdctl")
            .success()
    }
}
