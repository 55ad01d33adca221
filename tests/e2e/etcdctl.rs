//! etcdctl 3.4 (API v3) against the cluster: its commands and their printed output.

use std::time::Duration;

use serde_json::Value;

use crate::harness::*;

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("etcdctl JSON {text:?}: {e}"))
}

#[tokio::test]
async fn etcdctl_put_get_and_del_print_etcds_output() {
    let cluster = Cluster::start(1).await;

    let out = cluster.etcdctl(&["put", "foo", "bar"]).await;
    assert_eq!(out.assert_success().stdout, "OK\n");
    let out = cluster.etcdctl(&["put", "foo", "baz", "--prev-kv"]).await;
    assert_eq!(out.assert_success().stdout, "OK\nfoo\nbar\n");
    let out = cluster.etcdctl(&["put", "fop", "x"]).await;
    out.assert_success();

    let out = cluster.etcdctl(&["get", "foo"]).await;
    assert_eq!(out.assert_success().stdout, "foo\nbaz\n");
    let out = cluster.etcdctl(&["get", "foo", "--print-value-only"]).await;
    assert_eq!(out.assert_success().stdout, "baz\n");
    let out = cluster
        .etcdctl(&["get", "fo", "--prefix", "--keys-only"])
        .await;
    assert_eq!(out.assert_success().stdout, "foo\n\nfop\n\n");
    let out = cluster.etcdctl(&["get", "foo", "--rev", "2"]).await;
    assert_eq!(out.assert_success().stdout, "foo\nbar\n");
    let out = cluster.etcdctl(&["get", "missing"]).await;
    assert_eq!(out.assert_success().stdout, "");

    let out = cluster.etcdctl(&["get", "foo", "-w", "json"]).await;
    let v = json(&out.assert_success().stdout);
    assert_eq!(v["header"]["revision"], 4);
    assert_eq!(v["count"], 1);
    let kv = &v["kvs"][0];
    assert_eq!(kv["key"], "Zm9v", "base64 of foo");
    assert_eq!(kv["value"], "YmF6", "base64 of baz");
    assert_eq!(kv["create_revision"], 2);
    assert_eq!(kv["mod_revision"], 3);
    assert_eq!(kv["version"], 2);
    assert!(v["header"]["cluster_id"].as_u64().unwrap() != 0);
    assert_eq!(
        v["header"]["member_id"].as_u64().unwrap(),
        cluster.member_id(0)
    );

    let out = cluster.etcdctl(&["del", "foo"]).await;
    assert_eq!(out.assert_success().stdout, "1\n");
    let out = cluster.etcdctl(&["del", "foo"]).await;
    assert_eq!(out.assert_success().stdout, "0\n");
    let out = cluster
        .etcdctl(&["del", "f", "--prefix", "--prev-kv"])
        .await;
    assert_eq!(out.assert_success().stdout, "1\nfop\nx\n");
}

#[tokio::test]
async fn etcdctl_txn_reads_compares_and_both_branches_from_stdin() {
    let cluster = Cluster::start(1).await;
    cluster.etcdctl(&["put", "k", "v"]).await.assert_success();

    let script = "value(\"k\") = \"v\"\n\nput t ok\nget k\n\nput t failed\n\n";
    let out = cluster.etcdctl_with_stdin(&["txn"], script).await;
    assert_eq!(out.assert_success().stdout, "SUCCESS\n\nOK\n\nk\nv\n");
    let out = cluster.etcdctl(&["get", "t", "--print-value-only"]).await;
    assert_eq!(out.assert_success().stdout, "ok\n");

    let script =
        "mod(\"k\") > \"100\"\nversion(\"k\") = \"1\"\n\nput t ok\n\nput t failed\ndel k\n\n";
    let out = cluster.etcdctl_with_stdin(&["txn"], script).await;
    assert_eq!(out.assert_success().stdout, "FAILURE\n\nOK\n\n1\n");
    let out = cluster.etcdctl(&["get", "t", "--print-value-only"]).await;
    assert_eq!(out.assert_success().stdout, "failed\n");
    let out = cluster.etcdctl(&["get", "k"]).await;
    assert_eq!(out.assert_success().stdout, "");
}

