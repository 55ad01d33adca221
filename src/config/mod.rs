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
//! function, so that tests need not mutate the environment), touch the disk, resolve
//! host names, bind sockets, log or exit the process. [`parse`] returns a [`Config`] and
//! warnings, help or version text, or a [`ConfigError`]; `main` logs, prints and exits.

use std::collections::{BTreeMap, HashSet};
use std::ffi::OsString;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Arg, ArgAction, CommandFactory, FromArgMatches, Parser};
use url::Url;

/// The etcd server version reported by `Maintenance.Status` unless `--etcd-version` says otherwise.
pub const DEFAULT_ETCD_VERSION: &str = "3.6.5";
/// The etcd API version QuantyKube implements.
pub const ETCD_API_VERSION: &str = "3.6";
/// etcd's backend quota when `--quota-backend-bytes` is 0 (2 GiB).
pub const DEFAULT_QUOTA_BACKEND_BYTES: u64 = 2 * 1024 * 1024 * 1024;
/// etcd 3.6's `--snapshot-count` default (3.5 and older used 100000).
pub const DEFAULT_SNAPSHOT_COUNT: u64 = 10_000;
/// etcd's watch progress notification period when the flag is not positive.
pub const DEFAULT_WATCH_PROGRESS_NOTIFY_INTERVAL: Duration = Duration::from_secs(10 * 60);
/// etcd's lease checkpoint interval when the flag is not positive.
pub const DEFAULT_LEASE_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(5 * 60);

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

/// Everything a node needs from its command line and `ETCD_*` environment.
///
/// URL lists are sorted and free of duplicates, as etcd keeps them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub name: String,
    /// `--data-dir`, or `${name}.quantykube` when unset or empty.
    pub data_dir: PathBuf,
    /// `http` URLs whose host is an IP address or `localhost` (etcd's rule for binding).
    pub listen_client_urls: Vec<Url>,
    /// `http://host:port`, spelled as etcd reports them (no trailing slash).
    pub advertise_client_urls: Vec<String>,
    /// `http` URLs whose host is an IP address or `localhost`.
    pub listen_peer_urls: Vec<Url>,
    /// `http://host:port`, spelled as etcd reports them.
    pub initial_advertise_peer_urls: Vec<String>,
    /// Sorted by name; always contains this member with exactly its advertised peer URLs.
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
    pub max_request_bytes: usize,
    pub max_txn_ops: usize,
    pub log_level: LogLevel,
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
}

/// One `name=url` group of `--initial-cluster`; a name given several times has several URLs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMember {
    pub name: String,
    /// `http://host:port`, sorted.
    pub peer_urls: Vec<String>,
}

/// `--initial-cluster-state`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// Bootstrap a new cluster from `--initial-cluster`.
    New,
    /// Join a cluster that already has this member (added with MemberAdd).
    Existing,
}

/// `--log-level`, etcd's (zap's) levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
    Panic,
    Fatal,
}

impl LogLevel {
    /// The level as etcd spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
            LogLevel::Panic => "panic",
            LogLevel::Fatal => "fatal",
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
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

/// Why the command line or environment was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not an etcd flag, or a stray argument: clap's own error (print it, or `exit()` it).
    #[error(transparent)]
    Usage(#[from] clap::Error),
    /// Malformed flag syntax, as Go's flag package reports it.
    #[error("{0}")]
    Syntax(String),
    /// An etcd flag QuantyKube does not implement yet, set to a value that would matter.
    #[error("{}", unimplemented_message(.flag, *.from_env, *.only))]
    Unimplemented {
        flag: &'static str,
        /// Set through its `ETCD_*` variable rather than on the command line.
        from_env: bool,
        /// The one value that is accepted, because QuantyKube behaves that way anyway.
        only: Option<&'static str>,
    },
    /// A value that does not parse; `origin` is `flag --x` or `ETCD_X`.
    #[error("invalid value {value:?} for {origin}: {reason}")]
    InvalidValue {
        origin: String,
        value: String,
        reason: String,
    },
    /// A combination etcd refuses, with etcd's message.
    #[error("{0}")]
    Invalid(String),
}

impl ConfigError {
    /// The exit status etcd uses: 2 for command-line syntax (Go's flag package), 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            ConfigError::Usage(e) => e.exit_code(),
            ConfigError::Syntax(_) => 2,
            _ => 1,
        }
    }
}

fn unimplemented_message(flag: &str, from_env: bool, only: Option<&str>) -> String {
    let subject = if from_env {
        format!("{} (--{flag})", env_key(flag))
    } else {
        format!("--{flag}")
    };
    match only {
        Some(v) => format!(
            "{subject} is an etcd flag that QuantyKube does not implement yet \
             (only --{flag}={v}, which is what QuantyKube does, is accepted)"
        ),
        None => format!("{subject} is an etcd flag that QuantyKube does not implement yet"),
    }
}

/// Parses `args` (program name first, as `std::env::args_os()` yields them) and the
/// `ETCD_*` variables that `env` returns; an empty variable counts as unset, as in etcd.
///
/// A command-line flag wins over its environment variable (etcd refuses to start when
/// both are set; we warn instead).
pub fn parse<I, S>(args: I, env: &dyn Fn(&str) -> Option<String>) -> Result<Invocation, ConfigError>
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

    let mut warnings = Vec::new();
    let mut settings: BTreeMap<&'static str, Setting> = BTreeMap::new();
    // Unimplemented and tuning flags, command line first (in order), then environment.
    let mut others: Vec<(&'static EtcdFlag, Setting)> = Vec::new();
    for (name, value) in cli.into_values() {
        if let Some(value) = value {
            settings.insert(name, Setting::flag(name, value));
        }
    }
    let on_command_line: HashSet<&str> = settings
        .keys()
        .copied()
        .chain(scan.others.iter().map(|(f, _)| f.name))
        .collect();
    for (flag, value) in scan.others {
        others.push((flag, Setting::flag(flag.name, value)));
    }
    for flag in FLAGS {
        let key = env_key(flag.name);
        let Some(value) = env(&key).filter(|v| !v.is_empty()) else {
            continue;
        };
        if flag.name == "version" {
            // etcd ignores ETCD_VERSION too: images and scripts set it to name a release,
            // and read as --version it would stop the server.
            warnings.push(format!(
                "cannot set special environment variable {key}={value}: ignored"
            ));
        } else if on_command_line.contains(flag.name) {
            warnings.push(format!(
                "environment variable {key} is shadowed by the command-line flag --{} \
                 (etcd refuses to start when both are set)",
                flag.name
            ));
        } else if flag.treatment == Treatment::Implemented {
            settings.insert(flag.name, Setting::env(flag.name, value));
        } else {
            others.push((flag, Setting::env(flag.name, value)));
        }
    }

    if scan.version {
        let etcd_version = settings
            .get("etcd-version")
            .map_or(DEFAULT_ETCD_VERSION, |s| s.value.as_str());
        return Ok(Invocation::Version(version_text(etcd_version)));
    }

    for (flag, setting) in &others {
        check_other(flag, setting, &mut warnings)?;
    }
    let explicit: HashSet<&str> = settings
        .keys()
        .copied()
        .chain(others.iter().map(|(f, _)| f.name))
        .collect();
    for (old, new) in MIGRATED_FLAGS {
        if explicit.contains(old) && explicit.contains(new) {
            return Err(ConfigError::Invalid(format!(
                "cannot set --{old} and --{new} at the same time, please use --{new} only"
            )));
        }
    }

    let config = resolve(&settings, &mut warnings)?;
    Ok(Invocation::Run {
        config: Box::new(config),
        warnings,
    })
}

