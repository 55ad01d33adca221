//! Member processes: spawning a member with its flags (or as `ETCD_*` variables),
//! tied to the test process; waiting until it serves; its log; and the `snapshot
//! restore` commands that prepare a data dir.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use etcd_client::GetOptions;

use super::*;

impl Cluster {
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

    pub(super) fn spawn_member(&mut self, i: usize) {
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
    pub(super) async fn wait_ready(&mut self, i: usize, deadline: Instant) {
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
pub(super) fn member_data_dir(root: Option<&Path>, own: &Path, i: usize) -> PathBuf {
    root.map_or_else(
        || own.join("data"),
        |root| root.join(format!("m{i}")).join("data"),
    )
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
