//! `--config-file`, the logging flags, the gates and unix URLs against etcd's
//! behaviour: etcd's sample file, every key QuantyKube implements, precedence over
//! flags and `ETCD_*` variables, and etcd's errors for bad files (the messages of
//! `sigs.k8s.io/yaml` and Go's `encoding/json`, checked against etcd 3.4.23).
//!
//! Files are handed over through `parse_with_files`: these tests never touch the disk
//! or the process environment.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::file_keys::{leaves, Target};
use super::flags::{lookup, Treatment, FLAGS};
use super::*;

/// The files these tests can open, by path.
fn files(list: &[(&str, &str)]) -> impl Fn(&Path) -> Result<String, String> {
    let map: HashMap<PathBuf, String> = list
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
    move |p: &Path| {
        map.get(p)
            .cloned()
            .ok_or_else(|| format!("open {}: no such file or directory", p.display()))
    }
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn parse_file(
    text: &str,
    args: &[&str],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Config, Vec<String>), ConfigError> {
    let argv = ["quantykube", "--config-file", "/etc/etcd.yml"]
        .into_iter()
        .chain(args.iter().copied());
    match parse_with_files(argv, env, &files(&[("/etc/etcd.yml", text)]))? {
        Invocation::Run { config, warnings } => Ok((*config, warnings)),
        other => panic!("expected Run, got {other:?}"),
    }
}

fn load(text: &str) -> (Config, Vec<String>) {
    parse_file(text, &[], &|_| None).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn file_error(text: &str) -> String {
    match parse_file(text, &[], &|_| None) {
        Err(e) => e.to_string(),
        Ok((config, _)) => panic!("expected an error for {text:?}, got {config:?}"),
    }
}

fn flags_error(args: &[&str]) -> String {
    let argv = std::iter::once("quantykube").chain(args.iter().copied());
    match parse_with_files(argv, &|_| None, &files(&[])) {
        Err(e) => e.to_string(),
        Ok(other) => panic!("expected an error for {args:?}, got {other:?}"),
    }
}

fn run_flags(args: &[&str]) -> (Config, Vec<String>) {
    let argv = std::iter::once("quantykube").chain(args.iter().copied());
    match parse_with_files(argv, &|_| None, &files(&[])) {
        Ok(Invocation::Run { config, warnings }) => (*config, warnings),
        other => panic!("expected Run for {args:?}, got {other:?}"),
    }
}

/// etcd's own etcd.conf.yml.sample (v3.6.14), whose comments are left out.
const ETCD_SAMPLE: &str = r#"
name: 'default'
data-dir:
wal-dir:
snapshot-count: 10000
heartbeat-interval: 100
election-timeout: 1000
quota-backend-bytes: 0
listen-peer-urls: http://localhost:2380
listen-client-urls: http://localhost:2379
max-snapshots: 5
max-wals: 5
cors:
initial-advertise-peer-urls: http://localhost:2380
advertise-client-urls: http://localhost:2379
discovery:
discovery-fallback: 'proxy'
discovery-proxy:
discovery-srv:
initial-cluster:
initial-cluster-token: 'etcd-cluster'
initial-cluster-state: 'new'
strict-reconfig-check: false
enable-pprof: true
proxy: 'off'
proxy-failure-wait: 5000
proxy-refresh-interval: 30000
proxy-dial-timeout: 1000
proxy-write-timeout: 5000
proxy-read-timeout: 0
client-transport-security:
  cert-file:
  key-file:
  client-cert-auth: false
  trusted-ca-file:
  auto-tls: false
peer-transport-security:
  cert-file:
  key-file:
  client-cert-auth: false
  trusted-ca-file:
  auto-tls: false
  allowed-cn:
  allowed-hostname:
self-signed-cert-validity: 1
log-level: debug
logger: zap
log-outputs: [stderr]
force-new-cluster: false
auto-compaction-mode: periodic
auto-compaction-retention: "1"
cipher-suites: [
  TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
  TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
]
tls-min-version: 'TLS1.2'
tls-max-version: 'TLS1.3'
"#;

#[test]
fn etcds_sample_file_starts_a_member_with_its_meaning() {
    let (config, warnings) = load(ETCD_SAMPLE);
    assert_eq!(config.name, "default");
    assert_eq!(config.data_dir, PathBuf::from("default.quantykube"));
    assert_eq!(config.snapshot_count, 10_000);
    assert_eq!(config.heartbeat_interval, Duration::from_millis(100));
    assert_eq!(config.quota_backend_bytes, Some(2 << 30));
    assert_eq!(
        config.listen_client_urls[0].as_str(),
        "http://localhost:2379/"
    );
    assert_eq!(config.initial_cluster[0].name, "default");
    assert!(!config.strict_reconfig_check);
    assert_eq!(config.logs.level, LogLevel::Debug);
    assert_eq!(config.logs.outputs, [LogOutput::Stderr]);
    assert_eq!(config.logs.format, LogFormat::Json);
    assert_eq!(
        config.auto_compaction,
        Some(AutoCompaction::Periodic {
            retention: Duration::from_secs(3600)
        })
    );
    assert_eq!(config.tls.policy.cipher_suites.len(), 2);
    assert_eq!(config.tls.policy.max_version, Some(TlsVersion::Tls13));
    assert_eq!(config.config_file, Some(PathBuf::from("/etc/etcd.yml")));
    // The tuning keys are warned about as their flags are, and the keys etcd's own file
    // reader does not know (the v2 proxy's) are ignored, as etcd ignores them.
    for expected in [
        "config file key max-snapshots (--max-snapshots) is accepted",
        "config file key enable-pprof (--enable-pprof) is accepted",
        r#"config file key "proxy" is not an etcd setting: ignored"#,
        r#"config file key "discovery-fallback" is not an etcd setting"#,
    ] {
        assert!(
            warnings.iter().any(|w| w.starts_with(expected)),
            "{expected:?} in {warnings:#?}"
        );
    }
}

/// Every key whose flag QuantyKube implements, in two files (a key and its old name
/// cannot be given together, nor certificates with auto-TLS).
const EVERY_KEY: &str = r#"
name: m1
data-dir: /var/lib/qk/m1
wal-dir: /fast/qk/m1-wal
listen-peer-urls: http://127.0.0.1:12380
listen-client-urls: http://127.0.0.1:12379,unix:///run/qk/m1.sock
listen-client-http-urls: http://127.0.0.1:12381
listen-metrics-urls: http://127.0.0.1:12382
initial-advertise-peer-urls: http://10.0.0.1:12380
advertise-client-urls: http://10.0.0.1:12379
initial-cluster: m1=http://10.0.0.1:12380,m2=http://10.0.0.2:12380
initial-cluster-state: existing
initial-cluster-token: tok
heartbeat-interval: 50
election-timeout: 500
snapshot-count: 500
quota-backend-bytes: 4096
max-request-bytes: 2097152
max-txn-ops: 256
max-concurrent-streams: 64
log-level: warn
log-format: console
log-outputs: [stdout, /var/log/qk.log]
logger: zap
watch-progress-notify-interval: 90000000000
experimental-lease-checkpoint-interval: 30s
etcd-version: 3.5.17
gateway-body-timeout: 90s
strict-reconfig-check: false
max-learners: 3
enable-grpc-gateway: false
cors: http://a.example:80,http://b.example:8080
host-whitelist: localhost
auto-compaction-mode: revision
auto-compaction-retention: "1000"
auto-compaction-revision-interval: 1m
force-new-cluster: true
corrupt-check-time: 120000000000
compact-hash-check-time: 30000000000
feature-gates: InitialCorruptCheck=true,CompactHashCheck=true,SetMemberLocalAddr=true
auth-token: simple
bcrypt-cost: 12
auth-token-ttl: 600
cipher-suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]
tls-min-version: TLS1.2
tls-max-version: TLS1.3
self-signed-cert-validity: 3
client-transport-security:
  cert-file: /pki/server.crt
  key-file: /pki/server.key
  client-cert-file: /pki/client.crt
  client-key-file: /pki/client.key
  client-cert-auth: true
  trusted-ca-file: /pki/ca.crt
  allowed-hostname: [client.example]
peer-transport-security:
  cert-file: /pki/peer.crt
  key-file: /pki/peer.key
  client-cert-file: /pki/peer-client.crt
  client-key-file: /pki/peer-client.key
  client-cert-auth: true
  trusted-ca-file: /pki/peer-ca.crt
  allowed-cn: [m1, m2]
  skip-client-san-verification: true
"#;

const EVERY_OTHER_KEY: &str = r#"
discovery-srv: example.com
discovery-srv-name: qk
experimental-watch-progress-notify-interval: 5000000000
experimental-initial-corrupt-check: true
experimental-corrupt-check-time: 1000000000
experimental-compact-hash-check-enabled: true
experimental-compact-hash-check-time: 2000000000
experimental-peer-skip-client-san-verification: true
client-transport-security:
  auto-tls: true
peer-transport-security:
  auto-tls: true
  allowed-hostname: [peer.example]
"#;

#[test]
fn every_implemented_key_sets_what_its_flag_sets() {
    let (c, _) = load(EVERY_KEY);
    assert_eq!(c.name, "m1");
    assert_eq!(c.data_dir, PathBuf::from("/var/lib/qk/m1"));
    assert_eq!(c.wal_dir, Some(PathBuf::from("/fast/qk/m1-wal")));
    assert_eq!(c.listen_peer_urls[0].as_str(), "http://127.0.0.1:12380/");
    assert_eq!(c.listen_client_urls.len(), 2);
    assert_eq!(c.listen_client_urls[1].as_str(), "unix:///run/qk/m1.sock");
    assert_eq!(c.listen_client_http_urls.len(), 1);
    assert_eq!(c.listen_metrics_urls.len(), 1);
    assert_eq!(c.initial_advertise_peer_urls, ["http://10.0.0.1:12380"]);
    assert_eq!(c.advertise_client_urls, ["http://10.0.0.1:12379"]);
    assert_eq!(c.initial_cluster.len(), 2);
    assert_eq!(c.initial_cluster_state, ClusterState::Existing);
    assert_eq!(c.initial_cluster_token, "tok");
    assert_eq!(c.heartbeat_interval, Duration::from_millis(50));
    assert_eq!(c.election_timeout, Duration::from_millis(500));
    assert_eq!(c.snapshot_count, 500);
    assert_eq!(c.quota_backend_bytes, Some(4096));
    assert_eq!(c.max_request_bytes, 2 << 20);
    assert_eq!(c.max_txn_ops, 256);
    assert_eq!(c.max_concurrent_streams, 64);
    assert_eq!(
        c.logs,
        LogSettings {
            level: LogLevel::Warn,
            format: LogFormat::Console,
            outputs: vec![
                LogOutput::File(PathBuf::from("/var/log/qk.log")),
                LogOutput::Stdout
            ],
        }
    );
    assert_eq!(c.watch_progress_notify_interval, Duration::from_secs(90));
    assert_eq!(c.lease_checkpoint_interval, Duration::from_secs(30));
    assert_eq!(c.etcd_version, "3.5.17");
    assert_eq!(c.gateway_body_timeout, Duration::from_secs(90));
    assert!(!c.strict_reconfig_check);
    assert_eq!(c.max_learners, 3);
    assert!(!c.enable_grpc_gateway);
    assert_eq!(
        c.http_access.cors,
        ["http://a.example:80", "http://b.example:8080"]
    );
    assert_eq!(c.http_access.host_whitelist, ["localhost"]);
    assert_eq!(
        c.auto_compaction,
        Some(AutoCompaction::Revision {
            retention: 1000,
            interval: Duration::from_secs(60)
        })
    );
    assert!(c.force_new_cluster);
    assert!(c.initial_corrupt_check);
    assert_eq!(c.corrupt_check_time, Duration::from_secs(120));
    assert_eq!(c.compact_hash_check, Some(Duration::from_secs(30)));
    assert_eq!(c.peer_local_address, Some("10.0.0.1".parse().unwrap()));
    assert_eq!(c.auth.bcrypt_cost, 12);
    assert_eq!(c.auth.token_ttl, Duration::from_secs(600));
    assert!(c.auth.client_cert_auth);
    assert_eq!(c.tls.policy.cipher_suites.len(), 1);
    assert_eq!(c.tls.policy.self_signed_cert_validity_years, 3);
    let client = &c.tls.client;
    assert_eq!(client.cert_file, Some(PathBuf::from("/pki/server.crt")));
    assert_eq!(client.key_file, Some(PathBuf::from("/pki/server.key")));
    assert_eq!(
        client.client_cert_file,
        Some(PathBuf::from("/pki/client.crt"))
    );
    assert_eq!(
        client.client_key_file,
        Some(PathBuf::from("/pki/client.key"))
    );
    assert_eq!(client.trusted_ca_file, Some(PathBuf::from("/pki/ca.crt")));
    assert_eq!(client.allowed_hostnames, ["client.example"]);
    let peer = &c.tls.peer;
    assert_eq!(peer.cert_file, Some(PathBuf::from("/pki/peer.crt")));
    assert_eq!(peer.key_file, Some(PathBuf::from("/pki/peer.key")));
    assert_eq!(
        peer.client_cert_file,
        Some(PathBuf::from("/pki/peer-client.crt"))
    );
    assert_eq!(
        peer.client_key_file,
        Some(PathBuf::from("/pki/peer-client.key"))
    );
    assert_eq!(
        peer.trusted_ca_file,
        Some(PathBuf::from("/pki/peer-ca.crt"))
    );
    assert!(peer.client_cert_auth);
    assert_eq!(peer.allowed_cns, ["m1", "m2"]);
    assert!(peer.skip_client_san_verification);

    let (c, _) = load(EVERY_OTHER_KEY);
    assert_eq!(c.discovery_srv.as_deref(), Some("example.com"));
    assert_eq!(c.discovery_srv_name.as_deref(), Some("qk"));
    // etcd's file reader clears the default initial cluster for --discovery-srv.
    assert!(c.initial_cluster.is_empty());
    assert_eq!(c.watch_progress_notify_interval, Duration::from_secs(5));
    assert!(c.initial_corrupt_check);
    assert_eq!(c.corrupt_check_time, Duration::from_secs(1));
    assert_eq!(c.compact_hash_check, Some(Duration::from_secs(2)));
    assert!(c.tls.client.auto_tls && c.tls.peer.auto_tls);
    assert!(c.tls.peer.skip_client_san_verification);
    assert_eq!(c.tls.peer.allowed_hostnames, ["peer.example"]);
}

#[test]
fn the_tests_name_every_implemented_key() {
    let named: HashSet<String> = [EVERY_KEY, EVERY_OTHER_KEY]
        .iter()
        .flat_map(|text| {
            let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).unwrap();
            let mut keys = Vec::new();
            if let serde_yaml_ng::Value::Mapping(map) = value {
                for (k, v) in map {
                    let k = k.as_str().unwrap().to_string();
                    if let serde_yaml_ng::Value::Mapping(inner) = v {
                        for (ik, _) in inner {
                            keys.push(format!("{k}.{}", ik.as_str().unwrap()));
                        }
                    }
                    keys.push(k);
                }
            }
            keys
        })
        .collect();
    for (field, _, target) in leaves() {
        let Target::Flag(flag) = target else {
            continue;
        };
        let row = lookup(flag).unwrap_or_else(|| panic!("{} sets no etcd flag", field.path));
        if row.treatment == Treatment::Implemented {
            assert!(named.contains(field.path), "no test sets {}", field.path);
        }
    }
    // And every implemented flag but these has a key.
    let keyed: HashSet<&str> = leaves()
        .into_iter()
        .filter_map(|(_, _, t)| match t {
            Target::Flag(f) => Some(f),
            _ => None,
        })
        .collect();
    let without_key: Vec<&str> = FLAGS
        .iter()
        .filter(|f| f.treatment == Treatment::Implemented && !keyed.contains(f.name))
        .map(|f| f.name)
        .collect();
    assert_eq!(
        without_key,
        ["version", "config-file", "client-crl-file", "peer-crl-file"],
        "etcd's file has no key for these"
    );
}