#[tokio::test]
async fn etcdctl_compaction_hides_old_revisions() {
    let cluster = Cluster::start(1).await;
    for v in ["v1", "v2", "v3", "v4"] {
        cluster.etcdctl(&["put", "k", v]).await.assert_success(); // revs 2..=5
    }

    let out = cluster.etcdctl(&["compaction", "3"]).await;
    assert_eq!(out.assert_success().stdout, "compacted revision 3\n");
    let out = cluster.etcdctl(&["get", "k", "--rev", "2"]).await;
    assert!(!out.success());
    assert!(
        out.stderr
            .contains("Error: etcdserver: mvcc: required revision has been compacted"),
        "{out:?}"
    );
    let out = cluster.etcdctl(&["get", "k", "--rev", "3"]).await;
    assert_eq!(out.assert_success().stdout, "k\nv2\n");

    let out = cluster.etcdctl(&["compaction", "3"]).await;
    assert!(!out.success());
    assert!(
        out.stderr.contains("required revision has been compacted"),
        "{out:?}"
    );
    let out = cluster.etcdctl(&["compaction", "--physical", "5"]).await;
    assert_eq!(out.assert_success().stdout, "compacted revision 5\n");
    let out = cluster.etcdctl(&["compaction", "9"]).await;
    assert!(!out.success());
    assert!(
        out.stderr
            .contains("required revision is a future revision"),
        "{out:?}"
    );
}

#[tokio::test]
async fn etcdctl_member_list_shows_every_member() {
    let cluster = Cluster::start(3).await;

    let out = cluster.etcdctl(&["member", "list"]).await;
    let mut lines: Vec<String> = out
        .assert_success()
        .stdout
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    let mut expected: Vec<String> = (0..3)
        .map(|i| {
            format!(
                "{:x}, started, {}, {}, {}, false",
                cluster.member_id(i),
                cluster.name(i),
                cluster.peer_url(i),
                cluster.endpoint(i)
            )
        })
        .collect();
    expected.sort();
    assert_eq!(lines, expected);
}

// etcdctl 3.4's per-endpoint commands (`endpoint status`, `endpoint hashkv`,
// `move-leader`) dial each endpoint as grpc-go's `passthrough:///<endpoint>`, so that
// an endpoint given with its scheme arrives as the HTTP/2 `:authority`
// `http://host:port`. The tests below give every endpoint with its scheme, as users
// do (`Cluster::endpoint`); QuantyKube accepts that through its patched h2
// (vendor/h2/QUANTYKUBE-PATCH.md).

/// The member whose client URL is `endpoint`, as etcdctl prints it (with its scheme).
fn member_at(cluster: &Cluster, endpoint: &str) -> usize {
    (0..cluster.size())
        .find(|&i| cluster.endpoint(i) == endpoint)
        .unwrap_or_else(|| panic!("{endpoint:?} is no member's client URL"))
}

/// `-w json` of a per-endpoint command: one entry per member, in any order, each
/// naming its endpoint with the scheme; returned in member order.
fn per_member_json(cluster: &Cluster, stdout: &str, field: &str) -> Vec<Value> {
    let entries = json(stdout);
    let entries = entries
        .as_array()
        .expect("an array, one entry per endpoint");
    assert_eq!(entries.len(), cluster.size(), "{stdout}");
    let mut by_member: Vec<Option<Value>> = vec![None; cluster.size()];
    for entry in entries {
        let endpoint = entry["Endpoint"].as_str().expect("Endpoint");
        let i = member_at(cluster, endpoint);
        assert!(by_member[i].is_none(), "{endpoint} listed twice: {stdout}");
        by_member[i] = Some(entry[field].clone());
    }
    by_member.into_iter().map(Option::unwrap).collect()
}

