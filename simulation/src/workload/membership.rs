//! [`MembershipClient`]: an operator changing the cluster's membership while it serves,
//! with etcd's Cluster API as `etcdctl member ...` uses it.
//!
//! The client's seed fixes a few [`MembershipOp`]s and the pause before each; what each
//! one is about (which follower, which voter the leadership moves to, which member a
//! request is sent to) is decided when it runs, from the leader's member list, so that
//! the cluster keeps one to five voters and at most one learner: an operation the
//! cluster's size does not allow is replaced by one it does (an add by a removal, a
//! removal by an add), and the log says so. The operations:
//!
//! - add a learner (MemberAdd with `is_learner`), start it on a new host (`n4`, `n5`,
//!   ...), and promote it, asking again while it is not yet in sync with the leader;
//! - add a voter and start it;
//! - remove a follower, or the leader;
//! - replace a follower: remove it, wait for its process to stop, wipe its data, add
//!   it again with the same peer URL and start it on the same host with
//!   `--initial-cluster-state existing`;
//! - move the leadership to another voter (MoveLeader);
//! - switch a member's peer URL between its host name and its host's address
//!   (MemberUpdate: both reach the same turmoil host).
//!
//! Requests go to a seed-chosen voter (followers relay them to the leader); a request
//! whose connection could not even be made goes to the next one. Every change is
//! recorded in a [`MembershipLog`] with its invocation and completion times and its
//! outcome (done with the answer's member list, refused with etcd's code and message,
//! or unknown); a removal the cluster refused (etcd's `--strict-reconfig-check`, say)
//! is an expected outcome. After an unknown outcome the client reads the member list
//! again to learn what happened. Starting and wiping hosts goes through the harness
//! ([`HostRequests`]); the [`Directory`] learns of each member's arrival and removal,
//! so that the other clients reach new members, and keep removed ones in their
//! endpoint lists as a real client does. At the end the client reconciles: a removal
//! or addition of unknown outcome that the cluster carried out after all is reflected
//! too. It must never judge what it sees (the membership checker does) and never
//! inject faults.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use etcd_client::{Client, MemberAddOptions};

use crate::client::{self, ClientOptions};
use crate::cluster::{Directory, HostRequest, HostRequests};
use crate::error::SimError;
use crate::history::{
    self, ChangeOutcome, ListedMember, MemberChange, MembershipEntry, MembershipLog,
};
use crate::leaders::PartialIsolation;
use crate::node::PEER_PORT;
use crate::rng::SimRng;

/// One kind of membership operation; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum MembershipOp {
    AddLearner,
    AddVoter,
    RemoveFollower,
    RemoveLeader,
    Replace,
    MoveLeader,
    UpdatePeerUrl,
}

impl fmt::Display for MembershipOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MembershipOp::AddLearner => "add learner and promote",
            MembershipOp::AddVoter => "add voter",
            MembershipOp::RemoveFollower => "remove follower",
            MembershipOp::RemoveLeader => "remove leader",
            MembershipOp::Replace => "replace follower",
            MembershipOp::MoveLeader => "move leader",
            MembershipOp::UpdatePeerUrl => "update peer URL",
        })
    }
}

/// One operation of the client's plan, after a pause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MembershipStep {
    /// How long the client waits before it, after the previous one ended.
    pub after: Duration,
    pub op: MembershipOp,
}

/// A client changing the membership; see the module docs.
#[derive(Clone, Debug)]
pub struct MembershipClient {
    /// The client's name in its log (its turmoil host name, by convention).
    pub name: String,
    /// The members (the client reads who they are, and records arrivals and
    /// removals).
    pub directory: Directory,
    /// How the client has hosts started and wiped.
    pub requests: HostRequests,
    /// Seeds the client's choices: targets, the members asked.
    pub seed: u64,
    pub steps: Vec<MembershipStep>,
    /// The most voters the cluster may have (etcd's clusters: five is the common top).
    pub max_voters: usize,
    /// Whether the client adds members (and so replaces them). Off, an add or a
    /// replacement becomes a removal (or a peer URL update in a one-voter cluster).
    pub joins: bool,
    /// The most hosts the cluster may ever have had (names `n1` up to this).
    pub max_hosts: usize,
    /// Promotions of a learner not yet in sync are asked again this often, this many
    /// times.
    pub promote_every: Duration,
    pub promote_attempts: usize,
    /// How long a replacement waits for the removed member's process to stop before
    /// wiping it anyway (the membership checker reports it).
    pub exit_wait: Duration,
    /// If set, a replacement takes the follower the last partial isolation of a
    /// leader spared, while the leader's list has it as a follower (a targeted
    /// scenario's choice: its new process must reach the cut-off leader).
    pub replace_spared: Option<PartialIsolation>,
    pub options: ClientOptions,
}

