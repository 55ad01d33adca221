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
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, GetOptions, GetResponse, KeyValue, ResponseHeader};
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

    fn require_binary(self) -> PathBuf {
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
}

impl ClusterOptions {
    pub fn new(members: usize) -> Self {
        ClusterOptions {
            target: Target::from_env(),
            members,
            extra_args: Vec::new(),
        }
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
    client_url: String,
    peer_url: String,
    log_path: PathBuf,
    child: Option<Child>,
    id: u64,
}

impl Member {
    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
}

/// A running cluster of `n` members of the target server.
pub struct Cluster {
    target: Target,
    binary: PathBuf,
    token: String,
    extra_args: Vec<String>,
    members: Vec<Member>,
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
        let binary = options.target.require_binary();
        let (ip, base_port, token) = allocate_addresses(options.members);
        let mut members = Vec::with_capacity(options.members);
        for i in 0..options.members {
            let dir = tempfile::Builder::new()
                .prefix(&format!("qk-e2e-m{i}-"))
                .tempdir()
                .expect("create member tempdir");
            let client_port = base_port + 2 * i as u16;
            let log_path = dir.path().join("member.log");
            members.push(Member {
                name: format!("m{i}"),
                dir,
                client_url: format!("http://{ip}:{client_port}"),
                peer_url: format!("http://{ip}:{}", client_port + 1),
                log_path,
                child: None,
                id: 0,
            });
        }
        let mut cluster = Cluster {
            target: options.target,
            binary,
            token,
            extra_args: options.extra_args,
            members,
        };
        for i in 0..cluster.members.len() {
            cluster.spawn_member(i);
        }
        cluster.wait_ready_all().await;
        for i in 0..cluster.members.len() {
            let status = cluster
                .client(i)
                .await
                .status()
                .await
                .unwrap_or_else(|e| panic!("status of member {i}: {e}"));
            let id = status.header().expect("status header").member_id();
            assert_ne!(id, 0, "member {i} reported member_id 0");
            cluster.members[i].id = id;
        }
        cluster
    }

    pub fn target(&self) -> Target {
        self.target
    }

    pub fn size(&self) -> usize {
        self.members.len()
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
        connect(&[self.endpoint(i)]).await
    }

    /// A client connected to every member (etcd-client balances between them).
    pub async fn client_all(&self) -> Client {
        connect(&self.endpoints()).await
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
            let leader = quick_connect(&self.endpoint(i))
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
        run_etcdctl(&endpoints.join(","), args, stdin).await
    }

    /// Runs etcdctl against all running members named as `host:port`, without a scheme.
    /// etcdctl 3.4's per-endpoint commands (`endpoint status|health`) send such an
    /// endpoint with its scheme as the HTTP/2 `:authority`, which grpc-go accepts and
    /// QuantyKube's HTTP/2 server (h2) refuses; see docs/compatibility.md.
    pub async fn etcdctl_host_port(&self, args: &[&str]) -> CmdOutput {
        let endpoints: Vec<String> = (0..self.members.len())
            .filter(|&i| self.is_running(i))
            .map(|i| self.endpoint(i).trim_start_matches("http://").to_string())
            .collect();
        run_etcdctl(&endpoints.join(","), args, "").await
    }

    /// Runs etcdctl (API v3) against member `i` only.
    pub async fn etcdctl_on(&self, i: usize, args: &[&str]) -> CmdOutput {
        run_etcdctl(&self.endpoint(i), args, "").await
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
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let m = &self.members[i];
        let log = File::options()
            .create(true)
            .append(true)
            .open(&m.log_path)
            .expect("open member log");
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(m.data_dir())
            .arg("--listen-client-urls")
            .arg(&m.client_url)
            .arg("--advertise-client-urls")
            .arg(&m.client_url)
            .arg("--listen-peer-urls")
            .arg(&m.peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&m.peer_url)
            .arg("--initial-cluster")
            .arg(&initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(&self.token)
            .args(&self.extra_args)
            .current_dir(m.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log);
        // Quiet etcd's own ETCD_* environment so only the flags above count.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(key);
            }
        }
        let child = spawn_tied_to_process(cmd)
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.binary.display()));
        self.members[i].child = Some(child);
    }

    async fn wait_ready_all(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        for i in 0..self.members.len() {
            self.wait_ready(i, deadline).await;
        }
    }

    /// Waits until member `i` answers a linearizable Range, failing fast (with the
    /// member's log) if its process exits.
    async fn wait_ready(&mut self, i: usize, deadline: Instant) {
        let endpoint = self.endpoint(i);
        loop {
            if let Some(child) = self.members[i].child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.members[i].child = None;
                    panic!(
                        "{} member {i} exited during startup with {status}",
                        self.target
                    );
                }
            }
            let last_error = match quick_connect(&endpoint).await {
                Ok(mut client) => match client
                    .get("qk-e2e-readiness-probe", Some(GetOptions::new()))
                    .await
                {
                    Ok(_) => return,
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                panic!(
                    "{} member {i} ({endpoint}) not ready before the deadline; last error: \
                     {last_error}",
                    self.target
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
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
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(3))
        .with_timeout(RPC_TIMEOUT);
    Client::connect(endpoints, Some(options))
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoints:?}: {e}"))
}

/// A client with short timeouts, for polling.
async fn quick_connect(endpoint: &str) -> Result<Client, etcd_client::Error> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_millis(500))
        .with_timeout(Duration::from_secs(2));
    Client::connect([endpoint], Some(options)).await
}

async fn run_etcdctl(endpoints: &str, args: &[&str], stdin: &str) -> CmdOutput {
    use tokio::io::AsyncWriteExt;

    let mut cmd = tokio::process::Command::new(etcdctl_binary());
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=5s")
        .arg("--command-timeout=15s")
        .args(args)
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

/// Picks a loopback address for this process and a block of `2 * members` ports on it
/// that are free right now. The address is unique per process id; the port block is
/// unique per cluster within the process.
fn allocate_addresses(members: usize) -> (Ipv4Addr, u16, String) {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    const BASE: u32 = 20_000;
    const BLOCK: u32 = 20;
    // Ports 20000..32000: below Linux's default ephemeral range (32768..60999), so
    // client connections never hold a port a member will bind on restart.
    const BLOCKS: u32 = 600;
    assert!(
        2 * members as u32 <= BLOCK,
        "too many members for one port block"
    );
    let pid = std::process::id();
    let ip = Ipv4Addr::new(
        127,
        (1 + (pid / (254 * 254)) % 254) as u8,
        (1 + (pid / 254) % 254) as u8,
        (1 + pid % 254) as u8,
    );
    for _ in 0..BLOCKS {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = BASE + (n % BLOCKS) * BLOCK;
        let free = (0..2 * members as u32)
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
fn spawn_tied_to_process(mut cmd: Command) -> io::Result<Child> {
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
