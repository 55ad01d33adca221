//! The keys of etcd's `--config-file` (server/embed/config.go: the `json` tags of
//! `embed.Config`, `configJSON` and `securityConfig`), each with the Go type etcd
//! decodes it into and the flag whose value it sets.
//!
//! This module is only the table; `file` reads a document with it. Every leaf names an
//! etcd flag of `flags::FLAGS`, so that a key is implemented, ignored with a warning or
//! refused exactly as its flag is.

/// The Go type a key decodes into, as `encoding/json` names it in its errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GoType {
    Str,
    /// A named string type (`config.V2DeprecationEnum`).
    NamedStr(&'static str),
    Uint,
    Uint32,
    Uint64,
    Int,
    Int64,
    /// `time.Duration`: an integer count of nanoseconds, never `"5m"`.
    Duration,
    Bool,
    Strings,
}

impl GoType {
    pub(super) fn name(self) -> &'static str {
        match self {
            GoType::Str => "string",
            GoType::NamedStr(name) => name,
            GoType::Uint => "uint",
            GoType::Uint32 => "uint32",
            GoType::Uint64 => "uint64",
            GoType::Int => "int",
            GoType::Int64 => "int64",
            GoType::Duration => "time.Duration",
            GoType::Bool => "bool",
            GoType::Strings => "[]string",
        }
    }
}

