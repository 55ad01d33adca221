//! The `quantykube bench` command line: every flag, its default and its help text, and
//! the checks that clap cannot express (ranges, combinations).
//!
//! This module owns the flags' names and meaning. It must never open a connection,
//! start a runtime or print; [`BenchCli::validate`] only returns what is wrong.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::{Serialize, Serializer};

use crate::client::endpoints::{self, normalise};
use crate::client::{Credentials, TlsFiles, UserParser};

/// Operations per run when neither `--total` nor `--duration` is given (etcd's default).
pub const DEFAULT_TOTAL: u64 = 10_000;
/// Puts per watch run when neither `--total` nor `--duration` is given (etcd's
/// `watch --put-total` default), so that the default run takes about 10 s at the
/// default `--put-rate` of 100.
pub const DEFAULT_WATCH_TOTAL: u64 = 1_000;
/// The shortest `--timeline` window accepted: shorter ones would hold a handful of
/// operations each, and a long run would need a histogram per few of them.
const MIN_TIMELINE_INTERVAL: Duration = Duration::from_millis(10);
/// The highest `--rate` accepted (a billion requests per second).
const MAX_RATE: f64 = 1e9;

const AFTER_HELP: &str = "\
Flags may come before or after the workload. Latencies are measured on the client from \
the moment a request is sent (closed loop) or from the instant it was scheduled to be \
sent (--rate, open loop: no coordinated omission). See docs/bench-tool.md.

Examples:
  quantykube bench put --total 20000 --clients 100 --conns 10
  quantykube bench --endpoints 127.0.0.1:2379,127.0.0.1:22379 --target-leader put --duration 30s --rate 2000
  quantykube bench range --consistency s --key-space-size 1000 --total 50000 --clients 50
  quantykube bench txn-cas --key-space-size 100 --clients 32 --output json
  quantykube bench --endpoints https://127.0.0.1:2379 --cacert ca.pem --cert client.pem --key client-key.pem put
  quantykube bench --user root:secret put --total 20000 --clients 100 --conns 10";

/// `quantykube bench`: load an etcd v3 API endpoint (QuantyKube or etcd) and report
/// throughput, latency percentiles and errors.
#[derive(Debug, Parser, Serialize)]
#[command(
    name = "quantykube bench",
    about = "Benchmark any etcd v3 API endpoint (QuantyKube or etcd), in the spirit of etcd's `benchmark` tool",
    after_help = AFTER_HELP,
    disable_version_flag = true
)]
pub struct BenchCli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub workload: WorkloadArgs,
}

