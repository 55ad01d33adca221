//! Command-line and environment configuration: etcd's server flags, with etcd's meaning.
//!
//! This module owns the `quantykube` command line: the table of every etcd 3.6 server
//! flag and what QuantyKube does with it (implements it, accepts and ignores it with a
//! warning because it only tunes etcd's internals, or refuses it as not implemented
//! yet), Go `flag`-package syntax (`-name x`, `-name=x`, `--name x`, `--name=x`), the
//! `ETCD_*` environment variables, etcd's defaults, and etcd's validation of them with
//! etcd's own messages.
//!
//! It must never read the process environment itself (the caller passes a lookup
//! function, so that tests need not mutate the environment), touch the disk but to read
//! the `--config-file` (through a reader the caller may replace), resolve host names,
//! bind sockets, log or exit the process. [`parse`] returns a [`Config`] and
//! warnings, help or version text, or a [`ConfigError`]; `main` logs, prints and exits.
//!
//! The parts, each owning one thing:
//! - `flags`: the table of every etcd flag, its kind and its treatment, and the
//!   warning or refusal for the flags QuantyKube does not implement;
//! - `scan`: Go `flag`-package syntax and the `ETCD_*` merge, which make every value
//!   a `Setting` that knows where it came from;
//! - `cli`: the clap command that declares the implemented flags, and the help and
//!   version text;
//! - `values`: what a value means: Go's numbers, booleans and durations, URL lists,
//!   `--initial-cluster`, and etcd's checks and messages for them;
//! - `compaction`: what `--auto-compaction-mode` and `--auto-compaction-retention` mean;
//! - `file` and `file_keys`: `--config-file`, etcd's YAML keys read into the same
//!   settings (which then replace the command line's and the environment's);
//! - `gates`: `--feature-gates`, and the experimental flags folded into them;
//! - `logs`: `--logger`, `--log-level`, `--log-format` and `--log-outputs`;
//! - `checks`, `tls`, `auth`: the corruption checks', TLS and auth flags.
//!
//! This file holds the public types, [`parse`] (which wires the parts together) and
//! `resolve`, which turns the implemented flags into a [`Config`] in etcd's order of
//! checks and with etcd's defaults.

mod auth;
mod checks;
mod cli;
mod compaction;
mod error;
mod file;
mod file_keys;
mod flags;
mod gates;
mod logs;
mod scan;
mod setting;
mod tls;
pub mod token_options;
mod values;

pub use self::auth::{
    check_bcrypt_cost, AuthConfig, DEFAULT_BCRYPT_COST, DEFAULT_TOKEN_TTL, MAX_BCRYPT_COST,
    MIN_BCRYPT_COST,
};
pub use self::cli::{git_commit, ETCD_API_VERSION};
pub use self::compaction::{AutoCompaction, DEFAULT_REVISION_COMPACTION_INTERVAL};
pub use self::error::ConfigError;
pub use self::gates::{FeatureGates, Gate, GateState};
pub use self::logs::{LogFormat, LogLevel, LogOutput, LogSettings};
pub use self::tls::{CipherSuite, TlsInfo, TlsPolicy, TlsSettings, TlsVersion};
pub use self::values::{ClusterMember, ClusterState};

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::FromArgMatches;
use url::Url;

use self::cli::{command, help_text, tls_values, version_text, Cli};
use self::flags::{check_other, MIGRATED_FLAGS};
use self::gates::GateSource;
use self::scan::{merge, scan, Settings};
use self::setting::{env_key, Origin, Setting};
use self::values::{
    advertise_urls, check_initial_cluster, is_version, listen_urls, optional_listen_urls,
    parse_go_bool, parse_go_duration, parse_go_int, parse_initial_cluster, to_usize, uint_setting,
    RANGE_ERROR, SYNTAX_ERROR,
};

