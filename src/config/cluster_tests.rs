//! The cluster flags against etcd's: `--initial-cluster`, discovery by DNS SRV, the
//! cluster state, the timing rules and URLs. A child of `config::tests`, whose helpers
//! it uses.

use super::*;

#[test]
fn initial_cluster_is_parsed_as_etcd_does() {
    let config = run(&[
        "--name=b",
        "--initial-advertise-peer-urls=http://10.0.0.2:2380,http://10.0.1.2:2380",
        "--initial-cluster",
        "c=http://10.0.0.3:2380,b=http://10.0.1.2:2380,a=http://10.0.0.1:2380,b=http://10.0.0.2:2380",
        "--initial-cluster-token=tok",
    ]);
    let names: Vec<&str> = config
        .initial_cluster
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(
        config.initial_cluster[1].peer_urls,
        urls(&["http://10.0.0.2:2380", "http://10.0.1.2:2380"])
    );
    assert_eq!(config.initial_cluster_token, "tok");

    assert_eq!(
        bootstrap_error(&["--name=d", "--initial-cluster=a=http://10.0.0.1:2380"]),
        r#"couldn't find local name "d" in the initial cluster configuration"#
    );
    assert_eq!(
        bootstrap_error(&["--name=a", "--initial-cluster=a=http://10.0.0.1:2380"]),
        "--initial-cluster has a=http://10.0.0.1:2380 but missing from \
         --initial-advertise-peer-urls=http://localhost:2380 \
         (\"http://localhost:2380\" != \"http://10.0.0.1:2380\")"
    );
    assert_eq!(
        bootstrap_error(&[
            "--initial-cluster=default=http://localhost:2380,x=http://localhost:2380"
        ]),
        "initial cluster default=http://localhost:2380,x=http://localhost:2380 has duplicate url"
    );
    // A joining member is checked for its name only, as etcd does.
    let config = run(&[
        "--name=a",
        "--initial-cluster-state=existing",
        "--initial-cluster=a=http://10.0.0.1:2380",
    ]);
    assert_eq!(config.initial_cluster_state, ClusterState::Existing);
    assert!(error(&["--initial-cluster=default=localhost:2380"])
        .contains("URL scheme must be http, https, unix, or unixs"));
}

#[test]
fn discovery_srv_replaces_the_initial_cluster_as_etcd_does() {
    let config = run(&[
        "--name=m1",
        "--initial-advertise-peer-urls=http://m1.qk.test:2380",
        "--discovery-srv=qk.test",
        "--discovery-srv-name=c1",
    ]);
    assert_eq!(config.discovery_srv.as_deref(), Some("qk.test"));
    assert_eq!(config.discovery_srv_name.as_deref(), Some("c1"));
    // The SRV records give the cluster, in the start path: the parser never resolves.
    assert!(config.initial_cluster.is_empty());
    let config = run_with(&[], &env_of(&[("ETCD_DISCOVERY_SRV", "qk.test")])).0;
    assert_eq!(config.discovery_srv.as_deref(), Some("qk.test"));
    // Empty values are unset, as in etcd.
    let config = run(&["--discovery-srv=", "--discovery-srv-name="]);
    assert_eq!(
        (config.discovery_srv, config.discovery_srv_name),
        (None, None)
    );
    assert_eq!(config.initial_cluster.len(), 1);

    let conflict = "multiple discovery or bootstrap flags are set. Choose one of \
                    \"initial-cluster\", \"discovery\", \"discovery-endpoints\" or \"discovery-srv\"";
    assert_eq!(
        error(&[
            "--discovery-srv=qk.test",
            "--initial-cluster=default=http://localhost:2380"
        ]),
        conflict
    );
    assert_eq!(
        error_with(
            &["--discovery-srv=qk.test"],
            &env_of(&[("ETCD_INITIAL_CLUSTER", "a=http://10.0.0.1:2380")])
        )
        .to_string(),
        conflict
    );
    // An explicitly empty --initial-cluster is no bootstrap flag.
    assert!(run(&["--discovery-srv=qk.test", "--initial-cluster="])
        .initial_cluster
        .is_empty());
    // etcd clears its default initial cluster for --discovery-srv-name alone too, and
    // then finds no member of that name.
    assert_eq!(
        bootstrap_error(&["--name=m1", "--discovery-srv-name=c1"]),
        r#"couldn't find local name "m1" in the initial cluster configuration"#
    );
}

#[test]
fn bad_cluster_state_is_refused() {
    assert_eq!(
        error(&["--initial-cluster-state", "old"]),
        r#"invalid value "old" for flag --initial-cluster-state: valid values are "new" and "existing""#
    );
}

#[test]
fn etcd_timing_rules_apply() {
    assert_eq!(
        error(&["--heartbeat-interval=300"]),
        "--election-timeout[1000ms] should be at least as 5 times as --heartbeat-interval[300ms]"
    );
    assert_eq!(
        error(&["--heartbeat-interval=0"]),
        "--heartbeat-interval must be >0 (set to 0ms)"
    );
    assert!(error(&["--election-timeout=60000"]).contains("is too long"));
    run(&["--heartbeat-interval=200", "--election-timeout=1000"]);
}

#[test]
fn urls_follow_etcds_rules() {
    let config = run(&[
        "--listen-client-urls=http://0.0.0.0:2379,http://127.0.0.1:2379,http://0.0.0.0:2379",
        "--advertise-client-urls",
        " http://node1.example:2379 ,http://[::1]:2379",
        "--listen-peer-urls=http://[::]:2380",
    ]);
    assert_eq!(config.listen_client_urls.len(), 2);
    assert_eq!(config.listen_client_urls[0].host_str(), Some("0.0.0.0"));
    assert_eq!(
        config.advertise_client_urls,
        urls(&["http://[::1]:2379", "http://node1.example:2379"])
    );
    assert_eq!(config.listen_peer_urls[0].port(), Some(2380));
    assert_eq!(
        error(&["--listen-client-urls=http://127.0.0.1:2379"]),
        "--advertise-client-urls is required when --listen-client-urls is set explicitly"
    );
    assert!(error(&["--listen-peer-urls=unix://127.0.0.1:2380"]).contains("unix socket"));
    assert_eq!(
        error(&["--listen-peer-urls=http://node1.example:2380"]),
        "expected IP in URL for binding (http://node1.example:2380)"
    );
    assert!(
        error(&["--listen-peer-urls=http://127.0.0.1:2380/x"]).contains("must not contain a path")
    );
    assert!(error(&["--listen-peer-urls=http://127.0.0.1"]).contains(r#"the form "host:port""#));
    assert!(error(&["--listen-peer-urls="]).contains("URL scheme must be"));
    assert!(error(&["--advertise-client-urls=http://:2379"]).contains("unexpected empty host"));
}