#[test]
fn the_file_replaces_flags_and_environment() {
    let env = env_of(&[("ETCD_NAME", "from-env"), ("ETCD_WAL_DIR", "/wal")]);
    let (config, warnings) =
        parse_file("name: from-file\n", &["--name", "from-flag"], &env).unwrap();
    assert_eq!(config.name, "from-file");
    assert_eq!(
        warnings,
        ["ignoring --name, ETCD_WAL_DIR because --config-file is given (as etcd does)"]
    );
    // ETCD_CONFIG_FILE, when the flag is not given; the flag wins over it.
    let read = files(&[("/a.yml", "name: a\n"), ("/b.yml", "name: b\n")]);
    let env = env_of(&[("ETCD_CONFIG_FILE", "/a.yml"), ("ETCD_NAME", "e")]);
    let name = |args: &[&str]| match parse_with_files(
        std::iter::once("quantykube").chain(args.iter().copied()),
        &env,
        &read,
    ) {
        Ok(Invocation::Run { config, .. }) => config.name,
        other => panic!("{other:?}"),
    };
    assert_eq!(name(&[]), "a");
    assert_eq!(name(&["--config-file=/b.yml"]), "b");
    assert_eq!(name(&["--config-file="]), "a");
    // Help, version and usage errors still come from the command line.
    assert!(matches!(
        parse_with_files(
            ["quantykube", "--config-file=/a.yml", "--help"],
            &env,
            &read
        ),
        Ok(Invocation::Help(_))
    ));
    assert!(matches!(
        parse_with_files(
            ["quantykube", "--config-file=/a.yml", "--bogus"],
            &env,
            &read
        ),
        Err(ConfigError::Usage(_))
    ));
    assert_eq!(
        flags_error(&["--config-file=/missing.yml"]),
        "open /missing.yml: no such file or directory"
    );
}