/// The etcd server version reported by `Maintenance.Status` unless `--etcd-version` says otherwise.
pub const DEFAULT_ETCD_VERSION: &str = "3.7.1";
/// etcd's backend quota when `--quota-backend-bytes` is 0 (2 GiB).
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// etcd 3.6's `--snapshot-count` default (3.5 and older used 100000).
pub const DEFAULT_SNAPSHOT_COUNT: u64 = 10_000;
/// etcd's watch progress notification period when the flag is not positive.
pub const DEFAULT_WATCH_PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// etcd's lease checkpoint interval when the flag is not positive.
pub const DEFAULT_LEASE_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// `--gateway-body-timeout`'s default. etcd's HTTP server has no read timeout at all,
/// so a body that never ends holds its request forever; a minute is ample for the
/// largest body the gateway takes (about 4 MiB) over a slow link.
pub const DEFAULT_GATEWAY_BODY_TIMEOUT: Duration = Duration::from_secs(60);

// etcd raises shorter progress intervals to this floor (v3rpc minWatchProgressInterval).
const MIN_WATCH_PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_millis(100);
const MAX_ELECTION_MS: u64 = 50_000;
// etcd warns above this request size (etcdserver recommendedMaxRequestBytes).
const RECOMMENDED_MAX_REQUEST_BYTES: u64 = 10 * 1024 * 1024;
const DEFAULT_NAME: &str = "default";
// etcd's default data dir is "${name}.etcd"; ours is not etcd's on-disk format.
const DATA_DIR_SUFFIX: &str = ".quantykube";
const DEFAULT_CLIENT_URLS: &str = "http://localhost:2379";
const DEFAULT_PEER_URLS: &str = "http://localhost:2380";
const DEFAULT_CLUSTER_TOKEN: &str = "etcd-cluster";
/// etcd 3.6's `ErrConflictBootstrapFlags` (3.4 does not name --discovery-endpoints).
const CONFLICTING_BOOTSTRAP_FLAGS: &str = "multiple discovery or bootstrap flags are set. \
    Choose one of \"initial-cluster\", \"discovery\", \"discovery-endpoints\" or \"discovery-srv\"";

