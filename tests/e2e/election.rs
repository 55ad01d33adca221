//! The Election service (v3electionpb, issue 18): Campaign, Proclaim, Leader, Observe
//! and Resign over keys `name/<lease hex>` attached to the campaigner's lease, the
//! oldest leading; campaigners waiting in create-revision order, a leader's lease
//! expiring under it, Observe streaming each leader's proclamations, etcd's errors
//! (code Unknown: etcd's election server returns plain Go errors), three members,
//! auth, and etcdctl 3.4's `elect`, which campaigns on the client side with the same
//! keys.
//!
//! Written against etcd 3.4.23 first (`QK_TEST_TARGET=etcd`).

use std::time::{Duration, Instant};

use etcd_client::{
    EventType, LeaderKey, ObserveStream, Permission, ProclaimOptions, ResignOptions,
};
use tonic::Code;

use crate::auth_support::{connect_as, enable_auth, root_client};
use crate::harness::*;
use crate::lock::{
    etcdctl_process, holder_key, keys_under, waiting_client, PrefixWatch, HANDOVER_BOUND, SHORT_TTL,
};

fn proclaiming(leader: &LeaderKey) -> Option<ProclaimOptions> {
    Some(ProclaimOptions::new().with_leader(leader.clone()))
}

fn resigning(leader: &LeaderKey) -> Option<ResignOptions> {
    Some(ResignOptions::new().with_leader(leader.clone()))
}

/// The next proclamation an observer gets: the leader's key and value.
async fn next_proclamation(observer: &mut ObserveStream) -> (String, String, i64) {
    let message = tokio::time::timeout(RPC_TIMEOUT, observer.message())
        .await
        .expect("a proclamation in time")
        .expect("observe stream")
        .expect("observe stream open");
    let kv = message.kv().expect("observe kv");
    (
        String::from_utf8_lossy(kv.key()).into_owned(),
        String::from_utf8_lossy(kv.value()).into_owned(),
        header_rev(message.header()),
    )
}

#[tokio::test]
async fn campaign_proclaim_leader_and_resign() {
    let cluster = Cluster::start(1).await;
    let mut client = waiting_client(&cluster.endpoints()).await;
    let lease = client.lease_grant(60, None).await.expect("grant").id();

    let won = client.campaign("el", "v1", lease).await.expect("campaign");
    let revision = header_rev(won.header());
    let leader = won.leader().expect("leadership").clone();
    assert_eq!(leader.name(), b"el");
    assert_eq!(leader.key(), holder_key("el", lease).as_bytes());
    assert_eq!((leader.rev(), leader.lease()), (revision, lease));

    let current = client.leader("el").await.expect("leader");
    let kv = current.kv().expect("leader kv");
    assert_eq!(
        (kv.key(), kv.value(), kv.create_revision(), kv.lease()),
        (leader.key(), &b"v1"[..], revision, lease)
    );
    assert_eq!(header_rev(current.header()), revision);

    let proclaimed = client
        .proclaim("v2", proclaiming(&leader))
        .await
        .expect("proclaim");
    assert_eq!(header_rev(proclaimed.header()), revision + 1);
    let current = client.leader("el").await.expect("leader");
    assert_eq!(current.kv().expect("kv").value(), b"v2");

    // A leadership of another revision cannot proclaim.
    let stale = leader.clone().with_rev(revision - 1);
    assert_grpc_error(
        client.proclaim("v3", proclaiming(&stale)).await,
        Code::Unknown,
        "election: not leader",
    );

    // Campaigning again with the same lease is the same campaign: it leads at once and
    // proclaims the new value; its header is its first transaction's.
    let again = client
        .campaign("el", "v3", lease)
        .await
        .expect("campaign again");
    assert_eq!(again.leader().expect("leadership").rev(), revision);
    assert_eq!(header_rev(again.header()), revision + 1);
    let current = client.leader("el").await.expect("leader");
    assert_eq!(current.kv().expect("kv").value(), b"v3");

    let resigned = client.resign(resigning(&leader)).await.expect("resign");
    assert_eq!(header_rev(resigned.header()), revision + 3);
    assert_grpc_error(
        client.leader("el").await,
        Code::Unknown,
        "election: no leader",
    );
    // Resigning a leadership that ended is no error, and changes nothing.
    let again = client
        .resign(resigning(&leader))
        .await
        .expect("resign again");
    assert_eq!(header_rev(again.header()), revision + 3);
}