#[test]
fn the_file_keeps_etcds_file_defaults() {
    // Unlike the flag, a listen URL alone keeps the default advertised URL.
    let (c, _) = load("listen-client-urls: http://127.0.0.1:2379\n");
    assert_eq!(c.advertise_client_urls, ["http://localhost:2379"]);
    // Empty strings and nulls leave defaults; an empty state is "new".
    let (c, _) = load(
        "listen-peer-urls: ''\ninitial-cluster-state: ''\nself-signed-cert-validity: 0\nname: ~\n",
    );
    assert_eq!(c.listen_peer_urls[0].as_str(), "http://localhost:2380/");
    assert_eq!(c.initial_cluster_state, ClusterState::New);
    assert_eq!(c.tls.policy.self_signed_cert_validity_years, 1);
    assert_eq!(c.name, "default");
    // An empty file is all defaults; keys match ignoring case, as Go's decoder does.
    assert_eq!(load("").0.name, "default");
    assert_eq!(load("Name: upper\n").0.name, "upper");
    // The last of a repeated key, and the first document of several, as go-yaml reads them.
    assert_eq!(load("name: a\nname: b\n").0.name, "b");
    assert_eq!(load("name: a\n---\nname: b\n").0.name, "a");
    // YAML 1.1 booleans, as etcd's yaml.v2 reads them, and floats without a fraction.
    let (c, _) = load("strict-reconfig-check: no\nheartbeat-interval: 1e2\n");
    assert!(!c.strict_reconfig_check);
    assert_eq!(c.heartbeat_interval, Duration::from_millis(100));
    assert_eq!(
        file_error("initial-cluster-state: old\n"),
        r#"unexpected clusterState "old""#
    );
}