/// Everything a node needs from its command line and `ETCD_*` environment.
///
/// URL lists are sorted and free of duplicates, as etcd keeps them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub name: String,
    /// `--data-dir`, or `${name}.quantykube` when unset or empty.
    pub data_dir: PathBuf,
    /// `--wal-dir`: where the raft log's own database lives; `None` (unset or empty)
    /// for `<data-dir>/wal` (src/disk.rs).
    pub wal_dir: Option<PathBuf>,
    /// `http` URLs whose host is an IP address or `localhost` (etcd's rule for binding).
    pub listen_client_urls: Vec<Url>,
    /// `http://host:port`, spelled as etcd reports them (no trailing slash).
    pub advertise_client_urls: Vec<String>,
    /// `http` URLs whose host is an IP address or `localhost`.
    pub listen_peer_urls: Vec<Url>,
    /// `http://host:port`, spelled as etcd reports them.
    pub initial_advertise_peer_urls: Vec<String>,
    /// Sorted by name. For a new member, [`verify_bootstrap`] checks that it has this
    /// member with exactly its advertised peer URLs. Empty with `--discovery-srv` (or
    /// `--discovery-srv-name`) and no `--initial-cluster`: the start path fills it from
    /// DNS SRV records (`membership::discovery`), since this module never resolves names.
    pub initial_cluster: Vec<ClusterMember>,
    pub initial_cluster_state: ClusterState,
    pub initial_cluster_token: String,
    pub heartbeat_interval: Duration,
    /// At least 5 heartbeat intervals and at most 50 s, as etcd requires.
    pub election_timeout: Duration,
    /// Committed entries between snapshots; an explicit 0 already replaced by etcd's default.
    pub snapshot_count: u64,
    /// `None`: no quota (etcd's meaning of a negative value). `Some(bytes)`: an explicit 0
    /// already replaced by etcd's 2 GiB default.
    pub quota_backend_bytes: Option<u64>,
    /// `--quota-backend-bytes` as given (0 when unset): what etcd 3.6 reports as
    /// `Status.dbSizeQuota`.
    pub quota_backend_bytes_flag: i64,
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    /// `--max-concurrent-streams`: the HTTP/2 streams one client connection may have
    /// open at once on the client port (`SETTINGS_MAX_CONCURRENT_STREAMS`); etcd's
    /// default, `math.MaxUint32`, is no limit in practice.
    pub max_concurrent_streams: u32,
    /// `--log-level`, `--log-format`, `--log-outputs` (and `--logger`, checked only).
    pub logs: LogSettings,
    /// Always positive: etcd's default for values <= 0 and its 100 ms floor already applied.
    pub watch_progress_notify_interval: Duration,
    /// `--experimental-lease-checkpoint-interval`: how often the leader records every
    /// lease's remaining TTL through the log.
    pub lease_checkpoint_interval: Duration,
    /// The etcd version string `Maintenance.Status` reports.
    pub etcd_version: String,
    /// `--strict-reconfig-check`: refuse membership changes that could cost the quorum.
    pub strict_reconfig_check: bool,
    /// `--max-learners`: how many learners the cluster may have at once.
    pub max_learners: usize,
    /// `--auth-token`, `--auth-token-ttl`, `--bcrypt-cost` and whether client
    /// certificates name users (`--client-cert-auth`).
    pub auth: AuthConfig,
    /// `--experimental-initial-corrupt-check` (or the `InitialCorruptCheck` gate): a
    /// member with data compares its HashKV with its peers' before it starts.
    pub initial_corrupt_check: bool,
    /// `--corrupt-check-time`: how often the leader compares every member's HashKV with
    /// its own; zero (etcd's default) for never.
    pub corrupt_check_time: Duration,
    /// `--experimental-compact-hash-check-enabled` (or the `CompactHashCheck` gate) with
    /// `--compact-hash-check-time`: members record a hash at each compaction and the
    /// leader compares them this often; `None` when off (etcd's default).
    pub compact_hash_check: Option<Duration>,
    /// `--discovery-srv`: the DNS domain whose SRV records list the initial cluster
    /// (`None` when unset or empty). Never set together with `--initial-cluster`.
    pub discovery_srv: Option<String>,
    /// `--discovery-srv-name`: appended as `-<name>` to the SRV services looked up.
    pub discovery_srv_name: Option<String>,
    /// `--listen-client-http-urls`: HTTP-only client listeners; when any is set, the
    /// client URLs serve gRPC only, as in etcd.
    pub listen_client_http_urls: Vec<Url>,
    /// `--listen-metrics-urls`: `/metrics` and the health endpoints only.
    pub listen_metrics_urls: Vec<Url>,
    /// `--enable-grpc-gateway`: the JSON gateway on the client URLs.
    pub enable_grpc_gateway: bool,
    /// `--gateway-body-timeout` (QuantyKube only): how long the gateway waits for a
    /// request's body (a streaming call's first message) before refusing it.
    pub gateway_body_timeout: Duration,
    /// `--cors` and `--host-whitelist`: what etcd's access controller lets through to
    /// the HTTP endpoints of the client URLs.
    pub http_access: HttpAccess,
    /// The TLS flags of both sides.
    pub tls: TlsSettings,
    /// `--auto-compaction-mode` and `--auto-compaction-retention`; `None`: disabled (a
    /// retention of 0, etcd's default).
    pub auto_compaction: Option<AutoCompaction>,
    /// `--force-new-cluster`: restart this member's data as a one-member cluster.
    pub force_new_cluster: bool,
    /// `--feature-gates`, with the old experimental flags folded in.
    pub feature_gates: FeatureGates,
    /// The `SetMemberLocalAddr` gate: the address this member's peer connections leave
    /// from (the first advertised peer URL's IP that is neither loopback nor
    /// unspecified).
    pub peer_local_address: Option<IpAddr>,
    /// `--config-file` (or `ETCD_CONFIG_FILE`): the file everything above came from, the
    /// command line and the environment being ignored.
    pub config_file: Option<PathBuf>,
}

/// `--cors` and `--host-whitelist` (etcd's `AccessController`): each a set of allowed
/// values, where an empty set or one holding `*` allows every value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpAccess {
    pub cors: Vec<String>,
    pub host_whitelist: Vec<String>,
}

impl HttpAccess {
    fn allows(set: &[String], value: &str) -> bool {
        set.is_empty() || set.iter().any(|v| v == "*" || v == value)
    }

