//! Members named by DNS, as a StatefulSet names them, inside a network namespace that
//! each test makes for itself (`qk-dns-<pid>-<tag>`, removed on drop, also on panic).
//!
//! - [`host_names_in_urls_resolve_when_dialled`]: three members advertise peer and
//!   client URLs with host names (`http://m1.qk.test:2380`, ...) that the namespace's
//!   `/etc/hosts` maps to 127.0.0.11-13. One member is moved: killed, its entry changed
//!   to 127.0.0.22, restarted there with the same data dir and URLs. The others must
//!   reach it at its new address within [`RECONNECT_BOUND`]: it catches up, serves
//!   writes and reads, and forms the quorum with one of them while the third is down.
//! - [`discovery_srv_bootstraps_from_srv_records`]: dnsmasq in the namespace serves SRV
//!   records for `qk.test`; three members started with only `--discovery-srv qk.test`
//!   form a cluster, and etcd's messages come back when no record names this member,
//!   when there are none, and with `--initial-cluster` as well.
//!
//! etcd 3.4 (`QK_TEST_TARGET=etcd`) is the oracle, with one known divergence: 3.4 drops
//! the `_etcd-server` (http) records whenever the `_etcd-server-ssl` lookup fails
//! (fixed in etcd 3.5, "Fix cluster peer HTTP SRV discovery"), so it cannot bootstrap a
//! plain-http cluster from SRV records; against etcd the test checks that refusal, and
//! forms the cluster through the https records with `--peer-auto-tls` instead.
//! QuantyKube behaves as etcd 3.5 and 3.6 do.
//!
//! Needs root and `ip netns` (and dnsmasq, which `deploy/local/install-deps.sh`
//! installs, for the SRV test); without them a test prints `skipping: ...` and passes.
//! Every member listens on the namespace's loopback, so no traffic leaves it; the test
//! thread itself enters the namespace to talk to the members.

use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use tempfile::TempDir;

use crate::harness::{find_on_path, spawn_tied_to_process, Target};
use crate::support::connect::Connect;

const DOMAIN: &str = "qk.test";
const TOKEN: &str = "qk-dns";
const CLIENT_PORT: u16 = 2379;
const PEER_PORT: u16 = 2380;
/// Where the namespace's resolv.conf points: dnsmasq, or nothing at all.
const NAME_SERVER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 53);
const MOVED_TO: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 22);
/// How long a cluster may take to start and serve a linearizable read.
const START_BOUND: Duration = Duration::from_secs(40);
/// How long the cluster may take to reach a member at its new address.
const RECONNECT_BOUND: Duration = Duration::from_secs(30);
/// How long a member that must refuse to start may take to exit.
const EXIT_BOUND: Duration = Duration::from_secs(30);

/// The member ids etcd 3.4 gives `m{1,2,3}=http://m{1,2,3}.qk.test:2380` with the token
/// `qk-dns` (SHA-1 of the peer URLs and the token): a static bootstrap and an SRV one
/// build the same cluster.
const MEMBER_IDS: [u64; 3] = [
    0xd69e_1efc_3e6a_e01a,
    0x5c0c_7a39_83eb_89a9,
    0x9ad4_2c1b_a9c3_252e,
];

fn ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 11 + i as u8)
}

fn host(i: usize) -> String {
    format!("m{}.{DOMAIN}", i + 1)
}

fn peer_url(scheme: &str, i: usize) -> String {
    format!("{scheme}://{}:{PEER_PORT}", host(i))
}

// ---------------------------------------------------------------------------------
// The namespace.

/// A network namespace of the test's own, with `/etc/netns/<name>/` (which `ip netns
/// exec` mounts over `/etc/hosts` and `/etc/resolv.conf` for what it runs). Dropping it
/// deletes both; the members and dnsmasq must be killed first (they are dropped first).
struct Netns {
    name: String,
    etc: PathBuf,
}