#[test]
fn bad_files_get_etcds_errors() {
    const JSON: &str = "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal";
    for (text, expected) in [
        (
            "name: n1\n  data-dir: x: y\n",
            "error converting YAML to JSON: yaml: line 2: mapping values are not allowed in \
             this context",
        ),
        (
            "heartbeat-interval: \"100\"\n",
            "string into Go struct field configYAML.heartbeat-interval of type uint",
        ),
        (
            "heartbeat-interval: -1\n",
            "number -1 into Go struct field configYAML.heartbeat-interval of type uint",
        ),
        (
            "heartbeat-interval: 1.5\n",
            "number 1.5 into Go struct field configYAML.heartbeat-interval of type uint",
        ),
        (
            "max-concurrent-streams: 4294967296\n",
            "number 4294967296 into Go struct field configYAML.max-concurrent-streams of type \
             uint32",
        ),
        (
            "experimental-corrupt-check-time: 5m\n",
            "string into Go struct field configYAML.experimental-corrupt-check-time of type \
             time.Duration",
        ),
        (
            "name: 123\n",
            "number into Go struct field configYAML.name of type string",
        ),
        (
            "auto-compaction-retention: 1\n",
            "number into Go struct field configYAML.auto-compaction-retention of type string",
        ),
        (
            "log-outputs: stderr\n",
            "string into Go struct field configYAML.log-outputs of type []string",
        ),
        (
            "client-transport-security:\n  cert-file: 5\n  client-cert-auth: \"x\"\n",
            "number into Go struct field securityConfig.client-transport-security.cert-file of \
             type string",
        ),
        (
            "client-transport-security: 3\n",
            "number into Go struct field configYAML.client-transport-security of type \
             embed.securityConfig",
        ),
        ("- a\n- b\n", "array into Go value of type embed.configYAML"),
        // Go decodes the keys of the JSON object in byte order: `heartbeat` first.
        (
            "name: 1\nheartbeat-interval: x\n",
            "string into Go struct field configYAML.heartbeat-interval of type uint",
        ),
    ] {
        let error = file_error(text);
        let expected = if expected.starts_with("error ") {
            expected.to_string()
        } else {
            format!("{JSON} {expected}")
        };
        assert_eq!(error, expected, "for {text:?}");
    }
    assert_eq!(
        file_error("peer-transport-security:\n"),
        "invalid peer-transport-security"
    );
}