impl MembershipClient {
    /// A client named `name` with no steps yet, at most five voters and nine hosts,
    /// promoting every 300 ms up to 40 times, waiting 15 s for a removed member to stop,
    /// with 8 s request deadlines (a change commits twice, through joint consensus).
    pub fn new(
        name: impl Into<String>,
        directory: Directory,
        requests: HostRequests,
        seed: u64,
    ) -> Self {
        MembershipClient {
            name: name.into(),
            directory,
            requests,
            seed,
            steps: Vec::new(),
            max_voters: 5,
            joins: true,
            max_hosts: 9,
            promote_every: Duration::from_millis(300),
            promote_attempts: 40,
            exit_wait: Duration::from_secs(15),
            replace_spared: None,
            options: ClientOptions {
                request_timeout: Duration::from_secs(8),
                connect_timeout: Duration::from_secs(1),
                keepalive: Duration::from_secs(1),
            },
        }
    }

    /// Runs the steps, then reconciles, recording into `log`. Must run inside a turmoil
    /// host whose simulation serves [`HostRequests`]. The cluster's errors are
    /// recorded, not returned.
    pub async fn run(self, log: MembershipLog) -> Result<(), SimError> {
        let mut run = Run {
            rng: SimRng::new(self.seed, 0),
            clients: BTreeMap::new(),
            log: &log,
            client: &self,
        };
        for step in &self.steps {
            tokio::time::sleep(step.after).await;
            run.step(step.op).await;
        }
        run.reconcile().await;
        Ok(())
    }
}

/// The leader's member list, as the client reads it before each operation.
#[derive(Clone, Debug)]
struct View {
    /// The leader's id.
    leader: u64,
    members: Vec<ListedMember>,
}

impl View {
    fn voters(&self) -> impl Iterator<Item = &ListedMember> {
        self.members.iter().filter(|m| !m.is_learner)
    }

    fn learners(&self) -> impl Iterator<Item = &ListedMember> {
        self.members.iter().filter(|m| m.is_learner)
    }

    fn lists(&self, id: u64) -> bool {
        self.members.iter().any(|m| m.id == id)
    }

    fn is_learner(&self, id: u64) -> bool {
        self.members.iter().any(|m| m.id == id && m.is_learner)
    }
}

/// One run of a [`MembershipClient`].
struct Run<'a> {
    client: &'a MembershipClient,
    rng: SimRng,
    /// A connection per member name, dialled on first use and after an error.
    clients: BTreeMap<String, Client>,
    log: &'a MembershipLog,
}

