//! Starts real clusters of the target server (QuantyKube or etcd) as processes on
//! loopback, with etcd's own flags, and tears them down on drop.
//!
//! Target selection, by environment:
//! - `QK_TEST_TARGET=quantykube` (default): the binary is `QK_BIN`, or the `quantykube`
//!   binary that cargo built for this package.
//! - `QK_TEST_TARGET=etcd`: the binary is `QK_ETCD_BIN`, or `etcd` on `PATH`.
//!
//! `etcdctl` is `QK_ETCDCTL_BIN` or `etcdctl` on `PATH`. With `QK_E2E_KEEP` set, member
//! data dirs and logs are kept (and their paths printed) instead of deleted.
//!
//! Every cluster gets a loopback address of its own (derived from the test process id)
//! and a block of ports of its own (a per-process counter), checked free before use,
//! so tests running in parallel threads or processes never collide. Members are killed
//! with SIGKILL when the `Cluster` is dropped, also when a test panics, and (through
//! `PR_SET_PDEATHSIG`) when the test process itself dies.

#![allow(dead_code)]

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use etcd_client::{
    Certificate, Client, ConnectOptions, GetOptions, GetResponse, Identity, KeyValue,
    Member as EtcdMember, MemberAddOptions, MemberAddResponse, MemberRemoveResponse,
    ResponseHeader, StatusResponse, TlsOptions,
};
use tempfile::TempDir;

/// How long a cluster may take to start (or restart) and answer a linearizable read.
pub const START_TIMEOUT: Duration = Duration::from_secs(40);
/// Timeout of each RPC issued through the clients this harness hands out.
pub const RPC_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of one etcdctl invocation.
pub const ETCDCTL_TIMEOUT: Duration = Duration::from_secs(30);

/// Which server the tests run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Quantykube,
    Etcd,
}

impl Target {
    /// The target named by `QK_TEST_TARGET` (default `quantykube`).
    pub fn from_env() -> Target {
        match std::env::var("QK_TEST_TARGET").as_deref() {
            Ok("etcd") => Target::Etcd,
            Ok("quantykube") | Ok("") | Err(_) => Target::Quantykube,
            Ok(other) => panic!("QK_TEST_TARGET={other}: expected `quantykube` or `etcd`"),
        }
    }

    /// The binary to run for this target, or `None` if it cannot be found.
    pub fn binary(self) -> Option<PathBuf> {
        match self {
            Target::Quantykube => std::env::var_os("QK_BIN")
                .map(PathBuf::from)
                .or_else(|| option_env!("CARGO_BIN_EXE_quantykube").map(PathBuf::from))
                .filter(|p| p.is_file()),
            Target::Etcd => std::env::var_os("QK_ETCD_BIN")
                .map(PathBuf::from)
                .filter(|p| p.is_file())
                .or_else(|| find_on_path("etcd")),
        }
    }

    pub fn require_binary(self) -> PathBuf {
        self.binary().unwrap_or_else(|| match self {
            Target::Quantykube => panic!(
                "no quantykube binary: set QK_BIN, build the `quantykube` bin, \
                 or run against etcd with QK_TEST_TARGET=etcd"
            ),
            Target::Etcd => {
                panic!("no etcd binary: install Debian's etcd-server package or set QK_ETCD_BIN")
            }
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::Quantykube => "quantykube",
            Target::Etcd => "etcd",
        })
    }
}

/// Looks `name` up on `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The etcdctl binary: `QK_ETCDCTL_BIN` or `etcdctl` on `PATH`.
pub fn etcdctl_binary() -> PathBuf {
    std::env::var_os("QK_ETCDCTL_BIN")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| find_on_path("etcdctl"))
        .expect("etcdctl not found: install Debian's etcd-client package or set QK_ETCDCTL_BIN")
}

/// Options for starting a cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub target: Target,
    pub members: usize,
    /// Extra flags passed to every member, e.g. `["--max-txn-ops", "4"]`.
    pub extra_args: Vec<String>,
    /// Scheme of the client URLs the harness gives members (`http` or `https`).
    pub client_scheme: &'static str,
    /// Scheme of the peer URLs (also in `--initial-cluster`).
    pub peer_scheme: &'static str,
    /// Flags for one member only (its certificate files, its metrics URL...).
    pub member_args: Option<MemberArgs>,
    /// More `--listen-client-urls` of one member, listed after the harness's own.
    pub extra_client_urls: Option<MemberArgs>,
    /// How the harness's own clients (readiness probe, [`Cluster::client`], etcdctl)
    /// reach the members' client URLs; `None` is plain http.
    pub client_tls: Option<ClientTls>,
    /// The members whose readiness [`Cluster::start_with`] waits for (all if `None`),
    /// for clusters where a member is meant never to become ready.
    pub ready: Option<Vec<usize>>,
    /// Give every flag (the harness's and the extra ones) to the members as the
    /// `ETCD_*` environment variable etcd reads for it, with an empty command line.
    /// Extra flags must then be written `--flag=value` (or `--flag` for `true`).
    pub flags_as_env: bool,
    /// Give each member its own `--listen-metrics-urls` (see [`Cluster::metrics_url`]).
    pub metrics_urls: bool,
    /// Runs before each member first starts, e.g. to restore its data dir from a
    /// snapshot.
    pub prepare: Option<MemberPrepare>,
    /// Where members keep their data dirs (`<root>/m<i>/data`), e.g. each on a crash
    /// filesystem mounted at `<root>/m<i>`; `None`: `data` in each member's own
    /// temporary directory. Logs stay there.
    pub data_root: Option<PathBuf>,
    /// Start the members (the default); without, [`Cluster::start_all`] does, after
    /// the caller prepared their data dirs.
    pub start: bool,
    /// The server binary instead of the target's (e.g. `quantykube-planted`).
    pub binary: Option<PathBuf>,
    /// Environment variables every member gets.
    pub env: Vec<(String, String)>,
}

/// The facts about one member that per-member flags are made of.
#[derive(Clone, Debug)]
pub struct MemberSpec {
    pub index: usize,
    pub name: String,
    pub ip: Ipv4Addr,
    pub client_port: u16,
    pub peer_port: u16,
    /// Two more ports of the cluster's port block for this member's own use (a
    /// metrics URL, a second client URL), taken from the top of the block, so they
    /// collide with joining members only once a cluster has more than 6 members.
    pub spare_ports: [u16; 2],
    /// The member's own temporary directory (its log, and by default its data dir,
    /// `data`, are inside it).
    pub dir: PathBuf,
    /// The member's `--data-dir`.
    pub data_dir: PathBuf,
    /// The cluster's `--initial-cluster` and `--initial-cluster-token`.
    pub initial_cluster: String,
    pub token: String,
}

impl MemberSpec {
    /// The member's `--data-dir`.
    pub fn data_dir(&self) -> PathBuf {
        self.data_dir.clone()
    }

