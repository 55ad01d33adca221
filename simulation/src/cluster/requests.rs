//! [`HostRequests`]: how a client host (the membership client) asks the harness for
//! what only the code stepping the simulation can do, between two steps: start a
//! member that MemberAdd admitted on a host of its own, or wipe a removed member's
//! data directory so that its host can join again as a new member.
//!
//! The client queues a request and waits (in simulated time) for its answer; whoever
//! steps the simulation calls [`crate::SimCluster::serve_requests`] after each step,
//! as [`crate::faults::Injector`] does. It only carries requests; `SimCluster` carries
//! them out.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// What a client may ask of the harness.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostRequest {
    /// Start `name` as a new member of the running cluster (`--initial-cluster-state
    /// existing`): on a new host, or on the host of a removed and wiped member.
    Join { name: String },
    /// Stop a removed member's host if it still runs and delete its data directory.
    Wipe { name: String },
}

impl fmt::Display for HostRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostRequest::Join { name } => write!(f, "start {name} as a joining member"),
            HostRequest::Wipe { name } => write!(f, "wipe {name}'s data directory"),
        }
    }
}

#[derive(Debug, Default)]
struct Mailbox {
    next: u64,
    pending: VecDeque<(u64, HostRequest)>,
    answered: BTreeMap<u64, Result<String, String>>,
}

/// Shared, cheap to clone; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct HostRequests {
    mailbox: Arc<Mutex<Mailbox>>,
}

impl HostRequests {
    pub fn new() -> Self {
        HostRequests::default()
    }

    fn lock(&self) -> MutexGuard<'_, Mailbox> {
        self.mailbox
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `request` and waits until the harness carried it out: what it did, or
    /// why it could not. Must run inside a turmoil host.
    pub async fn ask(&self, request: HostRequest) -> Result<String, String> {
        let ticket = {
            let mut mailbox = self.lock();
            let ticket = mailbox.next;
            mailbox.next += 1;
            mailbox.pending.push_back((ticket, request));
            ticket
        };
        loop {
            if let Some(answer) = self.lock().answered.remove(&ticket) {
                return answer;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The requests queued since the last call, oldest first.
    pub(crate) fn take(&self) -> Vec<(u64, HostRequest)> {
        self.lock().pending.drain(..).collect()
    }

    pub(crate) fn answer(&self, ticket: u64, answer: Result<String, String>) {
        self.lock().answered.insert(ticket, answer);
    }
}
