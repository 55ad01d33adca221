//! `quantykube admin members|snapshots ...`: the admin API from the shell, with
//! etcdctl's connection flags (`--endpoints`, `--cacert`, `--cert`, `--key`,
//! `--insecure-skip-tls-verify`, `--user`, and their `ETCDCTL_*` variables), a table by
//! default or `-o json|yaml`, and exit codes a script can branch on (see [`Exit`]).
//!
//! `members update` does the read-modify-write for the user: it reads the member,
//! changes what the flags say, and writes it back with the uid and version it read. If
//! someone changed the member in between it stops with ABORTED rather than retry: the
//! user has not seen that change.

mod output;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use tonic::Code;

use crate::client::{AuthChannel, Credentials, TlsFiles, UserParser};
use crate::proto::admin_v1::admin_client::AdminClient;
use crate::proto::admin_v1::{
    CreateMemberRequest, CreateSnapshotRequest, DeleteMemberRequest, DeleteOptions,
    DeleteSnapshotRequest, DownloadSnapshotRequest, ElectMemberRequest, GetMemberRequest,
    GetSnapshotRequest, ListMembersRequest, ListSnapshotsRequest, Member, ObjectRef,
    PromoteMemberRequest, ResourceMetadata, Snapshot, SnapshotState, UpdateMemberRequest,
};

/// How long authenticating may take.
const AUTH_TIMEOUT: Duration = Duration::from_secs(5);
/// How often `snapshots create --wait` looks again.
const SNAPSHOT_POLL: Duration = Duration::from_millis(200);

#[derive(Debug, Parser)]
#[command(
    name = "quantykube admin",
    about = "QuantyKube's admin API: the cluster's members and snapshots as resources",
    disable_version_flag = true
)]
struct AdminCli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Args)]
struct Global {
    /// gRPC endpoints; the first that answers is used
    #[arg(
        long,
        global = true,
        env = "ETCDCTL_ENDPOINTS",
        value_delimiter = ',',
        default_value = "127.0.0.1:2379"
    )]
    endpoints: Vec<String>,
    /// verify certificates of TLS-enabled secure servers using this CA bundle
    #[arg(long, global = true, env = "ETCDCTL_CACERT")]
    cacert: Option<PathBuf>,
    /// identify secure client using this TLS certificate file
    #[arg(long, global = true, env = "ETCDCTL_CERT")]
    cert: Option<PathBuf>,
    /// identify secure client using this TLS key file
    #[arg(long, global = true, env = "ETCDCTL_KEY")]
    key: Option<PathBuf>,
    /// skip server certificate verification
    #[arg(long, global = true)]
    insecure_skip_tls_verify: bool,
    /// username:password for authentication (root's, once auth is on)
    #[arg(
        long,
        global = true,
        env = "ETCDCTL_USER",
        hide_env_values = true,
        value_name = "NAME:PASSWORD",
        value_parser = UserParser
    )]
    user: Option<Credentials>,
    /// dial timeout for client connections, in seconds
    #[arg(long, global = true, default_value = "2s", value_parser = parse_seconds)]
    dial_timeout: Duration,
    /// timeout of each request, in seconds
    #[arg(long, global = true, default_value = "30s", value_parser = parse_seconds)]
    command_timeout: Duration,
    /// output format
    #[arg(short = 'o', long, global = true, value_enum, default_value_t = Format::Table)]
    output: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Table,
    Json,
    Yaml,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The cluster's members
    #[command(subcommand)]
    Members(MembersCommand),
    /// Snapshots of the store kept on members' disks
    #[command(subcommand)]
    Snapshots(SnapshotsCommand),
}

