//! The clap command that declares the implemented flags, and the `--help` and
//! `--version` text.
//!
//! clap sees only what [`scan`](super::scan::scan) forwards: the implemented flags as
//! `--name=value`, and whatever is not an etcd flag, for clap to name in its error.
//! Values stay strings here; [`into_values`](Cli::into_values) hands them over by etcd
//! flag name. This module must never read the environment (the help only names the
//! `ETCD_*` variables), validate a value, print or exit.

use clap::{Arg, ArgAction, CommandFactory, Parser};

use super::flags::{Treatment, FLAGS};
use super::setting::env_key;
use super::tls::TLS_FLAGS;

/// The etcd API version QuantyKube implements.
pub const ETCD_API_VERSION: &str = "3.7";

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
pub(super) struct Cli {
    /// Human-readable name for this member [default: default]
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Path to the data directory [default: ${name}.quantykube]
    #[arg(long, value_name = "DIR")]
    data_dir: Option<String>,
    /// Path to the dedicated raft log (WAL) directory [default: ${data-dir}/wal]
    #[arg(long, value_name = "DIR")]
    wal_dir: Option<String>,
    /// List of URLs to listen on for client gRPC and HTTP traffic (http or https) [default: http://localhost:2379]
    #[arg(long, value_name = "URLS")]
    listen_client_urls: Option<String>,
    /// List of this member's client URLs to advertise to the public; required when
    /// --listen-client-urls is set [default: http://localhost:2379]
    #[arg(long, value_name = "URLS")]
    advertise_client_urls: Option<String>,
    /// List of URLs to listen on for peer traffic (http or https) [default: http://localhost:2380]
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
    /// Refuse writes and raise a NOSPACE alarm once the store would reach this many
    /// bytes; 0 means 2 GiB, negative means no quota [default: 0]
    #[arg(long, value_name = "BYTES")]
    quota_backend_bytes: Option<String>,
    /// Maximum client request size in bytes the server will accept [default: 1572864]
    #[arg(long, value_name = "BYTES")]
    max_request_bytes: Option<String>,
    /// Maximum number of operations permitted in a transaction [default: 128]
    #[arg(long, value_name = "N")]
    max_txn_ops: Option<String>,
    /// Maximum concurrent streams that each client can open at a time (HTTP/2's
    /// SETTINGS_MAX_CONCURRENT_STREAMS on the client port) [default: 4294967295]
    #[arg(long, value_name = "N")]
    max_concurrent_streams: Option<String>,
    /// Path to the server configuration file (etcd's YAML keys); when given, every other
    /// flag and ETCD_* variable is ignored
    #[arg(long, value_name = "FILE")]
    config_file: Option<String>,
    /// Log level: debug, info, warn, error, panic or fatal [default: info]
    #[arg(long, value_name = "LEVEL")]
    log_level: Option<String>,
    /// Log format: json or console [default: json]
    #[arg(long, value_name = "FORMAT")]
    log_format: Option<String>,
    /// Where logs go, comma-separated: default (stderr), stderr, stdout or file paths
    /// [default: default]
    #[arg(long, value_name = "OUTPUTS")]
    log_outputs: Option<String>,
    /// Only 'zap' (etcd's structured logger; the format is --log-format's) [default: zap]
    #[arg(long, value_name = "LOGGER")]
    logger: Option<String>,
    /// Duration of periodic watch progress notifications, e.g. 10m, 5s, 500ms [default: 10m]
    #[arg(long, value_name = "DURATION")]
    watch_progress_notify_interval: Option<String>,
    /// Deprecated (etcd 3.6) name of --watch-progress-notify-interval
    #[arg(long, value_name = "DURATION")]
    experimental_watch_progress_notify_interval: Option<String>,
    /// How often the leader checkpoints every lease's remaining TTL [default: 5m]
    #[arg(long, value_name = "DURATION")]
    experimental_lease_checkpoint_interval: Option<String>,
    /// The etcd version Maintenance.Status reports (QuantyKube only) [default: 3.7.1]
    #[arg(long, value_name = "VERSION")]
    etcd_version: Option<String>,
    /// How long the JSON gateway waits for a request body (a stream's first message)
    /// before answering 400 (QuantyKube only) [default: 60s]
    #[arg(long, value_name = "DURATION")]
    gateway_body_timeout: Option<String>,
    /// Reject reconfiguration requests that would cause quorum loss [default: true]
    #[arg(long, value_name = "BOOL")]
    strict_reconfig_check: Option<String>,
    /// Maximum number of learners in the cluster at once [default: 1]
    #[arg(long, value_name = "N")]
    max_learners: Option<String>,
    /// Auth tokens: `simple`, or
    /// `jwt,pub-key=FILE,priv-key=FILE,sign-method=RS256,ttl=5m` [default: simple]
    #[arg(long, value_name = "OPTIONS")]
    auth_token: Option<String>,
    /// Seconds a simple token lives without use [default: 300]
    #[arg(long, value_name = "SECONDS")]
    auth_token_ttl: Option<String>,
    /// bcrypt cost of stored password hashes, 4 to 31 [default: 10]
    #[arg(long, value_name = "COST")]
    bcrypt_cost: Option<String>,
    /// DNS domain whose SRV records (_etcd-server._tcp.<domain>) list the initial
    /// cluster, instead of --initial-cluster
    #[arg(long, value_name = "DOMAIN")]
    discovery_srv: Option<String>,
    /// Service name to query when using DNS discovery: _etcd-server-<name>._tcp.<domain>
    #[arg(long, value_name = "NAME")]
    discovery_srv_name: Option<String>,
    /// List of URLs to listen on for HTTP only client traffic (health, metrics,
    /// version); when set, --listen-client-urls serve gRPC only
    #[arg(long, value_name = "URLS")]
    listen_client_http_urls: Option<String>,
    /// List of URLs to listen on for the metrics and health endpoints
    #[arg(long, value_name = "URLS")]
    listen_metrics_urls: Option<String>,
    /// Serve the JSON gateway (etcd's /v3/ HTTP API) on the client URLs [default: true]
    #[arg(long, value_name = "BOOL")]
    enable_grpc_gateway: Option<String>,
    /// Comma-separated origins allowed by CORS on the HTTP endpoints [default: *]
    #[arg(long, value_name = "ORIGINS")]
    cors: Option<String>,
    /// Comma-separated Host header values plain HTTP requests may carry, against DNS
    /// rebinding [default: *]
    #[arg(long, value_name = "HOSTS")]
    host_whitelist: Option<String>,
    /// Interpret --auto-compaction-retention as: 'periodic' (a duration, or hours if it
    /// has no unit, e.g. '5m') or 'revision' (a number of revisions) [default: periodic]
    #[arg(long, value_name = "periodic|revision")]
    auto_compaction_mode: Option<String>,
    /// Auto compaction retention for the key-value store; 0 disables auto compaction
    /// [default: 0]
    #[arg(long, value_name = "RETENTION")]
    auto_compaction_retention: Option<String>,
    /// How often revision mode compacts (QuantyKube only; etcd always uses 5m)
    /// [default: 5m]
    #[arg(long, value_name = "DURATION")]
    auto_compaction_revision_interval: Option<String>,
    /// Force a new one-member cluster from this member's data (disaster recovery after
    /// a lost quorum; remove the flag once other members are added back) [default: false]
    #[arg(long, value_name = "BOOL")]
    force_new_cluster: Option<String>,
    /// Check a restarting member's data against its peers' before it serves
    /// (deprecated in etcd 3.6: --feature-gates=InitialCorruptCheck=true) [default: false]
    #[arg(long, value_name = "BOOL")]
    experimental_initial_corrupt_check: Option<String>,
    /// How often the leader checks every member's data against its own; 0 disables
    /// [default: 0s]
    #[arg(long, value_name = "DURATION")]
    corrupt_check_time: Option<String>,
    /// Deprecated (etcd 3.6) name of --corrupt-check-time
    #[arg(long, value_name = "DURATION")]
    experimental_corrupt_check_time: Option<String>,
    /// Record a hash at each compaction and have the leader compare members' (deprecated
    /// in etcd 3.6: --feature-gates=CompactHashCheck=true) [default: false]
    #[arg(long, value_name = "BOOL")]
    experimental_compact_hash_check_enabled: Option<String>,
    /// How often the leader compares the hashes recorded at compactions [default: 1m0s]
    #[arg(long, value_name = "DURATION")]
    compact_hash_check_time: Option<String>,
    /// Deprecated (etcd 3.6) name of --compact-hash-check-time
    #[arg(long, value_name = "DURATION")]
    experimental_compact_hash_check_time: Option<String>,
    /// etcd 3.6's feature gates, as Key=true|false,... (InitialCorruptCheck,
    /// CompactHashCheck and SetMemberLocalAddr are acted on; the others are accepted,
    /// with a warning where QuantyKube behaves otherwise; unknown ones are refused)
    #[arg(long, value_name = "GATES")]
    feature_gates: Option<String>,
}