#[tokio::test]
async fn election_errors_are_etcds() {
    let cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    let lease = client.lease_grant(60, None).await.expect("grant").id();
    for answer in [
        client.proclaim("v", None).await.map(|_| ()),
        client.resign(None).await.map(|_| ()),
    ] {
        assert_grpc_error(answer, Code::Unknown, "\"leader\" field must be provided");
    }
    assert_grpc_error(
        client.leader("nobody").await,
        Code::Unknown,
        "election: no leader",
    );
    assert_grpc_error(
        client.campaign("el", "v", 0x1234).await,
        Code::Unknown,
        "etcdserver: requested lease not found",
    );
    assert!(keys_under(&mut client, "el/").await.is_empty());
    // A leadership of no key is checked as any transaction on an empty key is.
    let keyless = LeaderKey::new().with_name("el").with_lease(lease);
    assert_grpc_error(
        client.proclaim("v", proclaiming(&keyless)).await,
        Code::Unknown,
        "etcdserver: key is not provided",
    );
    assert_grpc_error(
        client.resign(resigning(&keyless)).await,
        Code::Unknown,
        "etcdserver: key is not provided",
    );
}

/// Three campaigners on three members and an observer on the third, started before
/// anyone campaigns: the first leads at once and the others wait in create-revision
/// order; the observer sees the first leader's value, its proclamation, then each
/// successor's value once the leader resigns or its lease is revoked.
#[tokio::test]
async fn campaigners_on_three_members_lead_in_turn_and_observe_reports_each() {
    let cluster = Cluster::start(3).await;
    let mut clients = Vec::new();
    for i in 0..3 {
        clients.push(waiting_client(&[cluster.endpoint(i)]).await);
    }
    let mut leases = Vec::new();
    for client in clients.iter_mut() {
        leases.push(client.lease_grant(60, None).await.expect("grant").id());
    }
    // etcd sends the stream's headers with its first message: the observer's call is
    // answered only once someone campaigns.
    let mut observing = clients[2].clone();
    let observer = tokio::spawn(async move { observing.observe("turns").await });
    let start = clients[2].get("turns/", None).await.expect("get");
    let mut watch = PrefixWatch::open(&mut clients[2], "turns/", header_rev(start.header())).await;

    let first = clients[0]
        .campaign("turns", "v0", leases[0])
        .await
        .expect("first campaign");
    let first = first.leader().expect("leadership").clone();
    let mut waiting = Vec::new();
    for i in 1..3 {
        let mut client = clients[i].clone();
        let lease = leases[i];
        waiting.push(tokio::spawn(async move {
            client
                .campaign("turns", format!("v{i}"), lease)
                .await
                .map(|mut won| won.take_leader().expect("leadership"))
        }));
        watch
            .wait_for(EventType::Put, &holder_key("turns", lease), RPC_TIMEOUT)
            .await;
    }
    let mut observer = tokio::time::timeout(RPC_TIMEOUT, observer)
        .await
        .expect("observe answered")
        .expect("observe task")
        .expect("observe");
    let (key, value, _) = next_proclamation(&mut observer).await;
    assert_eq!(
        (key.as_str(), value.as_str()),
        (first.key_str().expect("utf-8"), "v0")
    );
    clients[0]
        .proclaim("v0b", proclaiming(&first))
        .await
        .expect("proclaim");
    let (_, value, _) = next_proclamation(&mut observer).await;
    assert_eq!(value, "v0b");

    let mut waiting = waiting.into_iter();
    let (second, third) = (waiting.next().expect("2nd"), waiting.next().expect("3rd"));
    clients[0].resign(resigning(&first)).await.expect("resign");
    let second = tokio::time::timeout(RPC_TIMEOUT, second)
        .await
        .expect("the second leads once the first resigned")
        .expect("campaign task")
        .expect("campaign");
    assert_eq!(second.key(), holder_key("turns", leases[1]).as_bytes());
    assert!(second.rev() > first.rev());
    let (key, value, _) = next_proclamation(&mut observer).await;
    assert_eq!((key.as_bytes(), value.as_str()), (second.key(), "v1"));
    assert!(!third.is_finished(), "the third waits for the second");

    clients[1].lease_revoke(leases[1]).await.expect("revoke");
    let third = tokio::time::timeout(RPC_TIMEOUT, third)
        .await
        .expect("the third leads once the second's lease is revoked")
        .expect("campaign task")
        .expect("campaign");
    assert!(third.rev() > second.rev());
    let (key, value, _) = next_proclamation(&mut observer).await;
    assert_eq!((key.as_bytes(), value.as_str()), (third.key(), "v2"));
}

