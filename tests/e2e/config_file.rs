//! etcd's `--config-file`, `--feature-gates`, `--log-format`/`--log-outputs` and unix
//! socket client URLs, on real members.
//!
//! Members start from a YAML file with every key both targets read, while the
//! harness's own flags (or, with `flags_as_env`, its `ETCD_*` variables and
//! `ETCD_CONFIG_FILE`) name other values, so that what the members do shows the file
//! won. etcd 3.4 is the oracle for the file (its keys, precedence and errors), the JSON
//! logs of `--logger zap` and `unix://host:port` sockets; it lacks `--feature-gates`,
//! `--log-format`, 3.6's unprefixed flag names and 3.7's `unix:///path` URLs, which are
//! checked on QuantyKube only (the tests say where).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use etcd_client::{Client, EventType, TxnOp};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tonic::transport::Endpoint;

use crate::harness::{
    etcdctl_binary, log_since, ClusterOptions, CmdOutput, MemberSpec, Target, ETCDCTL_TIMEOUT,
};

/// The file's names for the members, unlike the harness's `m0`, `m1`...
fn file_name(i: usize) -> String {
    format!("file-m{i}")
}

/// The config file of member `spec`: the harness's URLs, the file's own names and
/// token, and the keys of the limits and logs that the tests observe.
fn config_yaml(spec: &MemberSpec, members: usize, extra: &str) -> String {
    let url = |port: u16| format!("http://{}:{port}", spec.ip);
    let initial_cluster: Vec<String> = (0..members)
        .map(|i| {
            // Peer ports are the harness's: client port + 1, two ports per member.
            let peer = spec.client_port - 2 * spec.index as u16 + 2 * i as u16 + 1;
            format!("{}={}", file_name(i), url(peer))
        })
        .collect();
    format!(
        "name: {name}\n\
         data-dir: {data}\n\
         listen-client-urls: {client},unix://localhost:{socket}\n\
         advertise-client-urls: {client}\n\
         listen-peer-urls: {peer}\n\
         initial-advertise-peer-urls: {peer}\n\
         initial-cluster: {cluster}\n\
         initial-cluster-state: new\n\
         initial-cluster-token: file-token\n\
         heartbeat-interval: 50\n\
         election-timeout: 500\n\
         snapshot-count: 5000\n\
         max-txn-ops: 3\n\
         max-request-bytes: 4096\n\
         quota-backend-bytes: 0\n\
         strict-reconfig-check: true\n\
         auto-compaction-mode: revision\n\
         auto-compaction-retention: \"1000\"\n\
         auth-token: simple\n\
         bcrypt-cost: 10\n\
         auth-token-ttl: 300\n\
         force-new-cluster: false\n\
         listen-metrics-urls: {metrics}\n\
         logger: zap\n\
         log-level: info\n\
         log-outputs: [stderr, {log}]\n\
         {extra}",
        name = file_name(spec.index),
        data = spec.data_dir().display(),
        client = url(spec.client_port),
        socket = spec.spare_ports[1],
        peer = url(spec.peer_port),
        cluster = initial_cluster.join(","),
        metrics = url(spec.spare_ports[0]),
        log = json_log(&spec.dir).display(),
    )
}

fn config_path(dir: &Path) -> PathBuf {
    dir.join("etcd.yml")
}

fn json_log(dir: &Path) -> PathBuf {
    dir.join("log.json")
}

/// Members that start from their config file (given as `--config-file`, or as
/// `ETCD_CONFIG_FILE` with every harness flag an `ETCD_*` variable).
fn from_file(members: usize, as_env: bool, extra: &'static str) -> ClusterOptions {
    let options = ClusterOptions::new(members)
        .metrics_urls()
        .prepare(move |spec| {
            std::fs::write(config_path(&spec.dir), config_yaml(spec, members, extra))
                .expect("write the config file");
        })
        .member_args(|spec| {
            vec![format!(
                "--config-file={}",
                config_path(&spec.dir).display()
            )]
        });
    if as_env {
        options.flags_as_env()
    } else {
        options
    }
}