impl Cli {
    /// The given values, by etcd flag name.
    pub(super) fn into_values(self) -> Vec<(&'static str, Option<String>)> {
        vec![
            ("name", self.name),
            ("data-dir", self.data_dir),
            ("wal-dir", self.wal_dir),
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
            ("max-concurrent-streams", self.max_concurrent_streams),
            ("config-file", self.config_file),
            ("log-level", self.log_level),
            ("log-format", self.log_format),
            ("log-outputs", self.log_outputs),
            ("logger", self.logger),
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
            ("gateway-body-timeout", self.gateway_body_timeout),
            ("strict-reconfig-check", self.strict_reconfig_check),
            ("max-learners", self.max_learners),
            ("auth-token", self.auth_token),
            ("auth-token-ttl", self.auth_token_ttl),
            ("bcrypt-cost", self.bcrypt_cost),
            ("discovery-srv", self.discovery_srv),
            ("discovery-srv-name", self.discovery_srv_name),
            ("listen-client-http-urls", self.listen_client_http_urls),
            ("listen-metrics-urls", self.listen_metrics_urls),
            ("enable-grpc-gateway", self.enable_grpc_gateway),
            ("cors", self.cors),
            ("host-whitelist", self.host_whitelist),
            ("auto-compaction-mode", self.auto_compaction_mode),
            ("auto-compaction-retention", self.auto_compaction_retention),
            (
                "auto-compaction-revision-interval",
                self.auto_compaction_revision_interval,
            ),
            ("force-new-cluster", self.force_new_cluster),
            (
                "experimental-initial-corrupt-check",
                self.experimental_initial_corrupt_check,
            ),
            ("corrupt-check-time", self.corrupt_check_time),
            (
                "experimental-corrupt-check-time",
                self.experimental_corrupt_check_time,
            ),
            (
                "experimental-compact-hash-check-enabled",
                self.experimental_compact_hash_check_enabled,
            ),
            ("compact-hash-check-time", self.compact_hash_check_time),
            (
                "experimental-compact-hash-check-time",
                self.experimental_compact_hash_check_time,
            ),
            ("feature-gates", self.feature_gates),
        ]
    }
}