/// Builds the configuration from the explicitly set implemented flags, in the order
/// etcd validates them, so that the first error is etcd's first error.
fn resolve(
    settings: &BTreeMap<&'static str, Setting>,
    warnings: &mut Vec<String>,
) -> Result<Config, ConfigError> {
    let get = |name: &str| settings.get(name);
    let text =
        |name: &str, default: &str| get(name).map_or(default.to_string(), |s| s.value.clone());

    let log_level = match get("log-level") {
        None => LogLevel::Info,
        Some(s) => parse_log_level(&s.value)
            .ok_or_else(|| s.invalid("only supports debug, info, warn, error, panic, or fatal"))?,
    };

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
    if get("listen-client-urls").is_some() && get("advertise-client-urls").is_none() {
        // etcd drops its default advertise URL once the listen URL is chosen, then refuses.
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
            "existing" => ClusterState::Existing,
            _ => return Err(s.invalid(r#"valid values are "new" and "existing""#)),
        },
    };

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
    check_initial_cluster(
        &name,
        &initial_advertise_peer_urls,
        &initial_cluster,
        initial_cluster_state,
    )?;

    let data_dir = match get("data-dir") {
        Some(s) if !s.value.is_empty() => PathBuf::from(&s.value),
        _ => PathBuf::from(format!("{name}{DATA_DIR_SUFFIX}")),
    };

    let snapshot_count = match uint_setting(get("snapshot-count"), DEFAULT_SNAPSHOT_COUNT)? {
        0 => DEFAULT_SNAPSHOT_COUNT,
        n => n,
    };
    if get("snapshot-count").is_some() {
        warnings.push(
            "--snapshot-count is deprecated in 3.6 and will be decommissioned in 3.7.".into(),
        );
    }

    let quota_backend_bytes = match get("quota-backend-bytes") {
        None => Some(DEFAULT_QUOTA_BACKEND_BYTES),
        Some(s) => match parse_go_int(&s.value).map_err(|r| s.invalid(r))? {
            0 => Some(DEFAULT_QUOTA_BACKEND_BYTES),
            n => u64::try_from(n).ok(),
        },
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

    let watch_progress_notify_interval = watch_progress_interval(settings, warnings)?;
    let lease_checkpoint_interval = match get("experimental-lease-checkpoint-interval") {
        None => DEFAULT_LEASE_CHECKPOINT_INTERVAL,
        Some(setting) => match parse_go_duration(&setting.value).map_err(|r| setting.invalid(r))? {
            nanos if nanos <= 0 => DEFAULT_LEASE_CHECKPOINT_INTERVAL,
            nanos => Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
        },
    };

    let etcd_version = match get("etcd-version") {
        None => DEFAULT_ETCD_VERSION.to_string(),
        Some(s) if is_version(&s.value) => s.value.clone(),
        Some(s) => return Err(s.invalid("expected a version like 3.6.5")),
    };

    let strict_reconfig_check = match get("strict-reconfig-check") {
        None => true,
        Some(s) => parse_go_bool(&s.value).ok_or_else(|| s.invalid(SYNTAX_ERROR))?,
    };
    let max_learners = uint_setting(get("max-learners"), 1)?;
    let max_learners = to_usize(get("max-learners"), max_learners)?;

    Ok(Config {
        name,
        data_dir,
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
        max_request_bytes,
        max_txn_ops,
        log_level,
        watch_progress_notify_interval,
        lease_checkpoint_interval,
        etcd_version,
        strict_reconfig_check,
        max_learners,
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

/// etcd's bootstrap checks (`VerifyBootstrap`, `VerifyJoinExisting`). etcd runs them
/// only when the member has no data yet; we run them at every start, so a restart
/// needs a consistent `--initial-cluster` too. etcd resolves host names before
/// comparing advertised URLs with the cluster's; we compare them as written.
fn check_initial_cluster(
    name: &str,
    advertised: &[String],
    cluster: &[ClusterMember],
    state: ClusterState,
) -> Result<(), ConfigError> {
    let Some(local) = cluster.iter().find(|m| m.name == name) else {
        return Err(ConfigError::Invalid(format!(
            "couldn't find local name {name:?} in the initial cluster configuration"
        )));
    };
    if state == ClusterState::New && local.peer_urls != advertised {
        return Err(ConfigError::Invalid(advertise_mismatch(
            name,
            advertised,
            &local.peer_urls,
        )));
    }
    let mut seen = HashSet::new();
    if !cluster
        .iter()
        .flat_map(|m| &m.peer_urls)
        .all(|u| seen.insert(u))
    {
        return Err(ConfigError::Invalid(format!(
            "initial cluster {} has duplicate url",
            cluster_string(cluster)
        )));
    }
    Ok(())
}

/// etcd's `advertiseMatchesCluster` message for sorted, unequal URL lists.
fn advertise_mismatch(name: &str, advertised: &[String], in_cluster: &[String]) -> String {
    let cause = if advertised.len() != in_cluster.len() {
        format!(
            "len({}) != len({})",
            go_quote_list(advertised),
            go_quote_list(in_cluster)
        )
    } else {
        advertised
            .iter()
            .zip(in_cluster)
            .find(|(a, b)| a != b)
            .map(|(a, b)| format!("{a:?} != {b:?}"))
            .unwrap_or_default()
    };
    let ap = advertised.join(",");
    let own = |urls: &[String]| -> String {
        let members = [ClusterMember {
            name: name.into(),
            peer_urls: urls.to_vec(),
        }];
        cluster_string(&members)
    };
    let missing: Vec<String> = in_cluster
        .iter()
        .filter(|u| !advertised.contains(u))
        .map(|u| format!("{name}={u}"))
        .collect();
    if !missing.is_empty() {
        return format!(
            "--initial-cluster has {} but missing from --initial-advertise-peer-urls={ap} ({cause})",
            missing.join(",")
        );
    }
    let extra: Vec<&str> = advertised
        .iter()
        .filter(|u| !in_cluster.contains(u))
        .map(String::as_str)
        .collect();
    if !extra.is_empty() {
        return format!(
            "--initial-advertise-peer-urls has {} but missing from --initial-cluster={}",
            extra.join(","),
            own(advertised)
        );
    }
    format!(
        "failed to resolve {ap} to match --initial-cluster={} ({cause})",
        own(advertised)
    )
}

/// etcd's `URLsMap.String()`: `name=url` pairs, sorted, comma-separated.
fn cluster_string(cluster: &[ClusterMember]) -> String {
    let mut pairs: Vec<String> = cluster
        .iter()
        .flat_map(|m| m.peer_urls.iter().map(move |u| format!("{}={u}", m.name)))
        .collect();
    pairs.sort();
    pairs.join(",")
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", quoted.join(" "))
}

/// `name=url,name=url`, as etcd's `types.NewURLsMap` reads it.
fn parse_initial_cluster(setting: &Setting) -> Result<Vec<ClusterMember>, ConfigError> {
    let mut members: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for item in setting.value.split(',').filter(|i| !i.is_empty()) {
        let (name, url) = item.split_once('=').unwrap_or((item, ""));
        let url = check_url(url).map_err(|r| setting.invalid(r))?;
        members.entry(name.to_string()).or_default().push(url.text);
    }
    Ok(members
        .into_iter()
        .map(|(name, mut peer_urls)| {
            peer_urls.sort();
            ClusterMember { name, peer_urls }
        })
        .collect())
}

/// A URL in the only form etcd accepts for HTTP: `http://host:port`.
struct CheckedUrl {
    /// As etcd prints it.
    text: String,
    /// Without IPv6 brackets.
    host: String,
}

/// etcd's `types.NewURLs` rules for one URL, minus what QuantyKube lacks (TLS, unix sockets).
fn check_url(raw: &str) -> Result<CheckedUrl, String> {
    let s = raw.trim();
    let scheme_error = || format!("URL scheme must be http, https, unix, or unixs: {s}");
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err(scheme_error());
    };
    match scheme.to_ascii_lowercase().as_str() {
        "http" => {}
        "https" => {
            return Err(format!(
                "{s} uses TLS, which QuantyKube does not implement yet"
            ))
        }
        "unix" | "unixs" => {
            return Err(format!(
                "{s} is a unix socket, which QuantyKube does not implement yet"
            ))
        }
        _ => return Err(scheme_error()),
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if tail.starts_with('/') {
        return Err(format!("URL must not contain a path: {s}"));
    }
    if !tail.is_empty() {
        return Err(format!("URL must not contain a query or fragment: {s}"));
    }
    if authority.contains('@') {
        return Err(format!("URL must not contain user information: {s}"));
    }
    let (host, port) = split_host_port(authority)
        .ok_or_else(|| format!(r#"URL address does not have the form "host:port": {s}"#))?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.parse::<u16>().is_err()
    {
        return Err(format!("invalid port {port:?} in URL: {s}"));
    }
    Ok(CheckedUrl {
        text: format!("http://{authority}"),
        host: host.to_string(),
    })
}

/// Go's `net.SplitHostPort`: `host:port` or `[ipv6]:port`.
fn split_host_port(authority: &str) -> Option<(&str, &str)> {
    if let Some(bracketed) = authority.strip_prefix('[') {
        let (host, after) = bracketed.split_once(']')?;
        let port = after.strip_prefix(':')?;
        return (!port.contains(':')).then_some((host, port));
    }
    let (host, port) = authority.rsplit_once(':')?;
    (!host.contains([':', '[', ']'])).then_some((host, port))
}

/// A comma-separated URL flag, sorted and deduplicated as etcd's `UniqueURLs`.
fn url_list(
    setting: Option<&Setting>,
    flag: &'static str,
    default: &str,
) -> Result<Vec<CheckedUrl>, ConfigError> {
    let owned;
    let setting = match setting {
        Some(s) => s,
        None => {
            owned = Setting::flag(flag, default.to_string());
            &owned
        }
    };
    let mut urls = setting
        .value
        .split(',')
        .map(check_url)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|r| setting.invalid(r))?;
    urls.sort_by(|a, b| a.text.cmp(&b.text));
    urls.dedup_by(|a, b| a.text == b.text);
    Ok(urls)
}

fn listen_urls(
    setting: Option<&Setting>,
    flag: &'static str,
    default: &str,
) -> Result<Vec<Url>, ConfigError> {
    url_list(setting, flag, default)?
        .into_iter()
        .map(|u| {
            // etcd binds only to literal IPs (and localhost), never to resolved names.
            if u.host != "localhost" && u.host.parse::<IpAddr>().is_err() {
                return Err(ConfigError::Invalid(format!(
                    "expected IP in URL for binding ({})",
                    u.text
                )));
            }
            Url::parse(&u.text).map_err(|e| ConfigError::InvalidValue {
                origin: format!("flag --{flag}"),
                value: u.text.clone(),
                reason: e.to_string(),
            })
        })
        .collect()
}

fn advertise_urls(
    setting: Option<&Setting>,
    flag: &'static str,
    default: &str,
) -> Result<Vec<String>, ConfigError> {
    let urls = url_list(setting, flag, default)?;
    if let Some(empty) = urls.iter().find(|u| u.host.is_empty()) {
        let all: Vec<&str> = urls.iter().map(|u| u.text.as_str()).collect();
        return Err(ConfigError::Invalid(format!(
            r#"--{flag} "{}" must be "host:port" (unexpected empty host ({}))"#,
            all.join(","),
            empty.text
        )));
    }
    Ok(urls.into_iter().map(|u| u.text).collect())
}

fn uint_setting(setting: Option<&Setting>, default: u64) -> Result<u64, ConfigError> {
    setting.map_or(Ok(default), |s| {
        parse_go_uint(&s.value).map_err(|r| s.invalid(r))
    })
}

fn to_usize(setting: Option<&Setting>, value: u64) -> Result<usize, ConfigError> {
    usize::try_from(value).map_err(|_| match setting {
        Some(s) => s.invalid(RANGE_ERROR),
        None => ConfigError::Invalid(format!("{value} does not fit this platform")),
    })
}

fn parse_log_level(s: &str) -> Option<LogLevel> {
    // zap accepts each level in lower or upper case, and "" as info.
    Some(match s {
        "debug" | "DEBUG" => LogLevel::Debug,
        "info" | "INFO" | "" => LogLevel::Info,
        "warn" | "WARN" => LogLevel::Warn,
        "error" | "ERROR" => LogLevel::Error,
        "panic" | "PANIC" => LogLevel::Panic,
        "fatal" | "FATAL" => LogLevel::Fatal,
        _ => return None,
    })
}

/// `MAJOR.MINOR.PATCH`, optionally followed by a `-pre` or `+build` suffix, since
/// clients parse the reported version.
fn is_version(s: &str) -> bool {
    let core = s.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

// ---------------------------------------------------------------------------------
// Values as Go's flag package and etcd read them.

const SYNTAX_ERROR: &str = "parse error";
const RANGE_ERROR: &str = "value out of range";

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `strconv.ParseUint(s, 0, 64)`, which Go's flag package uses: `0x`, `0o`, `0b`
/// and leading-`0` (octal) prefixes, `_` between digits.
fn parse_go_uint(s: &str) -> Result<u64, &'static str> {
    let prefix = s.get(..2).map(str::to_ascii_lowercase);
    // `zero_seen`: a leading-0 octal prefix is itself the digit zero.
    let (base, digits, zero_seen) = match prefix.as_deref() {
        Some("0x") => (16, &s[2..], false),
        Some("0b") => (2, &s[2..], false),
        Some("0o") => (8, &s[2..], false),
        _ if s.len() > 1 && s.starts_with('0') => (8, &s[1..], true),
        _ => (10, s, false),
    };
    let mut value: u64 = 0;
    let mut digit_seen = zero_seen;
    // An underscore may follow a base prefix or a digit, never another underscore.
    let mut underscore_ok = base != 10;
    let mut last_underscore = false;
    for c in digits.chars() {
        if c == '_' {
            if !underscore_ok {
                return Err(SYNTAX_ERROR);
            }
            underscore_ok = false;
            last_underscore = true;
            continue;
        }
        let d = c.to_digit(base).ok_or(SYNTAX_ERROR)?;
        value = value
            .checked_mul(u64::from(base))
            .and_then(|v| v.checked_add(u64::from(d)))
            .ok_or(RANGE_ERROR)?;
        digit_seen = true;
        underscore_ok = true;
        last_underscore = false;
    }
    if last_underscore || !digit_seen {
        return Err(SYNTAX_ERROR);
    }
    Ok(value)
}

/// Go's `strconv.ParseInt(s, 0, 64)`.
fn parse_go_int(s: &str) -> Result<i64, &'static str> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let magnitude = i128::from(parse_go_uint(digits)?);
    i64::try_from(if negative { -magnitude } else { magnitude }).map_err(|_| RANGE_ERROR)
}

/// Go's `time.ParseDuration`, in nanoseconds: `10m`, `1h30m`, `1.5s`, `500ms`, `-2s`, `0`.
fn parse_go_duration(s: &str) -> Result<i128, String> {
    let invalid = || format!("time: invalid duration {s:?}");
    let (negative, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let limit: u128 = if negative { 1 << 63 } else { (1 << 63) - 1 };
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (int_digits, after) = rest.split_at(int_len);
        let (frac_digits, after) = match after.strip_prefix('.') {
            Some(f) => {
                let n = f.bytes().take_while(u8::is_ascii_digit).count();
                f.split_at(n)
            }
            None => ("", after),
        };
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(invalid());
        }
        let unit_len = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let per_unit: u128 = match unit {
            "" => return Err(format!("time: missing unit in duration {s:?}")),
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(format!("time: unknown unit {unit:?} in duration {s:?}")),
        };
        let int: u128 = if int_digits.is_empty() {
            0
        } else {
            int_digits.parse().map_err(|_| invalid())?
        };
        // Digits beyond nanosecond precision of an hour cannot change the result.
        let frac_digits = &frac_digits[..frac_digits.len().min(18)];
        let frac: u128 = if frac_digits.is_empty() {
            0
        } else {
            frac_digits.parse().map_err(|_| invalid())?
        };
        let scale = 10u128.pow(u32::try_from(frac_digits.len()).unwrap_or(0));
        let value = int
            .checked_mul(per_unit)
            .and_then(|v| v.checked_add(frac * per_unit / scale))
            .ok_or_else(invalid)?;
        total = total
            .checked_add(value)
            .filter(|t| *t <= limit)
            .ok_or_else(invalid)?;
        rest = after;
    }
    let total = i128::try_from(total).map_err(|_| invalid())?;
    Ok(if negative { -total } else { total })
}

// ---------------------------------------------------------------------------------
// The etcd 3.6 flag table (server/embed/config.go AddFlags and server/etcdmain/config.go).

/// How a flag takes its value, as Go's flag package sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `-flag` means true; a value only as `-flag=value`.
    Bool,
    Uint,
    Int,
    Duration,
    Text,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Treatment {
    /// Read into [`Config`]; also declared on the clap command.
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

struct EtcdFlag {
    name: &'static str,
    kind: Kind,
    treatment: Treatment,
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
const CHECKS: Treatment = Treatment::Tuning(
    "it only configures etcd's data corruption checks, which QuantyKube does not run yet",
);
const LEASES: Treatment = Treatment::Tuning("QuantyKube always checkpoints lease TTLs");
const DEFRAG: Treatment = Treatment::Tuning("QuantyKube never needs defragmentation");
const FSYNC: Treatment = Treatment::Tuning("QuantyKube always fsyncs");
const HTTP: Treatment = Treatment::Tuning(
    "it only affects etcd's HTTP gateway endpoints, which QuantyKube does not serve",
);
const GATES: Treatment = Treatment::Tuning(
    "etcd 3.6's feature gates only toggle corruption checks, lease checkpoints (always on in \
     QuantyKube) and internal tuning",
);
const REFUSED: Treatment = Treatment::Unimplemented(Some(""));
const fn only(value: &'static str) -> Treatment {
    Treatment::Unimplemented(Some(value))
}
const IGNORED_BY_ETCD: Treatment = Treatment::Obsolete("flag is no longer supported - ignoring");

use Kind::{Bool, Duration as Dur, Int, Text, Uint};
use Treatment::Implemented;

/// Every flag `etcd` 3.6 accepts (plus our `--etcd-version`), except `-h`/`-help`.
static FLAGS: &[EtcdFlag] = &[
    // Implemented.
    flag("name", Text, Implemented),
    flag("data-dir", Text, Implemented),
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
    flag("quota-backend-bytes", Text, Implemented),
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
    flag("strict-reconfig-check", Bool, Implemented),
    flag("max-learners", Int, Implemented),
    flag("version", Bool, Implemented),
    // Member tuning.
    flag("max-snapshots", Uint, PERF),
    flag("max-wals", Uint, PERF),
    flag("initial-election-tick-advance", Bool, PERF),
    flag("backend-bbolt-freelist-type", Text, PERF),
    flag("backend-batch-interval", Dur, PERF),
    flag("backend-batch-limit", Int, PERF),
    flag("max-concurrent-streams", Uint, PERF),
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
    flag("experimental-initial-corrupt-check", Bool, CHECKS),
    flag("corrupt-check-time", Dur, CHECKS),
    flag("experimental-corrupt-check-time", Dur, CHECKS),
    flag("experimental-compact-hash-check-enabled", Bool, CHECKS),
    flag("compact-hash-check-time", Dur, CHECKS),
    flag("experimental-compact-hash-check-time", Dur, CHECKS),
    flag("feature-gates", Text, GATES),
    flag("cors", Text, HTTP),
    flag("host-whitelist", Text, HTTP),
    // Logging, metrics, profiling, tracing.
    flag("logger", Text, OBSERVE),
    flag("log-outputs", Text, OBSERVE),
    flag("log-format", Text, OBSERVE),
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
    flag("config-file", Text, REFUSED),
    flag("wal-dir", Text, REFUSED),
    flag("listen-client-http-urls", Text, REFUSED),
    // Probes point at it (kubeadm's liveness probe), so ignoring it would hide a failure.
    flag("listen-metrics-urls", Text, REFUSED),
    flag("enable-grpc-gateway", Bool, only("false")),
    flag("pre-vote", Bool, only("true")),
    flag("force-new-cluster", Bool, only("false")),
    flag("auto-compaction-retention", Text, only("0")),
    flag(
        "auto-compaction-mode",
        Text,
        Treatment::Tuning(
            "it only matters with a non-zero --auto-compaction-retention, which QuantyKube refuses",
        ),
    ),
    flag("discovery", Text, REFUSED),
    flag("discovery-fallback", Text, only("exit")),
    flag("discovery-proxy", Text, REFUSED),
    flag("discovery-srv", Text, REFUSED),
    flag("discovery-srv-name", Text, REFUSED),
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
    // Not implemented yet: TLS.
    flag("cert-file", Text, REFUSED),
    flag("key-file", Text, REFUSED),
    flag("client-cert-file", Text, REFUSED),
    flag("client-key-file", Text, REFUSED),
    flag("client-cert-auth", Bool, only("false")),
    flag("client-crl-file", Text, REFUSED),
    flag("client-cert-allowed-hostname", Text, REFUSED),
    flag("trusted-ca-file", Text, REFUSED),
    flag("auto-tls", Bool, only("false")),
    flag("peer-cert-file", Text, REFUSED),
    flag("peer-key-file", Text, REFUSED),
    flag("peer-client-cert-file", Text, REFUSED),
    flag("peer-client-key-file", Text, REFUSED),
    flag("peer-client-cert-auth", Bool, only("false")),
    flag("peer-trusted-ca-file", Text, REFUSED),
    flag("peer-auto-tls", Bool, only("false")),
    flag("self-signed-cert-validity", Uint, only("1")),
    flag("peer-crl-file", Text, REFUSED),
    flag("peer-cert-allowed-cn", Text, REFUSED),
    flag("peer-cert-allowed-hostname", Text, REFUSED),
    flag("cipher-suites", Text, REFUSED),
    flag("peer-skip-client-san-verification", Bool, only("false")),
    flag(
        "experimental-peer-skip-client-san-verification",
        Bool,
        only("false"),
    ),
    flag("tls-min-version", Text, only("TLS1.2")),
    flag("tls-max-version", Text, REFUSED),
    // Not implemented yet: authentication options.
    flag("auth-token", Text, only("simple")),
    flag("bcrypt-cost", Uint, only("10")),
    flag("auth-token-ttl", Uint, only("300")),
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
const MIGRATED_FLAGS: &[(&str, &str)] = &[
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

fn lookup(name: &str) -> Option<&'static EtcdFlag> {
    FLAGS.iter().find(|f| f.name == name)
}

/// etcd's `flags.FlagToEnv("ETCD", name)`.
fn env_key(name: &str) -> String {
    format!("ETCD_{}", name.to_ascii_uppercase().replace('-', "_"))
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
fn check_other(
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
                    from_env: matches!(setting.origin, Origin::Env(_)),
                    only: ours.filter(|o| !o.is_empty()),
                });
            }
        }
    }
    Ok(())
}

/// Where a value came from, for messages.
#[derive(Clone, Copy, Debug)]
enum Origin {
    Flag(&'static str),
    Env(&'static str),
}

impl Origin {
    /// As Go's flag package and etcd's env reader name it in "invalid value" errors.
    fn describe(self) -> String {
        match self {
            Origin::Flag(name) => format!("flag --{name}"),
            Origin::Env(name) => env_key(name),
        }
    }

    fn subject(self) -> String {
        match self {
            Origin::Flag(name) => format!("--{name}"),
            Origin::Env(name) => format!("{} (--{name})", env_key(name)),
        }
    }
}

#[derive(Clone, Debug)]
struct Setting {
    value: String,
    origin: Origin,
}

impl Setting {
    fn flag(name: &'static str, value: String) -> Self {
        Setting {
            value,
            origin: Origin::Flag(name),
        }
    }

    fn env(name: &'static str, value: String) -> Self {
        Setting {
            value,
            origin: Origin::Env(name),
        }
    }

    fn invalid(&self, reason: impl Into<String>) -> ConfigError {
        ConfigError::InvalidValue {
            origin: self.origin.describe(),
            value: self.value.clone(),
            reason: reason.into(),
        }
    }
}

// ---------------------------------------------------------------------------------
// Go flag syntax, and the clap command that holds the implemented flags.

#[derive(Default)]
struct Scan {
    /// For clap: implemented flags as `--name=value`, and whatever is not an etcd flag.
    forwarded: Vec<String>,
    help: bool,
    version: bool,
    /// Non-implemented etcd flags from the command line, in order.
    others: Vec<(&'static EtcdFlag, String)>,
}

/// Reads arguments as Go's flag package does (`flag.FlagSet.Parse`): one or two dashes,
/// `=value` or the next argument as the value (even if it starts with a dash), boolean
/// flags never take the next argument, `--` or the first non-flag ends the flags.
fn scan(args: &[String]) -> Result<Scan, ConfigError> {
    let mut scan = Scan::default();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        i += 1;
        if arg == "--" {
            scan.forwarded.push(arg.clone());
            scan.forwarded.extend(args[i..].iter().cloned());
            break;
        }
        let Some(body) = arg.strip_prefix('-').filter(|b| !b.is_empty()) else {
            // Not a flag: Go stops here; clap reports the stray words.
            scan.forwarded.push("--".into());
            scan.forwarded.extend(args[i - 1..].iter().cloned());
            break;
        };
        let body = body.strip_prefix('-').unwrap_or(body);
        if body.is_empty() || body.starts_with(['-', '=']) {
            return Err(ConfigError::Syntax(format!("bad flag syntax: {arg}")));
        }
        let (name, inline) = match body.split_once('=') {
            Some((name, value)) => (name, Some(value.to_string())),
            None => (body, None),
        };
        if name == "h" || name == "help" {
            scan.help = true;
            return Ok(scan);
        }
        let Some(flag) = lookup(name) else {
            // Not an etcd flag: clap names it and suggests a near match. Stop, as Go
            // does, since the next argument may be this flag's value.
            let dashes = if name.chars().count() == 1 { "-" } else { "--" };
            scan.forwarded.push(format!("{dashes}{body}"));
            break;
        };
        let value = match (flag.kind, inline) {
            (Bool, inline) => {
                let value = inline.unwrap_or_else(|| "true".into());
                if parse_go_bool(&value).is_none() {
                    return Err(Setting::flag(flag.name, value).invalid(SYNTAX_ERROR));
                }
                value
            }
            (_, Some(value)) => value,
            (_, None) => {
                let value = args
                    .get(i)
                    .ok_or_else(|| ConfigError::Syntax(format!("flag needs an argument: {arg}")))?;
                i += 1;
                value.clone()
            }
        };
        match flag.treatment {
            Treatment::Implemented if flag.name == "version" => {
                scan.version = parse_go_bool(&value) == Some(true);
            }
            // `=` keeps clap from reading a value that starts with '-' as a flag.
            Treatment::Implemented => scan.forwarded.push(format!("--{}={value}", flag.name)),
            _ => {
                // The last setting wins, as in Go; warn about it once.
                scan.others.retain(|(f, _)| f.name != flag.name);
                scan.others.push((flag, value));
            }
        }
    }
    Ok(scan)
}

/// The implemented flags. Values stay strings here: they are parsed once the
/// environment is merged in, so that errors name where a value came from.
#[derive(Parser, Debug)]
#[command(
    name = "quantykube",
    about = "An etcd v3 compatible store: etcd's gRPC API on Raft (openraft) and RocksDB.",
    disable_version_flag = true,
    disable_help_flag = true,
    args_override_self = true
)]
struct Cli {
    /// Human-readable name for this member [default: default]
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Path to the data directory [default: ${name}.quantykube]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<String>,
    /// List of URLs to listen on for client gRPC traffic (http only) [default: http://localhost:2379]
    #[arg(long, value_name = "URLS")]
    listen_client_urls: Option<String>,
    /// List of this member's client URLs to advertise to the public; required when
    /// --listen-client-urls is set [default: http://localhost:2379]
    #[arg(long, value_name = "URLS")]
    advertise_client_urls: Option<String>,
    /// List of URLs to listen on for peer traffic (http only) [default: http://localhost:2380]
    #[arg(long, value_name = "URLS")]
    listen_peer_urls: Option<String>,
    /// List of this member's peer URLs to advertise to the rest of the cluster
    /// [default: http://localhost:2380]
    #[arg(long, value_name = "URLS")]
    initial_advertise_peer_urls: Option<String>,
    /// Initial cluster configuration for bootstrapping, name=url,... [default:
    /// ${name}=${initial-advertise-peer-urls}]
    #[arg(long, value_name = "NAME=URL,...")]
    initial_cluster: Option<String>,
    /// 'new' when bootstrapping a new cluster, 'existing' when joining one [default: new]
    #[arg(long, value_name = "new|existing")]
    initial_cluster_state: Option<String>,
    /// Initial cluster token for the cluster during bootstrap [default: etcd-cluster]
    #[arg(long, value_name = "TOKEN")]
    initial_cluster_token: Option<String>,
    /// Time (in milliseconds) of a heartbeat interval [default: 100]
    #[arg(long, value_name = "MS")]
    heartbeat_interval: Option<String>,
    /// Time (in milliseconds) for an election to timeout; at least 5 heartbeats [default: 1000]
    #[arg(long, value_name = "MS")]
    election_timeout: Option<String>,
    /// Number of committed transactions to trigger a snapshot [default: 10000]
    #[arg(long, value_name = "N")]
    snapshot_count: Option<String>,
    /// Raise alarms when the backend size exceeds this many bytes; 0 means 2 GiB,
    /// negative means no quota [default: 0]
    #[arg(long, value_name = "BYTES")]
    quota_backend_bytes: Option<String>,
    /// Maximum client request size in bytes the server will accept [default: 1572864]
    #[arg(long, value_name = "BYTES")]
    max_request_bytes: Option<String>,
    /// Maximum number of operations permitted in a transaction [default: 128]
    #[arg(long, value_name = "N")]
    max_txn_ops: Option<String>,
    /// Log level: debug, info, warn, error, panic or fatal [default: info]
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Duration of periodic watch progress notifications, e.g. 10m, 5s, 500ms [default: 10m]
    #[arg(long, value_name = "DURATION")]
    watch_progress_notify_interval: Option<String>,
    /// Deprecated (etcd 3.6) name of --watch-progress-notify-interval
    #[arg(long, value_name = "DURATION")]
    experimental_watch_progress_notify_interval: Option<String>,
    /// How often the leader checkpoints every lease's remaining TTL [default: 5m]
    #[arg(long, value_name = "DURATION")]
    experimental_lease_checkpoint_interval: Option<String>,
    /// The etcd version Maintenance.Status reports (QuantyKube only) [default: 3.6.5]
    #[arg(long, value_name = "VERSION")]
    etcd_version: Option<String>,
    /// Reject reconfiguration requests that would cause quorum loss [default: true]
    #[arg(long, value_name = "BOOL")]
    strict_reconfig_check: Option<String>,
    /// Maximum number of learners in the cluster at once [default: 1]
    #[arg(long, value_name = "N")]
    max_learners: Option<String>,
}

impl Cli {
    /// The given values, by etcd flag name.
    fn into_values(self) -> [(&'static str, Option<String>); 22] {
        [
            ("name", self.name),
            ("data-dir", self.data_dir),
            ("listen-client-urls", self.listen_client_urls),
            ("advertise-client-urls", self.advertise_client_urls),
            ("listen-peer-urls", self.listen_peer_urls),
            (
                "initial-advertise-peer-urls",
                self.initial_advertise_peer_urls,
            ),
            ("initial-cluster", self.initial_cluster),
            ("initial-cluster-state", self.initial_cluster_state),
            ("initial-cluster-token", self.initial_cluster_token),
            ("heartbeat-interval", self.heartbeat_interval),
            ("election-timeout", self.election_timeout),
            ("snapshot-count", self.snapshot_count),
            ("quota-backend-bytes", self.quota_backend_bytes),
            ("max-request-bytes", self.max_request_bytes),
            ("max-txn-ops", self.max_txn_ops),
            ("log-level", self.log_level),
            (
                "watch-progress-notify-interval",
                self.watch_progress_notify_interval,
            ),
            (
                "experimental-watch-progress-notify-interval",
                self.experimental_watch_progress_notify_interval,
            ),
            (
                "experimental-lease-checkpoint-interval",
                self.experimental_lease_checkpoint_interval,
            ),
            ("etcd-version", self.etcd_version),
            ("strict-reconfig-check", self.strict_reconfig_check),
            ("max-learners", self.max_learners),
        ]
    }
}

fn command() -> clap::Command {
    // -h/--help and --version never reach clap (`scan` handles them); they are
    // declared so that the help lists them.
    Cli::command()
        .arg(
            Arg::new("help")
                .short('h')
                .long("help")
                .action(ArgAction::Help)
                .help("Print this help"),
        )
        .arg(
            Arg::new("version")
                .long("version")
                .action(ArgAction::SetTrue)
                .help("Print QuantyKube's version and the etcd API version it implements"),
        )
        .mut_args(|arg| {
            let key = match arg.get_long() {
                Some("help" | "version") | None => return arg,
                Some(long) => env_key(long),
            };
            let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
            arg.help(format!("{help} [env: {key}]"))
        })
        .after_long_help(after_help())
}

fn help_text() -> String {
    command().render_long_help().to_string()
}

fn after_help() -> String {
    let mut tuning: Vec<&str> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    for f in FLAGS {
        match f.treatment {
            Treatment::Tuning(_) => tuning.push(f.name),
            Treatment::Unimplemented(Some(v)) if !v.is_empty() => {
                refused.push(format!("{} (only {v})", f.name))
            }
            Treatment::Unimplemented(_) => refused.push(f.name.to_string()),
            Treatment::Implemented | Treatment::Obsolete(_) => {}
        }
    }
    tuning.sort_unstable();
    refused.sort_unstable();
    format!(
        "Flags follow Go's syntax, as etcd's do: -name x, -name=x, --name x and --name=x all\n\
         work. Every flag can also be set through ETCD_ and its name in upper case with '-'\n\
         as '_' (e.g. ETCD_INITIAL_CLUSTER); the command-line flag wins.\n\n\
         etcd flags accepted but ignored, with a warning, because they only tune etcd's\n\
         internals:\n{}\n\n\
         etcd flags QuantyKube does not implement yet (refused, unless set to the value\n\
         shown, which is what QuantyKube does anyway):\n{}\n\n\
         `quantykube bench <workload> [flags]` is the load generator instead of a server\n\
         (put, range, txn-cas, mixed, watch, lease-keepalive against any etcd endpoint);\n\
         see `quantykube bench --help`.",
        wrap(&tuning),
        wrap(&refused)
    )
}

/// `--a, --b, ...` in indented lines of at most ~90 columns.
fn wrap<S: AsRef<str>>(names: &[S]) -> String {
    let mut out = String::new();
    let mut line = String::from(" ");
    for (i, name) in names.iter().enumerate() {
        let item = format!(
            " --{}{}",
            name.as_ref(),
            if i + 1 < names.len() { "," } else { "" }
        );
        if line.len() + item.len() > 90 && line.len() > 1 {
            out.push_str(&line);
            out.push('\n');
            line = String::from(" ");
        }
        line.push_str(&item);
    }
    out.push_str(&line);
    out
}

fn version_text(etcd_version: &str) -> String {
    format!(
        "QuantyKube Version: {}\netcd Version: {etcd_version}\netcd API Version: {ETCD_API_VERSION}\n\
         OS/Arch: {}/{}\n",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn run_with(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> (Config, Vec<String>) {
        let argv = std::iter::once("quantykube").chain(args.iter().copied());
        match parse(argv, env) {
            Ok(Invocation::Run { config, warnings }) => (*config, warnings),
            other => panic!("expected Run for {args:?}, got {other:?}"),
        }
    }

    fn run(args: &[&str]) -> Config {
        run_with(args, &no_env).0
    }

    fn error_with(args: &[&str], env: &dyn Fn(&str) -> Option<String>) -> ConfigError {
        let argv = std::iter::once("quantykube").chain(args.iter().copied());
        match parse(argv, env) {
            Err(e) => e,
            Ok(other) => panic!("expected an error for {args:?}, got {other:?}"),
        }
    }

    fn error(args: &[&str]) -> String {
        error_with(args, &no_env).to_string()
    }

    fn urls(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_without_flags_are_etcds() {
        let (config, warnings) = run_with(&[], &no_env);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(config.name, "default");
        assert_eq!(config.data_dir, PathBuf::from("default.quantykube"));
        assert_eq!(
            config.listen_client_urls,
            vec![Url::parse("http://localhost:2379").unwrap()]
        );
        assert_eq!(
            config.advertise_client_urls,
            urls(&["http://localhost:2379"])
        );
        assert_eq!(
            config.listen_peer_urls,
            vec![Url::parse("http://localhost:2380").unwrap()]
        );
        assert_eq!(
            config.initial_advertise_peer_urls,
            urls(&["http://localhost:2380"])
        );
        assert_eq!(
            config.initial_cluster,
            vec![ClusterMember {
                name: "default".into(),
                peer_urls: urls(&["http://localhost:2380"]),
            }]
        );
        assert_eq!(config.initial_cluster_state, ClusterState::New);
        assert_eq!(config.initial_cluster_token, "etcd-cluster");
        assert_eq!(config.heartbeat_interval, Duration::from_millis(100));
        assert_eq!(config.election_timeout, Duration::from_millis(1000));
        assert_eq!(config.snapshot_count, 10_000);
        assert_eq!(config.quota_backend_bytes, Some(2 << 30));
        assert_eq!(config.max_request_bytes, 1_572_864);
        assert_eq!(config.max_txn_ops, 128);
        assert_eq!(config.log_level, LogLevel::Info);
        assert_eq!(
            config.watch_progress_notify_interval,
            Duration::from_secs(600)
        );
        assert_eq!(config.etcd_version, "3.6.5");
    }

    #[test]
    fn every_go_flag_spelling_works() {
        for args in [
            &["--name", "n1"][..],
            &["--name=n1"],
            &["-name", "n1"],
            &["-name=n1"],
        ] {
            let config = run(args);
            assert_eq!(config.name, "n1", "{args:?}");
            // etcd derives the data dir and the default initial cluster from the name.
            assert_eq!(config.data_dir, PathBuf::from("n1.quantykube"));
            assert_eq!(config.initial_cluster[0].name, "n1");
        }
    }

    #[test]
    fn values_may_start_with_a_dash_and_the_last_flag_wins() {
        assert_eq!(run(&["--name", "-odd"]).name, "-odd");
        assert_eq!(run(&["--name", "a", "-name=b"]).name, "b");
        assert_eq!(run(&["--initial-cluster-token="]).initial_cluster_token, "");
    }

    #[test]
    fn typed_flags_parse() {
        let config = run(&[
            "--heartbeat-interval=50",
            "--election-timeout",
            "0x1f4",
            "--snapshot-count=1_000",
            "--quota-backend-bytes=-1",
            "--max-request-bytes",
            "2097152",
            "--max-txn-ops=1024",
            "--log-level=WARN",
            "--watch-progress-notify-interval=1m30s",
            "--etcd-version=3.5.17",
            "--data-dir=/var/lib/qk",
            "--initial-cluster-state=existing",
        ]);
        assert_eq!(config.heartbeat_interval, Duration::from_millis(50));
        assert_eq!(config.election_timeout, Duration::from_millis(500));
        assert_eq!(config.snapshot_count, 1000);
        assert_eq!(config.quota_backend_bytes, None);
        assert_eq!(config.max_request_bytes, 2 << 20);
        assert_eq!(config.max_txn_ops, 1024);
        assert_eq!(config.log_level, LogLevel::Warn);
        assert_eq!(
            config.watch_progress_notify_interval,
            Duration::from_secs(90)
        );
        assert_eq!(config.etcd_version, "3.5.17");
        assert_eq!(config.data_dir, PathBuf::from("/var/lib/qk"));
        assert_eq!(config.initial_cluster_state, ClusterState::Existing);
        assert_eq!(
            run(&["--quota-backend-bytes=0"]).quota_backend_bytes,
            Some(2 << 30)
        );
        assert_eq!(run(&["--snapshot-count=0"]).snapshot_count, 10_000);
        assert!(
            error(&["--max-txn-ops=-1"]).contains(r#"invalid value "-1" for flag --max-txn-ops"#)
        );
        assert!(error(&["--log-level=loud"]).contains("only supports debug"));
        assert!(error(&["--etcd-version=latest"]).contains("expected a version"));
    }

    #[test]
    fn environment_is_used_and_the_flag_wins() {
        let env = env_of(&[
            ("ETCD_NAME", "from-env"),
            ("ETCD_INITIAL_CLUSTER_TOKEN", "tok"),
            ("ETCD_DATA_DIR", ""),
        ]);
        let (config, warnings) = run_with(&[], &env);
        assert_eq!(config.name, "from-env");
        assert_eq!(config.initial_cluster_token, "tok");
        // Empty variables count as unset, as in etcd.
        assert_eq!(config.data_dir, PathBuf::from("from-env.quantykube"));
        assert!(warnings.is_empty(), "{warnings:?}");

        let (config, warnings) = run_with(&["--name", "from-flag"], &env);
        assert_eq!(config.name, "from-flag");
        assert_eq!(config.initial_cluster_token, "tok");
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("ETCD_NAME is shadowed by the command-line flag --name"));

        let err = error_with(&[], &env_of(&[("ETCD_HEARTBEAT_INTERVAL", "fast")]));
        assert_eq!(
            err.to_string(),
            r#"invalid value "fast" for ETCD_HEARTBEAT_INTERVAL: parse error"#
        );
        let (_, warnings) = run_with(&[], &env_of(&[("ETCD_VERSION", "3.6.0")]));
        assert!(warnings[0].contains("cannot set special environment variable ETCD_VERSION"));
    }

    #[test]
    fn unimplemented_flags_are_refused_by_name() {
        assert_eq!(
            error(&["--cert-file", "/etc/tls.crt"]),
            "--cert-file is an etcd flag that QuantyKube does not implement yet"
        );
        assert_eq!(
            error(&["-wal-dir=/wal"]),
            "--wal-dir is an etcd flag that QuantyKube does not implement yet"
        );
        let env = env_of(&[("ETCD_CERT_FILE", "/etc/tls.crt")]);
        let err = error_with(&[], &env);
        assert!(matches!(
            err,
            ConfigError::Unimplemented {
                flag: "cert-file",
                from_env: true,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "ETCD_CERT_FILE (--cert-file) is an etcd flag that QuantyKube does not implement yet"
        );
        assert_eq!(
            error(&["--pre-vote=false"]),
            "--pre-vote is an etcd flag that QuantyKube does not implement yet \
             (only --pre-vote=true, which is what QuantyKube does, is accepted)"
        );
        // A bare boolean flag means true, and never takes the next argument.
        assert!(error(&["--client-cert-auth", "--name", "x"]).starts_with("--client-cert-auth "));
    }

    #[test]
    fn unimplemented_flags_set_to_what_quantykube_does_are_accepted_silently() {
        let (config, warnings) = run_with(
            &[
                "--client-cert-auth=false",
                "--cert-file=",
                "--pre-vote",
                "--strict-reconfig-check=1",
                "--auto-compaction-retention=0",
                "--discovery-dial-timeout=2000ms",
                "--name=x",
            ],
            &env_of(&[("ETCD_AUTO_TLS", "false")]),
        );
        assert_eq!(config.name, "x");
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn tuning_flags_are_accepted_with_a_warning() {
        let env = env_of(&[("ETCD_MAX_WALS", "3")]);
        let (config, warnings) = run_with(
            &[
                "--max-snapshots",
                "2",
                "-grpc-keepalive-interval=1h",
                "--enable-pprof",
                "--name",
                "x",
            ],
            &env,
        );
        assert_eq!(config.name, "x");
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(warnings[0]
            .starts_with("--max-snapshots is accepted for etcd compatibility but ignored"));
        assert!(warnings[1].starts_with("--grpc-keepalive-interval "));
        assert!(warnings[2].starts_with("--enable-pprof "));
        assert!(warnings[3].starts_with("ETCD_MAX_WALS (--max-wals) is accepted"));
        // Their values are still checked as etcd checks them.
        assert_eq!(
            error(&["--max-snapshots=many"]),
            r#"invalid value "many" for flag --max-snapshots: parse error"#
        );
        assert!(error(&["--grpc-keepalive-time=5"]).contains("unexpected argument"));
        assert_eq!(
            error(&["--raft-read-timeout=5"]),
            r#"invalid value "5" for flag --raft-read-timeout: time: missing unit in duration "5""#
        );
        let (_, warnings) = run_with(&["--v", "-config"], &no_env);
        assert_eq!(warnings[0], "--v: flag is no longer supported - ignoring");
        assert_eq!(
            warnings[1],
            "--config: flag is no longer supported - ignoring"
        );
    }

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
            error(&["--name=d", "--initial-cluster=a=http://10.0.0.1:2380"]),
            r#"couldn't find local name "d" in the initial cluster configuration"#
        );
        assert_eq!(
            error(&["--name=a", "--initial-cluster=a=http://10.0.0.1:2380"]),
            "--initial-cluster has a=http://10.0.0.1:2380 but missing from \
             --initial-advertise-peer-urls=http://localhost:2380 \
             (\"http://localhost:2380\" != \"http://10.0.0.1:2380\")"
        );
        assert_eq!(
            error(&["--initial-cluster=default=http://localhost:2380,x=http://localhost:2380"]),
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
        assert_eq!(
            error(&["--listen-peer-urls=https://127.0.0.1:2380"]),
            "invalid value \"https://127.0.0.1:2380\" for flag --listen-peer-urls: \
             https://127.0.0.1:2380 uses TLS, which QuantyKube does not implement yet"
        );
        assert_eq!(
            error(&["--listen-peer-urls=http://node1.example:2380"]),
            "expected IP in URL for binding (http://node1.example:2380)"
        );
        assert!(error(&["--listen-peer-urls=http://127.0.0.1:2380/x"])
            .contains("must not contain a path"));
        assert!(error(&["--listen-peer-urls=http://127.0.0.1"]).contains(r#"the form "host:port""#));
        assert!(error(&["--listen-peer-urls="]).contains("URL scheme must be"));
        assert!(error(&["--advertise-client-urls=http://:2379"]).contains("unexpected empty host"));
    }

    #[test]
    fn watch_progress_interval_follows_etcd() {
        let (config, warnings) = run_with(
            &["--experimental-watch-progress-notify-interval=5s"],
            &no_env,
        );
        assert_eq!(
            config.watch_progress_notify_interval,
            Duration::from_secs(5)
        );
        assert!(warnings[0].contains("deprecated"));
        assert_eq!(
            run(&["--watch-progress-notify-interval=0"]).watch_progress_notify_interval,
            Duration::from_secs(600)
        );
        assert_eq!(
            run(&["--watch-progress-notify-interval=10ms"]).watch_progress_notify_interval,
            Duration::from_millis(100)
        );
        assert_eq!(
            error(&[
                "--experimental-watch-progress-notify-interval=5s",
                "--watch-progress-notify-interval=5s"
            ]),
            "cannot set --experimental-watch-progress-notify-interval and \
             --watch-progress-notify-interval at the same time, please use \
             --watch-progress-notify-interval only"
        );
    }

    #[test]
    fn help_and_version() {
        for flag in ["--help", "-h", "-help", "--h"] {
            let argv = ["quantykube", "--name=x", flag, "--bogus"];
            let Ok(Invocation::Help(text)) = parse(argv, &no_env) else {
                panic!("{flag} gave no help");
            };
            assert!(text.contains("--initial-cluster "), "{text}");
            assert!(text.contains("ETCD_INITIAL_CLUSTER"), "{text}");
            assert!(text.contains("--cert-file"), "{text}");
        }
        let Ok(Invocation::Version(text)) = parse(["quantykube", "--version"], &no_env) else {
            panic!("--version gave no version");
        };
        assert!(text.starts_with("QuantyKube Version: "), "{text}");
        assert!(text.contains("etcd API Version: 3.6\n"), "{text}");
        assert!(text.contains("etcd Version: 3.6.5\n"), "{text}");
        run(&["--version=false"]);
    }

    #[test]
    fn unknown_flags_and_words_get_clap_errors() {
        let ConfigError::Usage(e) = error_with(&["--nmae", "x"], &no_env) else {
            panic!("not a usage error");
        };
        assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
        assert!(e.to_string().contains("--nmae"));
        let ConfigError::Usage(e) = error_with(&["--name", "x", "bench"], &no_env) else {
            panic!("not a usage error");
        };
        assert!(e.to_string().contains("bench"));
        assert_eq!(error(&["--name"]), "flag needs an argument: --name");
        assert_eq!(error(&["---name=x"]), "bad flag syntax: ---name=x");
        assert_eq!(error_with(&["---x"], &no_env).exit_code(), 2);
    }

    #[test]
    fn go_number_and_duration_syntax() {
        assert_eq!(parse_go_uint("0"), Ok(0));
        assert_eq!(parse_go_uint("00"), Ok(0));
        assert_eq!(parse_go_uint("017"), Ok(15));
        assert_eq!(parse_go_uint("0o17"), Ok(15));
        assert_eq!(parse_go_uint("0x_1F"), Ok(31));
        assert_eq!(parse_go_uint("0b101"), Ok(5));
        assert_eq!(parse_go_uint("1_000"), Ok(1000));
        for bad in ["", "0x", "1__0", "_1", "1_", "08", "+1", "-1", "1e3"] {
            assert_eq!(parse_go_uint(bad), Err(SYNTAX_ERROR), "{bad:?}");
        }
        assert_eq!(parse_go_uint("18446744073709551616"), Err(RANGE_ERROR));
        assert_eq!(parse_go_int("-0x10"), Ok(-16));
        assert_eq!(parse_go_int("-9223372036854775808"), Ok(i64::MIN));

        let ms = 1_000_000i128;
        assert_eq!(parse_go_duration("10m"), Ok(600_000 * ms));
        assert_eq!(parse_go_duration("1h2m3.5s"), Ok(3_723_500 * ms));
        assert_eq!(parse_go_duration("500ms"), Ok(500 * ms));
        assert_eq!(parse_go_duration(".5us"), Ok(500));
        assert_eq!(parse_go_duration("1\u{b5}s"), Ok(1000));
        assert_eq!(parse_go_duration("-2s"), Ok(-2000 * ms));
        assert_eq!(parse_go_duration("0"), Ok(0));
        assert!(parse_go_duration("").is_err());
        assert!(parse_go_duration("5").unwrap_err().contains("missing unit"));
        assert!(parse_go_duration("5d")
            .unwrap_err()
            .contains("unknown unit"));
        assert!(parse_go_duration("1.s").is_ok());
        assert!(parse_go_duration(".s").is_err());
        assert!(parse_go_duration("3000000h").is_err());
    }

    #[test]
    fn flag_table_and_clap_command_agree() {
        let mut names = HashSet::new();
        for f in FLAGS {
            assert!(names.insert(f.name), "--{} listed twice", f.name);
        }
        let clap_longs: HashSet<String> = command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_string))
            .filter(|l| l != "help")
            .collect();
        let implemented: HashSet<String> = FLAGS
            .iter()
            .filter(|f| f.treatment == Treatment::Implemented)
            .map(|f| f.name.to_string())
            .collect();
        assert_eq!(clap_longs, implemented);
        for (old, new) in MIGRATED_FLAGS {
            assert!(
                lookup(old).is_some() && lookup(new).is_some(),
                "{old} / {new}"
            );
        }
        command().debug_assert();
    }
}