/// etcdctl in member `i`'s directory, where `unix://localhost:port` sockets are.
async fn etcdctl_in(dir: &Path, endpoint: &str, args: &[&str]) -> CmdOutput {
    let mut cmd = tokio::process::Command::new(etcdctl_binary());
    cmd.current_dir(dir)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("--dial-timeout=5s")
        .arg("--command-timeout=15s")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(ETCDCTL_TIMEOUT, cmd.output())
        .await
        .expect("etcdctl finished in time")
        .expect("run etcdctl");
    CmdOutput {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// etcd-client over a unix socket: its `connect` takes http(s) endpoints only, so the
/// channel dials the socket itself.
async fn unix_client(socket: PathBuf) -> Client {
    let channel = Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .expect("connect over the unix socket");
    Client::from_channel(etcd_client::Channel::Tonic(channel), None)
        .await
        .expect("client over the unix socket")
}

/// `curl --unix-socket`: the HTTP endpoints answer on the client socket too.
async fn curl_unix(socket: &Path, path: &str) -> String {
    let out = tokio::process::Command::new("curl")
        .args(["-sS", "--max-time", "10", "--unix-socket"])
        .arg(socket)
        .arg(format!("http://localhost{path}"))
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run curl");
    assert!(
        out.status.success(),
        "curl {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The JSON lines of a zap log: each has `level`, `ts`, `caller` and `msg` first, in
/// that order; returns them parsed.
fn parse_json_log(text: &str, target: Target) -> Vec<serde_json::Map<String, Value>> {
    let mut lines = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let value: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("{target}: not a JSON line ({e}): {line}"));
        let Value::Object(object) = value else {
            panic!("{target}: not a JSON object: {line}");
        };
        let keys: Vec<&str> = object.keys().map(String::as_str).take(4).collect();
        // serde_json's map is sorted; the order on the line is checked on the text.
        let positions: Vec<usize> = ["\"level\":", "\"ts\":", "\"caller\":", "\"msg\":"]
            .iter()
            .map(|k| {
                line.find(k)
                    .unwrap_or_else(|| panic!("{target}: no {k} in {line}"))
            })
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "{target}: keys out of zap's order in {line} ({keys:?})"
        );
        let level = object["level"].as_str().unwrap_or_default();
        assert!(
            ["debug", "info", "warn", "error"].contains(&level),
            "{target}: level {level:?} in {line}"
        );
        let ts = object["ts"].as_str().unwrap_or_default();
        assert!(
            ts.len() >= 24 && ts.as_bytes()[10] == b'T',
            "{target}: ts {ts:?}"
        );
        if target == Target::Quantykube {
            // etcd 3.5+'s `2006-01-02T15:04:05.000000Z0700` (3.4 has milliseconds).
            assert_eq!(ts.split('.').nth(1).map(|f| f.len()), Some(7), "{ts}");
        }
        let caller = object["caller"].as_str().unwrap_or_default();
        assert!(
            caller.contains('/')
                && caller
                    .rsplit(':')
                    .next()
                    .is_some_and(|l| l.parse::<u32>().is_ok()),
            "{target}: caller {caller:?}"
        );
        lines.push(object);
    }
    lines
}

#[tokio::test(flavor = "multi_thread")]
async fn members_start_from_a_config_file_and_ignore_flags_and_environment() {
    for as_env in [false, true] {
        let cluster = from_file(3, as_env, "").start().await;
        let target = cluster.target();
        let mut client = cluster.client(0).await;
        // The file's names, not the harness's flags (or ETCD_NAME).
        let mut names: Vec<String> = client
            .member_list()
            .await
            .expect("member list")
            .members()
            .iter()
            .map(|m| m.name().to_string())
            .collect();
        names.sort();
        assert_eq!(
            names,
            ["file-m0", "file-m1", "file-m2"],
            "{target}, env {as_env}"
        );
        // max-txn-ops: 3 and max-request-bytes: 4096.
        let ops: Vec<TxnOp> = (0..4)
            .map(|i| TxnOp::put(format!("k{i}"), "v", None))
            .collect();
        let refused = client
            .txn(etcd_client::Txn::new().and_then(ops))
            .await
            .expect_err("4 ops over max-txn-ops 3");
        assert!(
            refused
                .to_string()
                .contains("too many operations in txn request"),
            "{target}: {refused}"
        );
        let refused = client
            .put("big", vec![b'x'; 5000], None)
            .await
            .expect_err("over max-request-bytes");
        assert!(
            refused.to_string().contains("request is too large"),
            "{target}: {refused}"
        );
        client.put("small", "v", None).await.expect("a small put");
        // Every member logged etcd's line about the file, with its path, as JSON.
        for i in 0..3 {
            let spec = cluster.member_spec(i);
            let lines = parse_json_log(&log_since(&json_log(&spec.dir), 0), target);
            let loaded = lines
                .iter()
                .find(|l| {
                    l["msg"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("loaded server configuration"))
                })
                .unwrap_or_else(|| panic!("{target}: no 'loaded server configuration' line"));
            assert_eq!(loaded["level"], "info");
            assert_eq!(
                loaded["path"].as_str(),
                Some(config_path(&spec.dir).to_str().unwrap())
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_reach_a_member_over_its_unix_socket() {
    let cluster = from_file(1, false, "").start().await;
    let target = cluster.target();
    let spec = cluster.member_spec(0);
    // etcd 3.4 and 3.6: `unix://host:port` is the file `host:port` in the member's
    // working directory.
    let endpoint = format!("unix://localhost:{}", spec.spare_ports[1]);
    let socket = spec.dir.join(format!("localhost:{}", spec.spare_ports[1]));
    assert!(
        socket.exists(),
        "{target}: no socket at {}",
        socket.display()
    );
    etcdctl_in(&spec.dir, &endpoint, &["put", "via-unix", "1"])
        .await
        .assert_success();
    let out = etcdctl_in(
        &spec.dir,
        &endpoint,
        &["get", "via-unix", "--print-value-only"],
    )
    .await;
    assert_eq!(out.assert_success().stdout.trim(), "1", "{target}");

    let mut client = unix_client(socket.clone()).await;
    let mut events = client.watch("via-unix", None).await.expect("watch");
    client
        .put("via-unix", "2", None)
        .await
        .expect("put over the socket");
    let response = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let response = events
                .message()
                .await
                .expect("watch stream")
                .expect("a watch response");
            if !response.events().is_empty() {
                return response;
            }
        }
    })
    .await
    .expect("a watch event in time");
    let event = &response.events()[0];
    assert_eq!(event.event_type(), EventType::Put);
    assert_eq!(event.kv().map(|kv| kv.value()), Some(&b"2"[..]));
    let got = client.get("via-unix", None).await.expect("range");
    assert_eq!(got.kvs()[0].value(), b"2");

    let health: Value = serde_json::from_str(&curl_unix(&socket, "/health").await).unwrap();
    assert_eq!(health["health"], "true", "{target}");
    let version: Value = serde_json::from_str(&curl_unix(&socket, "/version").await).unwrap();
    assert!(version["etcdserver"].is_string(), "{target}: {version}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unix_urls_with_a_path_are_listened_on_and_advertised() {
    // etcd 3.7: `unix:///path` client URLs, advertised too. etcd 3.4 refuses a unix
    // URL without host:port, so this checks QuantyKube only.
    if Target::from_env() == Target::Etcd {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("qk.sock");
    // A stale socket of an earlier run is replaced.
    drop(std::os::unix::net::UnixListener::bind(&socket).expect("stale socket"));
    let url = format!("unix://{}", socket.display());
    let listen = url.clone();
    let advertise = url.clone();
    let cluster = ClusterOptions::new(1)
        .extra_client_urls(move |_| vec![listen.clone()])
        .member_args(move |spec| {
            vec![format!(
                "--advertise-client-urls=http://{}:{},{advertise}",
                spec.ip, spec.client_port
            )]
        })
        .start()
        .await;
    let spec = cluster.member_spec(0);
    let endpoint = url;
    let members = cluster
        .client(0)
        .await
        .member_list()
        .await
        .expect("member list");
    assert_eq!(
        members.members()[0].client_urls(),
        [
            format!("http://{}:{}", spec.ip, spec.client_port),
            endpoint.clone()
        ]
    );
    etcdctl_in(&spec.dir, &endpoint, &["put", "abs", "1"])
        .await
        .assert_success();
    let out = etcdctl_in(&spec.dir, &endpoint, &["endpoint", "status"]).await;
    assert!(
        out.assert_success().stdout.contains(&endpoint),
        "{}",
        out.stdout
    );
    let mut client = unix_client(socket.clone()).await;
    assert_eq!(
        client.get("abs", None).await.unwrap().kvs()[0].value(),
        b"1"
    );
    drop(cluster);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_config_files_get_etcds_errors() {
    const JSON: &str = "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal";
    let cases: &[(&str, &str)] = &[
        ("name: n1\n  data-dir: x: y\n", "error converting YAML to JSON: yaml: line 2: mapping values are not allowed in this context"),
        ("heartbeat-interval: \"100\"\n", "string into Go struct field configYAML.heartbeat-interval of type uint"),
        ("heartbeat-interval: -1\n", "number -1 into Go struct field configYAML.heartbeat-interval of type uint"),
        ("experimental-corrupt-check-time: 5m\n", "string into Go struct field configYAML.experimental-corrupt-check-time of type time.Duration"),
        ("name: 123\n", "number into Go struct field configYAML.name of type string"),
        ("client-transport-security:\n  cert-file: 5\n", "number into Go struct field securityConfig.client-transport-security.cert-file of type string"),
        ("log-outputs: stderr\n", "string into Go struct field configYAML.log-outputs of type []string"),
    ];
    let target = Target::from_env();
    for (i, (text, expected)) in cases.iter().enumerate() {
        let text = text.to_string();
        let mut cluster = ClusterOptions::new(1)
            .ready(&[])
            .prepare(move |spec| std::fs::write(config_path(&spec.dir), &text).unwrap())
            .member_args(|spec| {
                vec![format!(
                    "--config-file={}",
                    config_path(&spec.dir).display()
                )]
            })
            .start()
            .await;
        let status = cluster
            .wait_exit(0, Duration::from_secs(20))
            .await
            .unwrap_or_else(|| panic!("{target}: case {i} did not stop"));
        assert_eq!(status.code(), Some(1), "{target}: case {i}");
        let log = log_since(&cluster.log_path(0), 0);
        let expected = if expected.starts_with("error ") {
            expected.to_string()
        } else {
            format!("{JSON} {expected}")
        };
        assert!(
            log.contains(&expected),
            "{target}: case {i}: {expected:?} not in\n{log}"
        );
    }
    // A file that cannot be opened: Go's words.
    let mut cluster = ClusterOptions::new(1)
        .ready(&[])
        .arg("--config-file=/nonexistent/etcd.yml")
        .start()
        .await;
    assert_eq!(
        cluster
            .wait_exit(0, Duration::from_secs(20))
            .await
            .and_then(|s| s.code()),
        Some(1)
    );
    let log = log_since(&cluster.log_path(0), 0);
    assert!(
        log.contains("open /nonexistent/etcd.yml: no such file or directory"),
        "{target}: {log}"
    );
}

/// Starts one member with `args` that must refuse to start; returns its log.
async fn refused(args: &[&str]) -> String {
    let mut cluster = ClusterOptions::new(1)
        .ready(&[])
        .args(args.iter().map(|a| a.to_string()))
        .start()
        .await;
    let status = cluster.wait_exit(0, Duration::from_secs(20)).await;
    assert!(
        status.is_some_and(|s| !s.success()),
        "{args:?} started: {status:?}"
    );
    log_since(&cluster.log_path(0), 0)
}

#[tokio::test(flavor = "multi_thread")]
async fn feature_gates_and_unprefixed_flags_are_read_as_etcd_3_6_reads_them() {
    // etcd 3.4 has neither --feature-gates nor 3.6's unprefixed names: QuantyKube only.
    if Target::from_env() == Target::Etcd {
        return;
    }
    let cluster = ClusterOptions::new(1)
        .args([
            "--feature-gates=CompactHashCheck=true,SetMemberLocalAddr=true",
            "--feature-gates=LeaseCheckpoint=true,LeaseCheckpointPersist=true",
            "--compaction-batch-limit=100",
            "--snapshot-catchup-entries=100",
            "--corrupt-check-time=1m",
            "--compact-hash-check-time=30s",
            "--log-outputs=stdout",
        ])
        .start()
        .await;
    let lines = parse_json_log(&log_since(&cluster.log_path(0), 0), Target::Quantykube);
    // The harness's loopback addresses leave SetMemberLocalAddr nothing to pick.
    assert!(lines.iter().any(|l| l["level"] == "warn"
        && l["msg"]
            .as_str()
            .is_some_and(|m| m.starts_with("unable to set a member local address"))));
    drop(cluster);

    let log = refused(&["--feature-gates=Bogus=true"]).await;
    assert!(log.contains("unrecognized feature gate: Bogus"), "{log}");
    let log = refused(&[
        "--experimental-compact-hash-check-enabled",
        "--feature-gates=CompactHashCheck=true",
    ])
    .await;
    assert!(
        log.contains(
            "cannot specify both flags: --experimental-compact-hash-check-enabled=true and \
             --feature-gates=CompactHashCheck=true at the same time"
        ),
        "{log}"
    );
    let log = refused(&[
        "--corrupt-check-time=1m",
        "--experimental-corrupt-check-time=1m",
    ])
    .await;
    assert!(
        log.contains(
            "cannot set --experimental-corrupt-check-time and --corrupt-check-time at the same \
             time, please use --corrupt-check-time only"
        ),
        "{log}"
    );
    let log = refused(&["--feature-gates=LeaseCheckpointPersist=true"]).await;
    assert!(
        log.contains("requires enabling feature gate LeaseCheckpoint"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn console_logs_are_zaps_console_lines() {
    // etcd 3.4 has no --log-format (its zap logger writes JSON only): QuantyKube only.
    if Target::from_env() == Target::Etcd {
        return;
    }
    let cluster = ClusterOptions::new(1)
        .args(["--log-format=console", "--log-outputs=stderr"])
        .start()
        .await;
    let text = log_since(&cluster.log_path(0), 0);
    let mut listening = false;
    for line in text.lines().filter(|l| !l.is_empty()) {
        let parts: Vec<&str> = line.splitn(5, '\t').collect();
        assert!(parts.len() >= 4, "not a console line: {line:?}");
        assert_eq!(parts[0].as_bytes().get(10), Some(&b'T'), "{line}");
        assert!(
            ["debug", "info", "warn", "error"].contains(&parts[1]),
            "{line}"
        );
        assert!(parts[2].contains(".rs:"), "{line}");
        if parts[3] == "listening" {
            let fields: Value = serde_json::from_str(parts[4]).expect("fields as JSON");
            assert!(fields["url"].is_string(), "{line}");
            listening = true;
        }
    }
    assert!(listening, "no 'listening' line in\n{text}");
    let log = refused(&["--log-format=text"]).await;
    assert!(
        log.contains("unknown log format: text, supported values json, console"),
        "{log}"
    );
}