/// A leader whose lease expires loses the election; the next campaigner leads within
/// the TTL and a bound, and Observe reports it.
#[tokio::test]
async fn a_leader_whose_lease_expires_is_succeeded_and_observed() {
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
        .campaign("expiring", "old", short)
        .await
        .expect("first campaign");
    let mut observer = client.observe("expiring").await.expect("observe");
    let (key, value, _) = next_proclamation(&mut observer).await;
    assert_eq!(
        (key, value.as_str()),
        (holder_key("expiring", short), "old")
    );

    let won = client
        .campaign("expiring", "new", long)
        .await
        .expect("second campaign");
    let waited = granted_at.elapsed();
    let bound = Duration::from_secs(SHORT_TTL as u64) + HANDOVER_BOUND;
    assert!(waited <= bound, "waited {waited:?}, more than {bound:?}");
    assert_eq!(
        won.leader().expect("leadership").key(),
        holder_key("expiring", long).as_bytes()
    );
    assert_eq!(
        keys_under(&mut client, "expiring/").await,
        [holder_key("expiring", long)]
    );
    let (key, value, _) = next_proclamation(&mut observer).await;
    assert_eq!((key, value.as_str()), (holder_key("expiring", long), "new"));
}

/// A campaigner whose client gives up while it waits resigns (its key is removed).
#[tokio::test]
async fn a_cancelled_campaign_resigns() {
    let cluster = Cluster::start(1).await;
    let mut client = waiting_client(&cluster.endpoints()).await;
    let leader = client.lease_grant(60, None).await.expect("grant").id();
    let waiter = client.lease_grant(60, None).await.expect("grant").id();
    let won = client
        .campaign("given-up", "leader", leader)
        .await
        .expect("campaign");
    let mut watch = PrefixWatch::open(&mut client, "given-up/", header_rev(won.header())).await;
    let waiter_key = holder_key("given-up", waiter);
    let mut waiting = waiting_client(&cluster.endpoints()).await;
    let wait = tokio::spawn(async move { waiting.campaign("given-up", "waiter", waiter).await });
    watch
        .wait_for(EventType::Put, &waiter_key, RPC_TIMEOUT)
        .await;
    wait.abort();
    watch
        .wait_for(EventType::Delete, &waiter_key, RPC_TIMEOUT)
        .await;
    let current = client.leader("given-up").await.expect("leader");
    assert_eq!(current.kv().expect("kv").value(), b"leader");
}