/// Flags every workload understands.
#[derive(Debug, Clone, Args, Serialize)]
pub struct GlobalArgs {
    /// Endpoints to load, comma separated: host:port, http://host:port or
    /// https://host:port. As in etcd's client, https:// is always TLS, http:// never,
    /// and host:port is TLS when a TLS flag (--cacert, --cert, --key,
    /// --insecure-skip-tls-verify) is given.
    #[arg(
        long,
        global = true,
        value_delimiter = ',',
        default_value = "127.0.0.1:2379",
        value_name = "LIST"
    )]
    pub endpoints: Vec<String>,

    /// gRPC connections (HTTP/2) to open; the clients share them round-robin, and the
    /// connections are spread round-robin over the endpoints.
    #[arg(long, global = true, default_value_t = 1, value_name = "N")]
    pub conns: usize,

    /// Concurrent clients; each has at most one operation in flight.
    #[arg(long, global = true, default_value_t = 1, value_name = "N")]
    pub clients: usize,

    /// Operations to run in all [default: 10000; watch: 1000 puts].
    #[arg(long, global = true, conflicts_with = "duration", value_name = "N")]
    pub total: Option<u64>,

    /// Run for this long instead of a number of operations, e.g. 10s, 500ms, 2m.
    #[arg(long, global = true, value_name = "DURATION")]
    pub duration: Option<DurationArg>,

    /// Key size in bytes. Keys are the key's index in the key space, zero-padded decimal
    /// (with the default 8: 00000000, 00000001, ...).
    #[arg(long, global = true, default_value_t = 8, value_name = "BYTES")]
    pub key_size: usize,

    /// Value size in bytes (random bytes, made once and shared by every request).
    #[arg(long, global = true, default_value_t = 8, value_name = "BYTES")]
    pub val_size: usize,

    /// Number of distinct keys the workload writes and reads.
    #[arg(long, global = true, default_value_t = 1, value_name = "N")]
    pub key_space_size: u64,

    /// Walk the key space in order (operation i uses key i modulo the key space size)
    /// instead of picking keys uniformly at random.
    #[arg(long, global = true)]
    pub sequential_keys: bool,

    /// Send every request to the leader only: the endpoint whose Maintenance.Status
    /// names itself as leader, looked up once at the start.
    #[arg(long, global = true)]
    pub target_leader: bool,

    /// Open loop: start requests at this total rate (requests per second, all clients
    /// together) at fixed instants, and measure latency from each scheduled instant.
    /// Without it the bench runs closed loop, as fast as the clients get answers.
    /// Needs --clients >= rate x latency, or requests queue (and latency shows it).
    #[arg(long, global = true, value_name = "PER_SECOND")]
    pub rate: Option<f64>,

    /// Also report the run window by window (throughput, p50, p99 and errors of each
    /// window of this length, e.g. 1s) and the whole run's latency distribution, as the
    /// JSON fields `timeline` and `latency_distribution` (for charts of a long run).
    #[arg(long, global = true, value_name = "DURATION")]
    pub timeline: Option<DurationArg>,

    /// Report format on stdout: a text summary, or one JSON object for scripts.
    #[arg(long, global = true, value_enum, default_value_t = Output::Text)]
    pub output: Output,

    /// Timeout of establishing a connection.
    #[arg(long, global = true, default_value = "2s", value_name = "DURATION")]
    pub dial_timeout: DurationArg,

    /// Timeout of each request; a request without an answer by then counts as an error.
    #[arg(long, global = true, default_value = "10s", value_name = "DURATION")]
    pub request_timeout: DurationArg,

    /// Verify certificates of TLS-enabled servers using this CA bundle (PEM). Needed
    /// for https:// unless --insecure-skip-tls-verify: the system's CA store is not read.
    #[arg(long = "cacert", global = true, value_name = "FILE")]
    pub cacert_file: Option<PathBuf>,

    /// Identify the client to TLS servers with this certificate (PEM; needs --key).
    #[arg(long = "cert", global = true, value_name = "FILE")]
    pub cert_file: Option<PathBuf>,

    /// The private key of --cert (PEM).
    #[arg(long = "key", global = true, value_name = "FILE")]
    pub key_file: Option<PathBuf>,

    /// Skip server certificate verification (CA, name and expiry); the handshake's
    /// signatures are still checked. For testing only.
    #[arg(long, global = true)]
    pub insecure_skip_tls_verify: bool,

    /// Authenticate as this user (etcd's auth): the user name and the password,
    /// separated by the first ':' (the password may contain ':'). Each connection
    /// authenticates once and sends its token with every request. Unlike etcd's
    /// benchmark, a missing password is refused, not prompted for. The report shows the
    /// user name only.
    #[arg(long, global = true, value_name = "NAME:PASSWORD", value_parser = UserParser)]
    pub user: Option<Credentials>,
}

impl GlobalArgs {
    /// True if any TLS flag is given: host:port endpoints then use TLS, as etcd's
    /// client does when it has a TLS configuration.
    pub fn tls_requested(&self) -> bool {
        self.tls_files().requested()
    }

    /// The TLS flags, for the client library to read.
    pub fn tls_files(&self) -> TlsFiles<'_> {
        TlsFiles {
            cacert: self.cacert_file.as_deref(),
            cert: self.cert_file.as_deref(),
            key: self.key_file.as_deref(),
            insecure_skip_tls_verify: self.insecure_skip_tls_verify,
        }
    }

    /// The endpoints as given, trimmed, empty entries dropped.
    pub fn endpoint_list(&self) -> impl Iterator<Item = &str> {
        endpoints::list(&self.endpoints)
    }
}