#[test]
fn keys_are_implemented_warned_or_refused_as_their_flags() {
    assert_eq!(
        file_error("discovery-proxy: http://proxy:8080\n"),
        "config file key discovery-proxy (--discovery-proxy) is an etcd flag that \
         QuantyKube does not implement yet"
    );
    assert_eq!(
        file_error("pre-vote: false\n"),
        "config file key pre-vote (--pre-vote) is an etcd flag that QuantyKube does not \
         implement yet (only --pre-vote=true, which is what QuantyKube does, is accepted)"
    );
    // A value that would not matter passes, as for the flag.
    load(
        "discovery-proxy: ''\npre-vote: true\ndiscovery-config:\n  client:\n    dial-timeout: 2000000000\n",
    );
    assert_eq!(
        file_error("discovery-config:\n  client:\n    auth:\n      password: hunter2\n"),
        "config file key discovery-config.client.auth.password (--discovery-password) is an \
         etcd flag that QuantyKube does not implement yet"
    );
    assert!(
        file_error("client-transport-security:\n  allowed-cn: [x]\n")
            .contains("client-transport-security.allowed-cn is an etcd setting")
    );
    let (_, warnings) = load("socket-options:\n  reuse-port: true\nmemory-mlock: true\n");
    assert!(warnings
        .iter()
        .any(|w| w.starts_with("config file key socket-options.reuse-port (--socket-reuse-port)")));
    assert!(warnings
        .iter()
        .any(|w| w.starts_with("config file key memory-mlock")));
    // Values are still read as the flag's are.
    assert_eq!(
        file_error("auth-token: jwt\n").split(':').next(),
        Some("invalid value \"jwt\" for config file key auth-token")
    );
}