/// The TLS flags' values, which the command declares from [`TLS_FLAGS`] rather than
/// as fields of [`Cli`].
pub(super) fn tls_values(matches: &clap::ArgMatches) -> Vec<(&'static str, Option<String>)> {
    TLS_FLAGS
        .iter()
        .map(|(name, _)| (*name, matches.get_one::<String>(name).cloned()))
        .collect()
}

/// The clap command: the implemented flags, each with its `ETCD_*` variable, and
/// `-h`/`--help` and `--version` so that the help lists them.
pub(super) fn command() -> clap::Command {
    // -h/--help and --version never reach clap (`scan` handles them); they are
    // declared so that the help lists them.
    Cli::command()
        .args(
            TLS_FLAGS
                .iter()
                .map(|(name, help)| Arg::new(*name).long(*name).value_name("VALUE").help(*help)),
        )
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

/// `--help`'s text.
pub(super) fn help_text() -> String {
    command().render_long_help().to_string()
}

/// The help's epilogue: the syntax, and the etcd flags that are ignored or refused.
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
         as '_' (e.g. ETCD_INITIAL_CLUSTER); the command-line flag wins. With --config-file\n\
         (or ETCD_CONFIG_FILE), etcd's YAML keys replace every other flag and variable.\n\n\
         etcd flags accepted but ignored, with a warning, because they only tune etcd's\n\
         internals:\n{}\n\n\
         etcd flags QuantyKube does not implement yet (refused, unless set to the value\n\
         shown, which is what QuantyKube does anyway):\n{}\n\n\
         `quantykube bench <workload> [flags]` is the load generator instead of a server\n\
         (put, range, txn-cas, mixed, watch, lease-keepalive against any etcd endpoint);\n\
         see `quantykube bench --help`. `quantykube admin members|snapshots ...` drives the\n\
         admin API (see `quantykube admin --help`).",
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

/// `--version`'s text: QuantyKube's version, the commit it was built from and the etcd
/// versions it reports.
pub(super) fn version_text(etcd_version: &str) -> String {
    format!(
        "QuantyKube Version: {}\nGit SHA: {}\netcd Version: {etcd_version}\n\
         etcd API Version: {ETCD_API_VERSION}\nOS/Arch: {}/{}\n",
        env!("CARGO_PKG_VERSION"),
        GIT_COMMIT,
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// The commit a release build was made from: `deploy/bench/build-release.sh` (and the
/// release image built with it) sets `QK_GIT_COMMIT`. A plain `cargo build` leaves it
/// out, as etcd's `go build` does, so that development builds are not rebuilt at every
/// commit.
const GIT_COMMIT: &str = match option_env!("QK_GIT_COMMIT") {
    Some(commit) => commit,
    None => "Not provided (use deploy/bench/build-release.sh instead of cargo build)",
};

/// The commit this build was made from, as `--version` prints it.
pub fn git_commit() -> &'static str {
    GIT_COMMIT
}