    /// Whether CORS allows every origin (etcd then answers `*`).
    pub fn any_origin(&self) -> bool {
        Self::allows(&self.cors, "*")
    }

    pub fn origin_allowed(&self, origin: &str) -> bool {
        Self::allows(&self.cors, origin)
    }

    pub fn host_allowed(&self, host: &str) -> bool {
        Self::allows(&self.host_whitelist, host)
    }
}

/// etcd's `UniqueStringsValue` for a flag defaulting to `*`: the comma-separated values,
/// each once, sorted as etcd's `Values()` lists them.
fn unique_strings(setting: Option<&Setting>) -> Vec<String> {
    let Some(setting) = setting else {
        return vec!["*".to_string()];
    };
    let mut values: Vec<String> = setting.value.split(',').map(str::to_string).collect();
    values.sort();
    values.dedup();
    values
}

/// What the command line asks for.
#[derive(Clone, Debug)]
pub enum Invocation {
    /// Run the server. `warnings` are for the caller to log (accepted-but-ignored etcd
    /// flags, deprecations, adjusted values).
    Run {
        config: Box<Config>,
        warnings: Vec<String>,
    },
    /// `--help`, `-h`, `-help`: print this to stdout and exit 0.
    Help(String),
    /// `--version`: print this to stdout and exit 0.
    Version(String),
}

/// Parses `args` (program name first, as `std::env::args_os()` yields them) and the
/// `ETCD_*` variables that `env` returns; an empty variable counts as unset, as in etcd.
/// A `--config-file` (or `ETCD_CONFIG_FILE`) is read from the file system.
///
/// A command-line flag wins over its environment variable (etcd refuses to start when
/// both are set; we warn instead).
pub fn parse<I, S>(args: I, env: &dyn Fn(&str) -> Option<String>) -> Result<Invocation, ConfigError>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    parse_with_files(args, env, &file::read_config_file)
}

/// [`parse`], reading a config file through `read` (its text, or etcd's words for why
/// it cannot be read).
pub fn parse_with_files<I, S>(
    args: I,
    env: &dyn Fn(&str) -> Option<String>,
    read: &dyn Fn(&Path) -> Result<String, String>,
) -> Result<Invocation, ConfigError>
where
    I: IntoIterator<Item = S>,
    S: Into<OsString>,
{
    let mut args = args.into_iter().map(|a| {
        a.into()
            .into_string()
            .map_err(|a| ConfigError::Syntax(format!("argument is not valid UTF-8: {a:?}")))
    });
    let program = args
        .next()
        .transpose()?
        .unwrap_or_else(|| "quantykube".into());
    let args = args.collect::<Result<Vec<_>, _>>()?;

    // `quantykube bench` is dispatched in main.rs before this parser runs; here any bare
    // word is a usage error, as it is for etcd.
    let scan = scan(&args)?;
    if scan.help {
        return Ok(Invocation::Help(help_text()));
    }
    let matches = command().try_get_matches_from(std::iter::once(program).chain(scan.forwarded))?;
    let cli = Cli::from_arg_matches(&matches)?;
    let mut values = cli.into_values();
    values.extend(tls_values(&matches));

    let mut warnings = Vec::new();
    let Settings {
        implemented: settings,
        others,
    } = merge(values, scan.others, env, &mut warnings);

    if scan.version {
        let etcd_version = settings
            .get("etcd-version")
            .map_or(DEFAULT_ETCD_VERSION, |s| s.value.as_str());
        return Ok(Invocation::Version(version_text(etcd_version)));
    }

    // etcd reads ETCD_CONFIG_FILE only when the flag is empty, and then ignores every
    // other flag and variable.
    let config_file = settings
        .get("config-file")
        .map(|s| s.value.clone())
        .filter(|v| !v.is_empty())
        .or_else(|| env(&env_key("config-file")).filter(|v| !v.is_empty()));
    let (settings, others, present, source) = match &config_file {
        None => (settings, others, Vec::new(), GateSource::CommandLine),
        Some(path) => {
            let ignored: Vec<String> = settings
                .values()
                .chain(others.iter().map(|(_, s)| s))
                .filter(|s| {
                    !matches!(
                        s.origin,
                        Origin::Flag("config-file") | Origin::Env("config-file")
                    )
                })
                .map(|s| match s.origin {
                    Origin::Env(name) => env_key(name),
                    other => other.subject(),
                })
                .collect();
            warnings.clear();
            if !ignored.is_empty() {
                warnings.push(format!(
                    "ignoring {} because --config-file is given (as etcd does)",
                    ignored.join(", ")
                ));
            }
            let text = read(Path::new(path)).map_err(ConfigError::ConfigFile)?;
            let (file, present) = file::settings(&text, &mut warnings)?;
            (
                file.implemented,
                file.others,
                present,
                GateSource::ConfigFile,
            )
        }
    };

    for (flag, setting) in &others {
        check_other(flag, setting, &mut warnings)?;
    }
    let explicit: HashSet<&str> = settings
        .keys()
        .copied()
        .chain(others.iter().map(|(f, _)| f.name))
        .chain(present)
        .collect();
    for (old, new) in MIGRATED_FLAGS {
        if explicit.contains(old) && explicit.contains(new) {
            return Err(ConfigError::Invalid(format!(
                "cannot set --{old} and --{new} at the same time, please use --{new} only"
            )));
        }
    }
    flags::check_warning_unary_request_duration(&others)?;

    let gate_lookup = |name: &str| {
        settings.get(name).cloned().or_else(|| {
            others
                .iter()
                .find(|(f, _)| f.name == name)
                .map(|(_, s)| s.clone())
        })
    };
    let feature_gates = gates::resolve(&gate_lookup, source, &mut warnings)?;
    let mut config = resolve(&settings, source, feature_gates, &mut warnings)?;
    config.config_file = config_file.map(PathBuf::from);
    Ok(Invocation::Run {
        config: Box::new(config),
        warnings,
    })
}

