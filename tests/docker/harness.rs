//! Docker and Compose from the tests: commands with deadlines, the image (built by
//! deploy/image/build.sh when missing or built from another binary), compose projects
//! that remove their containers, volumes and networks when dropped (also on a failed
//! assertion), HTTP probes and etcd clients on the projects' published loopback ports.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The image the tests run; `QK_TEST_IMAGE` names another tag.
pub fn image_tag() -> String {
    std::env::var("QK_TEST_IMAGE").unwrap_or_else(|_| "quantykube:dev".to_owned())
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_quantykube"))
}

/// One test at a time in this binary, whatever `--test-threads` says: each runs a cluster
/// of containers, and two at once on two cores would time each other out. A tokio
/// mutex: the guard is held across the test's awaits, and a failed test does not poison
/// it. Taken by polling, so that sync and async tests alike can call this at their start.
pub fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    loop {
        if let Ok(guard) = SERIAL.try_lock() {
            return guard;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a finished command said.
#[derive(Debug)]
pub struct Out {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
}

/// Runs `program args` with extra environment, killing it after `deadline`.
pub fn run_blocking(
    program: &str,
    args: &[String],
    env: &[(String, String)],
    cwd: &Path,
    deadline: Duration,
) -> Out {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => {
            return Out {
                code: None,
                stdout: String::new(),
                stderr: format!("cannot run {program}: {error}"),
            }
        }
    };
    // Drain both pipes on threads so that a chatty command cannot block on a full pipe.
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_thread = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err_thread = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let code = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status.code(),
            Ok(None) if started.elapsed() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => break None,
        }
    };
    let stdout = out_thread.join().unwrap_or_default();
    let mut stderr = err_thread.join().unwrap_or_default();
    if code.is_none() {
        let _ = write!(stderr, "\n(killed after {deadline:?})");
    }
    Out {
        code,
        stdout,
        stderr,
    }
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|arg| (*arg).to_owned()).collect()
}

/// `docker args`, blocking (for Drop and set-up).
pub fn docker_blocking(args: &[&str], deadline: Duration) -> Out {
    run_blocking("docker", &strings(args), &[], &repo(), deadline)
}

/// `docker args` off the async runtime's threads.
pub async fn docker(args: &[&str]) -> Out {
    let args = strings(args);
    tokio::task::spawn_blocking(move || {
        run_blocking("docker", &args, &[], &repo(), Duration::from_secs(120))
    })
    .await
    .expect("docker command thread")
}

/// `docker args`, which must succeed.
pub async fn docker_ok(args: &[&str]) -> String {
    let out = docker(args).await;
    assert!(
        out.ok(),
        "docker {} failed ({:?}): {}{}",
        args.join(" "),
        out.code,
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// Whether this machine runs containers: `Err` holds the reason it does not. With
/// `QK_REQUIRE_DOCKER=1` a missing Docker fails the tests instead of skipping them.
pub fn docker_available() -> Result<(), String> {
    static AVAILABLE: OnceLock<Result<(), String>> = OnceLock::new();
    AVAILABLE
        .get_or_init(|| {
            let out = docker_blocking(&["info", "--format", "{{.ServerVersion}}"], secs(30));
            if out.ok() && !out.stdout.trim().is_empty() {
                Ok(())
            } else {
                let reason = format!("{}{}", out.stderr.trim(), out.stdout.trim());
                Err(reason
                    .lines()
                    .next()
                    .unwrap_or("docker info failed")
                    .to_owned())
            }
        })
        .clone()
}

/// The Compose command: `docker compose` (v2) or else `docker-compose` (v1).
pub fn compose_command() -> Result<Vec<String>, String> {
    static COMPOSE: OnceLock<Result<Vec<String>, String>> = OnceLock::new();
    COMPOSE
        .get_or_init(|| {
            if docker_blocking(&["compose", "version"], secs(30)).ok() {
                return Ok(strings(&["docker", "compose"]));
            }
            let v1 = run_blocking(
                "docker-compose",
                &strings(&["version"]),
                &[],
                &repo(),
                secs(30),
            );
            if v1.ok() {
                Ok(strings(&["docker-compose"]))
            } else {
                Err(format!(
                    "neither `docker compose` nor `docker-compose` runs: {}",
                    v1.stderr.trim()
                ))
            }
        })
        .clone()
}

/// Prints the skip line and returns true when the tests cannot run here.
pub fn skip(needs_compose: bool) -> bool {
    let reason = match docker_available() {
        Err(reason) => Some(format!("docker not available: {reason}")),
        Ok(()) if needs_compose => compose_command().err(),
        Ok(()) => None,
    };
    match reason {
        None => false,
        Some(reason) => {
            if std::env::var("QK_REQUIRE_DOCKER").is_ok_and(|v| v == "1") {
                panic!("QK_REQUIRE_DOCKER=1 but {reason}");
            }
            println!("SKIPPED: {reason}");
            true
        }
    }
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The test image, built from this test build's binary by deploy/image/build.sh unless
/// the tag already carries that binary (its label holds the binary's SHA-256).
pub fn ensure_image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    sweep_stale();
    IMAGE
        .get_or_init(|| {
            let tag = image_tag();
            let bin = binary();
            let sum = run_blocking(
                "sha256sum",
                &[bin.display().to_string()],
                &[],
                &repo(),
                secs(120),
            );
            assert!(sum.ok(), "sha256sum {}: {}", bin.display(), sum.stderr);
            let sha = sum
                .stdout
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_owned();
            let label = docker_blocking(
                &[
                    "image",
                    "inspect",
                    "--format",
                    "{{index .Config.Labels \"org.quantykube.binary-sha256\"}}",
                    &tag,
                ],
                secs(30),
            );
            if label.ok() && label.stdout.trim() == sha {
                println!("image {tag} already holds {}", bin.display());
                return tag;
            }
            let started = Instant::now();
            let out = run_blocking(
                "deploy/image/build.sh",
                &strings(&["debug"]),
                &[
                    ("BIN".to_owned(), bin.display().to_string()),
                    ("IMAGE".to_owned(), tag.clone()),
                ],
                &repo(),
                secs(300),
            );
            assert!(
                out.ok(),
                "deploy/image/build.sh failed ({:?}):\n{}\n{}",
                out.code,
                out.stdout,
                out.stderr
            );
            println!(
                "built {tag} from {} in {:.1?}",
                bin.display(),
                started.elapsed()
            );
            tag
        })
        .clone()
}

/// Free loopback ports for a project's published ports (taken by binding port 0).
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("bind a free port"))
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().expect("local addr").port())
        .collect()
}