impl Netns {
    /// A fresh namespace with `lo` up, or why there cannot be one.
    fn create(tag: &str) -> Result<Netns, String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("network namespaces need root".into());
        }
        if find_on_path("ip").is_none() && !Path::new("/usr/sbin/ip").exists() {
            return Err("no `ip` command (iproute2)".into());
        }
        let name = format!("qk-dns-{}-{tag}", std::process::id());
        // A namespace left by an earlier process with this pid.
        let _ = ip_command(&["netns", "delete", &name]);
        ip_command(&["netns", "add", &name]).map_err(|e| format!("`ip netns add` failed: {e}"))?;
        let ns = Netns {
            etc: PathBuf::from("/etc/netns").join(&name),
            name,
        };
        ip_command(&["-n", &ns.name, "link", "set", "lo", "up"])
            .map_err(|e| format!("cannot bring lo up in {}: {e}", ns.name))?;
        std::fs::create_dir_all(&ns.etc).map_err(|e| format!("{}: {e}", ns.etc.display()))?;
        Ok(ns)
    }

    /// Writes the namespace's `/etc/hosts` in place: running members see the new
    /// entries too (the file is bind-mounted into them, so it must stay the same file).
    fn write_hosts(&self, entries: &[(String, Ipv4Addr)]) {
        let mut text = String::from("127.0.0.1 localhost\n");
        for (name, addr) in entries {
            text.push_str(&format!("{addr} {name}\n"));
        }
        let path = self.etc.join("hosts");
        let mut file = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        file.write_all(text.as_bytes())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    fn write_resolv_conf(&self) {
        let path = self.etc.join("resolv.conf");
        std::fs::write(&path, format!("nameserver {NAME_SERVER}\n"))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// `program` run inside the namespace.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name]).arg(program);
        cmd
    }

    /// Moves the calling thread into the namespace (sockets it opens are inside).
    fn enter(&self) -> io::Result<()> {
        let file = File::open(Path::new("/run/netns").join(&self.name))?;
        // SAFETY: a valid namespace fd; setns affects only the calling thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Runs `body` on a thread inside the namespace, on a runtime of its own.
    fn run<F: Future<Output = ()>>(&self, body: impl FnOnce() -> F + Send) {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                self.enter()
                    .unwrap_or_else(|e| panic!("enter {}: {e}", self.name));
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime")
                    .block_on(body());
            });
        });
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip_command(&["netns", "delete", &self.name]) {
            eprintln!("cannot delete network namespace {}: {e}", self.name);
        }
        let _ = std::fs::remove_dir_all(&self.etc);
    }
}