#[tokio::test]
async fn etcdctl_endpoint_status_with_scheme_endpoints_reports_every_member_and_the_leader() {
    let cluster = Cluster::start(3).await;
    cluster.etcdctl(&["put", "k", "v"]).await.assert_success();
    let leader = cluster.leader_index().await;

    let out = cluster.etcdctl(&["endpoint", "status", "-w", "json"]).await;
    let statuses = per_member_json(&cluster, &out.assert_success().stdout, "Status");
    for (i, status) in statuses.iter().enumerate() {
        assert_eq!(
            status["header"]["member_id"].as_u64().unwrap(),
            cluster.member_id(i)
        );
        assert_eq!(
            status["leader"].as_u64().unwrap(),
            cluster.member_id(leader)
        );
        assert!(status["version"].as_str().unwrap().starts_with("3."));
        assert!(status["raftIndex"].as_u64().unwrap() > 0);
        assert!(status["raftTerm"].as_u64().unwrap() >= 1);
        assert!(status["dbSize"].as_i64().unwrap() > 0);
        assert_eq!(status["header"]["revision"], 2);
    }

    // The simple format: endpoint, ID, version, db size, is leader, is learner, ...
    let out = cluster.etcdctl(&["endpoint", "status"]).await;
    let stdout = &out.assert_success().stdout;
    assert_eq!(stdout.lines().count(), 3);
    for i in 0..3 {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("{}, ", cluster.endpoint(i))))
            .unwrap_or_else(|| panic!("no status line for member {i}: {stdout}"));
        let fields: Vec<&str> = line.split(", ").collect();
        assert_eq!(fields[1], format!("{:x}", cluster.member_id(i)));
        assert_eq!(fields[4], if i == leader { "true" } else { "false" });
        assert_eq!(fields[5], "false", "not a learner");
    }
}

#[tokio::test]
async fn etcdctl_endpoint_health_with_scheme_endpoints_reports_every_member_healthy() {
    let cluster = Cluster::start(3).await;

    let out = cluster.etcdctl(&["endpoint", "health"]).await;
    out.assert_success();
    // etcdctl 3.4 prints health lines on stderr.
    let text = format!("{}{}", out.stdout, out.stderr);
    for i in 0..3 {
        let expected = format!(
            "{} is healthy: successfully committed proposal",
            cluster.endpoint(i)
        );
        assert!(text.contains(&expected), "{expected:?} in {text:?}");
    }

    // `-w json` has no `Endpoint`/`Status` envelope: a flat entry per endpoint.
    let out = cluster.etcdctl(&["endpoint", "health", "-w", "json"]).await;
    let entries = json(&out.assert_success().stdout);
    let mut endpoints: Vec<String> = entries
        .as_array()
        .expect("an array, one entry per endpoint")
        .iter()
        .map(|entry| {
            assert_eq!(entry["health"], true, "{entry}");
            entry["endpoint"].as_str().expect("endpoint").to_owned()
        })
        .collect();
    endpoints.sort();
    let mut expected = cluster.endpoints();
    expected.sort();
    assert_eq!(endpoints, expected);
}

