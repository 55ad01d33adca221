//! [`AuthClient`]: etcd auth under change. An administrator (as `root`) creates users
//! `u1..uN`, each with a role `r-<user>` granting readwrite on its own prefix
//! `auth/<user>/` and on the shared prefix `auth/shared/`, turns auth on, and then, at
//! seed-chosen times, takes something away and gives it back a moment later: a role's
//! permission (RoleRevokePermission, then RoleGrantPermission), a user's role
//! (UserRevokeRole, then UserGrantRole), or the user itself (UserDelete, then UserAdd
//! and UserGrantRole). Once the users are done it turns auth off again, so that the
//! end-of-run checkers read the store without a token.
//!
//! Each user ([`AuthClient::user`]) logs in (Authenticate, a simple token, on the
//! connection to each member it uses) and sends Puts, linearizable Ranges and
//! compare-and-swap Txns on its own keys and the shared ones to seed-chosen members. A
//! request refused for an invalid token (its user was deleted) logs in again before
//! the next one; a login refused waits and tries again.
//!
//! Every change goes into the [`AuthLog`] with its times and whether it surely took
//! effect; every user request goes into it with its outcome (done, permission denied,
//! invalid token, other error) and into the [`History`] as a key-value operation. It
//! must never judge what it sees (the auth checker does) and never inject faults.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Permission};

use super::execute;
use crate::client::{self, ClientOptions};
use crate::cluster::Directory;
use crate::error::SimError;
use crate::history::{
    self, Access, AdminEntry, AuthChange, AuthChangeOutcome, AuthLog, History, Op, Operation,
    Outcome, UserEntry, UserOutcome,
};
use crate::rng::SimRng;

/// The root user's password.
const ROOT_PASSWORD: &str = "root-pw";
/// The prefix every user may read and write (unless something was taken away).
pub const SHARED_PREFIX: &str = "auth/shared/";
/// How many times an administrative request is sent before it is given up.
const ADMIN_ATTEMPTS: usize = 8;

/// A user's password.
fn password(user: &str) -> String {
    format!("{user}-pw")
}

/// `user`'s role.
pub fn role_of(user: &str) -> String {
    format!("r-{user}")
}

/// `user`'s own prefix.
pub fn prefix_of(user: &str) -> String {
    format!("auth/{user}/")
}

/// Where an auth run is, shared by the administrator's host and the users' hosts.
/// Cheap to clone; clones share it.
#[derive(Clone, Debug, Default)]
pub struct AuthPhase {
    /// Auth is on, the users exist: they may start.
    ready: Arc<AtomicBool>,
    /// Users that finished.
    users_done: Arc<AtomicUsize>,
    /// The administrator turned auth off again (or gave up) and finished.
    admin_done: Arc<AtomicBool>,
}

impl AuthPhase {
    pub fn new() -> Self {
        AuthPhase::default()
    }

    /// True once the administrator finished (auth is off again, unless it gave up).
    pub fn admin_done(&self) -> bool {
        self.admin_done.load(Ordering::SeqCst)
    }

    /// Users that finished.
    pub fn users_done(&self) -> usize {
        self.users_done.load(Ordering::SeqCst)
    }
}

/// What one administrative episode takes away (and then gives back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Episode {
    OwnPermission,
    SharedPermission,
    Role,
    User,
}

/// The auth workload; see the module docs.
#[derive(Clone, Debug)]
pub struct AuthClient {
    /// The administrator's name (its turmoil host name, by convention); users are
    /// named `u1..uN`.
    pub name: String,
    /// Where the members are.
    pub directory: Directory,
    pub users: usize,
    /// Seeds every choice.
    pub seed: u64,
    /// Episodes of taking away and giving back, spread over the run.
    pub episodes: usize,
    /// How long the users send requests once auth is on, and over which the
    /// administrator spreads its episodes.
    pub run_for: Duration,
    /// Pause between two requests of one user, drawn from `[min, max]` ms.
    pub pause: (u64, u64),
    pub options: ClientOptions,
}

