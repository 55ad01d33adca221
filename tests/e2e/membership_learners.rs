//! Learners on real processes: kubeadm's learner join and reset sequence, what a learner
//! refuses (and, where QuantyKube follows etcd 3.6, serves), and etcdctl's member
//! commands through a learner's add, start, promotion, update and removal. The etcd 3.4
//! facts these tests lean on are in `membership_support.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use etcd_client::GetOptions;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::harness::*;
use crate::membership_support::*;
use crate::raw;
use crate::support::status::assert_status;

// ---------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------

/// Runs etcdctl against member `i` again while it fails with [`UNHEALTHY_CLUSTER`]
/// (see [`settled!`]), for up to [`RECONFIG_RETRY`].
async fn etcdctl_settled(cluster: &Cluster, i: usize, args: &[&str]) -> CmdOutput {
    let deadline = Deadline::after(RECONFIG_RETRY, format!("etcdctl {args:?}"));
    loop {
        let out = cluster.etcdctl_on(i, args).await;
        if out.success() || !out.stderr.contains(UNHEALTHY_CLUSTER) {
            return out;
        }
        deadline.tick().await;
    }
}

// ---------------------------------------------------------------------------------
// kubeadm: join as a learner, promote, and reset
// ---------------------------------------------------------------------------------

/// kubeadm's `join --control-plane`: MemberList, MemberAdd as a learner (a repeat
/// answering "Peer URLs already exists" counts as done), start the member with
/// `existing`, MemberPromote until the learner is in sync. Then `kubeadm reset`:
/// MemberList, find the member by its peer URL, MemberRemove; the removed member exits.
#[tokio::test]
async fn kubeadm_join_learner_sequence() {
    let mut cluster = Cluster::start(1).await;
    let mut client = cluster.client(0).await;
    for k in 0..500 {
        client
            .put(format!("data/{k:04}"), format!("v{k}"), None)
            .await
            .expect("put");
    }

    let before = client
        .member_list()
        .await
        .expect("MemberList")
        .members()
        .to_vec();
    assert_eq!(ids_of(&before), BTreeSet::from([cluster.member_id(0)]));

    let i = cluster.reserve_member();
    let peer_url = cluster.peer_url(i);
    let added = member_add_retrying(&mut client, &peer_url, true).await;
    let member = added.member().expect("the new member").clone();
    assert!(member.is_learner());
    assert_eq!(member.peer_urls(), std::slice::from_ref(&peer_url));
    assert_eq!(member.name(), "", "not started yet");
    assert_ne!(member.id(), 0);
    assert_eq!(
        ids_of(added.member_list()),
        BTreeSet::from([cluster.member_id(0), member.id()])
    );
    cluster.set_member_id(i, member.id());
    let listed = client
        .member_list()
        .await
        .expect("MemberList")
        .members()
        .to_vec();
    let row = listed
        .iter()
        .find(|m| m.id() == member.id())
        .expect("listed");
    assert!(row.is_learner() && row.name().is_empty() && row.client_urls().is_empty());

    // The repeat kubeadm makes when it retries. etcd derives a member ID from the peer
    // URLs and the time in whole seconds: within the same second the repeat collides on
    // the ID first ("etcdserver: member ID already exist"); from the next second on it
    // is the peer URL that is taken, the answer kubeadm looks for.
    let (code, message) = refused(settled!(
        client.member_add([peer_url.as_str()], learner()).await
    ));
    assert_eq!(code, Code::FailedPrecondition);
    assert!(
        [MEMBER_ID_EXISTS, PEER_URLS_EXIST].contains(&message.as_str()),
        "immediate repeat of MemberAdd: {message}"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_grpc_error(
        settled!(client.member_add([peer_url.as_str()], learner()).await),
        Code::FailedPrecondition,
        PEER_URLS_EXIST,
    );
    assert_grpc_error(
        settled!(client.member_add([peer_url.as_str()], None).await),
        Code::FailedPrecondition,
        PEER_URLS_EXIST,
    );

    // Not started: far behind the leader.
    assert_grpc_error(
        client.member_promote(member.id()).await,
        Code::FailedPrecondition,
        LEARNER_NOT_READY,
    );

    let initial_cluster = initial_cluster_for(added.member_list(), member.id(), &cluster.name(i));
    cluster.start_joining(i, &initial_cluster);
    let status = cluster.wait_status(i, JOIN_TIMEOUT).await;
    assert!(status.is_learner(), "Status on the learner: isLearner");

    let deadline = Deadline::after(PROMOTE_TIMEOUT, "MemberPromote succeeds");
    let mut refusals = 0;
    let promoted = loop {
        match client.member_promote(member.id()).await {
            Ok(resp) => break resp,
            Err(e) => {
                assert_eq!(
                    refused::<()>(Err(e)),
                    (Code::FailedPrecondition, LEARNER_NOT_READY.to_owned()),
                    "MemberPromote refused while the learner catches up"
                );
                refusals += 1;
            }
        }
        deadline.tick().await;
    };
    eprintln!("MemberPromote refused {refusals} times after the learner started");
    let row = promoted
        .members()
        .iter()
        .find(|m| m.id() == member.id())
        .expect("the promoted member in the answer");
    assert!(!row.is_learner());

    cluster.wait_member_ready(i, JOIN_TIMEOUT).await;
    cluster.wait_started(0, i, JOIN_TIMEOUT).await;
    for via in [0, i] {
        let list = members_of(&cluster, via).await;
        let row = list.iter().find(|m| m.id() == member.id()).expect("listed");
        assert!(!row.is_learner(), "a voter in member {via}'s list");
        assert_eq!(row.name(), cluster.name(i));
        assert_eq!(row.client_urls(), [cluster.endpoint(i)]);
    }
    let got = cluster
        .client(i)
        .await
        .get("data/0499", None)
        .await
        .expect("linearizable read on the promoted member");
    assert_eq!(pairs(&got), vec![("data/0499".into(), "v499".into())]);

    // kubeadm reset on the joined node.
    let list = client
        .member_list()
        .await
        .expect("MemberList")
        .members()
        .to_vec();
    let found = list
        .iter()
        .find(|m| m.peer_urls().contains(&peer_url))
        .expect("the member with our peer URL");
    assert_eq!(found.id(), member.id());
    let removed = member_remove_retrying(&mut client, found.id()).await;
    assert_eq!(
        ids_of(removed.members()),
        BTreeSet::from([cluster.member_id(0)])
    );
    let list = client
        .member_list()
        .await
        .expect("MemberList")
        .members()
        .to_vec();
    assert_eq!(ids_of(&list), BTreeSet::from([cluster.member_id(0)]));

    let status = cluster
        .wait_exit(i, EXIT_TIMEOUT)
        .await
        .unwrap_or_else(|| panic!("removed member still runs after {EXIT_TIMEOUT:?}"));
    eprintln!("removed member exited with {status}");
    let log = std::fs::read_to_string(cluster.log_path(i)).unwrap_or_default();
    assert!(
        log.contains(REMOVED_LOG_LINE),
        "the removed member's log says {REMOVED_LOG_LINE:?}"
    );

    // The remaining member is a one-member cluster again.
    client.put("after-reset", "x", None).await.expect("put");
}

// ---------------------------------------------------------------------------------
// What a learner refuses
// ---------------------------------------------------------------------------------

/// The code of "etcdserver: rpc not supported for learner": Unavailable in etcd 3.4,
/// FailedPrecondition in etcd 3.6 and QuantyKube.
fn learner_refusal_code(target: Target) -> Code {
    match target {
        Target::Etcd => Code::Unavailable,
        Target::Quantykube => Code::FailedPrecondition,
    }
}

#[tokio::test]
async fn learner_restrictions() {
    let mut cluster = Cluster::start(1).await;
    let mut voter = cluster.client(0).await;
    let put = voter.put("k", "v", None).await.expect("put");
    let lease = voter.lease_grant(60, None).await.expect("lease grant").id();
    let i = cluster.add_member(0, true).await;
    let status = cluster.wait_status(i, JOIN_TIMEOUT).await;
    assert!(status.is_learner(), "Status on the learner: isLearner");
    assert_eq!(
        status.header().expect("header").member_id(),
        cluster.member_id(i)
    );
    assert_eq!(status.leader(), cluster.member_id(0));
    wait_applied(&cluster, i, header_rev(put.header()), JOIN_TIMEOUT).await;
    let learner_id = cluster.member_id(i);
    let mut client = cluster.client(i).await;

    // Served: serializable Range and Maintenance.Status.
    let got = client
        .get("k", Some(GetOptions::new().with_serializable()))
        .await
        .expect("serializable range on the learner");
    assert_eq!(pairs(&got), vec![("k".into(), "v".into())]);
    assert_eq!(got.header().expect("header").member_id(), learner_id);
    assert!(client.status().await.expect("status").is_learner());

    // Refused: every other unary RPC and every stream. etcd 3.4 answers Unavailable;
    // etcd 3.6 answers FailedPrecondition (so that clients do not retry on the same
    // learner), and QuantyKube follows 3.6 (docs/compatibility.md).
    let code = learner_refusal_code(cluster.target());
    let expected = (code, LEARNER_REFUSES.to_owned());
    let calls: Vec<(&str, (Code, String))> = vec![
        ("linearizable Range", refused(client.get("k", None).await)),
        ("Put", refused(client.put("k", "w", None).await)),
        ("DeleteRange", refused(client.delete("k", None).await)),
        ("Txn", refused(client.txn(etcd_client::Txn::new()).await)),
        ("Compact", refused(client.compact(1, None).await)),
        ("LeaseGrant", refused(client.lease_grant(10, None).await)),
        ("LeaseRevoke", refused(client.lease_revoke(lease).await)),
        (
            "LeaseTimeToLive",
            refused(client.lease_time_to_live(lease, None).await),
        ),
        ("LeaseLeases", refused(client.leases().await)),
        (
            "LeaseKeepAlive",
            refused(client.lease_keep_alive(lease).await.map(|_| ())),
        ),
        ("Watch", {
            match client.watch("k", None).await {
                Ok(mut stream) => refused(stream.message().await),
                Err(e) => refused::<()>(Err(e)),
            }
        }),
        ("MemberList", refused(client.member_list().await)),
        (
            "MemberAdd",
            refused(client.member_add(["http://127.0.0.1:1"], None).await),
        ),
        (
            "MemberPromote",
            refused(client.member_promote(learner_id).await),
        ),
        (
            "MoveLeader",
            refused(client.move_leader(cluster.member_id(0)).await),
        ),
        (
            "Alarm",
            refused(
                client
                    .alarm(
                        etcd_client::AlarmAction::Get,
                        etcd_client::AlarmType::None,
                        None,
                    )
                    .await,
            ),
        ),
        ("HashKV", refused(client.hash_kv(0).await)),
        ("Lock", refused(client.lock("l", None).await)),
        ("Unlock", refused(client.unlock("l/1").await)),
        ("Campaign", refused(client.campaign("e", "v", lease).await)),
        ("Leader", refused(client.leader("e").await)),
        ("Observe", {
            match client.observe("e").await {
                Ok(mut stream) => refused(stream.message().await),
                Err(e) => refused::<()>(Err(e)),
            }
        }),
    ];
    for (what, answer) in calls {
        assert_eq!(answer, expected, "{what} on a learner");
    }

    // Snapshot: etcd 3.4 refuses it on a learner; etcd 3.6 serves it there, and so
    // does QuantyKube's learner gate (whatever Snapshot itself answers).
    let answer = match client.snapshot().await {
        Ok(mut stream) => stream.message().await.map(|_| ()),
        Err(e) => Err(e),
    };
    match cluster.target() {
        Target::Etcd => assert_eq!(refused(answer), expected, "Snapshot on a learner"),
        Target::Quantykube => {
            if let Err(e) = answer {
                assert_ne!(
                    refused::<()>(Err(e)).1,
                    LEARNER_REFUSES,
                    "Snapshot on a learner"
                );
            }
        }
    }

    // grpc.health.v1.Health/Check is a unary RPC like the others: etcd's learner
    // interceptor refuses it too (a learner is not "serving" to a load balancer).
    let mut health = HealthClient::new(raw::channel(&cluster.endpoint(i)).await);
    let answer = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await;
    assert_status(answer, code, LEARNER_REFUSES, "health Check on a learner");

    // Nothing was written through the learner.
    let got = voter.get("k", None).await.expect("range on the voter");
    assert_eq!(pairs(&got), vec![("k".into(), "v".into())]);
}

// ---------------------------------------------------------------------------------
// etcdctl's member commands
// ---------------------------------------------------------------------------------

/// The `KEY="value"` lines etcdctl prints after `member add`.
fn env_lines(stdout: &str) -> BTreeMap<String, String> {
    stdout
        .lines()
        .filter_map(|line| line.split_once('='))
        .filter(|(key, _)| key.starts_with("ETCD_"))
        .map(|(key, value)| (key.to_owned(), value.trim_matches('"').to_owned()))
        .collect()
}

/// The hex member ID in etcdctl's "Member <id> <verb> in|to|from cluster <id>" line,
/// checking the rest of it. etcdctl pads IDs to 16 characters with spaces.
fn member_line_id(stdout: &str, verb: &str, preposition: &str) -> u64 {
    let line = stdout.lines().next().unwrap_or_default();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert!(
        words.len() == 6
            && words[0] == "Member"
            && words[2] == verb
            && words[3] == preposition
            && words[4] == "cluster",
        "etcdctl printed {line:?}"
    );
    u64::from_str_radix(words[5], 16).expect("hex cluster ID");
    u64::from_str_radix(words[1], 16).expect("hex member ID")
}

fn json_members(stdout: &str) -> Vec<serde_json::Value> {
    let list: serde_json::Value = serde_json::from_str(stdout).expect("member list JSON");
    list["members"].as_array().expect("members array").clone()
}

#[tokio::test]
async fn etcdctl_member_commands() {
    let mut cluster = Cluster::start(1).await;
    let first = cluster.member_id(0);
    let i = cluster.reserve_member();
    let name = cluster.name(i);
    let peer_url = cluster.peer_url(i);

    let out = etcdctl_settled(
        &cluster,
        0,
        &[
            "member",
            "add",
            &name,
            &format!("--peer-urls={peer_url}"),
            "--learner",
        ],
    )
    .await;
    out.assert_success();
    let id = member_line_id(&out.stdout, "added", "to");
    cluster.set_member_id(i, id);
    let env = env_lines(&out.stdout);
    assert_eq!(
        env.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "ETCD_INITIAL_ADVERTISE_PEER_URLS",
            "ETCD_INITIAL_CLUSTER",
            "ETCD_INITIAL_CLUSTER_STATE",
            "ETCD_NAME"
        ]
    );
    assert_eq!(env["ETCD_NAME"], name);
    assert_eq!(env["ETCD_INITIAL_ADVERTISE_PEER_URLS"], peer_url);
    assert_eq!(env["ETCD_INITIAL_CLUSTER_STATE"], "existing");
    let initial: BTreeSet<&str> = env["ETCD_INITIAL_CLUSTER"].split(',').collect();
    let first_entry = format!("{}={}", cluster.name(0), cluster.peer_url(0));
    let new_entry = format!("{name}={peer_url}");
    assert_eq!(
        initial,
        BTreeSet::from([first_entry.as_str(), new_entry.as_str()])
    );

    // Start it from exactly those values, as environment variables.
    cluster.start_joining_via_env(i, &env["ETCD_INITIAL_CLUSTER"]);
    let status = cluster.wait_status(i, JOIN_TIMEOUT).await;
    assert!(status.is_learner());
    cluster.wait_started(0, i, JOIN_TIMEOUT).await;

    let out = cluster
        .etcdctl_on(0, &["member", "list", "-w", "json"])
        .await;
    out.assert_success();
    let members = json_members(&out.stdout);
    assert_eq!(members.len(), 2);
    let row = members
        .iter()
        .find(|m| m["ID"].as_u64() == Some(id))
        .expect("the learner in the JSON list");
    assert_eq!(row["name"], name.as_str());
    assert_eq!(row["peerURLs"], serde_json::json!([peer_url]));
    assert_eq!(row["clientURLs"], serde_json::json!([cluster.endpoint(i)]));
    assert_eq!(row["isLearner"], true);
    let row = members
        .iter()
        .find(|m| m["ID"].as_u64() == Some(first))
        .expect("the first member in the JSON list");
    assert!(
        row.get("isLearner").is_none(),
        "voters have no isLearner field"
    );

    let hex = format!("{id:x}");
    let deadline = Deadline::after(PROMOTE_TIMEOUT, "etcdctl member promote succeeds");
    loop {
        let out = cluster.etcdctl_on(0, &["member", "promote", &hex]).await;
        if out.success() {
            assert_eq!(member_line_id(&out.stdout, "promoted", "in"), id);
            break;
        }
        assert!(
            out.stderr.contains(LEARNER_NOT_READY),
            "member promote: {}",
            out.stderr
        );
        deadline.tick().await;
    }
    cluster.wait_member_ready(i, JOIN_TIMEOUT).await;

    let out = cluster
        .etcdctl_on(
            0,
            &["member", "update", &hex, &format!("--peer-urls={peer_url}")],
        )
        .await;
    out.assert_success();
    assert_eq!(member_line_id(&out.stdout, "updated", "in"), id);

    let out = cluster.etcdctl(&["member", "list"]).await;
    out.assert_success();
    let line = format!(
        "{hex}, started, {name}, {peer_url}, {}, false",
        cluster.endpoint(i)
    );
    assert!(
        out.stdout.lines().any(|l| l == line),
        "member list has {line:?}:\n{}",
        out.stdout
    );

    let out = etcdctl_settled(&cluster, 0, &["member", "remove", &hex]).await;
    out.assert_success();
    assert_eq!(member_line_id(&out.stdout, "removed", "from"), id);
    cluster
        .wait_exit(i, EXIT_TIMEOUT)
        .await
        .unwrap_or_else(|| panic!("removed member still runs after {EXIT_TIMEOUT:?}"));
    let out = cluster.etcdctl(&["member", "list", "-w", "json"]).await;
    out.assert_success();
    let ids: Vec<Option<u64>> = json_members(&out.stdout)
        .iter()
        .map(|m| m["ID"].as_u64())
        .collect();
    assert_eq!(ids, [Some(first)]);
}
