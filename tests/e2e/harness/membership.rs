//! Membership changes: members that join a running cluster (or found one alone),
//! their flags and IDs, waiting for them, removing them for good, and MemberAdd and
//! MemberRemove retried while etcd calls the cluster unhealthy.

use std::net::{SocketAddrV4, TcpListener};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Member as EtcdMember, MemberAddOptions, MemberAddResponse, MemberRemoveResponse,
    StatusResponse,
};

use super::cluster::{Join, Member};
use super::ports::PORT_BLOCK;
use super::processes::member_data_dir;
use super::*;

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