    pub fn peer_url(&self, scheme: &str) -> String {
        format!("{scheme}://{}:{}", self.ip, self.peer_port)
    }
}

type MemberPrepareFn = dyn Fn(&MemberSpec) + Send + Sync;

/// Work on one member's directory before it first starts.
#[derive(Clone)]
pub struct MemberPrepare(Arc<MemberPrepareFn>);

impl MemberPrepare {
    pub fn new(f: impl Fn(&MemberSpec) + Send + Sync + 'static) -> Self {
        MemberPrepare(Arc::new(f))
    }
}

impl fmt::Debug for MemberPrepare {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemberPrepare(..)")
    }
}

type MemberArgsFn = dyn Fn(&MemberSpec) -> Vec<String> + Send + Sync;

/// A function giving one member's own flags or URLs.
#[derive(Clone)]
pub struct MemberArgs(Arc<MemberArgsFn>);

impl MemberArgs {
    pub fn new(f: impl Fn(&MemberSpec) -> Vec<String> + Send + Sync + 'static) -> Self {
        MemberArgs(Arc::new(f))
    }
}

impl fmt::Debug for MemberArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MemberArgs(..)")
    }
}

/// TLS of the harness's clients: the CA that verifies the members' certificate (or
/// none: skip verification, which only etcdctl can do) and the client certificate.
#[derive(Clone, Debug, Default)]
pub struct ClientTls {
    /// `None`: no verification (etcdctl `--insecure-skip-tls-verify`); the harness then
    /// probes readiness with etcdctl, since etcd-client (rustls) cannot skip it.
    pub ca: Option<PathBuf>,
    /// Client certificate and key, for members with `--client-cert-auth`.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl ClientTls {
    pub fn new(ca: impl Into<PathBuf>) -> Self {
        ClientTls {
            ca: Some(ca.into()),
            identity: None,
        }
    }

    /// No server verification and no client certificate (for `--auto-tls`).
    pub fn insecure() -> Self {
        ClientTls::default()
    }

    pub fn identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.identity = Some((cert.into(), key.into()));
        self
    }

    /// etcdctl's flags for this TLS.
    pub fn etcdctl_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        match &self.ca {
            Some(ca) => flags.push(format!("--cacert={}", ca.display())),
            // etcdctl 3.4 dials plaintext unless given a certificate, a CA or this.
            None => flags.extend([
                "--insecure-transport=false".to_owned(),
                "--insecure-skip-tls-verify".to_owned(),
            ]),
        }
        if let Some((cert, key)) = &self.identity {
            flags.push(format!("--cert={}", cert.display()));
            flags.push(format!("--key={}", key.display()));
        }
        flags
    }

    /// curl's arguments for this TLS (curl takes no `--flag=value`).
    pub fn curl_flags(&self) -> Vec<String> {
        let mut flags = Vec::new();
        match &self.ca {
            Some(ca) => flags.extend(["--cacert".to_owned(), ca.display().to_string()]),
            None => flags.push("--insecure".to_owned()),
        }
        if let Some((cert, key)) = &self.identity {
            flags.extend(["--cert".to_owned(), cert.display().to_string()]);
            flags.extend(["--key".to_owned(), key.display().to_string()]);
        }
        flags
    }

    /// etcd-client's TLS options (panics for [`ClientTls::insecure`]).
    pub fn etcd_client_options(&self) -> TlsOptions {
        let ca = self
            .ca
            .as_ref()
            .expect("etcd-client cannot skip server verification: give ClientTls a CA");
        let mut tls = TlsOptions::new().ca_certificate(Certificate::from_pem(read(ca)));
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(Identity::from_pem(read(cert), read(key)));
        }
        tls
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

impl ClusterOptions {
    pub fn new(members: usize) -> Self {
        ClusterOptions {
            target: Target::from_env(),
            members,
            extra_args: Vec::new(),
            client_scheme: "http",
            peer_scheme: "http",
            member_args: None,
            extra_client_urls: None,
            client_tls: None,
            ready: None,
            flags_as_env: false,
            metrics_urls: false,
            prepare: None,
            data_root: None,
            start: true,
            binary: None,
            env: Vec::new(),
        }
    }

    /// Runs `binary` as the server instead of the target's.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Gives every member the environment variable `name`.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Makes the cluster without starting its members (see [`Cluster::start_all`]).
    pub fn unstarted(mut self) -> Self {
        self.start = false;
        self
    }

    /// Members keep their data dirs under `root` (`<root>/m<i>/data`).
    pub fn data_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.data_root = Some(root.into());
        self
    }

    /// Runs `prepare` on each member's directory before the member first starts.
    pub fn prepare(mut self, prepare: impl Fn(&MemberSpec) + Send + Sync + 'static) -> Self {
        self.prepare = Some(MemberPrepare::new(prepare));
        self
    }

    /// Each member listens for metrics (and etcd's other HTTP endpoints) on a URL of
    /// its own: the first of its spare ports.
    pub fn metrics_urls(mut self) -> Self {
        self.metrics_urls = true;
        self
    }

    /// https client URLs, reached by the harness's clients with `tls`.
    pub fn https_clients(mut self, tls: ClientTls) -> Self {
        self.client_scheme = "https";
        self.client_tls = Some(tls);
        self
    }

    /// https peer URLs.
    pub fn https_peers(mut self) -> Self {
        self.peer_scheme = "https";
        self
    }

    pub fn member_args(
        mut self,
        f: impl Fn(&MemberSpec) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.member_args = Some(MemberArgs::new(f));
        self
    }

    pub fn extra_client_urls(
        mut self,
        f: impl Fn(&MemberSpec) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.extra_client_urls = Some(MemberArgs::new(f));
        self
    }

    pub fn ready(mut self, members: &[usize]) -> Self {
        self.ready = Some(members.to_vec());
        self
    }

    pub fn flags_as_env(mut self) -> Self {
        self.flags_as_env = true;
        self
    }

    pub fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra_args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.extra_args.extend(args.into_iter().map(Into::into));
        self
    }

    pub async fn start(self) -> Cluster {
        Cluster::start_with(self).await
    }
}

struct Member {
    name: String,
    dir: TempDir,
    data_dir: PathBuf,
    client_url: String,
    peer_url: String,
    log_path: PathBuf,
    child: Option<Child>,
    id: u64,
    /// `--listen-metrics-urls`, if the cluster was started with metrics URLs.
    metrics_url: Option<String>,
    /// Set for a member that joins a running cluster (`--initial-cluster-state
    /// existing`); `None` for the members the cluster started with.
    join: Option<Join>,
    /// Flags of this member alone, for its next starts (see [`Cluster::set_member_flags`]).
    flags: Vec<String>,
}

/// How a member that joins a running cluster is started.
#[derive(Clone, Debug)]
struct Join {
    /// `--initial-cluster`, as `etcdctl member add` prints it for the new member.
    initial_cluster: String,
    /// Pass name, initial cluster, advertised peer URL and cluster state as the
    /// `ETCD_*` environment variables `etcdctl member add` prints, instead of flags.
    via_env: bool,
    /// Found a new cluster (`--initial-cluster-state new`) instead of joining one.
    founds: bool,
}