/// With auth on, a user without permission on the election's prefix is refused as in
/// etcd; an Observe it may not read ends at once with no proclamation and no error
/// (etcd's observer just stops when its read fails).
#[tokio::test]
async fn with_auth_elections_act_as_their_caller() {
    let cluster = Cluster::start(1).await;
    enable_auth(&cluster).await;
    let mut root = root_client(&cluster, 0).await;
    let mut auth = root.auth_client();
    auth.role_add("voter").await.expect("role add");
    auth.role_grant_permission("voter", Permission::read_write("open/").with_prefix())
        .await
        .expect("grant permission");
    auth.user_add("bob", "bob-pw", None)
        .await
        .expect("user add");
    auth.user_grant_role("bob", "voter")
        .await
        .expect("grant role");
    let mut bob = connect_as(&cluster, 0, "bob", "bob-pw").await;
    let lease = bob.lease_grant(60, None).await.expect("grant").id();
    let root_lease = root.lease_grant(60, None).await.expect("grant").id();
    let closed = root
        .campaign("closed", "root's", root_lease)
        .await
        .expect("root campaigns")
        .take_leader()
        .expect("leadership");

    assert_grpc_error(
        bob.campaign("closed", "bob's", lease).await,
        Code::Unknown,
        "etcdserver: permission denied",
    );
    assert_grpc_error(
        bob.leader("closed").await,
        Code::Unknown,
        "etcdserver: permission denied",
    );
    let root_leadership = closed.clone().with_lease(lease);
    assert_grpc_error(
        bob.proclaim("bob's", proclaiming(&root_leadership)).await,
        Code::Unknown,
        "etcdserver: permission denied",
    );
    assert_grpc_error(
        bob.resign(resigning(&root_leadership)).await,
        Code::Unknown,
        "etcdserver: permission denied",
    );
    let mut observer = bob.observe("closed").await.expect("observe");
    let ended = tokio::time::timeout(RPC_TIMEOUT, observer.message())
        .await
        .expect("the observer ends at once");
    assert!(matches!(ended, Ok(None)), "{ended:?}");

    let won = bob
        .campaign("open", "bob's", lease)
        .await
        .expect("campaign where bob may write");
    let leader = won.leader().expect("leadership");
    assert_eq!(leader.key(), holder_key("open", lease).as_bytes());
    let current = root.leader("closed").await.expect("leader");
    assert_eq!(current.kv().expect("kv").value(), b"root's");
}

/// etcdctl 3.4's `elect` campaigns on the client side with the same keys: the Leader
/// RPC names its leader, an `elect -l` observer prints each leader, and a second
/// `elect` leads once the first is signalled (and resigns).
#[tokio::test]
async fn etcdctl_elect_and_its_observer() {
    let cluster = Cluster::start(1).await;
    let mut client = waiting_client(&cluster.endpoints()).await;
    let mut first = etcdctl_process(&cluster, &["elect", "office", "alice"]);
    let first_key = first.line().await;
    assert!(first_key.starts_with("office/"), "{first_key}");
    assert_eq!(first.line().await, "alice");
    let current = client.leader("office").await.expect("leader");
    let kv = current.kv().expect("kv");
    assert_eq!(
        (kv.key(), kv.value()),
        (first_key.as_bytes(), &b"alice"[..])
    );

    let mut observer = etcdctl_process(&cluster, &["elect", "-l", "office"]);
    assert_eq!(observer.line().await, first_key);
    assert_eq!(observer.line().await, "alice");

    let start = client.get("office/", None).await.expect("get");
    let mut watch = PrefixWatch::open(&mut client, "office/", header_rev(start.header())).await;
    let mut second = etcdctl_process(&cluster, &["elect", "office", "bob"]);
    // The second campaigner's key appears while the first leads; it leads once the
    // first is signalled and resigns.
    let second_key = watch.next_put(RPC_TIMEOUT).await;
    first.terminate();
    assert_eq!(second.line().await, second_key);
    assert_eq!(second.line().await, "bob");
    assert_eq!(observer.line().await, second_key);
    assert_eq!(observer.line().await, "bob");
    assert!(!keys_under(&mut client, "office/")
        .await
        .contains(&first_key));
    second.terminate();
    observer.terminate();
}