impl AuthClient {
    /// An administrator named `name` with three users, four episodes over 10 s, users
    /// pausing 5 to 30 ms between requests.
    pub fn new(name: impl Into<String>, directory: Directory, seed: u64) -> Self {
        AuthClient {
            name: name.into(),
            directory,
            users: 3,
            seed,
            episodes: 4,
            run_for: Duration::from_secs(10),
            pause: (5, 30),
            options: ClientOptions::default(),
        }
    }

    /// The users' names.
    pub fn user_names(&self) -> Vec<String> {
        (1..=self.users).map(|i| format!("u{i}")).collect()
    }

    /// The administrator: setup, the episodes, and auth off once every user is done.
    /// Must run inside a turmoil host.
    pub async fn admin(self, log: AuthLog, phase: AuthPhase) -> Result<(), SimError> {
        if self.directory.endpoints().is_empty() {
            return Err(SimError::Invalid("an auth client needs endpoints".into()));
        }
        let mut admin = Admin {
            client: &self,
            rng: SimRng::new(self.seed, 0),
            member: 0,
            connection: None,
            as_root: false,
            enabled: false,
            log,
        };
        let set_up = admin.set_up().await;
        let started = history::now();
        if set_up {
            phase.ready.store(true, Ordering::SeqCst);
            let spread = self.run_for.as_millis() as u64 / (self.episodes as u64 + 1);
            for _ in 0..self.episodes {
                tokio::time::sleep(admin.rng.millis(spread / 2, spread.max(spread / 2 + 1))).await;
                let users = self.user_names();
                let user = users[admin.rng.index(users.len())].clone();
                let episode = [
                    Episode::OwnPermission,
                    Episode::SharedPermission,
                    Episode::Role,
                    Episode::User,
                ][admin.rng.weighted(&[35, 20, 25, 20])];
                let back_after = admin.rng.millis(100, 1_500);
                admin.episode(&user, episode, back_after).await;
            }
        }
        // The users stop at `run_for`; then auth goes off for the checkers.
        let users = self.users;
        let deadline = started + self.run_for + Duration::from_secs(60);
        while phase.users_done() < users && history::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        admin.disable().await;
        phase.admin_done.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// User `n` (1-based). Must run inside a turmoil host.
    pub async fn user(
        self,
        n: usize,
        log: AuthLog,
        history: History,
        phase: AuthPhase,
    ) -> Result<(), SimError> {
        let name = format!("u{n}");
        let mut user = User {
            client: &self,
            rng: SimRng::new(self.seed, 100 + n as u64),
            name,
            connections: Vec::new(),
            mod_revisions: Default::default(),
            log,
            history,
        };
        // Waits for the setup, bounded by the run.
        let give_up = history::now() + self.run_for + Duration::from_secs(30);
        while !phase.ready.load(Ordering::SeqCst) && history::now() < give_up {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let end = history::now() + self.run_for;
        let mut n = 0usize;
        while phase.ready.load(Ordering::SeqCst) && history::now() < end {
            user.request(n).await;
            n += 1;
            let (min, max) = self.pause;
            tokio::time::sleep(user.rng.millis(min, max.max(min + 1))).await;
        }
        phase.users_done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// The administrator's session.
struct Admin<'a> {
    client: &'a AuthClient,
    rng: SimRng,
    member: usize,
    connection: Option<Client>,
    /// The connection is logged in as root.
    as_root: bool,
    /// The setup turned auth on: every request goes as root.
    enabled: bool,
    log: AuthLog,
}

impl Admin<'_> {
    /// Root, the users and their roles, then auth on. False if it could not finish.
    async fn set_up(&mut self) -> bool {
        let mut ok = self.quietly(Setup::RoleAdd("root".into())).await
            && self.quietly(Setup::RootUser).await
            && self.quietly(Setup::GrantRoot).await;
        for user in self.client.user_names() {
            if !ok {
                break;
            }
            let role = role_of(&user);
            self.log.set_roles(&user, vec![role.clone()]);
            ok = self.quietly(Setup::RoleAdd(role.clone())).await
                && self
                    .change(grant_permission(&role, &prefix_of(&user)))
                    .await
                && self.change(grant_permission(&role, SHARED_PREFIX)).await
                && self
                    .change(AuthChange::AddUser { user: user.clone() })
                    .await
                && self.change(AuthChange::GrantRole { user, role }).await;
        }
        self.enabled = ok && self.quietly(Setup::Enable).await;
        self.enabled
    }

    /// Takes `episode` away from `user` and gives it back `back_after` later.
    async fn episode(&mut self, user: &str, episode: Episode, back_after: Duration) {
        let role = role_of(user);
        let (away, back) = match episode {
            Episode::OwnPermission | Episode::SharedPermission => {
                let prefix = if episode == Episode::OwnPermission {
                    prefix_of(user)
                } else {
                    SHARED_PREFIX.to_owned()
                };
                (
                    vec![AuthChange::RevokePermission {
                        role: role.clone(),
                        prefix: prefix.clone(),
                    }],
                    vec![grant_permission(&role, &prefix)],
                )
            }
            Episode::Role => (
                vec![AuthChange::RevokeRole {
                    user: user.to_owned(),
                    role: role.clone(),
                }],
                vec![AuthChange::GrantRole {
                    user: user.to_owned(),
                    role: role.clone(),
                }],
            ),
            Episode::User => (
                vec![AuthChange::DeleteUser {
                    user: user.to_owned(),
                }],
                vec![
                    AuthChange::AddUser {
                        user: user.to_owned(),
                    },
                    AuthChange::GrantRole {
                        user: user.to_owned(),
                        role,
                    },
                ],
            ),
        };
        for change in away {
            self.change(change).await;
        }
        tokio::time::sleep(back_after).await;
        for change in back {
            self.change(change).await;
        }
    }

    /// Turns auth off (as root), trying for a while.
    async fn disable(&mut self) {
        for _ in 0..ADMIN_ATTEMPTS * 4 {
            let budget = self.budget();
            let result = bounded(budget, async {
                let client = self.connect(true).await?;
                client.auth_client().auth_disable().await?;
                Ok::<_, SimError>(())
            })
            .await;
            if result.is_err() {
                self.connection = None;
            }
            match result {
                Ok(()) => return,
                Err(error) if is_auth_not_enabled(&error) => return,
                Err(_) => self.next_member(),
            }
            tokio::time::sleep(self.rng.millis(100, 300)).await;
        }
    }

    /// Sends a recorded change until it is answered (or it says it was already so);
    /// each attempt goes into the log. True once done.
    async fn change(&mut self, change: AuthChange) -> bool {
        for _ in 0..ADMIN_ATTEMPTS {
            let invoked = history::now();
            let (as_root, budget) = (self.enabled, self.budget());
            let result = bounded(budget, async {
                let client = self.connect(as_root).await?;
                send(client, &change).await
            })
            .await;
            let outcome = match &result {
                Ok(()) => AuthChangeOutcome::Done,
                Err(error) if already_so(&change, error) => AuthChangeOutcome::Done,
                Err(error) => AuthChangeOutcome::Unknown(error.to_string()),
            };
            let done = outcome == AuthChangeOutcome::Done;
            if !done {
                // The next attempt goes elsewhere, on a new connection and login.
                self.next_member();
            }
            self.log.record_admin(AdminEntry {
                change: change.clone(),
                invoked,
                completed: history::now(),
                outcome,
            });
            if done {
                return true;
            }
            tokio::time::sleep(self.rng.millis(50, 200)).await;
        }
        false
    }

    /// A setup step that is not in the log (root's own records, auth on), sent until
    /// answered.
    async fn quietly(&mut self, step: Setup) -> bool {
        for _ in 0..ADMIN_ATTEMPTS {
            let budget = self.budget();
            let result = bounded(budget, async {
                let client = self.connect(false).await?;
                let mut auth = client.auth_client();
                match &step {
                    Setup::RoleAdd(role) => auth.role_add(role.as_str()).await.map(drop),
                    Setup::RootUser => auth.user_add("root", ROOT_PASSWORD, None).await.map(drop),
                    Setup::GrantRoot => auth.user_grant_role("root", "root").await.map(drop),
                    Setup::Enable => auth.auth_enable().await.map(drop),
                }
                .map_err(SimError::from)
            })
            .await;
            match result {
                Ok(()) => return true,
                Err(error) if error.to_string().contains("already exists") => return true,
                Err(_) => self.next_member(),
            }
            tokio::time::sleep(self.rng.millis(50, 200)).await;
        }
        false
    }

    /// The connection to the current member, dialled (and logged in as root if
    /// `as_root`) if need be.
    async fn connect(&mut self, as_root: bool) -> Result<&mut Client, SimError> {
        if self.connection.is_none() {
            let endpoints = self.client.directory.endpoints();
            let url = &endpoints[self.member % endpoints.len()];
            self.connection = Some(client::connect_with(url, &self.client.options).await?);
            self.as_root = false;
        }
        let client = self.connection.as_mut().expect("dialled");
        if as_root && !self.as_root {
            client
                .update_user(Some(("root".to_owned(), ROOT_PASSWORD.to_owned())))
                .await?;
            self.as_root = true;
        }
        Ok(client)
    }

    /// How long one administrative attempt may take, login and dial included.
    fn budget(&self) -> Duration {
        self.client.options.request_timeout * 2 + self.client.options.connect_timeout * 2
    }

    fn next_member(&mut self) {
        let members = self.client.directory.endpoints().len().max(1);
        self.member =
            (self.member + 1 + self.rng.index(members.saturating_sub(1).max(1))) % members;
        self.connection = None;
    }
}

/// `attempt` within `budget`.
async fn bounded<T>(
    budget: Duration,
    attempt: impl std::future::Future<Output = Result<T, SimError>>,
) -> Result<T, SimError> {
    match tokio::time::timeout(budget, attempt).await {
        Ok(result) => result,
        Err(_) => Err(SimError::Timeout("auth request".into())),
    }
}

/// Setup steps the auth checker need not know of.
enum Setup {
    RoleAdd(String),
    RootUser,
    GrantRoot,
    Enable,
}

fn grant_permission(role: &str, prefix: &str) -> AuthChange {
    AuthChange::GrantPermission {
        role: role.to_owned(),
        prefix: prefix.to_owned(),
    }
}

/// Sends one change on `client`.
async fn send(client: &mut Client, change: &AuthChange) -> Result<(), SimError> {
    let mut auth = client.auth_client();
    match change {
        AuthChange::GrantPermission { role, prefix } => auth
            .role_grant_permission(
                role.as_str(),
                Permission::read_write(prefix.as_str()).with_prefix(),
            )
            .await
            .map(drop),
        AuthChange::RevokePermission { role, prefix } => auth
            .role_revoke_permission(
                role.as_str(),
                prefix.as_str(),
                Some(etcd_client::RoleRevokePermissionOptions::new().with_prefix()),
            )
            .await
            .map(drop),
        AuthChange::GrantRole { user, role } => auth
            .user_grant_role(user.as_str(), role.as_str())
            .await
            .map(drop),
        AuthChange::RevokeRole { user, role } => auth
            .user_revoke_role(user.as_str(), role.as_str())
            .await
            .map(drop),
        AuthChange::AddUser { user } => auth
            .user_add(user.as_str(), password(user), None)
            .await
            .map(drop),
        AuthChange::DeleteUser { user } => auth.user_delete(user.as_str()).await.map(drop),
    }
    .map_err(SimError::from)
}

/// The etcd message of an error, if it is a gRPC status.
fn message(error: &SimError) -> Option<&str> {
    match error {
        SimError::Client(etcd_client::Error::GRpcStatus(status)) => Some(status.message()),
        _ => None,
    }
}

/// True if `error` answers `change` by saying the store already is as it asks: the
/// change (or an earlier attempt of it) is in effect.
fn already_so(change: &AuthChange, error: &SimError) -> bool {
    let Some(message) = message(error) else {
        return false;
    };
    match change {
        AuthChange::RevokePermission { .. } => {
            message == "etcdserver: permission is not granted to the role"
        }
        AuthChange::RevokeRole { .. } => message == "etcdserver: role is not granted to the user",
        AuthChange::DeleteUser { .. } => message == "etcdserver: user name not found",
        AuthChange::AddUser { .. } => message == "etcdserver: user name already exists",
        AuthChange::GrantPermission { .. } | AuthChange::GrantRole { .. } => false,
    }
}

fn is_auth_not_enabled(error: &SimError) -> bool {
    message(error) == Some("etcdserver: authentication is not enabled")
}

/// How a user request's error reads in the auth log.
fn user_outcome(error: &SimError) -> UserOutcome {
    if let SimError::Client(etcd_client::Error::GRpcStatus(status)) = error {
        match status.code() {
            tonic::Code::PermissionDenied => return UserOutcome::PermissionDenied,
            tonic::Code::Unauthenticated => return UserOutcome::InvalidToken,
            _ => {}
        }
    }
    UserOutcome::Failed(error.to_string())
}

/// A user's session: a connection (and a login) per member.
struct User<'a> {
    client: &'a AuthClient,
    rng: SimRng,
    name: String,
    /// Per endpoint: a connection logged in as the user.
    connections: Vec<Option<Client>>,
    /// The mod revision each key had when last seen (0: absent), for compare-and-swaps.
    mod_revisions: std::collections::BTreeMap<String, i64>,
    log: AuthLog,
    history: History,
}

impl User<'_> {
    /// The `n`th request: a Put, a linearizable Range or a compare-and-swap, on an own
    /// or a shared key, to a member the seed picks.
    async fn request(&mut self, n: usize) {
        let shared = self.rng.percent(30);
        let key = if shared {
            format!("{SHARED_PREFIX}k{}", self.rng.below(0..2))
        } else {
            format!("{}k{}", prefix_of(&self.name), self.rng.below(0..3))
        };
        let (op, access) = match self.rng.weighted(&[45, 35, 20]) {
            0 => (
                Op::Put {
                    key: key.clone(),
                    value: format!("{}-{n}", self.name),
                },
                Access::Write,
            ),
            1 => (
                Op::Get {
                    key: key.clone(),
                    serializable: false,
                },
                Access::Read,
            ),
            _ => (
                Op::Cas {
                    key: key.clone(),
                    expected: self.mod_revisions.get(&key).copied().unwrap_or(0),
                    value: format!("{}-{n}", self.name),
                },
                Access::ReadWrite,
            ),
        };
        let endpoints = self.client.directory.endpoints();
        if self.connections.len() < endpoints.len() {
            self.connections.resize_with(endpoints.len(), || None);
        }
        let member = self.rng.index(endpoints.len());
        let url = endpoints[member].clone();
        let options = self.client.options.clone();
        let budget = options.request_timeout * 2 + options.connect_timeout * 2;
        let invoked = history::now();
        let (name, slot) = (&self.name, &mut self.connections[member]);
        let result = bounded(budget, async {
            if slot.is_none() {
                let mut client = client::connect_with(&url, &options).await?;
                // A login refused (the user is gone) is an invalid token to the request:
                // it never reaches the store.
                client
                    .update_user(Some((name.clone(), password(name))))
                    .await
                    .map_err(|error| SimError::Invalid(format!("login: {error}")))?;
                *slot = Some(client);
            }
            execute(slot.as_mut().expect("dialled"), &op).await
        })
        .await;
        let completed = history::now();
        let (outcome, auth_outcome, answered_by) = match result {
            Ok((outcome, member)) => (outcome, UserOutcome::Done, Some(member)),
            Err(error) => {
                let auth_outcome = match &error {
                    SimError::Invalid(login) if login.starts_with("login:") => {
                        UserOutcome::InvalidToken
                    }
                    error => user_outcome(error),
                };
                // Dial and log in again next time, unless the member only refused.
                if auth_outcome != UserOutcome::PermissionDenied {
                    self.connections[member] = None;
                }
                (
                    Outcome::Unknown(format!("{url}: {error}")),
                    auth_outcome,
                    None,
                )
            }
        };
        match &outcome {
            Outcome::Read { value, .. } => {
                self.mod_revisions
                    .insert(key.clone(), value.as_ref().map_or(0, |(_, m)| *m));
            }
            Outcome::Written { revision }
            | Outcome::Swapped {
                revision,
                succeeded: true,
            } => {
                self.mod_revisions.insert(key.clone(), *revision);
            }
            _ => {}
        }
        self.log.record_user(UserEntry {
            user: self.name.clone(),
            key,
            access,
            linearizable: access == Access::Read,
            invoked,
            completed,
            outcome: auth_outcome,
        });
        self.history.record(Operation {
            client: self.name.clone(),
            op,
            invoked,
            completed,
            outcome,
            member: answered_by,
        });
    }
}
