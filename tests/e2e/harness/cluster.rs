//! The [`Cluster`]: its members, starting it, what it knows of them (URLs, names, IDs,
//! data dirs), its clients, killing and restarting members, finding the leader, and
//! killing every member when it is dropped.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use etcd_client::Client;
use tempfile::TempDir;

use super::etcdctl::json_member_id;
use super::ports::{allocate_addresses, spare_ports};
use super::processes::member_data_dir;
use super::*;
use crate::support::connect::Connect;

pub(super) struct Member {
    pub(super) name: String,
    pub(super) dir: TempDir,
    pub(super) data_dir: PathBuf,
    pub(super) client_url: String,
    pub(super) peer_url: String,
    pub(super) log_path: PathBuf,
    pub(super) child: Option<Child>,
    pub(super) id: u64,
    /// `--listen-metrics-urls`, if the cluster was started with metrics URLs.
    pub(super) metrics_url: Option<String>,
    /// Set for a member that joins a running cluster (`--initial-cluster-state
    /// existing`); `None` for the members the cluster started with.
    pub(super) join: Option<Join>,
    /// Flags of this member alone, for its next starts (see [`Cluster::set_member_flags`]).
    pub(super) flags: Vec<String>,
}

/// How a member that joins a running cluster is started.
#[derive(Clone, Debug)]
pub(super) struct Join {
    /// `--initial-cluster`, as `etcdctl member add` prints it for the new member.
    pub(super) initial_cluster: String,
    /// Pass name, initial cluster, advertised peer URL and cluster state as the
    /// `ETCD_*` environment variables `etcdctl member add` prints, instead of flags.
    pub(super) via_env: bool,
    /// Found a new cluster (`--initial-cluster-state new`) instead of joining one.
    pub(super) founds: bool,
}

impl Member {
    pub(super) fn data_dir(&self) -> PathBuf {
        self.data_dir.clone()
    }
}

/// A running cluster of `n` members of the target server.
pub struct Cluster {
    pub(super) target: Target,
    pub(super) binary: PathBuf,
    pub(super) token: String,
    pub(super) extra_args: Vec<String>,
    pub(super) member_args: Option<MemberArgs>,
    pub(super) extra_client_urls: Option<MemberArgs>,
    pub(super) client_tls: Option<ClientTls>,
    pub(super) flags_as_env: bool,
    pub(super) members: Vec<Member>,
    /// The loopback address and first port of this cluster's port block; members that
    /// join later take the next free pair of ports in the block.
    pub(super) ip: Ipv4Addr,
    pub(super) base_port: u16,
    /// `--initial-cluster` of the members the cluster started with.
    pub(super) initial_cluster: String,
    /// See [`ClusterOptions::data_root`].
    pub(super) data_root: Option<PathBuf>,
    /// See [`ClusterOptions::env`].
    pub(super) env: Vec<(String, String)>,
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
    pub(super) fn etcdctl_probes(&self) -> bool {
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
    pub(super) async fn quick(&self, endpoint: &str) -> Result<Client, etcd_client::Error> {
        Connect::new()
            .quick()
            .tls(self.client_tls.as_ref())
            .try_to([endpoint])
            .await
    }

    /// Runs `target`'s server for every member started from now on, with the same
    /// flags and data dirs (etcd's members moved to QuantyKube in place, say).
    pub fn switch_target(&mut self, target: Target) {
        self.target = target;
        self.set_binary(target.require_binary());
    }

    /// Runs `binary` for every member started from now on (a rolling upgrade restarts
    /// members one at a time after this).
    pub fn set_binary(&mut self, binary: impl Into<PathBuf>) {
        self.binary = binary.into();
    }

    /// Kills member `i` with SIGKILL and reaps it.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops member `i` as an operator does (SIGTERM), waiting up to 30 s for it to
    /// exit (a member hands leadership over and closes its databases first); returns
    /// its exit status, `None` if it was not running or did not exit in time.
    pub async fn stop(&mut self, i: usize) -> Option<std::process::ExitStatus> {
        let pid = self.members[i].child.as_ref()?.id();
        // SAFETY: kill(2) on a child this harness started and has not reaped.
        unsafe {
            libc::kill(pid as i32, libc::SIGTERM);
        }
        self.wait_exit(i, Duration::from_secs(30)).await
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
