//! The etcd 3.6 flag table (server/embed/config.go `AddFlags` and
//! server/etcdmain/config.go): every flag etcd accepts, how Go's flag package reads its
//! value ([`Kind`]), and what QuantyKube does with it ([`Treatment`]); the flags etcd
//! refuses together with their old names; and the warning or refusal for every flag
//! QuantyKube does not implement.
//!
//! This module owns which flags exist and their treatment. It never reads a value into
//! [`Config`](super::Config) (`resolve` does) nor scans arguments, and it must never
//! read the environment, log or exit: warnings go to the caller's list.

use super::error::ConfigError;
use super::setting::Setting;
use super::values::{parse_go_bool, parse_go_duration, parse_go_int, parse_go_uint, SYNTAX_ERROR};

/// How a flag takes its value, as Go's flag package sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// `-flag` means true; a value only as `-flag=value`.
    Bool,
    Uint,
    Int,
    Duration,
    Text,
}

/// What QuantyKube does with an etcd flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Treatment {
    /// Read into [`Config`](super::Config); also declared on the clap command.
    Implemented,
    /// Only tunes etcd's performance, resources or observability: accepted, ignored,
    /// and warned about; the text says why ignoring it is harmless.
    Tuning(&'static str),
    /// etcd itself accepts and ignores it; the text is etcd's warning.
    Obsolete(&'static str),
    /// Changes behaviour QuantyKube lacks: refused, unless set to the value that
    /// describes what QuantyKube does anyway (usually etcd's default).
    Unimplemented(Option<&'static str>),
}

/// One row of the table.
pub(super) struct EtcdFlag {
    pub(super) name: &'static str,
    pub(super) kind: Kind,
    pub(super) treatment: Treatment,
}

const fn flag(name: &'static str, kind: Kind, treatment: Treatment) -> EtcdFlag {
    EtcdFlag {
        name,
        kind,
        treatment,
    }
}

const PERF: Treatment = Treatment::Tuning("it only tunes etcd's performance or resource use");
const SOCKET: Treatment = Treatment::Tuning("it only sets a socket option on etcd's listeners");
const OBSERVE: Treatment =
    Treatment::Tuning("it only configures etcd's logs, metrics, profiling or tracing");
const LEASES: Treatment = Treatment::Tuning("QuantyKube always checkpoints lease TTLs");
const DEFRAG: Treatment = Treatment::Tuning(
    "RocksDB reclaims compacted space in the background, and Defragment (which only \
     hastens that) never stops a member from serving reads and writes",
);
const FSYNC: Treatment = Treatment::Tuning("QuantyKube always fsyncs");
const REFUSED: Treatment = Treatment::Unimplemented(Some(""));
const fn only(value: &'static str) -> Treatment {
    Treatment::Unimplemented(Some(value))
}
const IGNORED_BY_ETCD: Treatment = Treatment::Obsolete("flag is no longer supported - ignoring");

use Kind::{Bool, Duration as Dur, Int, Text, Uint};
use Treatment::Implemented;

/// Every flag `etcd` 3.6 accepts (plus our `--etcd-version`, `--gateway-body-timeout`
/// and `--auto-compaction-revision-interval`), except `-h`/`-help`.
pub(super) static FLAGS: &[EtcdFlag] = &[
    // Implemented.
    flag("name", Text, Implemented),
    flag("data-dir", Text, Implemented),
    flag("wal-dir", Text, Implemented),
    flag("listen-peer-urls", Text, Implemented),
    flag("listen-client-urls", Text, Implemented),
    flag("initial-advertise-peer-urls", Text, Implemented),
    flag("advertise-client-urls", Text, Implemented),
    flag("initial-cluster", Text, Implemented),
    flag("initial-cluster-state", Text, Implemented),
    flag("initial-cluster-token", Text, Implemented),
    flag("heartbeat-interval", Text, Implemented),
    flag("election-timeout", Text, Implemented),
    flag("snapshot-count", Text, Implemented),
    // etcd's meaning: 0 (the default) is 2 GiB, negative is no quota, and the store
    // counted is the revision store's RocksDB files and memtables. etcd's warning
    // above 8 GiB (bbolt's performance cliff) is not given: RocksDB has none there.
    flag("quota-backend-bytes", Int, Implemented),
    flag("max-request-bytes", Text, Implemented),
    flag("max-txn-ops", Text, Implemented),
    flag("log-level", Text, Implemented),
    flag(
        "experimental-watch-progress-notify-interval",
        Text,
        Implemented,
    ),
    flag("watch-progress-notify-interval", Text, Implemented),
    flag("experimental-lease-checkpoint-interval", Text, Implemented),
    flag("etcd-version", Text, Implemented),
    flag("gateway-body-timeout", Text, Implemented),
    flag("strict-reconfig-check", Bool, Implemented),
    flag("max-learners", Int, Implemented),
    flag("discovery-srv", Text, Implemented),
    flag("discovery-srv-name", Text, Implemented),
    flag("version", Bool, Implemented),
    flag("listen-client-http-urls", Text, Implemented),
    flag("listen-metrics-urls", Text, Implemented),
    flag("auto-compaction-mode", Text, Implemented),
    flag("auto-compaction-retention", Text, Implemented),
    // QuantyKube's own: etcd fixes revision mode's interval at 5 minutes.
    flag("auto-compaction-revision-interval", Text, Implemented),
    flag("force-new-cluster", Bool, Implemented),
    // config/file.rs: the file replaces the command line and the environment.
    flag("config-file", Text, Implemented),
    // Corruption checks and feature gates (config/checks.rs).
    flag("experimental-initial-corrupt-check", Bool, Implemented),
    flag("corrupt-check-time", Dur, Implemented),
    flag("experimental-corrupt-check-time", Dur, Implemented),
    flag("experimental-compact-hash-check-enabled", Bool, Implemented),
    flag("compact-hash-check-time", Dur, Implemented),
    flag("experimental-compact-hash-check-time", Dur, Implemented),
    flag("feature-gates", Text, Implemented),
    // TLS (config/tls.rs).
    flag("cert-file", Text, Implemented),
    flag("key-file", Text, Implemented),
    flag("client-cert-file", Text, Implemented),
    flag("client-key-file", Text, Implemented),
    flag("client-cert-auth", Bool, Implemented),
    flag("client-crl-file", Text, Implemented),
    flag("client-cert-allowed-hostname", Text, Implemented),
    flag("trusted-ca-file", Text, Implemented),
    flag("auto-tls", Bool, Implemented),
    flag("peer-cert-file", Text, Implemented),
    flag("peer-key-file", Text, Implemented),
    flag("peer-client-cert-file", Text, Implemented),
    flag("peer-client-key-file", Text, Implemented),
    flag("peer-client-cert-auth", Bool, Implemented),
    flag("peer-trusted-ca-file", Text, Implemented),
    flag("peer-auto-tls", Bool, Implemented),
    flag("peer-crl-file", Text, Implemented),
    flag("peer-cert-allowed-cn", Text, Implemented),
    flag("peer-cert-allowed-hostname", Text, Implemented),
    flag("peer-skip-client-san-verification", Bool, Implemented),
    flag(
        "experimental-peer-skip-client-san-verification",
        Bool,
        Implemented,
    ),
    flag("cipher-suites", Text, Implemented),
    flag("tls-min-version", Text, Implemented),
    flag("tls-max-version", Text, Implemented),
    flag("self-signed-cert-validity", Uint, Implemented),
    // Member tuning.
    flag("max-snapshots", Uint, PERF),
    flag("max-wals", Uint, PERF),
    flag("initial-election-tick-advance", Bool, PERF),
    flag("backend-bbolt-freelist-type", Text, PERF),
    flag("backend-batch-interval", Dur, PERF),
    flag("backend-batch-limit", Int, PERF),
    flag("max-concurrent-streams", Uint, Implemented),
    flag("grpc-keepalive-min-time", Dur, PERF),
    flag("grpc-keepalive-interval", Dur, PERF),
    flag("grpc-keepalive-timeout", Dur, PERF),
    flag("socket-reuse-port", Bool, SOCKET),
    flag("socket-reuse-address", Bool, SOCKET),
    flag("raft-read-timeout", Dur, PERF),
    flag("raft-write-timeout", Dur, PERF),
    flag("snapshot-catchup-entries", Uint, PERF),
    flag("experimental-snapshot-catchup-entries", Uint, PERF),
    flag("compaction-batch-limit", Int, PERF),
    flag("experimental-compaction-batch-limit", Int, PERF),
    flag("compaction-sleep-interval", Dur, PERF),
    flag("experimental-compaction-sleep-interval", Dur, PERF),
    flag("experimental-txn-mode-write-with-shared-buffer", Bool, PERF),
    flag("memory-mlock", Bool, PERF),
    flag("experimental-memory-mlock", Bool, PERF),
    flag("downgrade-check-time", Dur, PERF),
    flag("experimental-downgrade-check-time", Dur, PERF),
    flag("bootstrap-defrag-threshold-megabytes", Uint, DEFRAG),
    flag(
        "experimental-bootstrap-defrag-threshold-megabytes",
        Uint,
        DEFRAG,
    ),
    flag("experimental-stop-grpc-service-on-defrag", Bool, DEFRAG),
    flag("unsafe-no-fsync", Bool, FSYNC),
    flag("experimental-enable-lease-checkpoint", Bool, LEASES),
    flag("experimental-enable-lease-checkpoint-persist", Bool, LEASES),
    flag("cors", Text, Implemented),
    flag("host-whitelist", Text, Implemented),
    // Logging, metrics, profiling, tracing.
    flag("logger", Text, Implemented),
    flag("log-outputs", Text, Implemented),
    flag("log-format", Text, Implemented),
    flag("enable-log-rotation", Bool, OBSERVE),
    flag("log-rotation-config-json", Text, OBSERVE),
    flag("enable-pprof", Bool, OBSERVE),
    flag("metrics", Text, OBSERVE),
    flag("warning-apply-duration", Dur, OBSERVE),
    flag("experimental-warning-apply-duration", Dur, OBSERVE),
    flag("warning-unary-request-duration", Dur, OBSERVE),
    flag("experimental-warning-unary-request-duration", Dur, OBSERVE),
    flag("enable-distributed-tracing", Bool, OBSERVE),
    flag("experimental-enable-distributed-tracing", Bool, OBSERVE),
    flag("distributed-tracing-address", Text, OBSERVE),
    flag("experimental-distributed-tracing-address", Text, OBSERVE),
    flag("distributed-tracing-service-name", Text, OBSERVE),
    flag(
        "experimental-distributed-tracing-service-name",
        Text,
        OBSERVE,
    ),
    flag("distributed-tracing-instance-id", Text, OBSERVE),
    flag(
        "experimental-distributed-tracing-instance-id",
        Text,
        OBSERVE,
    ),
    flag("distributed-tracing-sampling-rate", Int, OBSERVE),
    flag(
        "experimental-distributed-tracing-sampling-rate",
        Int,
        OBSERVE,
    ),
    // Not implemented yet: storage layout, extra listeners, bootstrap, raft options.
    flag("enable-grpc-gateway", Bool, Implemented),
    flag("pre-vote", Bool, only("true")),
    flag("discovery", Text, REFUSED),
    flag("discovery-fallback", Text, only("exit")),
    flag("discovery-proxy", Text, REFUSED),
    flag("discovery-endpoints", Text, REFUSED),
    flag("discovery-token", Text, REFUSED),
    flag("discovery-dial-timeout", Dur, only("2s")),
    flag("discovery-request-timeout", Dur, only("5s")),
    flag("discovery-keepalive-time", Dur, only("2s")),
    flag("discovery-keepalive-timeout", Dur, only("6s")),
    flag("discovery-insecure-transport", Bool, only("true")),
    flag("discovery-insecure-skip-tls-verify", Bool, only("false")),
    flag("discovery-cert", Text, REFUSED),
    flag("discovery-key", Text, REFUSED),
    flag("discovery-cacert", Text, REFUSED),
    flag("discovery-user", Text, REFUSED),
    flag("discovery-password", Text, REFUSED),
    // Not implemented yet: authentication options.
    flag("auth-token", Text, Implemented),
    flag("bcrypt-cost", Uint, Implemented),
    flag("auth-token-ttl", Uint, Implemented),
    // etcd accepts and ignores these itself.
    flag(
        "v2-deprecation",
        Text,
        Treatment::Obsolete(
            "--v2-deprecation is deprecated and scheduled for removal in v3.8. \
             The default value is enforced, ignoring user input.",
        ),
    ),
    flag("cluster-active-size", Bool, IGNORED_BY_ETCD),
    flag("cluster-remove-delay", Bool, IGNORED_BY_ETCD),
    flag("cluster-sync-interval", Bool, IGNORED_BY_ETCD),
    flag("config", Bool, IGNORED_BY_ETCD),
    flag("force", Bool, IGNORED_BY_ETCD),
    flag("max-result-buffer", Bool, IGNORED_BY_ETCD),
    flag("max-retry-attempts", Bool, IGNORED_BY_ETCD),
    flag("peer-heartbeat-interval", Bool, IGNORED_BY_ETCD),
    flag("peer-election-timeout", Bool, IGNORED_BY_ETCD),
    flag("retry-interval", Bool, IGNORED_BY_ETCD),
    flag("snapshot", Bool, IGNORED_BY_ETCD),
    flag("v", Bool, IGNORED_BY_ETCD),
    flag("vv", Bool, IGNORED_BY_ETCD),
];

/// etcd 3.6 refuses an old experimental flag together with its new name.
pub(super) const MIGRATED_FLAGS: &[(&str, &str)] = &[
    (
        "experimental-compact-hash-check-time",
        "compact-hash-check-time",
    ),
    ("experimental-corrupt-check-time", "corrupt-check-time"),
    (
        "experimental-compaction-batch-limit",
        "compaction-batch-limit",
    ),
    (
        "experimental-watch-progress-notify-interval",
        "watch-progress-notify-interval",
    ),
    (
        "experimental-warning-apply-duration",
        "warning-apply-duration",
    ),
    (
        "experimental-bootstrap-defrag-threshold-megabytes",
        "bootstrap-defrag-threshold-megabytes",
    ),
    ("experimental-memory-mlock", "memory-mlock"),
    (
        "experimental-snapshot-catchup-entries",
        "snapshot-catchup-entries",
    ),
    (
        "experimental-compaction-sleep-interval",
        "compaction-sleep-interval",
    ),
    ("experimental-downgrade-check-time", "downgrade-check-time"),
    (
        "experimental-peer-skip-client-san-verification",
        "peer-skip-client-san-verification",
    ),
    (
        "experimental-enable-distributed-tracing",
        "enable-distributed-tracing",
    ),
    (
        "experimental-distributed-tracing-address",
        "distributed-tracing-address",
    ),
    (
        "experimental-distributed-tracing-service-name",
        "distributed-tracing-service-name",
    ),
    (
        "experimental-distributed-tracing-instance-id",
        "distributed-tracing-instance-id",
    ),
    (
        "experimental-distributed-tracing-sampling-rate",
        "distributed-tracing-sampling-rate",
    ),
];

/// etcd 3.6 refuses both unary-request warning durations when both are non-zero.
pub(super) fn check_warning_unary_request_duration(
    others: &[(&'static EtcdFlag, Setting)],
) -> Result<(), ConfigError> {
    let non_zero = |name: &str| {
        others.iter().any(|(f, s)| {
            f.name == name && parse_go_duration(&s.value).is_ok_and(|nanos| nanos != 0)
        })
    };
    if non_zero("experimental-warning-unary-request-duration")
        && non_zero("warning-unary-request-duration")
    {
        return Err(ConfigError::Invalid(
            "both --experimental-warning-unary-request-duration and \
             --warning-unary-request-duration flags are set. Use only \
             --warning-unary-request-duration"
                .into(),
        ));
    }
    Ok(())
}

/// The etcd flag of that name (without dashes), if there is one.
pub(super) fn lookup(name: &str) -> Option<&'static EtcdFlag> {
    FLAGS.iter().find(|f| f.name == name)
}

/// Whether `value` parses as `kind` and, if so, its canonical form for comparison.
fn canonical(kind: Kind, value: &str) -> Result<String, String> {
    match kind {
        Bool => parse_go_bool(value)
            .map(|b| b.to_string())
            .ok_or_else(|| SYNTAX_ERROR.to_string()),
        Uint => parse_go_uint(value)
            .map(|v| v.to_string())
            .map_err(str::to_string),
        Int => parse_go_int(value)
            .map(|v| v.to_string())
            .map_err(str::to_string),
        Dur => parse_go_duration(value).map(|v| v.to_string()),
        Text => Ok(value.to_string()),
    }
}

/// Validates a non-implemented etcd flag's value, then warns about it or refuses it.
pub(super) fn check_other(
    flag: &EtcdFlag,
    setting: &Setting,
    warnings: &mut Vec<String>,
) -> Result<(), ConfigError> {
    let value = canonical(flag.kind, &setting.value).map_err(|r| setting.invalid(r))?;
    let subject = setting.origin.subject();
    match flag.treatment {
        Treatment::Implemented => {}
        Treatment::Tuning(why) => warnings.push(format!(
            "{subject} is accepted for etcd compatibility but ignored: {why}"
        )),
        Treatment::Obsolete(message) => warnings.push(format!("{subject}: {message}")),
        Treatment::Unimplemented(ours) => {
            let accepted = ours.and_then(|o| canonical(flag.kind, o).ok());
            if accepted.as_deref() != Some(value.as_str()) {
                return Err(ConfigError::Unimplemented {
                    flag: flag.name,
                    subject: setting.origin.subject(),
                    only: ours.filter(|o| !o.is_empty()),
                });
            }
        }
    }
    Ok(())
}
