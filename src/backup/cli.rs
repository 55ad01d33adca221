//! `quantykube snapshot save|status|restore`: etcdctl's (and etcdutl's) snapshot
//! commands, with their flags, defaults, output and errors (`save` is the one online
//! command: see `backup::save`).
//!
//! `restore` writes a member's data dir for a new cluster from a snapshot file written
//! by QuantyKube or etcd: the store (`import`), the member's identity and the cluster
//! it founds, which wins over `--initial-cluster` when the member starts, as etcd's
//! restored WAL does. It writes into a staging directory beside the data dir and
//! renames it into place last, so that a corrupt or truncated file leaves nothing.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use quantykube_raft::{durable, Member, NodeId};

use super::file::{self, human_bytes, Status};
use super::BackupError;
use crate::identity;
use crate::membership::join::{write_identity, write_restored_cluster, Identity};
use crate::store::{self, RevisionStore};

/// `quantykube snapshot`: manage etcd snapshot files offline.
#[derive(Debug, Parser)]
#[command(name = "quantykube snapshot", disable_version_flag = true)]
struct SnapshotCli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Stores an etcd node backend snapshot to a given file
    Save {
        /// The file to write, or a directory ending in `/` to write
        /// `snapshot-<UTC time>.db` in (ours: a shell-less CronJob cannot name files)
        file: PathBuf,
        /// gRPC endpoint of the one member to save from
        #[arg(
            long,
            env = "ETCDCTL_ENDPOINTS",
            value_delimiter = ',',
            default_value = "127.0.0.1:2379"
        )]
        endpoints: Vec<String>,
        /// verify certificates of TLS-enabled secure servers using this CA bundle
        #[arg(long, env = "ETCDCTL_CACERT")]
        cacert: Option<PathBuf>,
        /// identify secure client using this TLS certificate file
        #[arg(long, env = "ETCDCTL_CERT")]
        cert: Option<PathBuf>,
        /// identify secure client using this TLS key file
        #[arg(long, env = "ETCDCTL_KEY")]
        key: Option<PathBuf>,
        /// skip server certificate verification
        #[arg(long)]
        insecure_skip_tls_verify: bool,
        /// dial timeout for client connections, in seconds
        #[arg(long, default_value = "2s", value_parser = parse_seconds)]
        dial_timeout: std::time::Duration,
        /// With a directory: keep only the newest N snapshot-*.db files (0 keeps all)
        #[arg(long, default_value_t = 0)]
        keep: usize,
        /// username:password for authentication, split at the first ':' (needed once
        /// auth is on: Snapshot is root's; the password is never prompted for)
        #[arg(
            long,
            env = "ETCDCTL_USER",
            hide_env_values = true,
            value_name = "NAME:PASSWORD",
            value_parser = crate::client::UserParser
        )]
        user: Option<crate::client::Credentials>,
    },
    /// Gets backend snapshot status of a given file
    Status {
        file: PathBuf,
        /// set the output format (simple, table, json)
        #[arg(short = 'w', long = "write-out", value_enum, default_value = "simple")]
        write_out: Format,
    },
    /// Restores an etcd member snapshot to an etcd directory
    Restore {
        file: PathBuf,
        /// Human-readable name for this member
        #[arg(long, default_value = "default")]
        name: String,
        /// Path to the data directory (default: <name>.etcd)
        #[arg(long)]
        data_dir: Option<PathBuf>,
        /// Initial cluster configuration for restore bootstrap
        #[arg(long, default_value = "default=http://localhost:2380")]
        initial_cluster: String,
        /// Initial cluster token for the etcd cluster during restore bootstrap
        #[arg(long, default_value = "etcd-cluster")]
        initial_cluster_token: String,
        /// List of this member's peer URLs to advertise to the rest of the cluster
        #[arg(long, default_value = "http://localhost:2380")]
        initial_advertise_peer_urls: String,
        /// Ignore snapshot integrity hash value (required if copied from data directory)
        #[arg(long)]
        skip_hash_check: bool,
    },
}