#[test]
fn old_and_new_names_are_refused_together_in_every_source() {
    let both = "cannot set --experimental-corrupt-check-time and --corrupt-check-time at the \
                same time, please use --corrupt-check-time only";
    assert_eq!(
        flags_error(&[
            "--experimental-corrupt-check-time=1s",
            "--corrupt-check-time=1s"
        ]),
        both
    );
    let argv = ["quantykube", "--corrupt-check-time=1s"];
    let env = env_of(&[("ETCD_EXPERIMENTAL_CORRUPT_CHECK_TIME", "1s")]);
    match parse_with_files(argv, &env, &files(&[])) {
        Err(e) => assert_eq!(e.to_string(), both),
        other => panic!("{other:?}"),
    }
    // A null key counts as set, as in etcd's FlagsExplicitlySet.
    assert_eq!(
        file_error("experimental-corrupt-check-time: 1\ncorrupt-check-time:\n"),
        both
    );
    assert_eq!(
        file_error(
            "experimental-peer-skip-client-san-verification: true\npeer-transport-security:\n  \
             skip-client-san-verification: false\n"
        ),
        "cannot set --experimental-peer-skip-client-san-verification and \
         --peer-skip-client-san-verification at the same time, please use \
         --peer-skip-client-san-verification only"
    );
    // Tuning flags' new names too, and etcd's own message for the unary warning.
    assert!(flags_error(&[
        "--experimental-compaction-batch-limit=5",
        "--compaction-batch-limit=5"
    ])
    .starts_with("cannot set --experimental-compaction-batch-limit and"));
    assert_eq!(
        flags_error(&[
            "--experimental-warning-unary-request-duration=1s",
            "--warning-unary-request-duration=2s"
        ]),
        "both --experimental-warning-unary-request-duration and \
         --warning-unary-request-duration flags are set. Use only \
         --warning-unary-request-duration"
    );
    // Each name alone is accepted (and warned about as tuning).
    let (_, warnings) = run_flags(&["--compaction-batch-limit=5", "--memory-mlock"]);
    assert_eq!(warnings.len(), 2, "{warnings:?}");
}