fn ip_command(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// The namespace for a test, or `None` after printing why the test is skipped.
fn namespace(tag: &str) -> Option<Netns> {
    match Netns::create(tag) {
        Ok(ns) => Some(ns),
        Err(why) => {
            println!("skipping: {why}");
            None
        }
    }
}

// ---------------------------------------------------------------------------------
// Processes in the namespace.

/// A child process killed on drop.
struct Process(Option<Child>);

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// dnsmasq in the namespace, answering for `qk.test` only: the members' addresses and
/// the SRV records the tests look up.
fn start_dnsmasq(ns: &Netns, dir: &Path) -> Result<Process, String> {
    let binary = find_on_path("dnsmasq")
        .or_else(|| Some(PathBuf::from("/usr/sbin/dnsmasq")).filter(|p| p.exists()))
        .ok_or("no dnsmasq (Debian's dnsmasq-base; deploy/local/install-deps.sh installs it)")?;
    let mut args = vec![
        "--keep-in-foreground".to_string(),
        "--conf-file=/dev/null".into(),
        "--no-resolv".into(),
        "--no-hosts".into(),
        format!("--listen-address={NAME_SERVER}"),
        "--bind-interfaces".into(),
        "--pid-file=".into(),
        "--user=root".into(),
        format!("--local=/{DOMAIN}/"),
        "--log-queries".into(),
        format!("--log-facility={}", dir.join("dnsmasq.log").display()),
        format!("--host-record=m7.{DOMAIN},127.0.0.17"),
    ];
    for i in 0..3 {
        args.push(format!("--host-record={},{}", host(i), ip(i)));
        // The plain records; the https ones etcd 3.4 needs; the https ones of a cluster
        // this member is not in.
        for service in ["_etcd-server", "_etcd-server-ssl-tls"] {
            args.push(format!(
                "--srv-host={service}._tcp.{DOMAIN},{},{PEER_PORT},0,0",
                host(i)
            ));
        }
    }
    args.push(format!(
        "--srv-host=_etcd-server-ssl-elsewhere._tcp.{DOMAIN},m7.{DOMAIN},{PEER_PORT},0,0"
    ));
    let log = File::create(dir.join("dnsmasq.out")).map_err(|e| e.to_string())?;
    let mut cmd = ns.command(&binary);
    cmd.args(&args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    let process = Process(Some(
        spawn_tied_to_process(cmd).map_err(|e| format!("spawn dnsmasq: {e}"))?,
    ));
    // Ready once a name resolves through it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let resolved = ns
            .command(Path::new("getent"))
            .args(["hosts", &host(0)])
            .output()
            .is_ok_and(|out| out.status.success());
        if resolved {
            return Ok(process);
        }
        if Instant::now() > deadline {
            let out = std::fs::read_to_string(dir.join("dnsmasq.out")).unwrap_or_default();
            return Err(format!("dnsmasq did not answer within 10 s: {out}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

struct Member {
    name: String,
    dir: TempDir,
    /// The address it listens on.
    ip: Ipv4Addr,
    /// `http` or `https` (etcd only, with `--peer-auto-tls`).
    peer_scheme: &'static str,
    /// `--initial-advertise-peer-urls`.
    advertise_peer_url: String,
    /// `--initial-cluster ...` or `--discovery-srv ...`, and anything else.
    flags: Vec<String>,
    child: Option<Child>,
}

impl Member {
    fn log_path(&self) -> PathBuf {
        self.dir.path().join("member.log")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn endpoint(&self) -> String {
        format!("http://{}:{CLIENT_PORT}", self.ip)
    }
}

/// Members of the target server in one namespace, killed on drop (their logs printed
/// if the test is failing).
struct Members<'ns> {
    ns: &'ns Netns,
    target: Target,
    binary: PathBuf,
    members: Vec<Member>,
}

impl<'ns> Members<'ns> {
    fn new(ns: &'ns Netns) -> Self {
        let target = Target::from_env();
        let binary = target
            .binary()
            .unwrap_or_else(|| panic!("no {target} binary (see tests/e2e/harness/target.rs)"));
        Members {
            ns,
            target,
            binary,
            members: Vec::new(),
        }
    }

    /// Adds member `m{i+1}` on 127.0.0.{11+i}, advertising `advertise_peer_url`.
    fn add(
        &mut self,
        i: usize,
        peer_scheme: &'static str,
        advertise_peer_url: String,
        flags: &[String],
    ) {
        let dir = tempfile::Builder::new()
            .prefix(&format!("qk-dns-m{}-", i + 1))
            .tempdir()
            .expect("member tempdir");
        self.members.push(Member {
            name: format!("m{}", i + 1),
            dir,
            ip: ip(i),
            peer_scheme,
            advertise_peer_url,
            flags: flags.to_vec(),
            child: None,
        });
    }

    fn spawn(&mut self, i: usize) {
        self.kill(i);
        let m = &self.members[i];
        let log = File::options()
            .create(true)
            .append(true)
            .open(m.log_path())
            .expect("member log");
        let mut cmd = self.ns.command(&self.binary);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(m.dir.path().join("data"))
            .arg("--listen-peer-urls")
            .arg(format!("{}://{}:{PEER_PORT}", m.peer_scheme, m.ip))
            .arg("--listen-client-urls")
            .arg(m.endpoint())
            .arg("--advertise-client-urls")
            .arg(format!("http://{}.{DOMAIN}:{CLIENT_PORT}", m.name))
            .arg("--initial-advertise-peer-urls")
            .arg(&m.advertise_peer_url)
            .arg("--initial-cluster-token")
            .arg(TOKEN)
            .args(&m.flags)
            .current_dir(m.dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log handle"))
            .stderr(log);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(key);
            }
        }
        let child = spawn_tied_to_process(cmd).unwrap_or_else(|e| panic!("spawn {}: {e}", m.name));
        self.members[i].child = Some(child);
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn endpoint(&self, i: usize) -> String {
        self.members[i].endpoint()
    }

    /// Waits until member `i` serves a linearizable read; panics if it exits first.
    async fn wait_ready(&mut self, i: usize, deadline: Instant) {
        let endpoint = self.endpoint(i);
        loop {
            if let Some(Ok(Some(status))) = self.members[i].child.as_mut().map(Child::try_wait) {
                self.members[i].child = None;
                panic!(
                    "{} {} exited during startup with {status}",
                    self.target, self.members[i].name
                );
            }
            let error = match quick_client(&endpoint).await {
                Ok(mut client) => match client.get("qk-dns-probe", None).await {
                    Ok(_) => return,
                    Err(e) => e.to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                panic!(
                    "{} {} ({endpoint}) not ready in time; last error: {error}",
                    self.target, self.members[i].name
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn wait_ready_all(&mut self) {
        let deadline = Instant::now() + START_BOUND;
        for i in 0..self.members.len() {
            self.wait_ready(i, deadline).await;
        }
    }

    /// Waits for member `i` to exit (it must refuse to start) and returns its status
    /// and log.
    async fn wait_exit(&mut self, i: usize) -> (ExitStatus, String) {
        let deadline = Instant::now() + EXIT_BOUND;
        let child = self.members[i].child.as_mut().expect("member runs");
        loop {
            if let Some(status) = child.try_wait().expect("wait for member") {
                self.members[i].child = None;
                return (status, self.members[i].log());
            }
            if Instant::now() >= deadline {
                panic!(
                    "{} {} did not exit within {EXIT_BOUND:?}:\n{}",
                    self.target,
                    self.members[i].name,
                    self.members[i].log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The member ids the members' Status headers report.
    async fn member_ids(&self) -> Vec<u64> {
        let mut ids = Vec::new();
        for i in 0..self.members.len() {
            let status = client(&self.endpoint(i))
                .await
                .status()
                .await
                .unwrap_or_else(|e| panic!("status of {}: {e}", self.members[i].name));
            ids.push(status.header().expect("header").member_id());
        }
        ids
    }
}

impl Drop for Members<'_> {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
        if std::thread::panicking() {
            for m in &self.members {
                let log = m.log();
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                eprintln!(
                    "----- {} {} log (last lines) -----\n{}",
                    self.target,
                    m.name,
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
        }
    }
}

async fn quick_client(endpoint: &str) -> Result<Client, etcd_client::Error> {
    Connect::new().quick().try_to([endpoint]).await
}

async fn client(endpoint: &str) -> Client {
    Connect::new().to([endpoint]).await
}

/// Retries `attempt` until it returns `Some`, or panics after `bound` naming `what`.
async fn eventually<T, F, Fut>(bound: Duration, what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, String>>,
{
    let deadline = Instant::now() + bound;
    let mut last = String::from("no answer yet");
    loop {
        match attempt().await {
            Ok(Some(value)) => return value,
            Ok(None) => {}
            Err(e) => last = e,
        }
        if Instant::now() >= deadline {
            panic!("not within {bound:?}: {what} (last: {last})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of `key` on the member at `endpoint` (serializable: its own applied state).
async fn local_value(endpoint: &str, key: &str) -> Result<Option<String>, String> {
    let mut client = quick_client(endpoint).await.map_err(|e| e.to_string())?;
    let resp = client
        .get(key, Some(GetOptions::new().with_serializable()))
        .await
        .map_err(|e| e.to_string())?;
    Ok(resp
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
}

async fn put(endpoint: &str, key: &str, value: &str) -> Result<Option<()>, String> {
    let mut client = quick_client(endpoint).await.map_err(|e| e.to_string())?;
    client
        .put(key, value, None)
        .await
        .map(|_| Some(()))
        .map_err(|e| e.to_string())
}

/// The value of `key` by a linearizable read on the member at `endpoint`.
async fn read(endpoint: &str, key: &str) -> Result<Option<String>, String> {
    let mut client = quick_client(endpoint).await.map_err(|e| e.to_string())?;
    let resp = client.get(key, None).await.map_err(|e| e.to_string())?;
    Ok(resp
        .kvs()
        .first()
        .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()))
}

// ---------------------------------------------------------------------------------
// The tests.

#[test]
fn host_names_in_urls_resolve_when_dialled() {
    let Some(ns) = namespace("move") else {
        return;
    };
    // No name server: every name the members use is in the namespace's /etc/hosts.
    ns.write_resolv_conf();
    let mut hosts: Vec<(String, Ipv4Addr)> = (0..3).map(|i| (host(i), ip(i))).collect();
    ns.write_hosts(&hosts);
    ns.run(|| async {
        let mut cluster = Members::new(&ns);
        let initial_cluster = (0..3)
            .map(|i| format!("m{}={}", i + 1, peer_url("http", i)))
            .collect::<Vec<_>>()
            .join(",");
        for i in 0..3 {
            let flags = ["--initial-cluster".to_string(), initial_cluster.clone()];
            cluster.add(i, "http", peer_url("http", i), &flags);
            cluster.spawn(i);
        }
        cluster.wait_ready_all().await;
        let ids = cluster.member_ids().await;
        println!("{} member ids: {:x?}", cluster.target, ids);
        assert_eq!(ids, MEMBER_IDS, "member ids from host-name peer URLs");
        put(&cluster.endpoint(0), "before-move", "1").await.unwrap();

        // Move m1: down, writes it misses, a new address for its name, up again there.
        cluster.kill(0);
        // If m1 led, the first writes wait for an election: retry as clients do.
        for k in 0..5 {
            let key = format!("while-down-{k}");
            let give_up = Instant::now() + Duration::from_secs(15);
            loop {
                match put(&cluster.endpoint(1), &key, "2").await {
                    Ok(_) => break,
                    Err(e) if Instant::now() < give_up => {
                        println!("write while m1 is down, retrying: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(e) => panic!("write while m1 is down: {e}"),
                }
            }
        }
        hosts[0].1 = MOVED_TO;
        ns.write_hosts(&hosts);
        cluster.members[0].ip = MOVED_TO;
        let restarted = Instant::now();
        cluster.spawn(0);
        let moved = cluster.endpoint(0);

        // The leader reaches it at its new address: it catches up.
        eventually(RECONNECT_BOUND, "m1 catches up at its new address", || {
            local_value(&moved, "while-down-4")
        })
        .await;
        let caught_up = restarted.elapsed();
        // Writes through it and reads from it.
        eventually(RECONNECT_BOUND, "a write through the moved m1", || {
            put(&moved, "after-move", "3")
        })
        .await;
        assert_eq!(
            read(&moved, "after-move").await.unwrap().as_deref(),
            Some("3")
        );
        assert_eq!(
            read(&cluster.endpoint(2), "after-move")
                .await
                .unwrap()
                .as_deref(),
            Some("3")
        );
        // Both ways: with m2 down, m1 and m3 are the quorum (and elect a leader if m2
        // led), so m3 must reach m1 as m1 reaches m3.
        cluster.kill(1);
        let m3 = cluster.endpoint(2);
        eventually(RECONNECT_BOUND, "a write that needs m1 and m3", || {
            put(&m3, "quorum-with-moved", "4")
        })
        .await;
        eventually(RECONNECT_BOUND, "m1 applies it", || {
            local_value(&moved, "quorum-with-moved")
        })
        .await;
        println!(
            "{}: the moved member caught up {caught_up:?} after its restart; quorum with it \
             {:?} after",
            cluster.target,
            restarted.elapsed()
        );
    });
}

#[test]
fn discovery_srv_bootstraps_from_srv_records() {
    let Some(ns) = namespace("srv") else {
        return;
    };
    let scratch = tempfile::Builder::new()
        .prefix("qk-dns-srv-")
        .tempdir()
        .expect("tempdir");
    ns.write_resolv_conf();
    // Names resolve through DNS only, as a StatefulSet's do.
    ns.write_hosts(&[]);
    let _dnsmasq = match start_dnsmasq(&ns, scratch.path()) {
        Ok(process) => process,
        Err(why) => {
            println!("skipping: {why}");
            return;
        }
    };
    let target = Target::from_env();
    ns.run(|| async {
        refusals(&ns).await;
        match target {
            Target::Quantykube => srv_cluster(&ns, "http", &[]).await,
            Target::Etcd => {
                // etcd 3.4 cannot bootstrap from http SRV records (see the module doc).
                let mut members = Members::new(&ns);
                members.add(0, "http", peer_url("http", 0), &srv_flags(&[]));
                members.spawn(0);
                let (status, log) = members.wait_exit(0).await;
                assert!(!status.success());
                assert_log(
                    &log,
                    "error setting up initial cluster: error querying DNS SRV records for \
                     _etcd-server-ssl lookup _etcd-server-ssl._tcp.qk.test on 127.0.0.53:53: \
                     no such host",
                );
                drop(members);
                srv_cluster(
                    &ns,
                    "https",
                    &["--discovery-srv-name=tls", "--peer-auto-tls"],
                )
                .await;
            }
        }
    });
}

/// `--discovery-srv qk.test` and `extra`.
fn srv_flags(extra: &[&str]) -> Vec<String> {
    let mut flags = vec!["--discovery-srv".to_string(), DOMAIN.to_string()];
    flags.extend(extra.iter().map(|f| f.to_string()));
    flags
}

/// Three members started with only `--discovery-srv` form a cluster. m3 advertises
/// its IP, which its SRV target resolves to: it is found by address, and takes the SRV
/// URL as its peer URL. A member restarted with data does not look DNS up again.
async fn srv_cluster(ns: &Netns, scheme: &'static str, extra: &[&str]) {
    let mut members = Members::new(ns);
    for i in 0..3 {
        let advertised = if i == 2 {
            format!("{scheme}://{}:{PEER_PORT}", ip(i))
        } else {
            peer_url(scheme, i)
        };
        members.add(i, scheme, advertised, &srv_flags(extra));
        members.spawn(i);
    }
    members.wait_ready_all().await;
    let ids = members.member_ids().await;
    println!("{} member ids from SRV records: {ids:x?}", members.target);
    if scheme == "http" {
        assert_eq!(ids, MEMBER_IDS, "the ids of the same static cluster");
    }
    // The placeholder names ("0", "1") give way to the names the members publish.
    let endpoint = members.endpoint(0);
    let listed = eventually(START_BOUND, "every member published its name", || async {
        let mut client = quick_client(&endpoint).await.map_err(|e| e.to_string())?;
        let list = client.member_list().await.map_err(|e| e.to_string())?;
        let mut listed: Vec<(u64, String, Vec<String>)> = list
            .members()
            .iter()
            .map(|m| (m.id(), m.name().to_string(), m.peer_urls().to_vec()))
            .collect();
        listed.sort_by(|a, b| a.1.cmp(&b.1));
        Ok(listed
            .iter()
            .all(|m| m.1.starts_with('m'))
            .then_some(listed))
    })
    .await;
    let expected: Vec<(String, Vec<String>)> = (0..3)
        .map(|i| (format!("m{}", i + 1), vec![peer_url(scheme, i)]))
        .collect();
    let got: Vec<(String, Vec<String>)> =
        listed.iter().map(|m| (m.1.clone(), m.2.clone())).collect();
    assert_eq!(got, expected, "MemberList of the SRV cluster");
    let listed_ids: Vec<u64> = listed.iter().map(|m| m.0).collect();
    assert_eq!(listed_ids, ids);

    put(&members.endpoint(2), "from-srv", "1").await.unwrap();
    assert_eq!(
        read(&members.endpoint(0), "from-srv")
            .await
            .unwrap()
            .as_deref(),
        Some("1")
    );

    // A member with data ignores the bootstrap flags: it restarts even where its SRV
    // records are gone (the last --discovery-srv-name wins, and has none).
    members.kill(0);
    members.members[0]
        .flags
        .push("--discovery-srv-name=missing".into());
    members.spawn(0);
    members.wait_ready(0, Instant::now() + START_BOUND).await;
    assert_eq!(
        local_value(&members.endpoint(0), "from-srv")
            .await
            .unwrap()
            .as_deref(),
        Some("1")
    );
}

/// A member that cannot take its cluster from DNS refuses to start, with etcd's message.
async fn refusals(ns: &Netns) {
    let target = Target::from_env();
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        // Records, for another member only (an https one: etcd 3.4 reads those).
        (
            srv_flags(&["--discovery-srv-name=elsewhere"]),
            vec![
                r#"error setting up initial cluster: cannot find local etcd member "m1" in SRV records"#,
            ],
        ),
        // No records at all.
        (
            srv_flags(&["--discovery-srv-name=missing"]),
            match target {
                Target::Etcd => vec![
                    "error setting up initial cluster: error querying DNS SRV records for \
                     _etcd-server-ssl-missing lookup _etcd-server-ssl-missing._tcp.qk.test on \
                     127.0.0.53:53: no such host",
                ],
                // etcd 3.5+ looks up both services, and joins both errors.
                Target::Quantykube => vec![
                    "error setting up initial cluster: error querying DNS SRV records for \
                     _etcd-server-ssl-missing lookup _etcd-server-ssl-missing._tcp.qk.test on \
                     127.0.0.53:53: no such host\nerror querying DNS SRV records for \
                     _etcd-server-missing lookup _etcd-server-missing._tcp.qk.test on \
                     127.0.0.53:53: no such host",
                ],
            },
        ),
        // Both bootstrap flags.
        (
            {
                let mut flags = srv_flags(&[]);
                flags.extend([
                    "--initial-cluster".into(),
                    format!("m1={}", peer_url("http", 0)),
                ]);
                flags
            },
            match target {
                Target::Etcd => vec![
                    r#"multiple discovery or bootstrap flags are set. Choose one of "initial-cluster", "discovery" or "discovery-srv""#,
                ],
                // etcd 3.6's message names its v3 discovery too.
                Target::Quantykube => vec![
                    r#"multiple discovery or bootstrap flags are set. Choose one of "initial-cluster", "discovery", "discovery-endpoints" or "discovery-srv""#,
                ],
            },
        ),
    ];
    for (flags, expected) in cases {
        let mut members = Members::new(ns);
        members.add(0, "http", peer_url("http", 0), &flags);
        members.spawn(0);
        let (status, log) = members.wait_exit(0).await;
        assert!(!status.success(), "{flags:?}: exited with {status}");
        for text in expected {
            assert_log(&log, text);
        }
        println!("{target} {flags:?}: refused as expected");
    }
}

/// `expected` as written, or as a zap JSON line holds it (quotes and newlines escaped):
/// etcd 3.4's capnslog writes it raw, QuantyKube (as etcd 3.5+) writes JSON.
#[track_caller]
fn assert_log(log: &str, expected: &str) {
    let escaped = serde_json::to_string(expected).expect("a JSON string");
    let escaped = &escaped[1..escaped.len() - 1];
    assert!(
        log.contains(expected) || log.contains(escaped),
        "the log does not say:\n{expected}\n----- log -----\n{log}"
    );
}