impl Run<'_> {
    async fn step(&mut self, planned: MembershipOp) {
        let Some(view) = self.view().await else {
            self.log.note(format!(
                "skipped {planned}: no leader's member list within 10s"
            ));
            return;
        };
        let Some(op) = self.feasible(planned, &view) else {
            self.log.note(format!(
                "skipped {planned}: the cluster's size allows nothing"
            ));
            return;
        };
        if op != planned {
            self.log.note(format!(
                "{op} instead of {planned}: {} voters, {} learners",
                view.voters().count(),
                view.learners().count()
            ));
        }
        match op {
            MembershipOp::AddLearner => {
                let name = self.fresh_name();
                if let Some(id) = self.add(&view, &name, true).await {
                    self.promote(&name, id).await;
                }
            }
            MembershipOp::AddVoter => {
                let name = self.fresh_name();
                self.add(&view, &name, false).await;
            }
            MembershipOp::RemoveFollower => {
                if let Some((name, id)) = self.follower(&view) {
                    self.remove(&view, &name, id).await;
                }
            }
            MembershipOp::RemoveLeader => {
                if let Some(name) = self.host_of_id(&view, view.leader) {
                    self.remove(&view, &name, view.leader).await;
                }
            }
            MembershipOp::Replace => {
                let target = self.spared_follower(&view).or_else(|| self.follower(&view));
                if let Some((name, id)) = target {
                    self.replace(&view, &name, id).await;
                }
            }
            MembershipOp::MoveLeader => self.move_leader(&view).await,
            MembershipOp::UpdatePeerUrl => self.update_peer_url(&view).await,
        }
    }

    /// `planned`, or what replaces it in a cluster of this size, or nothing.
    fn feasible(&self, planned: MembershipOp, view: &View) -> Option<MembershipOp> {
        let voters = view.voters().count();
        let learners = view.learners().count();
        let can_add = self.client.joins
            && voters < self.client.max_voters
            && self.client.directory.len() < self.client.max_hosts;
        let can_remove = voters >= 2;
        let removal = can_remove.then_some(MembershipOp::RemoveFollower);
        let addition = can_add.then_some(MembershipOp::AddVoter);
        let update = Some(MembershipOp::UpdatePeerUrl);
        match planned {
            MembershipOp::AddLearner if can_add && learners == 0 => Some(planned),
            MembershipOp::AddLearner | MembershipOp::AddVoter => addition.or(removal).or(update),
            MembershipOp::Replace if !self.client.joins => removal.or(update),
            MembershipOp::RemoveFollower
            | MembershipOp::RemoveLeader
            | MembershipOp::Replace
            | MembershipOp::MoveLeader => can_remove.then_some(planned).or(addition).or(update),
            MembershipOp::UpdatePeerUrl => Some(planned),
        }
    }

    /// The next host name never used: `n4` after `n1..n3`.
    fn fresh_name(&self) -> String {
        format!("n{}", self.client.directory.len() + 1)
    }

    /// MemberAdd of `http://{name}:2380`, then the host started as a joining member;
    /// the new member's id, if it was added.
    async fn add(&mut self, view: &View, name: &str, learner: bool) -> Option<u64> {
        let peer_url = format!("http://{name}:{PEER_PORT}");
        let change = MemberChange::Add {
            name: name.to_owned(),
            peer_url: peer_url.clone(),
            learner,
        };
        let mut outcome = self.change(change.clone(), view, None).await;
        if let ChangeOutcome::Refused { message, .. } = &outcome {
            // The id is computed from the peer URLs and the time in seconds: a member
            // replaced twice within a second would get its removed id back.
            if message.contains("member not found") {
                tokio::time::sleep(Duration::from_millis(1100)).await;
                outcome = self.change(change, view, None).await;
            }
        }
        let id = match outcome {
            ChangeOutcome::Done { id, .. } => id,
            ChangeOutcome::Refused { .. } => return None,
            ChangeOutcome::Unknown(_) => {
                let found = self
                    .view()
                    .await?
                    .members
                    .into_iter()
                    .find(|m| m.peer_urls.contains(&peer_url))?;
                self.log
                    .note(format!("{name} ({:x}) was added after all", found.id));
                found.id
            }
        };
        self.join(name).await;
        Some(id)
    }

    /// Has the harness start `name` as a joining member.
    async fn join(&mut self, name: &str) {
        let answer = self
            .client
            .requests
            .ask(HostRequest::Join {
                name: name.to_owned(),
            })
            .await;
        self.log.note(match answer {
            Ok(did) => did,
            Err(why) => format!("could not start {name}: {why}"),
        });
    }

    /// Promotes learner `id`, asking again while it is not yet in sync.
    async fn promote(&mut self, name: &str, id: u64) {
        for _ in 0..self.client.promote_attempts {
            tokio::time::sleep(self.client.promote_every).await;
            let Some(view) = self.view().await else {
                continue;
            };
            // A list without the learner comes from a member that has not applied its
            // addition: a deposed leader that does not know it yet, say. Ask again.
            if !view.lists(id) {
                continue;
            }
            if !view.is_learner(id) {
                return;
            }
            let change = MemberChange::Promote {
                name: name.to_owned(),
                id,
            };
            match self.change(change, &view, Some(name)).await {
                ChangeOutcome::Done { .. } => return,
                ChangeOutcome::Refused { message, .. } if !message.contains("in sync") => return,
                ChangeOutcome::Refused { .. } | ChangeOutcome::Unknown(_) => {}
            }
        }
    }

    /// MemberRemove of `name` (member `id`); true if it is no longer a member.
    async fn remove(&mut self, view: &View, name: &str, id: u64) -> bool {
        // Its process may stop as soon as it applies its removal, before the answer.
        self.client.directory.expect_exit(name, true);
        let change = MemberChange::Remove {
            name: name.to_owned(),
            id,
        };
        let removed = match self.change(change, view, Some(name)).await {
            ChangeOutcome::Done { .. } => true,
            ChangeOutcome::Refused { .. } => {
                self.client.directory.expect_exit(name, false);
                false
            }
            // The removal may still complete; reconcile() looks again at the end.
            ChangeOutcome::Unknown(_) => self.view().await.is_some_and(|v| !v.lists(id)),
        };
        if removed {
            self.client.directory.retire(name);
            self.log
                .note(format!("{name} ({id:x}) is no longer a member"));
        }
        removed
    }

    /// etcd's "replace a failed member": remove it, let it stop, wipe its data, add it
    /// again with the same peer URL, start it with `--initial-cluster-state existing`.
    async fn replace(&mut self, view: &View, name: &str, id: u64) {
        if !self.remove(view, name, id).await {
            return;
        }
        let since = history::now();
        while self.client.directory.is_running(name)
            && history::now() - since < self.client.exit_wait
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let waited = history::now() - since;
        self.log.note(if self.client.directory.is_running(name) {
            format!("{name} still runs {waited:?} after its removal")
        } else {
            format!("{name} is not running ({waited:?} after its removal)")
        });
        let wiped = self
            .client
            .requests
            .ask(HostRequest::Wipe {
                name: name.to_owned(),
            })
            .await;
        match wiped {
            Ok(did) => self.log.note(format!("wiped {name}: {did}")),
            Err(why) => {
                self.log.note(format!("could not wipe {name}: {why}"));
                return;
            }
        }
        let Some(view) = self.view().await else {
            self.log
                .note(format!("{name} not added again: no leader's member list"));
            return;
        };
        self.add(&view, name, false).await;
    }

    /// MoveLeader to a seed-chosen voter other than the leader.
    async fn move_leader(&mut self, view: &View) {
        let targets: Vec<&ListedMember> = view.voters().filter(|m| m.id != view.leader).collect();
        let Some(target) = self.rng.pick(&targets).map(|m| (*m).clone()) else {
            return;
        };
        let Some(name) = self.host_of(&target) else {
            return;
        };
        let change = MemberChange::MoveLeader {
            name,
            id: target.id,
        };
        self.change(change, view, None).await;
    }

    /// MemberUpdate of a seed-chosen member's peer URL: its host name's URL becomes its
    /// address's, or back.
    async fn update_peer_url(&mut self, view: &View) {
        let members = view.members.clone();
        let Some(member) = self.rng.pick(&members).cloned() else {
            return;
        };
        let Some(entry) = self
            .host_of(&member)
            .and_then(|name| self.client.directory.entry(&name))
        else {
            return;
        };
        let peer_url = if member.peer_urls.contains(&entry.peer_url) {
            entry.peer_url_by_address.clone()
        } else {
            entry.peer_url.clone()
        };
        let change = MemberChange::Update {
            name: entry.name,
            id: member.id,
            peer_url,
        };
        self.change(change, view, None).await;
    }

    /// At the end: whatever the cluster did about changes of unknown outcome is
    /// reflected in the directory (a member removed after all is retired, one added
    /// after all is started), and the final member list goes into the log.
    async fn reconcile(&mut self) {
        for _ in 0..10 {
            let Some(view) = self.view().await else {
                continue;
            };
            let mut settled = true;
            for (name, _) in self.client.directory.current() {
                let listed = view
                    .members
                    .iter()
                    .any(|m| self.host_of(m).as_deref() == Some(name.as_str()));
                if !listed {
                    settled = false;
                    self.client.directory.retire(&name);
                    self.log
                        .note(format!("{name} is no longer a member (found at the end)"));
                }
            }
            for member in &view.members {
                let name = self.host_of(member);
                if name
                    .as_deref()
                    .is_some_and(|n| self.client.directory.entry(n).is_none())
                {
                    settled = false;
                    self.log
                        .note(format!("{member} was added after all (found at the end)"));
                    self.join(name.as_deref().unwrap_or_default()).await;
                }
            }
            if settled {
                let listed: Vec<String> = view.members.iter().map(ToString::to_string).collect();
                self.log
                    .note(format!("final members: {}", listed.join("; ")));
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.log.note("the member list did not settle");
    }

    /// A seed-chosen voter other than the leader: its host name and id.
    fn follower(&mut self, view: &View) -> Option<(String, u64)> {
        let followers: Vec<ListedMember> = view
            .voters()
            .filter(|m| m.id != view.leader)
            .cloned()
            .collect();
        let follower = self.rng.pick(&followers)?.clone();
        Some((self.host_of(&follower)?, follower.id))
    }

    /// The follower the last partial isolation spared, if the client is to replace it
    /// and `view` has it as a follower: its host name and id.
    fn spared_follower(&self, view: &View) -> Option<(String, u64)> {
        let (_, spared) = self.client.replace_spared.as_ref()?.get()?;
        let member = view
            .voters()
            .filter(|m| m.id != view.leader)
            .find(|m| self.host_of(m).as_deref() == Some(spared.as_str()))?;
        Some((spared, member.id))
    }

    /// The host a listed member runs on: its published name, or the host its peer URL
    /// names (a member that has not started yet has no name).
    fn host_of(&self, member: &ListedMember) -> Option<String> {
        if !member.name.is_empty() {
            return Some(member.name.clone());
        }
        member
            .peer_urls
            .iter()
            .find_map(|url| self.client.directory.name_of_url(url))
    }

    fn host_of_id(&self, view: &View, id: u64) -> Option<String> {
        let member = view.members.iter().find(|m| m.id == id)?;
        self.host_of(member)
    }

    /// The leader's member list: the first current member (in a seed-chosen order)
    /// that says it leads answers it. `None` if none does within 10 s.
    async fn view(&mut self) -> Option<View> {
        let deadline = history::now() + Duration::from_secs(10);
        loop {
            let mut members = self.client.directory.current();
            self.rng.shuffle(&mut members);
            for (name, url) in members {
                if let Some(view) = self.view_from(&name, &url).await {
                    return Some(view);
                }
            }
            if history::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn view_from(&mut self, name: &str, url: &str) -> Option<View> {
        let budget = Duration::from_secs(2);
        let asked = async {
            let client = self.connect(name, url).await.ok()?;
            let status = client.status().await.ok()?;
            let id = status.header().map_or(0, |h| h.member_id());
            if status.leader() == 0 || status.leader() != id {
                return None;
            }
            let list = client.member_list().await.ok()?;
            let mut members: Vec<ListedMember> = list
                .members()
                .iter()
                .map(ListedMember::from_member)
                .collect();
            members.sort();
            Some(View {
                leader: id,
                members,
            })
        };
        let view = tokio::time::timeout(budget, asked).await.ok().flatten();
        if view.is_none() {
            self.clients.remove(name);
        }
        view
    }

    async fn connect(&mut self, name: &str, url: &str) -> Result<&mut Client, SimError> {
        if !self.clients.contains_key(name) {
            let client = client::connect_with(url, &self.client.options).await?;
            self.clients.insert(name.to_owned(), client);
        }
        self.clients
            .get_mut(name)
            .ok_or_else(|| SimError::Invalid(format!("no client for {name}")))
    }

    /// Sends `change` to a seed-chosen voter of `view` (not `about`, the member the
    /// change removes or promotes), moving to the next one if a connection cannot be
    /// made, and records it.
    async fn change(
        &mut self,
        change: MemberChange,
        view: &View,
        about: Option<&str>,
    ) -> ChangeOutcome {
        let mut asked: Vec<String> = view
            .voters()
            .filter_map(|m| self.host_of(m))
            .filter(|name| Some(name.as_str()) != about)
            .filter(|name| self.client.directory.entry(name).is_some_and(|e| e.current))
            .collect();
        self.rng.shuffle(&mut asked);
        let invoked = history::now();
        let budget = self.client.options.request_timeout + self.client.options.connect_timeout;
        let mut last = ("nobody".to_owned(), "no member to ask".to_owned());
        for name in asked {
            let url = format!("http://{name}:{}", crate::node::CLIENT_PORT);
            let client = match self.connect(&name, &url).await {
                Ok(client) => client,
                Err(error) => {
                    // Never sent: the next member may take it.
                    last = (name, error.to_string());
                    continue;
                }
            };
            let outcome = match tokio::time::timeout(budget, send(client, &change)).await {
                Ok(Ok((id, members))) => ChangeOutcome::Done { id, members },
                Ok(Err(error)) => classify(error),
                Err(_) => ChangeOutcome::Unknown("client deadline".into()),
            };
            if !outcome.is_done() {
                self.clients.remove(&name);
            }
            self.log.record(MembershipEntry::Change {
                change,
                asked: name,
                invoked,
                completed: history::now(),
                outcome: outcome.clone(),
            });
            return outcome;
        }
        let outcome = ChangeOutcome::Refused {
            code: "not sent".into(),
            message: last.1,
        };
        self.log.record(MembershipEntry::Change {
            change,
            asked: last.0,
            invoked,
            completed: history::now(),
            outcome: outcome.clone(),
        });
        outcome
    }
}

/// Sends one change: the id it was about (for an add, the new member's) and the
/// member list in the answer.
async fn send(
    client: &mut Client,
    change: &MemberChange,
) -> Result<(u64, Vec<ListedMember>), etcd_client::Error> {
    let listed = |members: &[etcd_client::Member]| {
        let mut listed: Vec<ListedMember> = members.iter().map(ListedMember::from_member).collect();
        listed.sort();
        listed
    };
    match change {
        MemberChange::Add {
            peer_url, learner, ..
        } => {
            let options = learner.then(|| MemberAddOptions::new().with_is_learner());
            let response = client.member_add([peer_url.as_str()], options).await?;
            let id = response.member().map_or(0, |m| m.id());
            Ok((id, listed(response.member_list())))
        }
        MemberChange::Promote { id, .. } => {
            let response = client.member_promote(*id).await?;
            Ok((*id, listed(response.members())))
        }
        MemberChange::Remove { id, .. } => {
            let response = client.member_remove(*id).await?;
            Ok((*id, listed(response.members())))
        }
        MemberChange::Update { id, peer_url, .. } => {
            let response = client.member_update(*id, vec![peer_url.clone()]).await?;
            Ok((*id, listed(response.members())))
        }
        MemberChange::MoveLeader { id, .. } => {
            client.move_leader(*id).await?;
            Ok((*id, Vec::new()))
        }
    }
}

/// A refusal by etcd's rules (the change did not happen) or an unknown outcome.
fn classify(error: etcd_client::Error) -> ChangeOutcome {
    use tonic::Code;
    match &error {
        etcd_client::Error::GRpcStatus(status) => {
            let refused = matches!(
                status.code(),
                Code::FailedPrecondition
                    | Code::NotFound
                    | Code::InvalidArgument
                    | Code::AlreadyExists
                    | Code::PermissionDenied
            ) || (status.code() == Code::Unavailable
                && status.message() == "etcdserver: unhealthy cluster");
            if refused {
                ChangeOutcome::Refused {
                    code: format!("{:?}", status.code()),
                    message: status.message().to_owned(),
                }
            } else {
                ChangeOutcome::Unknown(format!("{:?}: {}", status.code(), status.message()))
            }
        }
        other => ChangeOutcome::Unknown(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, learner: bool) -> ListedMember {
        ListedMember::fixture(id, learner)
    }

    fn run_with<'a>(client: &'a MembershipClient, log: &'a MembershipLog) -> Run<'a> {
        Run {
            client,
            rng: SimRng::new(1, 0),
            clients: BTreeMap::new(),
            log,
        }
    }

    #[test]
    fn operations_keep_one_to_five_voters_and_one_learner() {
        let directory = Directory::new();
        let client = MembershipClient::new("m", directory, HostRequests::new(), 1);
        let log = MembershipLog::new("m");
        let run = run_with(&client, &log);
        let view = |voters: u64, learners: u64| View {
            leader: 1,
            members: (1..=voters)
                .map(|id| member(id, false))
                .chain((voters + 1..=voters + learners).map(|id| member(id, true)))
                .collect(),
        };
        use MembershipOp as Op;
        assert_eq!(
            run.feasible(Op::AddLearner, &view(3, 0)),
            Some(Op::AddLearner)
        );
        assert_eq!(
            run.feasible(Op::AddLearner, &view(3, 1)),
            Some(Op::AddVoter)
        );
        assert_eq!(
            run.feasible(Op::AddVoter, &view(5, 0)),
            Some(Op::RemoveFollower)
        );
        assert_eq!(
            run.feasible(Op::AddLearner, &view(5, 0)),
            Some(Op::RemoveFollower)
        );
        assert_eq!(
            run.feasible(Op::RemoveLeader, &view(1, 0)),
            Some(Op::AddVoter)
        );
        assert_eq!(run.feasible(Op::Replace, &view(2, 0)), Some(Op::Replace));
        assert_eq!(
            run.feasible(Op::MoveLeader, &view(1, 0)),
            Some(Op::AddVoter)
        );
        assert_eq!(
            run.feasible(Op::UpdatePeerUrl, &view(1, 0)),
            Some(Op::UpdatePeerUrl)
        );
        assert_eq!(
            run.feasible(Op::RemoveFollower, &view(1, 0)),
            Some(Op::AddVoter)
        );
    }

    #[test]
    fn without_joins_adds_and_replacements_become_removals() {
        let client = MembershipClient {
            joins: false,
            ..MembershipClient::new("m", Directory::new(), HostRequests::new(), 1)
        };
        let log = MembershipLog::new("m");
        let run = run_with(&client, &log);
        let view = |voters: u64| View {
            leader: 1,
            members: (1..=voters).map(|id| member(id, false)).collect(),
        };
        use MembershipOp as Op;
        assert_eq!(
            run.feasible(Op::AddLearner, &view(3)),
            Some(Op::RemoveFollower)
        );
        assert_eq!(
            run.feasible(Op::AddVoter, &view(2)),
            Some(Op::RemoveFollower)
        );
        assert_eq!(
            run.feasible(Op::Replace, &view(3)),
            Some(Op::RemoveFollower)
        );
        assert_eq!(
            run.feasible(Op::AddVoter, &view(1)),
            Some(Op::UpdatePeerUrl)
        );
        assert_eq!(
            run.feasible(Op::RemoveLeader, &view(1)),
            Some(Op::UpdatePeerUrl)
        );
    }

    #[test]
    fn refusals_by_the_rules_are_told_from_unknown_outcomes() {
        let status = |code, message: &str| {
            etcd_client::Error::GRpcStatus(tonic::Status::new(code, message.to_owned()))
        };
        use tonic::Code;
        assert!(matches!(
            classify(status(
                Code::FailedPrecondition,
                "etcdserver: re-configuration failed due to not enough started members"
            )),
            ChangeOutcome::Refused { .. }
        ));
        assert!(matches!(
            classify(status(Code::Unavailable, "etcdserver: unhealthy cluster")),
            ChangeOutcome::Refused { .. }
        ));
        assert!(matches!(
            classify(status(Code::Unavailable, "etcdserver: request timed out")),
            ChangeOutcome::Unknown(_)
        ));
        assert!(matches!(
            classify(status(Code::Cancelled, "Timeout expired")),
            ChangeOutcome::Unknown(_)
        ));
    }
}