/// The workload to run, with its own flags.
#[derive(Debug, Subcommand, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadArgs {
    /// Put keys of the key space (random, or in order with --sequential-keys).
    Put(PutArgs),
    /// Range: one key of the key space per request, or a fixed key or range
    /// (KEY [RANGE_END]) with --limit.
    Range(RangeArgs),
    /// Read then compare-and-swap, as the Kubernetes API server updates an object: a
    /// Range of the key, then a Txn `if mod_revision(key) == seen then put else range`.
    /// A failed compare counts as a conflict, not an error.
    TxnCas(TxnCasArgs),
    /// Reads (single-key Range) and writes (Put) over the key space in a given ratio.
    Mixed(MixedArgs),
    /// Watchers on the key space, spread over streams, while writers put into it at
    /// --put-rate: events delivered per second, and latency from write acknowledgement
    /// to delivery.
    Watch(WatchArgs),
    /// Grant leases, then send LeaseKeepAlive requests on streams (one per client):
    /// latency from request to its response.
    LeaseKeepalive(LeaseKeepaliveArgs),
}

impl WorkloadArgs {
    /// The workload's name as typed on the command line and reported.
    pub fn name(&self) -> &'static str {
        match self {
            WorkloadArgs::Put(_) => "put",
            WorkloadArgs::Range(_) => "range",
            WorkloadArgs::TxnCas(_) => "txn-cas",
            WorkloadArgs::Mixed(_) => "mixed",
            WorkloadArgs::Watch(_) => "watch",
            WorkloadArgs::LeaseKeepalive(_) => "lease-keepalive",
        }
    }
}

/// `put` flags.
#[derive(Debug, Clone, Args, Serialize)]
pub struct PutArgs {
    /// Compact the store as the Kubernetes API server does, every N revisions: each
    /// time the writes pass another N revisions, compact away all but the last N (in
    /// the background; the puts go on meanwhile).
    #[arg(long, value_name = "REVISIONS")]
    pub compact_every: Option<u64>,
}

/// `range` flags.
#[derive(Debug, Clone, Args, Serialize)]
pub struct RangeArgs {
    /// A fixed key to read (or the start of a range). Without it each request reads one
    /// key of the key space (random, or in order with --sequential-keys).
    pub key: Option<String>,

    /// End of the range (exclusive), as in etcd's Range; needs KEY.
    #[arg(requires = "key")]
    pub range_end: Option<String>,

    /// At most this many keys per response (0: no limit).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub limit: i64,

    /// l: linearizable (etcd's default), s: serializable (served from the member's
    /// local state).
    #[arg(long, value_enum, default_value_t = Consistency::L)]
    pub consistency: Consistency,

    /// Read with etcd 3.7's KV.RangeStream (the range in chunks) instead of Range;
    /// needs KEY. Reports the time to the first chunk and the chunks per operation.
    #[arg(long)]
    pub stream: bool,
}

/// `txn-cas` flags.
#[derive(Debug, Clone, Args, Serialize)]
pub struct TxnCasArgs {
    /// Consistency of the read before each compare-and-swap: l or s.
    #[arg(long, value_enum, default_value_t = Consistency::L)]
    pub consistency: Consistency,
}

/// `mixed` flags.
#[derive(Debug, Clone, Args, Serialize)]
pub struct MixedArgs {
    /// Fraction of operations that are reads, from 0 to 1 (0.9: nine reads per write).
    #[arg(long, default_value_t = 0.5, value_name = "RATIO")]
    pub read_ratio: f64,

    /// Consistency of the reads: l or s.
    #[arg(long, value_enum, default_value_t = Consistency::L)]
    pub consistency: Consistency,
}

/// `watch` flags.
#[derive(Debug, Clone, Args, Serialize)]
pub struct WatchArgs {
    /// Watchers, each watching the whole key space.
    #[arg(long, default_value_t = 100, value_name = "N")]
    pub watchers: usize,

    /// Watch streams the watchers are spread over (round-robin); the streams are spread
    /// over the connections.
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub streams: usize,

    /// Total rate of the writers' puts, per second (0: as fast as possible). The
    /// writers are the --clients; --total (or --duration) bounds their puts.
    #[arg(long, default_value_t = 100.0, value_name = "PER_SECOND")]
    pub put_rate: f64,
}

/// `lease-keepalive` flags.
#[derive(Debug, Clone, Args, Serialize)]
pub struct LeaseKeepaliveArgs {
    /// Leases to grant before the run [default: one per client]. Client i keeps alive
    /// leases i, i + clients, ... in turn.
    #[arg(long, value_name = "N")]
    pub leases: Option<usize>,