#[derive(Debug, Subcommand)]
enum MembersCommand {
    /// Lists every member
    List {
        /// members per request (the server's choice if 0)
        #[arg(long, default_value_t = 0)]
        page_size: i32,
    },
    /// Shows one member
    Get { name: String },
    /// Adds a learner; start it with --name NAME and --initial-cluster-state existing
    Add {
        name: String,
        /// the new member's peer URLs
        #[arg(long, value_delimiter = ',', required = true)]
        peer_urls: Vec<String>,
    },
    /// Changes a member's peer URLs (read, change, write back guarded)
    Update {
        name: String,
        #[arg(long, value_delimiter = ',', required = true)]
        peer_urls: Vec<String>,
    },
    /// Removes a member
    Remove {
        name: String,
        /// remove only if the member's uid is this
        #[arg(long)]
        uid: Option<String>,
        /// remove only if the member's version is this
        #[arg(long)]
        version: Option<i64>,
    },
    /// Makes a learner a voter once it has caught up
    Promote { name: String },
    /// Hands the cluster's leadership to a voter
    TransferLeadership { name: String },
}

#[derive(Debug, Subcommand)]
enum SnapshotsCommand {
    /// Writes a snapshot on the serving member's disk
    Create {
        name: String,
        /// return at once, in state CREATING, instead of waiting for READY
        #[arg(long)]
        no_wait: bool,
    },
    /// Lists every snapshot
    List {
        #[arg(long, default_value_t = 0)]
        page_size: i32,
    },
    /// Shows one snapshot
    Get { name: String },
    /// Deletes a snapshot and its file
    Delete {
        name: String,
        #[arg(long)]
        uid: Option<String>,
        #[arg(long)]
        version: Option<i64>,
    },
    /// Writes a READY snapshot's file here (an etcd snapshot file)
    Download { name: String, file: PathBuf },
}

/// Exit codes, one per outcome a script may handle differently.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    /// Anything not listed below.
    Failed = 1,
    /// The command line is wrong (clap's code).
    Usage = 2,
    NotFound = 3,
    AlreadyExists = 4,
    /// A uid or version guard failed: someone else changed the resource.
    Aborted = 5,
    /// The cluster is not in a state the command can act on (a learner not caught
    /// up, a snapshot not ready).
    FailedPrecondition = 6,
    /// No endpoint answered, or no leader, or the request timed out.
    Unavailable = 7,
    /// The credentials were refused or are not root's.
    PermissionDenied = 8,
    InvalidArgument = 9,
}

impl Exit {
    fn of(code: Code) -> Exit {
        match code {
            Code::Ok => Exit::Ok,
            Code::NotFound => Exit::NotFound,
            Code::AlreadyExists => Exit::AlreadyExists,
            Code::Aborted => Exit::Aborted,
            Code::FailedPrecondition => Exit::FailedPrecondition,
            Code::Unavailable | Code::DeadlineExceeded => Exit::Unavailable,
            Code::PermissionDenied | Code::Unauthenticated => Exit::PermissionDenied,
            Code::InvalidArgument | Code::OutOfRange => Exit::InvalidArgument,
            _ => Exit::Failed,
        }
    }
}

/// Why a command stopped.
struct Failure {
    exit: Exit,
    message: String,
}

impl From<tonic::Status> for Failure {
    fn from(status: tonic::Status) -> Failure {
        Failure {
            exit: Exit::of(status.code()),
            message: format!("{:?}: {}", status.code(), status.message()),
        }
    }
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    let number = text.strip_suffix('s').unwrap_or(text);
    number
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?} is not a number of seconds"))
}

/// Runs `quantykube admin` with `args` (after `admin`).
pub fn main(args: impl Iterator<Item = OsString>) -> ExitCode {
    let cli = match AdminCli::try_parse_from(std::iter::once(OsString::from("admin")).chain(args)) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "Error: {e}");
            return ExitCode::from(Exit::Failed as u8);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            let _ = writeln!(std::io::stderr(), "Error: {}", failure.message);
            ExitCode::from(failure.exit as u8)
        }
    }
}