/// A duration as etcdctl writes it: `2s`, `500ms`, or whole seconds.
fn parse_seconds(raw: &str) -> Result<std::time::Duration, String> {
    let number = |n: &str| {
        n.trim()
            .parse::<u64>()
            .map_err(|_| format!("invalid duration {raw:?}"))
    };
    if let Some(ms) = raw.strip_suffix("ms") {
        Ok(std::time::Duration::from_millis(number(ms)?))
    } else if let Some(s) = raw.strip_suffix('s') {
        Ok(std::time::Duration::from_secs(number(s)?))
    } else {
        Ok(std::time::Duration::from_secs(number(raw)?))
    }
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Format {
    Simple,
    Table,
    Json,
}

/// Runs `quantykube snapshot <args>`.
pub fn main<I: IntoIterator<Item = OsString>>(args: I) -> ExitCode {
    let argv = std::iter::once(OsString::from("quantykube snapshot")).chain(args);
    let cli = match SnapshotCli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2));
        }
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("QUANTYKUBE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .try_init();
    let result = match cli.command {
        Command::Save {
            file,
            endpoints,
            cacert,
            cert,
            key,
            insecure_skip_tls_verify,
            dial_timeout,
            keep,
            user,
        } => {
            let request = super::save::Save {
                endpoints: &endpoints,
                tls: crate::client::TlsFiles {
                    cacert: cacert.as_deref(),
                    cert: cert.as_deref(),
                    key: key.as_deref(),
                    insecure_skip_tls_verify,
                },
                dial_timeout,
                target: &file,
                keep,
                user: user.as_ref(),
            };
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| BackupError::Write(e.to_string()))
                .and_then(|runtime| runtime.block_on(super::save::save(&request)))
                .map(|saved| {
                    let _ = writeln!(std::io::stdout(), "Snapshot saved at {}", saved.display());
                })
        }
        Command::Status { file, write_out } => status(&file).map(|s| print_status(&s, write_out)),
        Command::Restore {
            file,
            name,
            data_dir,
            initial_cluster,
            initial_cluster_token,
            initial_advertise_peer_urls,
            skip_hash_check,
        } => {
            let data_dir = data_dir.unwrap_or_else(|| PathBuf::from(format!("{name}.etcd")));
            restore(&Restore {
                file: &file,
                name: &name,
                data_dir: &data_dir,
                initial_cluster: &initial_cluster,
                token: &initial_cluster_token,
                advertise_peer_urls: &initial_advertise_peer_urls,
                skip_hash_check,
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            // etcdctl's fatal errors: "Error: <reason>", exit status 1.
            let _ = writeln!(std::io::stderr(), "Error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn status(path: &Path) -> Result<Status, BackupError> {
    // etcdctl's status reads a file with or without its trailer.
    let snapshot = file::open(path, true)?;
    file::status(&snapshot.db)
}

fn print_status(status: &Status, format: Format) {
    let text = match format {
        Format::Simple => format!(
            "{:x}, {}, {}, {}\n",
            status.hash,
            status.revision,
            status.total_key,
            human_bytes(status.total_size)
        ),
        Format::Json => match serde_json::to_string(status) {
            Ok(json) => format!("{json}\n"),
            Err(error) => format!("{error}\n"),
        },
        Format::Table => table(
            &["HASH", "REVISION", "TOTAL KEYS", "TOTAL SIZE"],
            &[
                format!("{:x}", status.hash),
                status.revision.to_string(),
                status.total_key.to_string(),
                human_bytes(status.total_size),
            ],
        ),
    };
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// One row under a header, boxed as etcdctl's tables are.
fn table(header: &[&str], row: &[String]) -> String {
    let widths: Vec<usize> = header
        .iter()
        .zip(row)
        .map(|(h, r)| h.len().max(r.len()) + 2)
        .collect();
    let rule: String = widths
        .iter()
        .map(|w| format!("+{}", "-".repeat(*w)))
        .collect::<String>()
        + "+\n";
    let centred = |text: &str, width: usize| {
        let left = (width - text.len()) / 2;
        format!(
            "{}{text}{}",
            " ".repeat(left),
            " ".repeat(width - text.len() - left)
        )
    };
    let head: String = header
        .iter()
        .zip(&widths)
        .map(|(h, w)| format!("|{}", centred(h, *w)))
        .collect::<String>()
        + "|\n";
    let body: String = row
        .iter()
        .zip(&widths)
        .map(|(r, w)| format!("| {r:>width$} ", width = w - 2))
        .collect::<String>()
        + "|\n";
    format!("{rule}{head}{rule}{body}{rule}")
}

struct Restore<'a> {
    file: &'a Path,
    name: &'a str,
    data_dir: &'a Path,
    initial_cluster: &'a str,
    token: &'a str,
    advertise_peer_urls: &'a str,
    skip_hash_check: bool,
}

fn restore(request: &Restore<'_>) -> Result<(), BackupError> {
    let cluster = crate::config::restore_members(
        request.name,
        request.initial_cluster,
        request.advertise_peer_urls,
    )?;
    if request.data_dir.exists() {
        return Err(BackupError::DataDirExists(request.data_dir.to_path_buf()));
    }
    let snapshot = file::open(request.file, request.skip_hash_check)?;
    let members: std::collections::BTreeMap<NodeId, Member> = cluster
        .iter()
        .map(|m| {
            (
                identity::member_id(&m.peer_urls, request.token),
                Member {
                    name: m.name.clone(),
                    peer_urls: m.peer_urls.clone(),
                    client_urls: Vec::new(),
                },
            )
        })
        .collect();
    let own = cluster
        .iter()
        .find(|m| m.name == request.name)
        .map(|m| identity::member_id(&m.peer_urls, request.token))
        .ok_or_else(|| BackupError::NotEtcd("the member is not in --initial-cluster".into()))?;
    let staging = staging_dir(request.data_dir);
    if staging.exists() {
        std::fs::remove_dir_all(&staging).map_err(BackupError::file(&staging))?;
    }
    let written = (|| {
        durable::create_dir_all(&staging).map_err(BackupError::file(&staging))?;
        let summary = {
            let db = store::open_database(&crate::disk::store_path(&staging), &[])?;
            let store = RevisionStore::new(db)?;
            let summary = super::import::import(&snapshot.db, &store)?;
            // Closing the database neither syncs its WAL nor flushes it: without this,
            // a power cut after the restore leaves a data dir whose store lost its
            // newest writes (the current revision among them), and nothing says so.
            if !crate::planted_bug!(RestoreWithoutSync) {
                store.sync_to_disk()?;
            }
            summary
        };
        let identity_error =
            |e: crate::membership::MembershipError| BackupError::Identity(e.to_string());
        write_identity(
            &staging,
            Identity {
                member_id: own,
                cluster_id: identity::cluster_id(members.keys().copied()),
            },
        )
        .map_err(identity_error)?;
        write_restored_cluster(&staging, &members).map_err(identity_error)?;
        durable::rename(&staging, request.data_dir).map_err(BackupError::file(request.data_dir))?;
        Ok::<_, BackupError>(summary)
    })();
    let summary = match written {
        Ok(summary) => summary,
        Err(error) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(error);
        }
    };
    let _ = writeln!(
        std::io::stderr(),
        "restored snapshot {} into {}: member {own:x}, revision {}, {} versions, {} leases",
        request.file.display(),
        request.data_dir.display(),
        summary.current_revision,
        summary.versions,
        summary.leases,
    );
    Ok(())
}

/// Where a restore writes before the data dir exists: beside it, so that the final
/// rename stays on one file system.
fn staging_dir(data_dir: &Path) -> PathBuf {
    let mut name = data_dir
        .file_name()
        .map(OsString::from)
        .unwrap_or_else(|| OsString::from("data"));
    name.push(".restoring");
    data_dir.with_file_name(name)
}