    /// TTL of the granted leases, in seconds (they are revoked at the end).
    #[arg(long, default_value_t = 100, value_name = "SECONDS")]
    pub lease_ttl: i64,
}

/// Read consistency, as etcd's benchmark spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Consistency {
    /// Linearizable.
    L,
    /// Serializable.
    S,
}

impl Consistency {
    /// The `serializable` field of a RangeRequest.
    pub fn serializable(self) -> bool {
        self == Consistency::S
    }
}

/// Report format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Output {
    Text,
    Json,
}

/// A duration on the command line: `10s`, `1.5s`, `500ms`, `100us`, `2m`, `1h`, or a
/// bare number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationArg(pub Duration);

impl FromStr for DurationArg {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let value: f64 = number
            .parse()
            .map_err(|_| format!("`{text}` is not a duration (e.g. 10s, 500ms, 2m)"))?;
        let seconds = match unit.trim() {
            "" | "s" => value,
            "ms" => value / 1e3,
            "us" | "µs" => value / 1e6,
            "m" => value * 60.0,
            "h" => value * 3600.0,
            other => return Err(format!("unknown duration unit `{other}` in `{text}`")),
        };
        Duration::try_from_secs_f64(seconds)
            .map(DurationArg)
            .map_err(|_| format!("`{text}` is out of range"))
    }
}

impl fmt::Display for DurationArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Serialize for DurationArg {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl BenchCli {
    /// What clap cannot check: zero counts, ratios out of range, keys too short for the
    /// key space, flags that do not apply to the workload.
    pub fn validate(&self) -> Result<(), String> {
        let g = &self.global;
        if g.endpoint_list().next().is_none() {
            return Err("--endpoints: at least one endpoint is needed".into());
        }
        if g.cert_file.is_some() != g.key_file.is_some() {
            return Err("--cert and --key go together: give both or neither".into());
        }
        let can_verify = g.cacert_file.is_some() || g.insecure_skip_tls_verify;
        for endpoint in g.endpoint_list() {
            let url = normalise(endpoint, g.tls_requested()).map_err(|e| e.to_string())?;
            // etcd's client would verify against the system's CA store; this build has
            // none (tonic's rustls without native roots), so say what to give instead
            // of failing every handshake.
            if url.starts_with("https://") && !can_verify {
                return Err(format!(
                    "endpoint {endpoint} uses TLS: give --cacert FILE (the CA that signed \
                     the server's certificate) or --insecure-skip-tls-verify; \
                     quantykube bench does not read the system's CA store"
                ));
            }
        }
        positive("--conns", g.conns as u64)?;
        positive("--clients", g.clients as u64)?;
        if let Some(total) = g.total {
            positive("--total", total)?;
        }
        if let Some(duration) = g.duration {
            if duration.0.is_zero() {
                return Err("--duration must be longer than 0".into());
            }
        }
        if g.timeline
            .is_some_and(|interval| interval.0 < MIN_TIMELINE_INTERVAL)
        {
            return Err("--timeline must be at least 10ms".into());
        }
        if let Some(rate) = g.rate {
            if !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE) {
                return Err(format!(
                    "--rate must be a positive number up to {MAX_RATE}, got {rate}"
                ));
            }
        }
        positive("--key-size", g.key_size as u64)?;
        positive("--key-space-size", g.key_space_size)?;
        if !fits(g.key_space_size - 1, g.key_size) {
            return Err(format!(
                "--key-size {} is too short for --key-space-size {}: keys are zero-padded \
                 decimal indexes, which need {} bytes",
                g.key_size,
                g.key_space_size,
                digits(g.key_space_size - 1)
            ));
        }
        if g.dial_timeout.0.is_zero() || g.request_timeout.0.is_zero() {
            return Err("--dial-timeout and --request-timeout must be longer than 0".into());
        }
        match &self.workload {
            WorkloadArgs::Put(args) => {
                if let Some(every) = args.compact_every {
                    positive("--compact-every", every)?;
                    if i64::try_from(every).is_err() {
                        return Err(format!("--compact-every must be at most {}", i64::MAX));
                    }
                }
            }
            WorkloadArgs::TxnCas(_) => {}
            WorkloadArgs::Range(args) => {
                if args.limit < 0 {
                    return Err(format!("--limit must not be negative, got {}", args.limit));
                }
                if args.key.as_deref() == Some("") {
                    return Err("range: KEY must not be empty".into());
                }
                if args.stream && args.key.is_none() {
                    return Err("range --stream reads a fixed KEY [RANGE_END]: give KEY".into());
                }
            }
            WorkloadArgs::Mixed(args) => {
                if !(0.0..=1.0).contains(&args.read_ratio) {
                    return Err(format!(
                        "--read-ratio must be between 0 and 1, got {}",
                        args.read_ratio
                    ));
                }
            }
            WorkloadArgs::Watch(args) => {
                positive("--watchers", args.watchers as u64)?;
                positive("--streams", args.streams as u64)?;
                if !(args.put_rate.is_finite() && args.put_rate >= 0.0 && args.put_rate <= MAX_RATE)
                {
                    return Err(format!(
                        "--put-rate must be 0 or a positive number up to {MAX_RATE}, got {}",
                        args.put_rate
                    ));
                }
                if g.rate.is_some() {
                    return Err("watch: the writers' rate is --put-rate, not --rate".into());
                }
            }
            WorkloadArgs::LeaseKeepalive(args) => {
                if let Some(leases) = args.leases {
                    positive("--leases", leases as u64)?;
                }
                if args.lease_ttl <= 0 {
                    return Err(format!(
                        "--lease-ttl must be positive, got {}",
                        args.lease_ttl
                    ));
                }
            }
        }
        Ok(())
    }
}