/// etcd's bootstrap checks of `--name`, `--initial-advertise-peer-urls` and
/// `--initial-cluster` (`VerifyBootstrap`, `VerifyJoinExisting`), with etcd's messages.
/// As etcd, the caller runs them only for a member that has no data yet: a member that
/// has one ignores the bootstrap flags (a member whose peer URLs MemberUpdate changed
/// restarts with its new URL and an old `--initial-cluster`).
pub fn verify_bootstrap(config: &Config) -> Result<(), ConfigError> {
    check_initial_cluster(
        &config.name,
        &config.initial_advertise_peer_urls,
        &config.initial_cluster,
        config.initial_cluster_state,
    )
}

/// The members of a new cluster as `snapshot restore` takes them (`--name`,
/// `--initial-cluster`, `--initial-advertise-peer-urls`), parsed and checked as a
/// member's bootstrap flags are, with the same errors.
pub fn restore_members(
    name: &str,
    initial_cluster: &str,
    initial_advertise_peer_urls: &str,
) -> Result<Vec<ClusterMember>, ConfigError> {
    let cluster = parse_initial_cluster(&Setting::flag(
        "initial-cluster",
        initial_cluster.to_string(),
    ))?;
    let advertised = advertise_urls(
        Some(&Setting::flag(
            "initial-advertise-peer-urls",
            initial_advertise_peer_urls.to_string(),
        )),
        "initial-advertise-peer-urls",
        DEFAULT_PEER_URLS,
    )?;
    check_initial_cluster(name, &advertised, &cluster, ClusterState::New)?;
    Ok(cluster)
}