/// What a key's value is for.
#[derive(Clone, Copy, Debug)]
pub(super) enum Target {
    /// The value of this etcd flag.
    Flag(&'static str),
    /// etcd reads the key but it has no effect (the client side's
    /// `skip-client-san-verification`, `grpc-additional-server-options`).
    Inert,
    /// etcd acts on it and no flag expresses it: refused unless empty.
    Refused,
}

/// One key: its name, its path from the top (for errors and origins), and its value.
pub(super) struct Field {
    pub(super) key: &'static str,
    pub(super) path: &'static str,
    pub(super) node: Node,
}

pub(super) enum Node {
    Leaf(GoType, Target),
    Section(&'static Section),
}

/// A Go struct of the file: its type as errors name it.
pub(super) struct Section {
    /// `reflect.Type.String()`, for "into Go struct field X of type T".
    pub(super) type_name: &'static str,
    /// The struct's own name, for "Go struct field NAME.path".
    pub(super) struct_name: &'static str,
    pub(super) fields: &'static [Field],
}

const fn leaf(key: &'static str, path: &'static str, ty: GoType, target: Target) -> Field {
    Field {
        key,
        path,
        node: Node::Leaf(ty, target),
    }
}

/// A top-level key that sets the flag of the same name.
const fn top(key: &'static str, ty: GoType) -> Field {
    leaf(key, key, ty, Target::Flag(key))
}

const fn section(key: &'static str, section: &'static Section) -> Field {
    Field {
        key,
        path: key,
        node: Node::Section(section),
    }
}

use GoType::{Bool, Duration, Int, Int64, Str, Strings, Uint, Uint32, Uint64};
use Target::{Flag, Inert, Refused};

/// `configYAML`: `embed.Config` and `configJSON`, plus QuantyKube's own flags.
pub(super) static ROOT: Section = Section {
    type_name: "embed.configYAML",
    struct_name: "configYAML",
    fields: &[
        top("name", Str),
        top("data-dir", Str),
        top("wal-dir", Str),
        top("snapshot-count", Uint64),
        // etcd's json tag differs from the flag's name (etcd PR 15033).
        leaf(
            "experimental-snapshot-catch-up-entries",
            "experimental-snapshot-catch-up-entries",
            Uint64,
            Flag("experimental-snapshot-catchup-entries"),
        ),
        top("snapshot-catchup-entries", Uint64),
        top("max-snapshots", Uint),
        top("max-wals", Uint),
        top("heartbeat-interval", Uint),
        top("election-timeout", Uint),
        top("initial-election-tick-advance", Bool),
        top("backend-batch-interval", Duration),
        top("backend-batch-limit", Int),
        top("backend-bbolt-freelist-type", Str),
        top("quota-backend-bytes", Int64),
        top("max-txn-ops", Uint),
        top("max-request-bytes", Uint),
        top("max-concurrent-streams", Uint32),
        top("self-signed-cert-validity", Uint),
        top("cipher-suites", Strings),
        top("tls-min-version", Str),
        top("tls-max-version", Str),
        top("initial-cluster-state", Str),
        top("discovery-srv", Str),
        top("discovery-srv-name", Str),
        top("discovery-proxy", Str),
        top("discovery", Str),
        section("discovery-config", &DISCOVERY),
        top("initial-cluster", Str),
        top("initial-cluster-token", Str),
        top("strict-reconfig-check", Bool),
        top("auto-compaction-mode", Str),
        top("auto-compaction-retention", Str),
        top("grpc-keepalive-min-time", Duration),
        top("grpc-keepalive-interval", Duration),
        top("grpc-keepalive-timeout", Duration),
        leaf(
            "grpc-additional-server-options",
            "grpc-additional-server-options",
            Strings,
            Inert,
        ),
        section("socket-options", &SOCKET_OPTIONS),
        top("pre-vote", Bool),
        top("auth-token", Str),
        top("bcrypt-cost", Uint),
        top("auth-token-ttl", Uint),
        top("experimental-initial-corrupt-check", Bool),
        top("experimental-corrupt-check-time", Duration),
        top("corrupt-check-time", Duration),
        top("experimental-compact-hash-check-enabled", Bool),
        top("experimental-compact-hash-check-time", Duration),
        top("compact-hash-check-time", Duration),
        top("experimental-enable-lease-checkpoint", Bool),
        top("experimental-enable-lease-checkpoint-persist", Bool),
        top("experimental-compaction-batch-limit", Int),
        top("compaction-batch-limit", Int),
        top("experimental-compaction-sleep-interval", Duration),
        top("compaction-sleep-interval", Duration),
        top("experimental-watch-progress-notify-interval", Duration),
        top("watch-progress-notify-interval", Duration),
        top("experimental-warning-apply-duration", Duration),
        top("warning-apply-duration", Duration),
        top("experimental-bootstrap-defrag-threshold-megabytes", Uint),
        top("bootstrap-defrag-threshold-megabytes", Uint),
        top("warning-unary-request-duration", Duration),
        top("experimental-warning-unary-request-duration", Duration),
        top("max-learners", Int),
        top("force-new-cluster", Bool),
        top("enable-pprof", Bool),
        top("metrics", Str),
        top("listen-metrics-urls", Str),
        top("experimental-enable-distributed-tracing", Bool),
        top("enable-distributed-tracing", Bool),
        top("experimental-distributed-tracing-address", Str),
        top("distributed-tracing-address", Str),
        top("experimental-distributed-tracing-service-name", Str),
        top("distributed-tracing-service-name", Str),
        top("experimental-distributed-tracing-instance-id", Str),
        top("distributed-tracing-instance-id", Str),
        top("experimental-distributed-tracing-sampling-rate", Int),
        top("distributed-tracing-sampling-rate", Int),
        top("experimental-peer-skip-client-san-verification", Bool),
        top("logger", Str),
        top("log-level", Str),
        top("log-format", Str),
        top("log-outputs", Strings),
        top("enable-log-rotation", Bool),
        top("log-rotation-config-json", Str),
        top("enable-grpc-gateway", Bool),
        top("unsafe-no-fsync", Bool),
        top("experimental-downgrade-check-time", Duration),
        top("downgrade-check-time", Duration),
        top("memory-mlock", Bool),
        top("experimental-memory-mlock", Bool),
        top("experimental-txn-mode-write-with-shared-buffer", Bool),
        top("experimental-stop-grpc-service-on-defrag", Bool),
        top(
            "v2-deprecation",
            GoType::NamedStr("config.V2DeprecationEnum"),
        ),
        // configJSON.
        top("listen-peer-urls", Str),
        top("listen-client-urls", Str),
        top("listen-client-http-urls", Str),
        top("initial-advertise-peer-urls", Str),
        top("advertise-client-urls", Str),
        top("cors", Str),
        top("host-whitelist", Str),
        section("client-transport-security", &CLIENT_SECURITY),
        section("peer-transport-security", &PEER_SECURITY),
        top("feature-gates", Str),
        // QuantyKube's own flags, under their flag names and as strings (as on the
        // command line: `5m`, `3.6.5`).
        top("etcd-version", Str),
        top("gateway-body-timeout", Str),
        top("auto-compaction-revision-interval", Str),
        top("experimental-lease-checkpoint-interval", Str),
    ],
};

/// `embed.securityConfig` for the client port. etcd's file has no CRL key for either
/// side, and the client side's `skip-client-san-verification` does nothing in etcd
/// (client connections are never SAN-checked).
static CLIENT_SECURITY: Section = Section {
    type_name: "embed.securityConfig",
    struct_name: "securityConfig",
    fields: &[
        leaf(
            "cert-file",
            "client-transport-security.cert-file",
            Str,
            Flag("cert-file"),
        ),
        leaf(
            "key-file",
            "client-transport-security.key-file",
            Str,
            Flag("key-file"),
        ),
        leaf(
            "client-cert-file",
            "client-transport-security.client-cert-file",
            Str,
            Flag("client-cert-file"),
        ),
        leaf(
            "client-key-file",
            "client-transport-security.client-key-file",
            Str,
            Flag("client-key-file"),
        ),
        leaf(
            "client-cert-auth",
            "client-transport-security.client-cert-auth",
            Bool,
            Flag("client-cert-auth"),
        ),
        leaf(
            "trusted-ca-file",
            "client-transport-security.trusted-ca-file",
            Str,
            Flag("trusted-ca-file"),
        ),
        leaf(
            "auto-tls",
            "client-transport-security.auto-tls",
            Bool,
            Flag("auto-tls"),
        ),
        // etcd checks client certificates' CNs against it; no flag sets it.
        leaf(
            "allowed-cn",
            "client-transport-security.allowed-cn",
            Strings,
            Refused,
        ),
        leaf(
            "allowed-hostname",
            "client-transport-security.allowed-hostname",
            Strings,
            Flag("client-cert-allowed-hostname"),
        ),
        leaf(
            "skip-client-san-verification",
            "client-transport-security.skip-client-san-verification",
            Bool,
            Inert,
        ),
    ],
};

/// `embed.securityConfig` for the peer port.
static PEER_SECURITY: Section = Section {
    type_name: "embed.securityConfig",
    struct_name: "securityConfig",
    fields: &[
        leaf(
            "cert-file",
            "peer-transport-security.cert-file",
            Str,
            Flag("peer-cert-file"),
        ),
        leaf(
            "key-file",
            "peer-transport-security.key-file",
            Str,
            Flag("peer-key-file"),
        ),
        leaf(
            "client-cert-file",
            "peer-transport-security.client-cert-file",
            Str,
            Flag("peer-client-cert-file"),
        ),
        leaf(
            "client-key-file",
            "peer-transport-security.client-key-file",
            Str,
            Flag("peer-client-key-file"),
        ),
        leaf(
            "client-cert-auth",
            "peer-transport-security.client-cert-auth",
            Bool,
            Flag("peer-client-cert-auth"),
        ),
        leaf(
            "trusted-ca-file",
            "peer-transport-security.trusted-ca-file",
            Str,
            Flag("peer-trusted-ca-file"),
        ),
        leaf(
            "auto-tls",
            "peer-transport-security.auto-tls",
            Bool,
            Flag("peer-auto-tls"),
        ),
        leaf(
            "allowed-cn",
            "peer-transport-security.allowed-cn",
            Strings,
            Flag("peer-cert-allowed-cn"),
        ),
        leaf(
            "allowed-hostname",
            "peer-transport-security.allowed-hostname",
            Strings,
            Flag("peer-cert-allowed-hostname"),
        ),
        leaf(
            "skip-client-san-verification",
            "peer-transport-security.skip-client-san-verification",
            Bool,
            Flag("peer-skip-client-san-verification"),
        ),
    ],
};

/// `transport.SocketOpts`.
static SOCKET_OPTIONS: Section = Section {
    type_name: "transport.SocketOpts",
    struct_name: "SocketOpts",
    fields: &[
        leaf(
            "reuse-port",
            "socket-options.reuse-port",
            Bool,
            Flag("socket-reuse-port"),
        ),
        leaf(
            "reuse-address",
            "socket-options.reuse-address",
            Bool,
            Flag("socket-reuse-address"),
        ),
    ],
};

/// `v3discovery.DiscoveryConfig`: the v3 discovery flags, nested.
static DISCOVERY: Section = Section {
    type_name: "v3discovery.DiscoveryConfig",
    struct_name: "DiscoveryConfig",
    fields: &[
        section("client", &DISCOVERY_CLIENT),
        leaf(
            "token",
            "discovery-config.token",
            Str,
            Flag("discovery-token"),
        ),
    ],
};

static DISCOVERY_CLIENT: Section = Section {
    type_name: "clientv3.ConfigSpec",
    struct_name: "ConfigSpec",
    fields: &[
        leaf(
            "endpoints",
            "discovery-config.client.endpoints",
            Strings,
            Flag("discovery-endpoints"),
        ),
        leaf(
            "request-timeout",
            "discovery-config.client.request-timeout",
            Duration,
            Flag("discovery-request-timeout"),
        ),
        leaf(
            "dial-timeout",
            "discovery-config.client.dial-timeout",
            Duration,
            Flag("discovery-dial-timeout"),
        ),
        leaf(
            "keepalive-time",
            "discovery-config.client.keepalive-time",
            Duration,
            Flag("discovery-keepalive-time"),
        ),
        leaf(
            "keepalive-timeout",
            "discovery-config.client.keepalive-timeout",
            Duration,
            Flag("discovery-keepalive-timeout"),
        ),
        leaf(
            "max-request-bytes",
            "discovery-config.client.max-request-bytes",
            Int,
            Inert,
        ),
        leaf(
            "max-recv-bytes",
            "discovery-config.client.max-recv-bytes",
            Int,
            Inert,
        ),
        section("secure", &DISCOVERY_SECURE),
        section("auth", &DISCOVERY_AUTH),
    ],
};

static DISCOVERY_SECURE: Section = Section {
    type_name: "clientv3.SecureConfig",
    struct_name: "SecureConfig",
    fields: &[
        leaf(
            "cert",
            "discovery-config.client.secure.cert",
            Str,
            Flag("discovery-cert"),
        ),
        leaf(
            "key",
            "discovery-config.client.secure.key",
            Str,
            Flag("discovery-key"),
        ),
        leaf(
            "cacert",
            "discovery-config.client.secure.cacert",
            Str,
            Flag("discovery-cacert"),
        ),
        leaf(
            "server-name",
            "discovery-config.client.secure.server-name",
            Str,
            Refused,
        ),
        leaf(
            "insecure-transport",
            "discovery-config.client.secure.insecure-transport",
            Bool,
            Flag("discovery-insecure-transport"),
        ),
        leaf(
            "insecure-skip-tls-verify",
            "discovery-config.client.secure.insecure-skip-tls-verify",
            Bool,
            Flag("discovery-insecure-skip-tls-verify"),
        ),
    ],
};

static DISCOVERY_AUTH: Section = Section {
    type_name: "clientv3.AuthConfig",
    struct_name: "AuthConfig",
    fields: &[
        leaf(
            "username",
            "discovery-config.client.auth.username",
            Str,
            Flag("discovery-user"),
        ),
        leaf(
            "password",
            "discovery-config.client.auth.password",
            Str,
            Flag("discovery-password"),
        ),
    ],
};

/// Every leaf of the table, depth first.
#[cfg(test)]
pub(super) fn leaves() -> Vec<(&'static Field, GoType, Target)> {
    fn walk(section: &'static Section, out: &mut Vec<(&'static Field, GoType, Target)>) {
        for field in section.fields {
            match &field.node {
                Node::Leaf(ty, target) => out.push((field, *ty, *target)),
                Node::Section(inner) => walk(inner, out),
            }
        }
    }
    let mut out = Vec::new();
    walk(&ROOT, &mut out);
    out
}
