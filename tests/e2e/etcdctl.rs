//! etcdctl 3.4 (API v3) against the cluster: its commands and their printed output.

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

#[tokio::test]
async fn etcdctl_endpoint_status_reports_each_member_and_one_leader() {
    let cluster = Cluster::start(3).await;
    cluster.etcdctl(&["put", "k", "v"]).await.assert_success();
    let leader = cluster.leader_index().await;

    let out = cluster
        .etcdctl_host_port(&["endpoint", "status", "-w", "json"])
        .await;
    let statuses = json(&out.assert_success().stdout);
    let statuses = statuses.as_array().expect("array of statuses");
    assert_eq!(statuses.len(), 3);
    for entry in statuses {
        let endpoint = entry["Endpoint"].as_str().unwrap();
        let i = (0..3)
            .find(|&i| cluster.endpoint(i).trim_start_matches("http://") == endpoint)
            .expect("a member's endpoint");
        let status = &entry["Status"];
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
    let out = cluster.etcdctl_host_port(&["endpoint", "status"]).await;
    let stdout = &out.assert_success().stdout;
    assert_eq!(stdout.lines().count(), 3);
    for i in 0..3 {
        let line = stdout
            .lines()
            .find(|l| {
                l.starts_with(&format!(
                    "{}, ",
                    cluster.endpoint(i).trim_start_matches("http://")
                ))
            })
            .unwrap_or_else(|| panic!("no status line for member {i}: {stdout}"));
        let fields: Vec<&str> = line.split(", ").collect();
        assert_eq!(fields[1], format!("{:x}", cluster.member_id(i)));
        assert_eq!(fields[4], if i == leader { "true" } else { "false" });
        assert_eq!(fields[5], "false", "not a learner");
    }
}

#[tokio::test]
async fn etcdctl_endpoint_health_reports_every_member_healthy() {
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
}