async fn connect(global: &Global) -> Result<AdminClient<AuthChannel>, Failure> {
    let tls = TlsFiles {
        cacert: global.cacert.as_deref(),
        cert: global.cert.as_deref(),
        key: global.key.as_deref(),
        insecure_skip_tls_verify: global.insecure_skip_tls_verify,
    };
    let mut errors = Vec::new();
    for endpoint in &global.endpoints {
        let dialed = crate::client::dial(
            endpoint,
            &tls,
            global.dial_timeout,
            global.user.as_ref(),
            AUTH_TIMEOUT,
        )
        .await;
        match dialed {
            Ok(channel) => {
                return Ok(AdminClient::new(channel).max_decoding_message_size(usize::MAX))
            }
            Err(error) => errors.push(error.to_string()),
        }
    }
    Err(Failure {
        exit: Exit::Unavailable,
        message: format!("no endpoint answered: {}", errors.join("; ")),
    })
}

/// Where a List walk is: every page until the empty token (section 3.2). An empty page
/// with a token is not the end; only the empty token is.
#[derive(Debug, Default)]
struct Pages {
    /// The token of the next request; None once a page came back without one.
    next: Option<String>,
    started: bool,
}

impl Pages {
    fn next_token(&mut self) -> Option<String> {
        if !self.started {
            self.started = true;
            return Some(String::new());
        }
        self.next.take()
    }

    fn answered(&mut self, next_page_token: String) {
        self.next = (!next_page_token.is_empty()).then_some(next_page_token);
    }
}

fn object(name: &str) -> Option<ObjectRef> {
    Some(ObjectRef {
        atespace: String::new(),
        name: name.to_string(),
    })
}

fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    request
}

fn delete_options(uid: Option<String>, version: Option<i64>) -> Option<DeleteOptions> {
    Some(DeleteOptions {
        version: version.unwrap_or(0),
        uid: uid.unwrap_or_default(),
    })
}

async fn run(cli: AdminCli) -> Result<(), Failure> {
    let global = &cli.global;
    let mut client = connect(global).await?;
    let timeout = global.command_timeout;
    let format = global.output;
    match cli.command {
        Command::Members(command) => members(&mut client, command, timeout, format).await,
        Command::Snapshots(command) => snapshots(&mut client, command, timeout, format).await,
    }
}

async fn members(
    client: &mut AdminClient<AuthChannel>,
    command: MembersCommand,
    timeout: Duration,
    format: Format,
) -> Result<(), Failure> {
    let one = |member: Member| output::members(&[member], format, false);
    match command {
        MembersCommand::List { page_size } => {
            let mut all = Vec::new();
            let mut pages = Pages::default();
            while let Some(page_token) = pages.next_token() {
                let page = client
                    .list_members(request(
                        ListMembersRequest {
                            page_size,
                            page_token,
                        },
                        timeout,
                    ))
                    .await?
                    .into_inner();
                all.extend(page.members);
                pages.answered(page.next_page_token);
            }
            output::members(&all, format, true)
        }
        MembersCommand::Get { name } => {
            let member = client
                .get_member(request(
                    GetMemberRequest {
                        member: object(&name),
                    },
                    timeout,
                ))
                .await?;
            one(member.into_inner())
        }
        MembersCommand::Add { name, peer_urls } => {
            let member = Member {
                metadata: Some(ResourceMetadata {
                    name,
                    ..Default::default()
                }),
                peer_urls,
                status: None,
                unknown_fields: Vec::new(),
            };
            let created = client
                .create_member(request(
                    CreateMemberRequest {
                        member: Some(member),
                    },
                    timeout,
                ))
                .await?;
            one(created.into_inner())
        }
        MembersCommand::Update { name, peer_urls } => {
            let mut member = client
                .get_member(request(
                    GetMemberRequest {
                        member: object(&name),
                    },
                    timeout,
                ))
                .await?
                .into_inner();
            // Modify what was read (its uid and version are the guards), never a fresh
            // member: fields this client does not know of go back as they came.
            member.peer_urls = peer_urls;
            let updated = client
                .update_member(request(
                    UpdateMemberRequest {
                        member: Some(member),
                    },
                    timeout,
                ))
                .await?;
            one(updated.into_inner())
        }
        MembersCommand::Remove { name, uid, version } => {
            let deleted = client
                .delete_member(request(
                    DeleteMemberRequest {
                        member: object(&name),
                        options: delete_options(uid, version),
                    },
                    timeout,
                ))
                .await?;
            one(deleted.into_inner())
        }
        MembersCommand::Promote { name } => {
            let promoted = client
                .promote_member(request(
                    PromoteMemberRequest {
                        member: object(&name),
                    },
                    timeout,
                ))
                .await?;
            one(promoted.into_inner())
        }
        MembersCommand::TransferLeadership { name } => {
            let elected = client
                .elect_member(request(
                    ElectMemberRequest {
                        member: object(&name),
                    },
                    timeout,
                ))
                .await?;
            one(elected.into_inner())
        }
    }
}