#[tokio::test]
async fn etcdctl_move_leader_with_scheme_endpoints_moves_the_leader() {
    let cluster = Cluster::start(3).await;
    let leader = cluster.leader_index().await;
    let transferee = (leader + 1) % 3;

    // Given every endpoint, etcdctl asks each for its status (one dial per endpoint)
    // to find the leader's, then sends MoveLeader there.
    let out = cluster
        .etcdctl(&[
            "move-leader",
            &format!("{:x}", cluster.member_id(transferee)),
        ])
        .await;
    assert_eq!(
        out.assert_success().stdout.trim(),
        format!(
            "Leadership transferred from {:x} to {:x}",
            cluster.member_id(leader),
            cluster.member_id(transferee)
        )
    );

    // Every member names the transferee as leader, and it says it leads.
    let deadline = Deadline::after(
        Duration::from_secs(10),
        "every member follows the transferee",
    );
    loop {
        let out = cluster.etcdctl(&["endpoint", "status", "-w", "json"]).await;
        let statuses = per_member_json(&cluster, &out.assert_success().stdout, "Status");
        if statuses
            .iter()
            .all(|s| s["leader"].as_u64() == Some(cluster.member_id(transferee)))
        {
            break;
        }
        deadline.tick().await;
    }
    let out = cluster.etcdctl(&["endpoint", "status"]).await;
    let stdout = &out.assert_success().stdout;
    let leading: Vec<&str> = stdout
        .lines()
        .filter(|l| l.split(", ").nth(4) == Some("true"))
        .collect();
    assert_eq!(leading.len(), 1, "one leader: {stdout}");
    assert!(
        leading[0].starts_with(&format!(
            "{}, {:x}, ",
            cluster.endpoint(transferee),
            cluster.member_id(transferee)
        )),
        "{stdout}"
    );

    // The old leader's endpoint alone is now no leader's: etcdctl refuses, naming it.
    let out = cluster
        .etcdctl_on(
            leader,
            &["move-leader", &format!("{:x}", cluster.member_id(leader))],
        )
        .await;
    assert!(!out.success());
    assert!(
        out.stderr.contains(&format!(
            "no leader endpoint given at [{}]",
            cluster.endpoint(leader)
        )),
        "{}",
        out.stderr
    );
}

/// `endpoint hashkv` with scheme endpoints, the whole result checked on both targets:
/// a hash per member, equal on all of them, that of the asked revision (the requests
/// once failed with a stream reset by QuantyKube's HTTP/2 layer).
#[tokio::test]
async fn etcdctl_endpoint_hashkv_with_scheme_endpoints_reaches_every_member() {
    let cluster = Cluster::start(3).await;
    cluster.etcdctl(&["put", "a", "1"]).await.assert_success();
    cluster.etcdctl(&["put", "b", "2"]).await.assert_success(); // revision 3

    let out = cluster.etcdctl(&["endpoint", "hashkv", "-w", "json"]).await;
    let hashes = per_member_json(&cluster, &out.assert_success().stdout, "HashKV");
    let hash_at_3 = hashes[0]["hash"].as_u64().expect("hash");
    assert_ne!(hash_at_3, 0);
    for (i, resp) in hashes.iter().enumerate() {
        assert_eq!(
            resp["header"]["member_id"].as_u64(),
            Some(cluster.member_id(i))
        );
        assert_eq!(resp["header"]["revision"], 3);
        assert_eq!(resp["hash"].as_u64(), Some(hash_at_3), "member {i}: {resp}");
        assert_eq!(resp["compact_revision"], -1, "never compacted");
    }

    // A write changes the hash of the latest revision, not that of revision 3.
    cluster.etcdctl(&["put", "a", "3"]).await.assert_success(); // revision 4
    let out = cluster.etcdctl(&["endpoint", "hashkv"]).await;
    let stdout = &out.assert_success().stdout;
    let latest = simple_hashes(&cluster, stdout);
    assert!(latest.iter().all(|&h| h == latest[0]), "{stdout}");
    assert_ne!(latest[0], hash_at_3, "{stdout}");
    let out = cluster.etcdctl(&["endpoint", "hashkv", "--rev", "3"]).await;
    let at_3 = simple_hashes(&cluster, &out.assert_success().stdout);
    assert_eq!(at_3, vec![hash_at_3; cluster.size()]);
}

/// The simple format of `endpoint hashkv`: `<endpoint>, <hash>` per member, in member
/// order.
fn simple_hashes(cluster: &Cluster, stdout: &str) -> Vec<u64> {
    assert_eq!(stdout.lines().count(), cluster.size(), "{stdout}");
    (0..cluster.size())
        .map(|i| {
            let prefix = format!("{}, ", cluster.endpoint(i));
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("no hash line for member {i}: {stdout}"));
            line[prefix.len()..].parse().expect("a decimal hash")
        })
        .collect()
}
