//! How a cluster is started ([`ClusterOptions`]): its target, members and flags,
//! per-member flags and preparation ([`MemberSpec`], [`MemberArgs`],
//! [`MemberPrepare`]), and the TLS of the harness's own clients ([`ClientTls`]).

use std::fmt;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use etcd_client::{Certificate, Identity, TlsOptions};

use super::{Cluster, Target};

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

pub(super) type MemberPrepareFn = dyn Fn(&MemberSpec) + Send + Sync;

/// Work on one member's directory before it first starts.
#[derive(Clone)]
pub struct MemberPrepare(pub(super) Arc<MemberPrepareFn>);

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

pub(super) type MemberArgsFn = dyn Fn(&MemberSpec) -> Vec<String> + Send + Sync;

/// A function giving one member's own flags or URLs.
#[derive(Clone)]
pub struct MemberArgs(pub(super) Arc<MemberArgsFn>);

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