async fn snapshots(
    client: &mut AdminClient<AuthChannel>,
    command: SnapshotsCommand,
    timeout: Duration,
    format: Format,
) -> Result<(), Failure> {
    let one = |snapshot: Snapshot| output::snapshots(&[snapshot], format, false);
    match command {
        SnapshotsCommand::Create { name, no_wait } => {
            let snapshot = Snapshot {
                metadata: Some(ResourceMetadata {
                    name: name.clone(),
                    ..Default::default()
                }),
                status: None,
            };
            let mut created = client
                .create_snapshot(request(
                    CreateSnapshotRequest {
                        snapshot: Some(snapshot),
                    },
                    timeout,
                ))
                .await?
                .into_inner();
            let deadline = tokio::time::Instant::now() + timeout;
            while !no_wait && state(&created) == SnapshotState::Creating {
                if tokio::time::Instant::now() >= deadline {
                    return Err(Failure {
                        exit: Exit::Unavailable,
                        message: format!("snapshot {name:?} is still being written"),
                    });
                }
                tokio::time::sleep(SNAPSHOT_POLL).await;
                created = client
                    .get_snapshot(request(
                        GetSnapshotRequest {
                            snapshot: object(&name),
                        },
                        timeout,
                    ))
                    .await?
                    .into_inner();
            }
            let failed = state(&created) == SnapshotState::Failed;
            one(created)?;
            if failed {
                return Err(Failure {
                    exit: Exit::Failed,
                    message: format!("snapshot {name:?} failed"),
                });
            }
            Ok(())
        }
        SnapshotsCommand::List { page_size } => {
            let mut all = Vec::new();
            let mut pages = Pages::default();
            while let Some(page_token) = pages.next_token() {
                let page = client
                    .list_snapshots(request(
                        ListSnapshotsRequest {
                            page_size,
                            page_token,
                        },
                        timeout,
                    ))
                    .await?
                    .into_inner();
                all.extend(page.snapshots);
                pages.answered(page.next_page_token);
            }
            output::snapshots(&all, format, true)
        }
        SnapshotsCommand::Get { name } => {
            let snapshot = client
                .get_snapshot(request(
                    GetSnapshotRequest {
                        snapshot: object(&name),
                    },
                    timeout,
                ))
                .await?;
            one(snapshot.into_inner())
        }
        SnapshotsCommand::Delete { name, uid, version } => {
            let deleted = client
                .delete_snapshot(request(
                    DeleteSnapshotRequest {
                        snapshot: object(&name),
                        options: delete_options(uid, version),
                    },
                    timeout,
                ))
                .await?;
            one(deleted.into_inner())
        }
        SnapshotsCommand::Download { name, file } => download(client, &name, &file).await,
    }
}

fn state(snapshot: &Snapshot) -> SnapshotState {
    snapshot
        .status
        .as_ref()
        .map_or(SnapshotState::Unspecified, |s| s.state())
}