#[test]
fn feature_gates_in_a_file_and_on_the_command_line() {
    let (c, _) = load("feature-gates: CompactHashCheck=true\n");
    assert!(c.feature_gates.enabled(Gate::CompactHashCheck));
    assert_eq!(c.compact_hash_check, Some(Duration::from_secs(60)));
    assert_eq!(
        file_error(
            "experimental-enable-lease-checkpoint: true\nfeature-gates: LeaseCheckpoint=true\n"
        ),
        "cannot specify both flags: --experimental-enable-lease-checkpoint=true and \
         --feature-gates=LeaseCheckpoint=true at the same time, please just use \
         --feature-gates=LeaseCheckpoint=true"
    );
    // Go calls the gate flag's Set once per occurrence.
    let (c, _) = run_flags(&[
        "--feature-gates=InitialCorruptCheck=true",
        "--feature-gates",
        "CompactHashCheck=true",
    ]);
    assert!(c.initial_corrupt_check);
    assert!(c.compact_hash_check.is_some());
    // The experimental flags set their gates; the tuning ones warn.
    let (c, warnings) = run_flags(&[
        "--experimental-stop-grpc-service-on-defrag",
        "--experimental-enable-lease-checkpoint",
        "--experimental-enable-lease-checkpoint-persist",
    ]);
    assert!(c.feature_gates.enabled(Gate::StopGrpcServiceOnDefrag));
    assert!(c.feature_gates.enabled(Gate::LeaseCheckpointPersist));
    // Warned about once, as the flag, not again as its gate.
    assert!(warnings
        .iter()
        .any(|w| w.starts_with("--experimental-stop-grpc-service-on-defrag is accepted")));
    assert!(!warnings
        .iter()
        .any(|w| w.starts_with("feature gate StopGRPCServiceOnDefrag")));
    let (_, warnings) = run_flags(&["--feature-gates=StopGRPCServiceOnDefrag=true"]);
    assert!(warnings
        .iter()
        .any(|w| w.starts_with("feature gate StopGRPCServiceOnDefrag=true is accepted")));
    assert!(
        flags_error(&["--experimental-enable-lease-checkpoint-persist"])
            .contains("LeaseCheckpointPersist requires enabling feature gate LeaseCheckpoint")
    );
    // SetMemberLocalAddr: the first advertised peer IP that is not loopback.
    let (c, warnings) = run_flags(&["--feature-gates=SetMemberLocalAddr=true"]);
    assert_eq!(c.peer_local_address, None);
    assert!(warnings[0].starts_with("unable to set a member local address"));
}