impl Member {
    fn data_dir(&self) -> PathBuf {
        self.data_dir.clone()
    }
}

/// A running cluster of `n` members of the target server.
pub struct Cluster {
    target: Target,
    binary: PathBuf,
    token: String,
    extra_args: Vec<String>,
    member_args: Option<MemberArgs>,
    extra_client_urls: Option<MemberArgs>,
    client_tls: Option<ClientTls>,
    flags_as_env: bool,
    members: Vec<Member>,
    /// The loopback address and first port of this cluster's port block; members that
    /// join later take the next free pair of ports in the block.
    ip: Ipv4Addr,
    base_port: u16,
    /// `--initial-cluster` of the members the cluster started with.
    initial_cluster: String,
    /// See [`ClusterOptions::data_root`].
    data_root: Option<PathBuf>,
    /// See [`ClusterOptions::env`].
    env: Vec<(String, String)>,
}

/// The output of one etcdctl run.
#[derive(Debug)]
pub struct CmdOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Panics with the full output unless the command succeeded.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.status.success(),
            "etcdctl failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

impl Cluster {
    /// Starts `n` members of the target chosen by `QK_TEST_TARGET`, with default flags.
    pub async fn start(n: usize) -> Cluster {
        ClusterOptions::new(n).start().await
    }

    /// Starts a cluster as `options` says and waits until every member serves a
    /// linearizable read.
    pub async fn start_with(options: ClusterOptions) -> Cluster {
        assert!(options.members >= 1, "a cluster needs at least one member");
        let binary = options
            .binary
            .clone()
            .unwrap_or_else(|| options.target.require_binary());
        let (ip, base_port, token) = allocate_addresses(options.members);
        let mut members = Vec::with_capacity(options.members);
        for i in 0..options.members {
            let dir = tempfile::Builder::new()
                .prefix(&format!("qk-e2e-m{i}-"))
                .tempdir()
                .expect("create member tempdir");
            let client_port = base_port + 2 * i as u16;
            let log_path = dir.path().join("member.log");
            let data_dir = member_data_dir(options.data_root.as_deref(), dir.path(), i);
            members.push(Member {
                name: format!("m{i}"),
                dir,
                data_dir,
                client_url: format!("{}://{ip}:{client_port}", options.client_scheme),
                peer_url: format!("{}://{ip}:{}", options.peer_scheme, client_port + 1),
                log_path,
                child: None,
                id: 0,
                // The first of the member's spare ports (see `Cluster::member_spec`).
                metrics_url: options
                    .metrics_urls
                    .then(|| format!("http://{ip}:{}", spare_ports(base_port, i)[0])),
                join: None,
                flags: Vec::new(),
            });
        }
        let initial_cluster = members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let mut cluster = Cluster {
            target: options.target,
            binary,
            token,
            extra_args: options.extra_args,
            member_args: options.member_args,
            extra_client_urls: options.extra_client_urls,
            client_tls: options.client_tls,
            flags_as_env: options.flags_as_env,
            members,
            ip,
            base_port,
            initial_cluster,
            data_root: options.data_root,
            env: options.env,
        };
        if !options.start {
            return cluster;
        }
        for i in 0..cluster.members.len() {
            if let Some(prepare) = &options.prepare {
                (prepare.0)(&cluster.member_spec(i));
            }
            cluster.spawn_member(i);
        }
        let ready = options
            .ready
            .unwrap_or_else(|| (0..cluster.members.len()).collect());
        let deadline = Instant::now() + START_TIMEOUT;
        for &i in &ready {
            cluster.wait_ready(i, deadline).await;
        }
        for &i in &ready {
            let id = cluster.member_id_by_probe(i).await;
            assert_ne!(id, 0, "member {i} reported member_id 0");
            cluster.members[i].id = id;
        }
        cluster
    }

    /// Member `i`'s ID from its Status header (etcdctl's `get` header when the harness
    /// cannot verify the member's certificate).
    async fn member_id_by_probe(&self, i: usize) -> u64 {
        if self.etcdctl_probes() {
            let out = self
                .etcdctl_on(i, &["get", "qk-e2e-readiness-probe", "-w", "json"])
                .await;
            out.assert_success();
            return json_member_id(&out.stdout)
                .unwrap_or_else(|| panic!("no member_id in etcdctl's answer: {}", out.stdout));
        }
        let status = self
            .client(i)
            .await
            .status()
            .await
            .unwrap_or_else(|e| panic!("status of member {i}: {e}"));
        status.header().expect("status header").member_id()
    }

    /// Whether the harness probes members with etcdctl instead of etcd-client.
    fn etcdctl_probes(&self) -> bool {
        self.client_tls.as_ref().is_some_and(|t| t.ca.is_none())
    }

    /// The TLS of the harness's clients, if the members' client URLs are https.
    pub fn client_tls(&self) -> Option<&ClientTls> {
        self.client_tls.as_ref()
    }

    /// Member `i`'s spec, as given to per-member flag functions.
    pub fn member_spec(&self, i: usize) -> MemberSpec {
        let client_port = self.base_port + 2 * i as u16;
        MemberSpec {
            index: i,
            name: self.members[i].name.clone(),
            ip: self.ip,
            client_port,
            peer_port: client_port + 1,
            spare_ports: spare_ports(self.base_port, i),
            dir: self.members[i].dir.path().to_path_buf(),
            data_dir: self.members[i].data_dir(),
            initial_cluster: self.initial_cluster.clone(),
            token: self.token.clone(),
        }
    }

    /// The loopback address of this cluster's members.
    pub fn ip(&self) -> Ipv4Addr {
        self.ip
    }

    pub fn target(&self) -> Target {
        self.target
    }

    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// Member `i`'s `--listen-metrics-urls`, when started with
    /// [`ClusterOptions::metrics_urls`].
    pub fn metrics_url(&self, i: usize) -> Option<String> {
        self.members[i].metrics_url.clone()
    }