/// Client TLS material for a project started with deploy/compose/tls.yml.
#[derive(Clone)]
pub struct Tls {
    pub dir: PathBuf,
}

impl Tls {
    pub fn options(&self) -> TlsOptions {
        let read = |name: &str| {
            std::fs::read(self.dir.join(name))
                .unwrap_or_else(|e| panic!("read {}: {e}", self.dir.join(name).display()))
        };
        TlsOptions::new()
            .ca_certificate(Certificate::from_pem(read("ca.crt")))
            .identity(Identity::from_pem(read("client.crt"), read("client.key")))
            .domain_name("localhost")
    }
}

/// A compose project of our own: its own name, container names and loopback ports, so
/// that it never touches a cluster the user runs from the same files. Dropping it runs
/// `down -v` (containers, volumes, network), printing the members' logs first when the
/// test is failing.
pub struct Project {
    pub name: String,
    pub prefix: String,
    compose: Vec<String>,
    files: Vec<PathBuf>,
    env: Vec<(String, String)>,
    /// Member ordinal -> (client port, metrics port) on 127.0.0.1.
    pub ports: BTreeMap<usize, (u16, u16)>,
    pub tls: Option<Tls>,
    /// Whether `up` ran: only then does Drop print logs on failure.
    started: bool,
}

pub const BASE_FILE: &str = "deploy/docker-compose.yml";
pub const SCALE_FILE: &str = "deploy/compose/scale-5.yml";
pub const TLS_FILE: &str = "deploy/compose/tls.yml";

impl Project {
    /// A project named `qkdt<pid>-<scenario>` (two test runs on one machine never share
    /// one), for members 0..5 (3 and 4 only exist with deploy/compose/scale-5.yml), with
    /// `QK_REPLICAS=3` whatever the caller's environment says (`set_env` changes it).
    pub fn new(scenario: &str, tls: Option<Tls>) -> Project {
        let compose = compose_command().expect("compose checked by skip()");
        let image = ensure_image();
        let name = format!("{}-{scenario}", run_tag());
        let prefix = format!("{name}-");
        let mut files = vec![repo().join(BASE_FILE), repo().join(SCALE_FILE)];
        let mut env = vec![
            ("QK_IMAGE".to_owned(), image),
            ("QK_CONTAINER_PREFIX".to_owned(), prefix.clone()),
            ("QK_REPLICAS".to_owned(), "3".to_owned()),
        ];
        if let Some(tls) = &tls {
            files.push(repo().join(TLS_FILE));
            env.push(("QK_CERTS_DIR".to_owned(), tls.dir.display().to_string()));
        }
        let free = free_ports(10);
        let mut ports = BTreeMap::new();
        for ordinal in 0..5 {
            let (client, metrics) = (free[2 * ordinal], free[2 * ordinal + 1]);
            env.push((format!("QK_CLIENT_PORT_{ordinal}"), client.to_string()));
            env.push((format!("QK_METRICS_PORT_{ordinal}"), metrics.to_string()));
            ports.insert(ordinal, (client, metrics));
        }
        let project = Project {
            name,
            prefix,
            compose,
            files,
            env,
            ports,
            tls,
            started: false,
        };
        project.down_blocking();
        project
    }