fn positive(flag: &str, value: u64) -> Result<(), String> {
    if value == 0 {
        Err(format!("{flag} must be at least 1"))
    } else {
        Ok(())
    }
}

/// Decimal digits of `n` (at least 1).
pub fn digits(mut n: u64) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

fn fits(largest_index: u64, key_size: usize) -> bool {
    digits(largest_index) <= key_size
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<BenchCli, clap::Error> {
        BenchCli::try_parse_from(std::iter::once("quantykube bench").chain(args.iter().copied()))
    }

    #[test]
    fn durations_parse_with_units() {
        let d = |s: &str| s.parse::<DurationArg>().map(|d| d.0);
        assert_eq!(d("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(d("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(d("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(d("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(d("3"), Ok(Duration::from_secs(3)));
        assert!(d("ten").is_err());
        assert!(d("5d").is_err());
    }

    #[test]
    fn flags_may_follow_the_workload() {
        let cli = parse(&[
            "put",
            "--total",
            "200",
            "--clients",
            "4",
            "--output",
            "json",
        ])
        .expect("parses");
        assert_eq!(cli.global.total, Some(200));
        assert_eq!(cli.global.clients, 4);
        assert_eq!(cli.global.output, Output::Json);
        assert!(cli.validate().is_ok());
    }

    #[test]
    fn total_and_duration_conflict() {
        assert!(parse(&["put", "--total", "10", "--duration", "1s"]).is_err());
    }

    #[test]
    fn checks_beyond_clap() {
        let cli = parse(&["put", "--clients", "0"]).expect("parses");
        assert!(cli.validate().unwrap_err().contains("--clients"));
        let cli = parse(&["put", "--key-size", "2", "--key-space-size", "101"]).expect("parses");
        assert!(cli.validate().unwrap_err().contains("--key-size"));
        let cli = parse(&["put", "--key-size", "2", "--key-space-size", "100"]).expect("parses");
        assert!(cli.validate().is_ok());
        let cli = parse(&["mixed", "--read-ratio", "1.5"]).expect("parses");
        assert!(cli.validate().unwrap_err().contains("--read-ratio"));
        let cli = parse(&["watch", "--rate", "10"]).expect("parses");
        assert!(cli.validate().unwrap_err().contains("--put-rate"));
    }

    #[test]
    fn tls_flags_have_etcds_names() {
        let cli = parse(&[
            "--cacert",
            "/certs/ca.pem",
            "put",
            "--cert",
            "/certs/client.pem",
            "--key",
            "/certs/client-key.pem",
            "--insecure-skip-tls-verify",
        ])
        .expect("parses");
        let g = &cli.global;
        assert_eq!(g.cacert_file, Some(PathBuf::from("/certs/ca.pem")));
        assert_eq!(g.cert_file, Some(PathBuf::from("/certs/client.pem")));
        assert_eq!(g.key_file, Some(PathBuf::from("/certs/client-key.pem")));
        assert!(g.insecure_skip_tls_verify);
        assert!(g.tls_requested());
        // What the client library reads the files from.
        let files = g.tls_files();
        assert_eq!(files.cacert, g.cacert_file.as_deref());
        assert_eq!(files.cert, g.cert_file.as_deref());
        assert_eq!(files.key, g.key_file.as_deref());
        assert!(files.insecure_skip_tls_verify);
        assert!(cli.validate().is_ok());
        let plain = parse(&["put"]).expect("parses");
        assert!(!plain.global.tls_requested());
    }

    #[test]
    fn tls_key_flag_and_range_key_argument_coexist() {
        // range's positional KEY and the global --key are different arguments.
        let cli =
            parse(&["range", "00000001", "--key", "k.pem", "--cert", "c.pem"]).expect("parses");
        assert_eq!(cli.global.key_file, Some(PathBuf::from("k.pem")));
        match &cli.workload {
            WorkloadArgs::Range(args) => assert_eq!(args.key.as_deref(), Some("00000001")),
            other => panic!("parsed as {}", other.name()),
        }
    }

    #[test]
    fn tls_flag_checks() {
        let cli = parse(&["put", "--cert", "c.pem"]).expect("parses");
        assert!(cli.validate().unwrap_err().contains("--key"));
        let cli = parse(&["put", "--key", "k.pem"]).expect("parses");
        assert!(cli.validate().unwrap_err().contains("--cert"));
        // https:// needs something to verify the server with.
        let cli = parse(&["put", "--endpoints", "https://127.0.0.1:2379"]).expect("parses");
        assert!(cli.validate().unwrap_err().contains("--cacert"));
        let cli = parse(&[
            "put",
            "--endpoints",
            "https://127.0.0.1:2379",
            "--cert",
            "c.pem",
            "--key",
            "k.pem",
        ])
        .expect("parses");
        assert!(cli.validate().unwrap_err().contains("--cacert"));
        let cli = parse(&[
            "put",
            "--endpoints",
            "https://127.0.0.1:2379,127.0.0.1:22379",
            "--cacert",
            "ca.pem",
        ])
        .expect("parses");
        assert!(cli.validate().is_ok());
        let cli = parse(&[
            "put",
            "--endpoints",
            "https://127.0.0.1:2379",
            "--insecure-skip-tls-verify",
        ])
        .expect("parses");
        assert!(cli.validate().is_ok());
        // A bare address becomes https:// with a TLS flag, so it needs a CA too.
        let cli = parse(&["put", "--cert", "c.pem", "--key", "k.pem"]).expect("parses");
        assert!(cli.validate().unwrap_err().contains("--cacert"));
    }

    #[test]
    fn user_flag_splits_at_the_first_colon() {
        let cli = parse(&["put", "--user", "root:pa:ss"]).expect("parses");
        let user = cli.global.user.as_ref().expect("a user");
        assert_eq!(user, &Credentials::parse("root:pa:ss").expect("valid"));
        assert_eq!(user.name(), "root");
        assert!(cli.validate().is_ok());
        // Global: before the workload too; the report's parameters name the user only.
        let cli = parse(&["--user", "root:s3cret", "range"]).expect("parses");
        let params = serde_json::to_string(&cli.global).expect("serialises");
        assert!(
            params.contains(r#""user":"root""#) && !params.contains("s3cret"),
            "{params}"
        );
        assert!(parse(&["put"]).expect("parses").global.user.is_none());
    }

    #[test]
    fn user_flag_refusals_never_echo_the_password() {
        for (value, wanted) in [("root", "NAME:PASSWORD"), (":s3cret", "user name")] {
            let error = parse(&["put", "--user", value]).expect_err("refused");
            let text = error.to_string();
            assert!(
                text.contains(wanted) && !text.contains("s3cret"),
                "{value}: {text}"
            );
            assert_eq!(error.exit_code(), 2);
        }
    }

    #[test]
    fn digits_of_indexes() {
        assert_eq!(digits(0), 1);
        assert_eq!(digits(9), 1);
        assert_eq!(digits(10), 2);
        assert_eq!(digits(u64::MAX), 20);
    }
}