/// Builds the configuration from the explicitly set implemented flags, in the order
/// etcd validates them, so that the first error is etcd's first error.
fn resolve(
    settings: &BTreeMap<&'static str, Setting>,
    source: GateSource,
    feature_gates: FeatureGates,
    warnings: &mut Vec<String>,
) -> Result<Config, ConfigError> {
    let get = |name: &str| settings.get(name);
    let text =
        |name: &str, default: &str| get(name).map_or(default.to_string(), |s| s.value.clone());
    let from_file = source == GateSource::ConfigFile;

    let logs = logs::resolve(settings, warnings)?;

    let listen_peer_urls = listen_urls(
        get("listen-peer-urls"),
        "listen-peer-urls",
        DEFAULT_PEER_URLS,
    )?;
    let listen_client_urls = listen_urls(
        get("listen-client-urls"),
        "listen-client-urls",
        DEFAULT_CLIENT_URLS,
    )?;
    let initial_advertise_peer_urls = advertise_urls(
        get("initial-advertise-peer-urls"),
        "initial-advertise-peer-urls",
        DEFAULT_PEER_URLS,
    )?;
    if !from_file && get("listen-client-urls").is_some() && get("advertise-client-urls").is_none() {
        // etcd drops its default advertise URL once the listen URL is chosen on the
        // command line, then refuses (its file reader keeps the default).
        return Err(ConfigError::Invalid(
            "--advertise-client-urls is required when --listen-client-urls is set explicitly"
                .into(),
        ));
    }
    let advertise_client_urls = advertise_urls(
        get("advertise-client-urls"),
        "advertise-client-urls",
        DEFAULT_CLIENT_URLS,
    )?;

    let initial_cluster_state = match get("initial-cluster-state") {
        None => ClusterState::New,
        Some(s) => match s.value.as_str() {
            "new" => ClusterState::New,
            // etcd's file reader counts an empty state as "new".
            "" if from_file => ClusterState::New,
            "existing" => ClusterState::Existing,
            _ if from_file => {
                return Err(ConfigError::Invalid(format!(
                    "unexpected clusterState {:?}",
                    s.value
                )))
            }
            _ => return Err(s.invalid(r#"valid values are "new" and "existing""#)),
        },
    };

    // etcd counts an empty value as unset.
    let non_empty = |flag: &str| get(flag).map(|s| s.value.clone()).filter(|v| !v.is_empty());
    let discovery_srv = non_empty("discovery-srv");
    let discovery_srv_name = non_empty("discovery-srv-name");
    if discovery_srv.is_some() && non_empty("initial-cluster").is_some() {
        return Err(ConfigError::Invalid(CONFLICTING_BOOTSTRAP_FLAGS.into()));
    }

    let heartbeat_ms = uint_setting(get("heartbeat-interval"), 100)?;
    let election_ms = uint_setting(get("election-timeout"), 1000)?;
    if heartbeat_ms == 0 {
        return Err(ConfigError::Invalid(format!(
            "--heartbeat-interval must be >0 (set to {heartbeat_ms}ms)"
        )));
    }
    if election_ms == 0 {
        return Err(ConfigError::Invalid(format!(
            "--election-timeout must be >0 (set to {election_ms}ms)"
        )));
    }
    if heartbeat_ms.saturating_mul(5) > election_ms {
        return Err(ConfigError::Invalid(format!(
            "--election-timeout[{election_ms}ms] should be at least as 5 times as \
             --heartbeat-interval[{heartbeat_ms}ms]"
        )));
    }
    if election_ms > MAX_ELECTION_MS {
        return Err(ConfigError::Invalid(format!(
            "--election-timeout[{election_ms}ms] is too long, and should be set less than \
             {MAX_ELECTION_MS}ms"
        )));
    }

    let name = text("name", DEFAULT_NAME);
    let initial_cluster = match get("initial-cluster") {
        Some(s) => parse_initial_cluster(s)?,
        // etcd clears its default initial cluster once a discovery flag is set: the SRV
        // records give it (and with only --discovery-srv-name, nothing does; its file
        // reader looks at --discovery-srv only).
        None if discovery_srv.is_some() || (!from_file && discovery_srv_name.is_some()) => {
            Vec::new()
        }
        None => vec![ClusterMember {
            // etcd builds its default from the name, falling back to "default" when empty.
            name: if name.is_empty() {
                DEFAULT_NAME.into()
            } else {
                name.clone()
            },
            peer_urls: initial_advertise_peer_urls.clone(),
        }],
    };

    let data_dir = match get("data-dir") {
        Some(s) if !s.value.is_empty() => PathBuf::from(&s.value),
        _ => PathBuf::from(format!("{name}{DATA_DIR_SUFFIX}")),
    };
    let wal_dir = get("wal-dir")
        .filter(|s| !s.value.is_empty())
        .map(|s| PathBuf::from(&s.value));

    let snapshot_count = match uint_setting(get("snapshot-count"), DEFAULT_SNAPSHOT_COUNT)? {
        0 => DEFAULT_SNAPSHOT_COUNT,
        n => n,
    };
    if get("snapshot-count").is_some() {
        warnings.push(
            "--snapshot-count is deprecated in 3.6 and will be decommissioned in 3.7.".into(),
        );
    }

    let quota_backend_bytes_flag = match get("quota-backend-bytes") {
        None => 0,
        Some(s) => parse_go_int(&s.value).map_err(|r| s.invalid(r))?,
    };
    let quota_backend_bytes = match quota_backend_bytes_flag {
        0 => Some(DEFAULT_QUOTA_BACKEND_BYTES),
        // Negative: no quota, as etcd's passthrough quota.
        n => u64::try_from(n).ok(),
    };

    let max_request_bytes = uint_setting(get("max-request-bytes"), 1_572_864)?;
    if max_request_bytes > RECOMMENDED_MAX_REQUEST_BYTES {
        warnings.push(format!(
            "--max-request-bytes {max_request_bytes} exceeds the recommended request limit of \
             {RECOMMENDED_MAX_REQUEST_BYTES} bytes"
        ));
    }
    let max_request_bytes = to_usize(get("max-request-bytes"), max_request_bytes)?;
    let max_txn_ops = uint_setting(get("max-txn-ops"), 128)?;
    let max_txn_ops = to_usize(get("max-txn-ops"), max_txn_ops)?;
    let max_concurrent_streams = match get("max-concurrent-streams") {
        None => u32::MAX,
        // etcd's `flags.Uint32Value`: `strconv.ParseUint(s, 0, 32)`.
        Some(setting) => {
            let value = uint_setting(Some(setting), u64::from(u32::MAX))?;
            u32::try_from(value).map_err(|_| setting.invalid(RANGE_ERROR))?
        }
    };

    let watch_progress_notify_interval = watch_progress_interval(settings, warnings)?;
    let lease_checkpoint_interval = match get("experimental-lease-checkpoint-interval") {
        None => DEFAULT_LEASE_CHECKPOINT_INTERVAL,
        Some(setting) => match parse_go_duration(&setting.value).map_err(|r| setting.invalid(r))? {
            nanos if nanos <= 0 => DEFAULT_LEASE_CHECKPOINT_INTERVAL,
            nanos => Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
        },
    };

    let gateway_body_timeout = match get("gateway-body-timeout") {
        None => DEFAULT_GATEWAY_BODY_TIMEOUT,
        Some(setting) => match parse_go_duration(&setting.value).map_err(|r| setting.invalid(r))? {
            nanos if nanos <= 0 => return Err(setting.invalid("must be positive")),
            nanos => Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
        },
    };

    let etcd_version = match get("etcd-version") {
        None => DEFAULT_ETCD_VERSION.to_string(),
        Some(s) if is_version(&s.value) => s.value.clone(),
        Some(s) => return Err(s.invalid("expected a version like 3.7.1")),
    };

    let strict_reconfig_check = match get("strict-reconfig-check") {
        None => true,
        Some(s) => parse_go_bool(&s.value).ok_or_else(|| s.invalid(SYNTAX_ERROR))?,
    };
    let max_learners = uint_setting(get("max-learners"), 1)?;
    let max_learners = to_usize(get("max-learners"), max_learners)?;
    let checks = checks::corruption_checks(settings, &feature_gates, warnings)?;

    let force_new_cluster = match get("force-new-cluster") {
        None => false,
        Some(s) => parse_go_bool(&s.value).ok_or_else(|| s.invalid(SYNTAX_ERROR))?,
    };
    // etcd checks the mode as it validates the flags, and reads the retention once its
    // listeners are configured: after everything above.
    let auto_compaction = compaction::resolve(settings, warnings)?;

    let listen_client_http_urls =
        optional_listen_urls(get("listen-client-http-urls"), "listen-client-http-urls")?;
    let listen_metrics_urls =
        optional_listen_urls(get("listen-metrics-urls"), "listen-metrics-urls")?;
    let enable_grpc_gateway = match get("enable-grpc-gateway") {
        None => true,
        Some(s) => parse_go_bool(&s.value).ok_or_else(|| s.invalid(SYNTAX_ERROR))?,
    };
    let http_access = HttpAccess {
        cors: values::cors_origins(get("cors"))?,
        host_whitelist: unique_strings(get("host-whitelist")),
    };
    let tls = tls::resolve(settings)?;
    tls::check_secure_urls(
        &tls,
        &listen_client_urls,
        &listen_client_http_urls,
        &listen_metrics_urls,
        &listen_peer_urls,
    )?;

    let auth = auth::resolve_auth(settings, tls.client.client_cert_auth)?;
    let peer_local_address = if feature_gates.enabled(Gate::SetMemberLocalAddr) {
        let address = member_local_address(&initial_advertise_peer_urls);
        if address.is_none() {
            warnings.push(format!(
                "unable to set a member local address due to lack of suitable local \
                 addresses (advertise-peer-urls {})",
                initial_advertise_peer_urls.join(",")
            ));
        }
        address
    } else {
        None
    };
    Ok(Config {
        name,
        data_dir,
        wal_dir,
        listen_client_urls,
        advertise_client_urls,
        listen_peer_urls,
        initial_advertise_peer_urls,
        initial_cluster,
        initial_cluster_state,
        initial_cluster_token: text("initial-cluster-token", DEFAULT_CLUSTER_TOKEN),
        heartbeat_interval: Duration::from_millis(heartbeat_ms),
        election_timeout: Duration::from_millis(election_ms),
        snapshot_count,
        quota_backend_bytes,
        quota_backend_bytes_flag,
        max_request_bytes,
        max_txn_ops,
        max_concurrent_streams,
        logs,
        watch_progress_notify_interval,
        lease_checkpoint_interval,
        etcd_version,
        strict_reconfig_check,
        max_learners,
        initial_corrupt_check: checks.initial,
        corrupt_check_time: checks.period,
        compact_hash_check: checks.compact_hash,
        discovery_srv,
        discovery_srv_name,
        listen_client_http_urls,
        listen_metrics_urls,
        enable_grpc_gateway,
        gateway_body_timeout,
        http_access,
        tls,
        auto_compaction,
        force_new_cluster,
        auth,
        feature_gates,
        peer_local_address,
        config_file: None,
    })
}

/// etcd's `InferLocalAddr`: the first advertised peer URL whose host is an IP address
/// that is neither loopback nor unspecified.
fn member_local_address(advertised: &[String]) -> Option<IpAddr> {
    advertised.iter().find_map(|u| {
        let host = Url::parse(u)
            .ok()?
            .host_str()?
            .trim_matches(['[', ']'])
            .to_string();
        let ip: IpAddr = host.parse().ok()?;
        (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
    })
}

fn watch_progress_interval(
    settings: &BTreeMap<&'static str, Setting>,
    warnings: &mut Vec<String>,
) -> Result<Duration, ConfigError> {
    const OLD: &str = "experimental-watch-progress-notify-interval";
    let setting = match (
        settings.get(OLD),
        settings.get("watch-progress-notify-interval"),
    ) {
        (Some(old), _) => {
            warnings.push(format!(
                "--{OLD} is deprecated in v3.6 and will be decommissioned in v3.7. \
                 Use '--watch-progress-notify-interval' instead."
            ));
            old
        }
        (None, Some(new)) => new,
        (None, None) => return Ok(DEFAULT_WATCH_PROGRESS_NOTIFY_INTERVAL),
    };
    let nanos = parse_go_duration(&setting.value).map_err(|r| setting.invalid(r))?;
    if nanos <= 0 {
        // etcd keeps its 10-minute default unless the interval is positive.
        return Ok(DEFAULT_WATCH_PROGRESS_NOTIFY_INTERVAL);
    }
    let interval = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
    if interval < MIN_WATCH_PROGRESS_NOTIFY_INTERVAL {
        warnings.push(format!(
            "adjusting watch progress notify interval {} to the minimum period of 100ms",
            setting.value
        ));
        return Ok(MIN_WATCH_PROGRESS_NOTIFY_INTERVAL);
    }
    Ok(interval)
}

#[cfg(test)]
mod file_tests;
#[cfg(test)]
mod tests;