    fn compose_args(&self, files: &[PathBuf], args: &[&str]) -> (String, Vec<String>) {
        let mut all: Vec<String> = self.compose[1..].to_vec();
        all.push("-p".to_owned());
        all.push(self.name.clone());
        for file in files {
            all.push("-f".to_owned());
            all.push(file.display().to_string());
        }
        all.extend(strings(args));
        (self.compose[0].clone(), all)
    }

    /// The files a command reads: the base file, plus the TLS override when the project
    /// has TLS, plus the scale file when `scaled`.
    fn files(&self, scaled: bool) -> Vec<PathBuf> {
        self.files
            .iter()
            .filter(|file| scaled || !file.ends_with(SCALE_FILE))
            .cloned()
            .collect()
    }

    fn compose_blocking(&self, files: &[PathBuf], args: &[&str], deadline: Duration) -> Out {
        let (program, args) = self.compose_args(files, args);
        run_blocking(&program, &args, &self.env, &repo(), deadline)
    }

    /// `compose <args>` over the base file (and TLS), or with the scale file too.
    pub async fn compose(&self, scaled: bool, args: &[&str]) -> Out {
        let files = self.files(scaled);
        let (program, args) = self.compose_args(&files, args);
        let env = self.env.clone();
        tokio::task::spawn_blocking(move || run_blocking(&program, &args, &env, &repo(), secs(180)))
            .await
            .expect("compose thread")
    }

    pub async fn compose_ok(&mut self, scaled: bool, args: &[&str]) -> String {
        if args.first() == Some(&"up") {
            self.started = true;
        }
        let out = self.compose(scaled, args).await;
        assert!(
            out.ok(),
            "compose {} failed ({:?}):\n{}\n{}",
            args.join(" "),
            out.code,
            out.stdout,
            out.stderr
        );
        out.stdout
    }

    /// Sets a variable the compose files read (e.g. `QK_REPLICAS`) for later commands.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// `up -d` of the three base members.
    pub async fn up(&mut self) {
        self.compose_ok(false, &["up", "-d"]).await;
    }

    pub fn container(&self, ordinal: usize) -> String {
        format!("{}qk-{ordinal}", self.prefix)
    }

    pub fn service(ordinal: usize) -> String {
        format!("qk-{ordinal}")
    }

    pub fn volume(&self, ordinal: usize) -> String {
        format!("{}_data-qk-{ordinal}", self.name)
    }

    pub fn network(&self) -> String {
        format!("{}_cluster", self.name)
    }

    pub fn client_port(&self, ordinal: usize) -> u16 {
        self.ports[&ordinal].0
    }

    pub fn metrics_addr(&self, ordinal: usize) -> String {
        format!("127.0.0.1:{}", self.ports[&ordinal].1)
    }

    pub fn endpoint(&self, ordinal: usize) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port(ordinal))
    }

    pub fn endpoints(&self, members: &[usize]) -> Vec<String> {
        members.iter().map(|&m| self.endpoint(m)).collect()
    }

    pub fn connect_options(&self) -> ConnectOptions {
        let options = client_options();
        match &self.tls {
            Some(tls) => options.with_tls(tls.options()),
            None => options,
        }
    }

    /// A client of one member (lazy: a stopped member fails its calls, not this).
    pub async fn client(&self, ordinal: usize) -> Client {
        connect(&[self.endpoint(ordinal)], self.connect_options()).await
    }

    pub async fn try_client(&self, ordinal: usize) -> Result<Client, String> {
        try_connect(&[self.endpoint(ordinal)], self.connect_options()).await
    }

    /// The last lines of each member's log.
    pub fn logs_blocking(&self, tail: usize) -> String {
        let files = self.files(true);
        let out = self.compose_blocking(
            &files,
            &["logs", "--no-color", "--tail", &tail.to_string()],
            secs(60),
        );
        format!("{}{}", out.stdout, out.stderr)
    }

    fn down_blocking(&self) {
        let files = self.files(true);
        let out = self.compose_blocking(
            &files,
            &["down", "-v", "--remove-orphans", "-t", "5"],
            secs(120),
        );
        if !out.ok() {
            eprintln!("compose down of {} failed: {}", self.name, out.stderr);
        }
        // Whatever the files no longer name (a container or volume made by hand).
        remove_project_resources(&self.name);
    }
}

/// `qkdt<pid>`: what this test process's projects and containers are named after.
pub fn run_tag() -> String {
    format!("qkdt{}", std::process::id())
}