#[test]
fn log_flags_are_checked_as_etcd_checks_them() {
    let (c, _) = run_flags(&["--log-format=console", "--log-outputs=stdout,stderr,stdout"]);
    assert_eq!(c.logs.format, LogFormat::Console);
    assert_eq!(c.logs.outputs, [LogOutput::Stderr, LogOutput::Stdout]);
    assert_eq!(
        run_flags(&["--log-outputs=default"]).0.logs.outputs,
        [LogOutput::Stderr]
    );
    assert_eq!(
        flags_error(&["--log-format=text"]),
        "unknown log format: text, supported values json, console"
    );
    assert_eq!(
        flags_error(&["--log-outputs=default,stdout"]),
        r#"multi logoutput for "default" is not supported yet"#
    );
    assert_eq!(
        flags_error(&["--logger=capnslog"]),
        "--logger=capnslog is removed in v3.5"
    );
    assert_eq!(flags_error(&["--logger=x"]), r#"unknown logger option "x""#);
    let (c, warnings) = run_flags(&["--log-outputs=systemd/journal"]);
    assert_eq!(c.logs.outputs, [LogOutput::Stderr]);
    assert!(warnings[0].contains("systemd/journal"));
}

#[test]
fn client_urls_may_be_unix_sockets_and_peer_urls_may_not() {
    let (c, _) = run_flags(&[
        "--listen-client-urls=unix:///run/qk.sock,unixs://localhost:2379",
        "--advertise-client-urls=unix:///run/qk.sock",
        "--cert-file=/pki/s.crt",
        "--key-file=/pki/s.key",
    ]);
    assert_eq!(c.listen_client_urls.len(), 2);
    assert_eq!(c.advertise_client_urls, ["unix:///run/qk.sock"]);
    assert_eq!(
        flags_error(&[
            "--listen-client-urls=unixs:///run/qk.sock",
            "--advertise-client-urls=unix:///run/qk.sock"
        ]),
        "TLS key/cert (--cert-file, --key-file) must be provided for client url \
         unixs:///run/qk.sock with HTTPS scheme"
    );
    for flag in ["--listen-peer-urls", "--initial-advertise-peer-urls"] {
        assert!(flags_error(&[&format!("{flag}=unix:///run/p.sock")])
            .contains("QuantyKube's peers use TCP only"));
    }
    assert!(flags_error(&["--advertise-client-urls=http://:2379"]).contains(
        r#"must be in the format "host:port", "unix:/path/to/socket" or "unixs:/path/to/socket""#
    ));
}