    /// The client URL of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        self.members[i].client_url.clone()
    }

    /// The client URLs of all members.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// The peer URL of member `i`.
    pub fn peer_url(&self, i: usize) -> String {
        self.members[i].peer_url.clone()
    }

    /// The `--name` of member `i`.
    pub fn name(&self, i: usize) -> String {
        self.members[i].name.clone()
    }

    /// Member `i`'s ID, as its Status header reported it when the cluster started.
    pub fn member_id(&self, i: usize) -> u64 {
        self.members[i].id
    }

    /// The index of the member with the given ID.
    pub fn index_of(&self, id: u64) -> Option<usize> {
        self.members.iter().position(|m| m.id == id)
    }

    /// Member `i`'s data dir (`--data-dir`).
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.members[i].data_dir()
    }

    /// The log file (stdout and stderr) of member `i`.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.members[i].log_path.clone()
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// Member `i`'s resident memory, from `/proc`, if it runs.
    pub fn rss_bytes(&self, i: usize) -> Option<u64> {
        let pid = self.members[i].child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|line| line.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    }

    /// A client connected to member `i` only.
    pub async fn client(&self, i: usize) -> Client {
        connect_tls(&[self.endpoint(i)], self.client_tls.as_ref()).await
    }

    /// A client connected to every member (etcd-client balances between them).
    pub async fn client_all(&self) -> Client {
        connect_tls(&self.endpoints(), self.client_tls.as_ref()).await
    }

    /// A client with short timeouts, for polling.
    async fn quick(&self, endpoint: &str) -> Result<Client, etcd_client::Error> {
        quick_connect_tls(endpoint, self.client_tls.as_ref()).await
    }

    /// Kills member `i` with SIGKILL and reaps it.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Restarts member `i` (killing it first if it runs) with the same data dir and
    /// flags, and waits until it serves a linearizable read. etcd needs nothing more
    /// than the original flags: with an existing data dir it ignores
    /// `--initial-cluster-state` and the initial cluster.
    pub async fn restart(&mut self, i: usize) {
        self.kill9(i);
        self.spawn_member(i);
        self.wait_ready(i, Instant::now() + START_TIMEOUT).await;
    }

    /// Starts member `i` again without waiting for it to be ready.
    pub fn start_member(&mut self, i: usize) {
        self.kill9(i);
        self.spawn_member(i);
    }

    /// Starts every member that is not running (of a cluster made with
    /// [`ClusterOptions::unstarted`], say), waits until all are ready, and learns the
    /// IDs of those it did not know.
    pub async fn start_all(&mut self) {
        for i in 0..self.members.len() {
            if !self.is_running(i) {
                self.spawn_member(i);
            }
        }
        self.wait_ready_all().await;
        for i in 0..self.members.len() {
            if self.members[i].id == 0 {
                let id = self.member_id_by_probe(i).await;
                assert_ne!(id, 0, "member {i} reported member_id 0");
                self.members[i].id = id;
            }
        }
    }

    /// Restarts every member at once and waits until all are ready.
    pub async fn restart_all(&mut self) {
        for i in 0..self.members.len() {
            self.kill9(i);
        }
        for i in 0..self.members.len() {
            self.spawn_member(i);
        }
        self.wait_ready_all().await;
    }

    /// The index of the current leader, as the running members' Status reports it,
    /// waiting up to `timeout` for the running members to agree on one running leader.
    pub async fn wait_leader(&self, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.current_leader().await {
                return i;
            }
            if Instant::now() >= deadline {
                // The Drop of the cluster prints the members' logs.
                panic!("no agreed leader among running members within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The index of the leader, waiting a few seconds for one to exist.
    pub async fn leader_index(&self) -> usize {
        self.wait_leader(Duration::from_secs(15)).await
    }

    /// The leader every running member agrees on, if that leader is itself running.
    pub async fn current_leader(&self) -> Option<usize> {
        let mut agreed: Option<u64> = None;
        for i in 0..self.members.len() {
            if !self.is_running(i) {
                continue;
            }
            let leader = self
                .quick(&self.endpoint(i))
                .await
                .ok()?
                .status()
                .await
                .ok()?
                .leader();
            if leader == 0 || agreed.is_some_and(|a| a != leader) {
                return None;
            }
            agreed = Some(leader);
        }
        let leader = self.index_of(agreed?)?;
        self.is_running(leader).then_some(leader)
    }

    /// Runs etcdctl (API v3) against all running members with the given arguments.
    pub async fn etcdctl(&self, args: &[&str]) -> CmdOutput {
        self.etcdctl_with_stdin(args, "").await
    }

    /// Runs etcdctl (API v3) against all running members, feeding `stdin`.
    pub async fn etcdctl_with_stdin(&self, args: &[&str], stdin: &str) -> CmdOutput {
        let endpoints: Vec<String> = (0..self.members.len())
            .filter(|&i| self.is_running(i))
            .map(|i| self.endpoint(i))
            .collect();
        run_etcdctl(&endpoints.join(","), &self.tls_args(args), stdin).await
    }

    /// `args` after the harness's TLS flags for etcdctl, if any.
    fn tls_args(&self, args: &[&str]) -> Vec<String> {
        let mut all = self
            .client_tls
            .as_ref()
            .map(ClientTls::etcdctl_flags)
            .unwrap_or_default();
        all.extend(args.iter().map(|a| a.to_string()));
        all
    }

    /// Runs etcdctl (API v3) against member `i` only.
    pub async fn etcdctl_on(&self, i: usize, args: &[&str]) -> CmdOutput {
        run_etcdctl(&self.endpoint(i), &self.tls_args(args), "").await
    }

    /// The last lines of every member's log, for failure messages.
    pub fn log_tails(&self) -> String {
        let mut out = String::new();
        for (i, m) in self.members.iter().enumerate() {
            out.push_str(&format!(
                "\n----- {} member {i} ({}, {}) log {} -----\n{}",
                self.target,
                m.name,
                m.client_url,
                m.log_path.display(),
                tail(&m.log_path, 40)
            ));
        }
        out
    }

    fn spawn_member(&mut self, i: usize) {
        assert!(self.members[i].child.is_none(), "member {i} is running");
        let m = &self.members[i];
        let (initial_cluster, state, via_env) = match &m.join {
            Some(join) => {
                let state = if join.founds { "new" } else { "existing" };
                (join.initial_cluster.as_str(), state, join.via_env)
            }
            None => (self.initial_cluster.as_str(), "new", false),
        };
        let log = File::options()
            .create(true)
            .append(true)
            .open(&m.log_path)
            .expect("open member log");
        let spec = self.member_spec(i);
        let mut listen_client_urls = vec![m.client_url.clone()];
        if let Some(extra) = &self.extra_client_urls {
            listen_client_urls.extend((extra.0)(&spec));
        }
        // (flag, value) pairs, given as flags or, with `flags_as_env`, as ETCD_* variables.
        let mut flags: Vec<(String, String)> = Vec::new();
        let mut flag = |name: &str, value: &str| flags.push((name.to_owned(), value.to_owned()));
        if !via_env {
            flag("name", &m.name);
        }
        flag("data-dir", &m.data_dir().to_string_lossy());
        flag("listen-client-urls", &listen_client_urls.join(","));
        flag("advertise-client-urls", &m.client_url);
        flag("listen-peer-urls", &m.peer_url);
        if !via_env {
            flag("initial-advertise-peer-urls", &m.peer_url);
            flag("initial-cluster", initial_cluster);
            flag("initial-cluster-state", state);
        }
        flag("initial-cluster-token", &self.token);
        if let Some(url) = &m.metrics_url {
            flag("listen-metrics-urls", url);
        }
        let mut args = self.extra_args.clone();
        if let Some(member_args) = &self.member_args {
            args.extend((member_args.0)(&spec));
        }
        args.extend(m.flags.iter().cloned());
        let mut cmd = Command::new(&self.binary);
        if self.flags_as_env {
            flags.extend(args.iter().map(|a| split_flag(a)));
            for (name, value) in &flags {
                cmd.env(flag_env_name(name), value);
            }
        } else {
            for (name, value) in &flags {
                cmd.arg(format!("--{name}")).arg(value);
            }
            cmd.args(&args);
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd.current_dir(m.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log);
        // Quiet etcd's own ETCD_* environment so only the flags above count.
        for (key, _) in std::env::vars_os() {
            let key_str = key.to_string_lossy();
            // etcd 3.4 refuses to start when a variable shadows a flag, so every other
            // ETCD_* goes, and with `flags_as_env` the ones set above stay.
            let ours = self.flags_as_env && flags.iter().any(|(n, _)| flag_env_name(n) == key_str);
            if key_str.starts_with("ETCD_") && !ours {
                cmd.env_remove(key);
            }
        }
        if via_env {
            cmd.env("ETCD_NAME", &m.name)
                .env("ETCD_INITIAL_CLUSTER", initial_cluster)
                .env("ETCD_INITIAL_ADVERTISE_PEER_URLS", &m.peer_url)
                .env("ETCD_INITIAL_CLUSTER_STATE", state);
        }
        let child = spawn_tied_to_process(cmd)
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.binary.display()));
        self.members[i].child = Some(child);
    }

    /// One linearizable read from member `i`, by etcd-client, or by etcdctl when the
    /// harness cannot verify the member's certificate.
    async fn probe_read(&self, i: usize) -> Result<(), String> {
        if self.etcdctl_probes() {
            let out = self
                .etcdctl_on(
                    i,
                    &["--command-timeout=2s", "get", "qk-e2e-readiness-probe"],
                )
                .await;
            return if out.success() {
                Ok(())
            } else {
                Err(out.stderr)
            };
        }
        let mut client = self
            .quick(&self.endpoint(i))
            .await
            .map_err(|e| e.to_string())?;
        client
            .get("qk-e2e-readiness-probe", Some(GetOptions::new()))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Waits until every member serves a linearizable read.
    pub async fn wait_ready_all(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        for i in 0..self.members.len() {
            self.wait_ready(i, deadline).await;
        }
    }

    /// Waits until member `i` answers a linearizable Range, failing fast (with the
    /// member's log) if its process exits.
    async fn wait_ready(&mut self, i: usize, deadline: Instant) {
        if let Err(why) = self.try_wait_ready(i, deadline).await {
            panic!("{why}");
        }
    }

    /// Waits until member `i` answers a linearizable Range; the reason if its process
    /// exits first or the deadline passes.
    pub async fn try_wait_ready(&mut self, i: usize, deadline: Instant) -> Result<(), String> {
        let endpoint = self.endpoint(i);
        loop {
            if let Some(child) = self.members[i].child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.members[i].child = None;
                    return Err(format!(
                        "{} member {i} exited during startup with {status}",
                        self.target
                    ));
                }
            }
            let last_error = match self.probe_read(i).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(format!(
                    "{} member {i} ({endpoint}) not ready before the deadline; last error: \
                     {last_error}",
                    self.target
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Runs a restore command, panicking with its output if it fails.
pub fn run(mut command: Command) {
    let out = command.output().expect("run restore");
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The restore command of `target` for member `spec`: etcdctl's for etcd, QuantyKube's
/// own (same flags) for QuantyKube.
pub fn restore_command(target: Target, file: &Path, spec: &MemberSpec) -> Command {
    let command = match target {
        Target::Etcd => {
            let mut c = Command::new(etcdctl_binary());
            c.env("ETCDCTL_API", "3");
            c
        }
        Target::Quantykube => Command::new(target.require_binary()),
    };
    with_restore_args(command, file, spec)
}

/// `command` (etcdctl, or a server binary) with `snapshot restore` of `file` for member
/// `spec` and etcd's flags.
pub fn with_restore_args(mut command: Command, file: &Path, spec: &MemberSpec) -> Command {
    command
        .arg("snapshot")
        .arg("restore")
        .arg(file)
        .arg("--name")
        .arg(&spec.name)
        .arg("--initial-cluster")
        .arg(&spec.initial_cluster)
        .arg("--initial-cluster-token")
        .arg(&spec.token)
        .arg("--initial-advertise-peer-urls")
        .arg(spec.peer_url("http"))
        .arg("--data-dir")
        .arg(spec.data_dir());
    command
}

/// Member `i`'s data dir: under `root` if given, else in its own directory.
fn member_data_dir(root: Option<&Path>, own: &Path, i: usize) -> PathBuf {
    root.map_or_else(
        || own.join("data"),
        |root| root.join(format!("m{i}")).join("data"),
    )
}

/// How long MemberAdd and MemberRemove are retried while etcd refuses them as
/// `etcdserver: unhealthy cluster`: with `--strict-reconfig-check` (the default) etcd
/// 3.4 requires the member handling the change to have been connected to every voter
/// (to a quorum, for a removal) for 5 s, so a change right after the cluster started or
/// a member joined is refused for a while.
pub const RECONFIG_RETRY: Duration = Duration::from_secs(30);

/// etcd's answer while a membership change would act on an unsettled cluster.
pub const UNHEALTHY_CLUSTER: &str = "etcdserver: unhealthy cluster";

/// Membership changes: members that join a running cluster with
/// `--initial-cluster-state existing`, and members removed for good.
///
/// A joining member is a slot of its own (index, name `m{index}`, the next free pair
/// of ports in the cluster's block, a fresh data dir); its ID comes from the
/// server's MemberAdd answer, so callers record it with [`Cluster::set_member_id`].
impl Cluster {
    /// Reserves a slot for a new member: name, client and peer URLs, data dir. The
    /// member is not started and has ID 0 until [`Cluster::set_member_id`].
    pub fn reserve_member(&mut self) -> usize {
        let i = self.members.len();
        let client_port = self.base_port + 2 * i as u16;
        assert!(
            2 * i as u32 + 2 <= PORT_BLOCK,
            "no room in the cluster's port block for member {i}"
        );
        for port in [client_port, client_port + 1] {
            TcpListener::bind(SocketAddrV4::new(self.ip, port))
                .unwrap_or_else(|e| panic!("port {}:{port} for member {i}: {e}", self.ip));
        }
        let dir = tempfile::Builder::new()
            .prefix(&format!("qk-e2e-m{i}-"))
            .tempdir()
            .expect("create member tempdir");
        let log_path = dir.path().join("member.log");
        let data_dir = member_data_dir(self.data_root.as_deref(), dir.path(), i);
        let client_scheme = if self.client_tls.is_some() {
            "https"
        } else {
            "http"
        };
        let peer_scheme = self.members[0]
            .peer_url
            .split("://")
            .next()
            .unwrap_or("http");
        let peer_url = format!("{peer_scheme}://{}:{}", self.ip, client_port + 1);
        self.members.push(Member {
            name: format!("m{i}"),
            dir,
            data_dir,
            client_url: format!("{client_scheme}://{}:{client_port}", self.ip),
            peer_url,
            log_path,
            child: None,
            id: 0,
            metrics_url: None,
            join: None,
            flags: Vec::new(),
        });
        i
    }

    /// Gives member `i` these flags (after the cluster's) from its next start on, e.g.
    /// `--force-new-cluster` for a restart; an empty list takes them away again.
    pub fn set_member_flags(&mut self, i: usize, flags: &[&str]) {
        self.members[i].flags = flags.iter().map(|f| f.to_string()).collect();
    }

    /// Records the ID the server gave member `i` (from MemberAdd's answer).
    pub fn set_member_id(&mut self, i: usize, id: u64) {
        self.members[i].id = id;
    }

    /// Starts member `i` as a member joining a running cluster: `--initial-cluster
    /// <initial_cluster> --initial-cluster-state existing` and the member's own name and
    /// URLs, as flags. Does not wait.
    pub fn start_joining(&mut self, i: usize, initial_cluster: &str) {
        self.join_as(i, initial_cluster, false);
    }

    /// As [`Cluster::start_joining`], but name, initial cluster, advertised peer URL and
    /// cluster state are the `ETCD_*` environment variables `etcdctl member add` prints.
    pub fn start_joining_via_env(&mut self, i: usize, initial_cluster: &str) {
        self.join_as(i, initial_cluster, true);
    }

    fn join_as(&mut self, i: usize, initial_cluster: &str, via_env: bool) {
        self.kill9(i);
        self.members[i].join = Some(Join {
            initial_cluster: initial_cluster.to_owned(),
            via_env,
            founds: false,
        });
        self.spawn_member(i);
    }

    /// Starts member `i` as the one founding member of a cluster of its own, on its
    /// usual name, URLs and the cluster's token (`--initial-cluster` naming only itself,
    /// `--initial-cluster-state new`): its member id is the one this cluster knows at
    /// that peer URL, its cluster id another. Its data dir must be empty. Does not wait.
    pub fn start_alone(&mut self, i: usize) {
        self.kill9(i);
        let m = &self.members[i];
        self.members[i].join = Some(Join {
            initial_cluster: format!("{}={}", m.name, m.peer_url),
            via_env: false,
            founds: true,
        });
        self.spawn_member(i);
    }

    /// Adds a member through MemberAdd sent to member `via` (retried while the server
    /// answers [`UNHEALTHY_CLUSTER`]), records its ID and starts it with the initial
    /// cluster of the MemberAdd answer. Does not wait for it; returns its index.
    pub async fn add_member(&mut self, via: usize, learner: bool) -> usize {
        let i = self.reserve_member();
        let peer_url = self.peer_url(i);
        let mut client = self.client(via).await;
        let resp = member_add_retrying(&mut client, &peer_url, learner).await;
        let added = resp.member().expect("MemberAdd answers the new member");
        assert_eq!(added.peer_urls(), std::slice::from_ref(&peer_url));
        assert_eq!(added.is_learner(), learner);
        self.set_member_id(i, added.id());
        let initial_cluster = initial_cluster_for(resp.member_list(), added.id(), &self.name(i));
        self.start_joining(i, &initial_cluster);
        i
    }

    /// Gives stopped member `i` a new peer URL (to listen on and advertise) for its next
    /// start, after a MemberUpdate moved it there.
    pub fn set_peer_url(&mut self, i: usize, peer_url: &str) {
        assert!(!self.is_running(i), "member {i} runs");
        self.members[i].peer_url = peer_url.to_owned();
    }

    /// Waits until member `i` serves a linearizable read (a voter; learners refuse
    /// them), failing fast if its process exits.
    pub async fn wait_member_ready(&mut self, i: usize, timeout: Duration) {
        self.wait_ready(i, Instant::now() + timeout).await;
    }

    /// Waits until member `i` answers Maintenance.Status (learners do too) and returns
    /// that answer, failing fast if its process exits.
    pub async fn wait_status(&mut self, i: usize, timeout: Duration) -> StatusResponse {
        let deadline = Instant::now() + timeout;
        let endpoint = self.endpoint(i);
        loop {
            if let Some(status) = self.poll_exit(i) {
                panic!("{} member {i} exited with {status}", self.target);
            }
            let last_error = match self.quick(&endpoint).await {
                Ok(mut client) => match client.status().await {
                    Ok(status) => return status,
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                panic!(
                    "{} member {i} ({endpoint}) answered no Status within {timeout:?}; last \
                     error: {last_error}",
                    self.target
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the member list that member `via` serves shows member `i` started
    /// (etcd lists a member without a name until it has published its attributes).
    pub async fn wait_started(&self, via: usize, i: usize, timeout: Duration) {
        let id = self.member_id(i);
        let deadline = Deadline::after(timeout, format!("member {i} ({id:x}) listed as started"));
        loop {
            if let Ok(mut client) = self.quick(&self.endpoint(via)).await {
                if let Ok(list) = client.member_list().await {
                    if list
                        .members()
                        .iter()
                        .any(|m| m.id() == id && !m.name().is_empty())
                    {
                        return;
                    }
                }
            }
            deadline.tick().await;
        }
    }

    /// Reaps member `i` if its process has exited on its own, returning its status.
    pub fn poll_exit(&mut self, i: usize) -> Option<ExitStatus> {
        let status = self.members[i].child.as_mut()?.try_wait().ok()??;
        self.members[i].child = None;
        Some(status)
    }

    /// Waits up to `timeout` for member `i`'s process to exit on its own (as a removed
    /// member does) and returns its exit status, or `None` if it still runs (or was
    /// never started).
    pub async fn wait_exit(&mut self, i: usize, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.poll_exit(i) {
                return Some(status);
            }
            if self.members[i].child.is_none() || Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops member `i` for good: kills it and deletes its data dir (its log stays, and
    /// its slot, name and URLs can join again).
    pub fn wipe(&mut self, i: usize) {
        self.kill9(i);
        let data = self.members[i].data_dir();
        if data.exists() {
            std::fs::remove_dir_all(&data)
                .unwrap_or_else(|e| panic!("remove {}: {e}", data.display()));
        }
    }

    /// The indices of the members whose processes run.
    pub fn running(&self) -> Vec<usize> {
        (0..self.members.len())
            .filter(|&i| self.is_running(i))
            .collect()
    }
}

/// MemberAdd of one peer URL, retried for up to [`RECONFIG_RETRY`] while the server
/// answers [`UNHEALTHY_CLUSTER`]; panics on any other error.
pub async fn member_add_retrying(
    client: &mut Client,
    peer_url: &str,
    learner: bool,
) -> MemberAddResponse {
    let deadline = Deadline::after(RECONFIG_RETRY, format!("MemberAdd {peer_url}"));
    loop {
        let options = if learner {
            MemberAddOptions::new().with_is_learner()
        } else {
            MemberAddOptions::new()
        };
        match client.member_add([peer_url], Some(options)).await {
            Ok(resp) => return resp,
            Err(etcd_client::Error::GRpcStatus(s))
                if s.code() == tonic::Code::Unavailable && s.message() == UNHEALTHY_CLUSTER => {}
            Err(e) => panic!("MemberAdd {peer_url}: {e}"),
        }
        deadline.tick().await;
    }
}

/// MemberRemove of `id`, retried for up to [`RECONFIG_RETRY`] while the server answers
/// [`UNHEALTHY_CLUSTER`]; panics on any other error.
pub async fn member_remove_retrying(client: &mut Client, id: u64) -> MemberRemoveResponse {
    let deadline = Deadline::after(RECONFIG_RETRY, format!("MemberRemove {id:x}"));
    loop {
        match client.member_remove(id).await {
            Ok(resp) => return resp,
            Err(etcd_client::Error::GRpcStatus(s))
                if s.code() == tonic::Code::Unavailable && s.message() == UNHEALTHY_CLUSTER => {}
            Err(e) => panic!("MemberRemove {id:x}: {e}"),
        }
        deadline.tick().await;
    }
}

/// The `--initial-cluster` of a member MemberAdd has just added, as `etcdctl member add`
/// prints it (`ETCD_INITIAL_CLUSTER`): `name=peerURL` for every member of the answer,
/// the new member (`new_id`) under `new_name`, a member that has not started yet under
/// its empty name. etcd refuses to join unless this lists every current member.
pub fn initial_cluster_for(members: &[EtcdMember], new_id: u64, new_name: &str) -> String {
    members
        .iter()
        .flat_map(|m| {
            let name = if m.id() == new_id { new_name } else { m.name() };
            m.peer_urls().iter().map(move |url| format!("{name}={url}"))
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill9(i);
        }
        if std::thread::panicking() {
            eprintln!("{}", self.log_tails());
        }
        if std::env::var_os("QK_E2E_KEEP").is_some() {
            for m in self.members.drain(..) {
                eprintln!(
                    "kept data and log of {}: {}",
                    m.name,
                    m.dir.keep().display()
                );
            }
        }
    }
}

/// Connects a client with the harness's timeouts.
pub async fn connect(endpoints: &[String]) -> Client {
    connect_tls(endpoints, None).await
}

/// Connects a client with the harness's timeouts, over TLS if `tls` is given.
pub async fn connect_tls(endpoints: &[String], tls: Option<&ClientTls>) -> Client {
    try_connect_tls(endpoints, tls)
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoints:?}: {e}"))
}

/// As [`connect_tls`], answering the error instead of panicking.
pub async fn try_connect_tls(
    endpoints: &[String],
    tls: Option<&ClientTls>,
) -> Result<Client, etcd_client::Error> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(RPC_TIMEOUT);
    if let Some(tls) = tls {
        options = options.with_tls(tls.etcd_client_options());
    }
    Client::connect(endpoints, Some(options)).await
}

/// A client with short timeouts, for polling.
async fn quick_connect_tls(
    endpoint: &str,
    tls: Option<&ClientTls>,
) -> Result<Client, etcd_client::Error> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(2));
    if let Some(tls) = tls {
        options = options.with_tls(tls.etcd_client_options());
    }
    Client::connect([endpoint], Some(options)).await
}

/// `--flag=value`, `--flag` (= `true`) as a (flag, value) pair.
fn split_flag(arg: &str) -> (String, String) {
    let arg = arg.trim_start_matches('-');
    match arg.split_once('=') {
        Some((name, value)) => (name.to_owned(), value.to_owned()),
        None => (arg.to_owned(), "true".to_owned()),
    }
}

/// The environment variable etcd reads for `flag`: `ETCD_` and the flag upper-cased,
/// `-` as `_` (etcd's `flags.SetFlagsFromEnv`).
pub fn flag_env_name(flag: &str) -> String {
    format!("ETCD_{}", flag.to_uppercase().replace('-', "_"))
}

/// `header.member_id` of etcdctl's `-w json` answer.
fn json_member_id(stdout: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(stdout.trim()).ok()?;
    value.get("header")?.get("member_id")?.as_u64()
}

/// Runs etcdctl (API v3) against `endpoints` with exactly `args` (no harness TLS flags),
/// for tests of what a client with other credentials sees.
pub async fn etcdctl_raw(endpoints: &str, args: &[&str]) -> CmdOutput {
    run_etcdctl(endpoints, args, "").await
}

async fn run_etcdctl<S: AsRef<str> + fmt::Debug>(
    endpoints: &str,
    args: &[S],
    stdin: &str,
) -> CmdOutput {
    use tokio::io::AsyncWriteExt;

    let mut cmd = tokio::process::Command::new(etcdctl_binary());
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=5s")
        .arg("--command-timeout=15s")
        .args(args.iter().map(AsRef::as_ref))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        let key_str = key.to_string_lossy();
        if key_str.starts_with("ETCDCTL_") && key_str != "ETCDCTL_API" {
            cmd.env_remove(key);
        }
    }
    let mut child = cmd.spawn().expect("spawn etcdctl");
    let mut child_stdin = child.stdin.take().expect("etcdctl stdin");
    let input = stdin.to_owned();
    let writer = tokio::spawn(async move {
        let _ = child_stdin.write_all(input.as_bytes()).await;
        // Dropping closes stdin, which ends an interactive `etcdctl txn`.
    });
    let output = tokio::time::timeout(ETCDCTL_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("etcdctl {args:?} did not finish within {ETCDCTL_TIMEOUT:?}"))
        .expect("wait for etcdctl");
    let _ = writer.await;
    CmdOutput {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A deadline for a polling loop: call `tick` after each unsuccessful check.
pub struct Deadline {
    end: Instant,
    timeout: Duration,
    what: String,
}

impl Deadline {
    pub fn after(timeout: Duration, what: impl Into<String>) -> Deadline {
        Deadline {
            end: Instant::now() + timeout,
            timeout,
            what: what.into(),
        }
    }

    /// Panics if the deadline has passed; otherwise sleeps a little.
    pub async fn tick(&self) {
        if Instant::now() >= self.end {
            panic!(
                "timed out after {:?} waiting for: {}",
                self.timeout, self.what
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The gRPC status of a failed etcd-client call (panics on success or other errors).
pub fn grpc_status<T: fmt::Debug>(result: Result<T, etcd_client::Error>) -> tonic::Status {
    match result {
        Err(etcd_client::Error::GRpcStatus(status)) => status,
        Err(other) => panic!("expected a gRPC status error, got {other:?}"),
        Ok(value) => panic!("expected a gRPC status error, got success: {value:?}"),
    }
}

/// Asserts that `result` failed with exactly `code` and `message`.
#[track_caller]
pub fn assert_grpc_error<T: fmt::Debug>(
    result: Result<T, etcd_client::Error>,
    code: tonic::Code,
    message: &str,
) {
    let status = grpc_status(result);
    assert_eq!(
        (status.code(), status.message()),
        (code, message),
        "unexpected gRPC error"
    );
}

fn tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return "(no log)".to_owned();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(16 * 1024);
    let _ = file.seek(SeekFrom::Start(start));
    let mut text = String::new();
    let mut bytes = Vec::new();
    if file.read_to_end(&mut bytes).is_ok() {
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Ports per cluster: a client and a peer port for each of up to 10 members (the
/// members a cluster starts with and those that join it later).
const PORT_BLOCK: u32 = 20;

/// Picks a loopback address for this process and a block of `2 * members` ports on it
/// that are free right now. The address is unique per process id; the port block is
/// unique per cluster within the process.
/// The loopback address of this test process's clusters (unique per process id), for
/// certificates whose SANs must name it before the cluster exists.
pub fn loopback_ip() -> Ipv4Addr {
    let pid = std::process::id();
    Ipv4Addr::new(
        127,
        (1 + (pid / (254 * 254)) % 254) as u8,
        (1 + (pid / 254) % 254) as u8,
        (1 + pid % 254) as u8,
    )
}

/// Member `i`'s two spare ports, counted down from the top of the cluster's port block
/// so that members that join later keep taking pairs from the bottom.
fn spare_ports(base_port: u16, i: usize) -> [u16; 2] {
    let top = base_port + PORT_BLOCK as u16 - 1 - 2 * i as u16;
    [top, top - 1]
}

fn allocate_addresses(members: usize) -> (Ipv4Addr, u16, String) {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    const BASE: u32 = 20_000;
    const BLOCK: u32 = PORT_BLOCK;
    // Ports 20000..32000: below Linux's default ephemeral range (32768..60999), so
    // client connections never hold a port a member will bind on restart.
    const BLOCKS: u32 = 600;
    assert!(
        (4 * members) as u32 <= BLOCK,
        "too many members for one port block"
    );
    let pid = std::process::id();
    let ip = loopback_ip();
    for _ in 0..BLOCKS {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = BASE + (n % BLOCKS) * BLOCK;
        // Each member's client and peer ports from the bottom, its spare ports (see
        // `spare_ports`) from the top.
        let free = (0..2 * members as u32)
            .chain((0..2 * members as u32).map(|i| BLOCK - 1 - i))
            .all(|k| TcpListener::bind(SocketAddrV4::new(ip, (base + k) as u16)).is_ok());
        if free {
            return (ip, base as u16, format!("qk-e2e-{pid}-{n}"));
        }
    }
    panic!("no free port block on {ip}");
}

type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` from one long-lived thread, with `PR_SET_PDEATHSIG` = SIGKILL, so the
/// child dies when this test process dies, even if no destructor runs. (The death
/// signal fires when the *thread* that forked exits, hence the dedicated thread.)
pub fn spawn_tied_to_process(mut cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let sender = SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<SpawnRequest>();
            std::thread::Builder::new()
                .name("qk-e2e-spawner".into())
                .spawn(move || {
                    for (mut cmd, reply) in rx {
                        let _ = reply.send(cmd.spawn());
                    }
                })
                .expect("start spawner thread");
            Mutex::new(tx)
        })
        .lock()
        .expect("spawner lock")
        .clone();
    let (reply_tx, reply_rx) = mpsc::channel();
    sender
        .send((cmd, reply_tx))
        .expect("spawner thread is gone");
    reply_rx.recv().expect("spawner thread is gone")
}

/// The keys of a Range response, as strings.
pub fn keys(resp: &GetResponse) -> Vec<String> {
    resp.kvs().iter().map(|kv| lossy(kv.key())).collect()
}

/// The key/value pairs of a Range response, as strings.
pub fn pairs(resp: &GetResponse) -> Vec<(String, String)> {
    resp.kvs()
        .iter()
        .map(|kv| (lossy(kv.key()), lossy(kv.value())))
        .collect()
}

/// A key-value's (create_revision, mod_revision, version).
pub fn revs(kv: &KeyValue) -> (i64, i64, i64) {
    (kv.create_revision(), kv.mod_revision(), kv.version())
}

/// The revision in a response header (panics if the header is missing).
pub fn header_rev(header: Option<&ResponseHeader>) -> i64 {
    header.expect("response header").revision()
}

pub fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The store's current revision, by a linearizable Range on `client`.
pub async fn current_revision(client: &mut Client) -> i64 {
    let resp = client
        .get("qk-e2e-revision-probe", None)
        .await
        .expect("range for the current revision");
    header_rev(resp.header())
}

/// One HTTP answer, as curl received it.
#[derive(Debug, Clone)]
pub struct HttpAnswer {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpAnswer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == &name.to_ascii_lowercase())
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP(S) request by curl, as operators and kubelet-like probes make them: `tls`
/// gives `--cacert`/`--cert`/`--key` for https. `Err` carries curl's exit status and
/// message when no HTTP answer came (refused connection, TLS failure, timeout).
pub async fn http_request(
    method: &str,
    url: &str,
    tls: Option<&ClientTls>,
    max_time: Duration,
) -> Result<HttpAnswer, String> {
    http_request_with(method, url, tls, max_time, &[]).await
}

/// As [`http_request`], with more curl arguments (e.g. `--http1.1`).
pub async fn http_request_with(
    method: &str,
    url: &str,
    tls: Option<&ClientTls>,
    max_time: Duration,
    curl_args: &[&str],
) -> Result<HttpAnswer, String> {
    let mut cmd = tokio::process::Command::new("curl");
    cmd.args(["-sS", "-i", "--noproxy", "*", "-X", method])
        .args(curl_args)
        .arg("--max-time")
        .arg(max_time.as_secs_f64().to_string())
        .args(tls.map(ClientTls::curl_flags).unwrap_or_default())
        .arg(url)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(max_time + Duration::from_secs(5), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("curl {url} did not finish"))
        .expect("run curl");
    if !out.status.success() {
        return Err(format!(
            "curl {method} {url}: {} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("curl {url}: no header end in {text:?}"));
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("curl {url}: status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(HttpAnswer {
        status,
        headers,
        body: body.to_owned(),
    })
}

/// A GET by curl; panics unless an HTTP answer came.
pub async fn http_get(url: &str, tls: Option<&ClientTls>) -> HttpAnswer {
    http_request("GET", url, tls, Duration::from_secs(20))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The text member `i`'s log gained since byte `offset` (see [`Cluster::log_len`]).
pub fn log_since(path: &Path, offset: u64) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let _ = file.seek(SeekFrom::Start(offset));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Cluster {
    /// The current length of member `i`'s log, to read only what follows.
    pub fn log_len(&self, i: usize) -> u64 {
        std::fs::metadata(&self.members[i].log_path)
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// The process id of member `i`, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }
}