/// Removes the containers, volumes and network of compose project `name` by label.
fn remove_project_resources(name: &str) {
    let label = format!("label=com.docker.compose.project={name}");
    for (kind, list) in [
        ("container", vec!["ps", "-aq", "--filter", &label]),
        ("volume", vec!["volume", "ls", "-q", "--filter", &label]),
        ("network", vec!["network", "ls", "-q", "--filter", &label]),
    ] {
        let ids = docker_blocking(&list, secs(30));
        for id in ids.stdout.split_whitespace() {
            let rm = match kind {
                "container" => vec!["rm", "-f", "-v", id],
                "volume" => vec!["volume", "rm", "-f", id],
                _ => vec!["network", "rm", id],
            };
            docker_blocking(&rm, secs(60));
        }
    }
}

/// Once per test process: removes what test runs that no longer exist left behind (a
/// run killed before its guards ran), found by the `qkdt<pid>` in the names.
fn sweep_stale() {
    static SWEPT: OnceLock<()> = OnceLock::new();
    SWEPT.get_or_init(|| {
        let stale = |name: &str| {
            name.strip_prefix("qkdt")
                .and_then(|rest| rest.split_once('-'))
                .and_then(|(pid, _)| pid.parse::<u32>().ok())
                .is_some_and(|pid| {
                    pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
                })
        };
        let format = "{{.Label \"com.docker.compose.project\"}}";
        let mut projects = std::collections::BTreeSet::new();
        for list in [
            vec![
                "ps",
                "-a",
                "--filter",
                "label=com.docker.compose.project",
                "--format",
                format,
            ],
            vec![
                "volume",
                "ls",
                "--filter",
                "label=com.docker.compose.project",
                "--format",
                format,
            ],
            vec![
                "network",
                "ls",
                "--filter",
                "label=com.docker.compose.project",
                "--format",
                format,
            ],
        ] {
            let out = docker_blocking(&list, secs(30));
            projects.extend(
                out.stdout
                    .split_whitespace()
                    .filter(|n| stale(n))
                    .map(str::to_owned),
            );
        }
        for project in projects {
            println!("removing {project}, left behind by a test run that is gone");
            remove_project_resources(&project);
        }
        let containers = docker_blocking(
            &[
                "ps",
                "-a",
                "--filter",
                "name=^qkdt",
                "--format",
                "{{.Names}}",
            ],
            secs(30),
        );
        for name in containers.stdout.split_whitespace().filter(|n| stale(n)) {
            println!("removing container {name}, left behind by a test run that is gone");
            docker_blocking(&["rm", "-f", "-v", name], secs(60));
        }
    });
}

impl Drop for Project {
    fn drop(&mut self) {
        if std::thread::panicking() && self.started {
            eprintln!(
                "---- logs of project {} ----\n{}",
                self.name,
                self.logs_blocking(150)
            );
        }
        self.down_blocking();
    }
}

/// Deadlines on every call, and HTTP/2 keepalives so that a paused or cut-off member is
/// noticed in seconds rather than never.
pub fn client_options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(secs(2))
        .with_timeout(secs(5))
        .with_keep_alive(secs(2), secs(2))
        .with_keep_alive_while_idle(true)
}

pub async fn connect(endpoints: &[String], options: ConnectOptions) -> Client {
    try_connect(endpoints, options)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A client of `endpoints` (the connection itself is made at the first call).
pub async fn try_connect(endpoints: &[String], options: ConnectOptions) -> Result<Client, String> {
    tokio::time::timeout(secs(10), Client::connect(endpoints, Some(options)))
        .await
        .map_err(|_| format!("connect to {endpoints:?} timed out"))?
        .map_err(|e| format!("connect to {endpoints:?}: {e}"))
}

/// `GET path` over plain HTTP/1.1: the status code and body, or `None` when the member
/// does not answer within 3 s.
pub async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let text = String::from_utf8_lossy(&response).into_owned();
        let code = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_owned())
            .unwrap_or_default();
        Some((code, body))
    };
    tokio::time::timeout(secs(3), exchange).await.ok().flatten()
}

/// Every test's hard bound: a test that runs longer fails (and its project is removed).
pub const TEST_LIMIT: Duration = Duration::from_secs(170);

/// Runs a test's body within [`TEST_LIMIT`]. The body stays alive while the failure
/// unwinds, so that its projects print their members' logs before they are removed.
pub async fn bounded<T>(body: impl std::future::Future<Output = T>) -> T {
    let mut body = std::pin::pin!(body);
    match tokio::time::timeout(TEST_LIMIT, &mut body).await {
        Ok(value) => value,
        Err(_) => panic!("the test ran past its bound of {TEST_LIMIT:?}"),
    }
}

/// Polls `check` every 250 ms until it returns `Some`, panicking with `what` and the last
/// state it described after `deadline`.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(value) => return value,
            Err(state) => state,
        };
        if started.elapsed() > deadline {
            panic!("{what}: not reached within {deadline:?}; last: {last}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