/// Streams the file into `<file>.part`, checks its SHA-256 against the snapshot's, and
/// renames it into place: an interrupted download never looks complete.
async fn download(
    client: &mut AdminClient<AuthChannel>,
    name: &str,
    file: &std::path::Path,
) -> Result<(), Failure> {
    use sha2::{Digest, Sha256};
    let io = |e: std::io::Error| Failure {
        exit: Exit::Failed,
        message: format!("{}: {e}", file.display()),
    };
    let expected = client
        .get_snapshot(GetSnapshotRequest {
            snapshot: object(name),
        })
        .await?
        .into_inner();
    let expected_sha = expected
        .status
        .as_ref()
        .map(|s| s.sha256.clone())
        .unwrap_or_default();
    let mut stream = client
        .download_snapshot(DownloadSnapshotRequest {
            snapshot: object(name),
        })
        .await?
        .into_inner();
    let part = PathBuf::from(format!("{}.part", file.display()));
    let mut out = std::fs::File::create(&part).map_err(io)?;
    let mut hasher = Sha256::new();
    let written = async {
        while let Some(message) = stream.message().await? {
            hasher.update(&message.chunk);
            out.write_all(&message.chunk).map_err(io)?;
        }
        out.sync_all().map_err(io)?;
        let got = hex(&hasher.finalize());
        if got != expected_sha {
            return Err(Failure {
                exit: Exit::Failed,
                message: format!("downloaded {name:?} has SHA-256 {got}, not {expected_sha}"),
            });
        }
        quantykube_raft::durable::rename(&part, file).map_err(io)
    }
    .await;
    if written.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    written
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commands_parse_as_documented() {
        let parse = |args: &[&str]| {
            AdminCli::try_parse_from(std::iter::once("admin").chain(args.iter().copied()))
        };
        let cli = parse(&[
            "members",
            "add",
            "m3",
            "--peer-urls",
            "http://a:2380,http://b:2380",
            "-o",
            "json",
        ])
        .unwrap();
        assert_eq!(cli.global.output, Format::Json);
        match cli.command {
            Command::Members(MembersCommand::Add { name, peer_urls }) => {
                assert_eq!(name, "m3");
                assert_eq!(peer_urls, ["http://a:2380", "http://b:2380"]);
            }
            other => panic!("{other:?}"),
        }
        assert!(
            parse(&["members", "add", "m3"]).is_err(),
            "--peer-urls is required"
        );
        assert!(parse(&[
            "members",
            "transfer-leadership",
            "m1",
            "--endpoints",
            "a:1,b:2"
        ])
        .is_ok());
        assert!(parse(&["snapshots", "download", "s1", "/tmp/s1.db"]).is_ok());
        assert!(parse(&["members", "list", "-o", "xml"]).is_err());
    }

    #[test]
    fn a_list_walks_past_empty_pages_to_the_empty_token() {
        // Pages as a server may send them: [a], [] with a token, [b], the end.
        let answers = [(vec!["a"], "t1"), (vec![], "t2"), (vec!["b"], "")];
        let mut pages = Pages::default();
        let (mut seen, mut tokens) = (Vec::new(), Vec::new());
        let mut answers = answers.into_iter();
        while let Some(token) = pages.next_token() {
            tokens.push(token);
            let (items, next) = answers.next().expect("asked past the last page");
            seen.extend(items);
            pages.answered(next.to_string());
        }
        assert_eq!(seen, ["a", "b"]);
        assert_eq!(tokens, ["", "t1", "t2"]);
    }

    #[test]
    fn exit_codes_follow_the_status() {
        assert_eq!(Exit::of(Code::Aborted) as u8, 5);
        assert_eq!(Exit::of(Code::NotFound) as u8, 3);
        assert_eq!(Exit::of(Code::Unavailable) as u8, 7);
        assert_eq!(Exit::of(Code::Internal) as u8, 1);
    }
}
