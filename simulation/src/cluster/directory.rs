//! [`Directory`]: what a cluster's hosts and the simulation's client hosts share about
//! the members: every host that ever joined, by name, with its URLs, whether the
//! cluster counts it as a member now, and whether its process runs.
//!
//! Clients take their endpoints from here as a real client takes them from a
//! configured list: a member added later is appended, and a removed member's endpoint
//! stays (a client with a stale list keeps sending to it). The cluster's own view (who
//! is a member now, which faults may aim at) is the `current` subset. It records; it
//! never starts, stops or asks a member anything.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// One host that was a member at some point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectoryEntry {
    /// The host's (and member's) name, e.g. `n4`.
    pub name: String,
    /// Its client URL, e.g. `http://n4:2379`.
    pub client_url: String,
    /// Its peer URL by name, e.g. `http://n4:2380`.
    pub peer_url: String,
    /// The same peer port by the host's address, e.g. `http://192.168.0.4:2380`: a
    /// second URL that reaches the same host (what MemberUpdate may switch to).
    pub peer_url_by_address: String,
    /// True while the cluster counts the host as a member (from its start as a member
    /// until its removal is known).
    pub current: bool,
    /// True once a removal of this member was asked for: its process may stop on its
    /// own (as etcd's removed members do) without failing the simulation.
    pub exit_expected: bool,
    /// True while the host's member process runs.
    pub running: bool,
    /// When its process last stopped on its own (simulated time), if it did.
    pub exited_at: Option<Duration>,
}

/// Shared, cheap to clone; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct Directory {
    entries: Arc<Mutex<Vec<DirectoryEntry>>>,
}

impl Directory {
    pub fn new() -> Self {
        Directory::default()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<DirectoryEntry>> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every entry, in the order the hosts first joined.
    pub fn entries(&self) -> Vec<DirectoryEntry> {
        self.lock().clone()
    }

    /// The entry of `name`, if it ever joined.
    pub fn entry(&self, name: &str) -> Option<DirectoryEntry> {
        self.lock().iter().find(|e| e.name == name).cloned()
    }

    /// How many hosts ever joined.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Every client URL ever known, removed members' included: a client's endpoint
    /// list that only grows.
    pub fn endpoints(&self) -> Vec<String> {
        self.lock().iter().map(|e| e.client_url.clone()).collect()
    }

    /// Every (name, client URL) ever known, removed members' included.
    pub fn all_members(&self) -> Vec<(String, String)> {
        self.lock()
            .iter()
            .map(|e| (e.name.clone(), e.client_url.clone()))
            .collect()
    }

    /// The (name, client URL) of every member the cluster counts now.
    pub fn current(&self) -> Vec<(String, String)> {
        self.lock()
            .iter()
            .filter(|e| e.current)
            .map(|e| (e.name.clone(), e.client_url.clone()))
            .collect()
    }

    /// The name of the host `url` (a peer or client URL, by name or by address)
    /// belongs to.
    pub fn name_of_url(&self, url: &str) -> Option<String> {
        let url = url.trim_end_matches('/');
        self.lock()
            .iter()
            .find(|e| e.client_url == url || e.peer_url == url || e.peer_url_by_address == url)
            .map(|e| e.name.clone())
    }

    /// Adds a host (a member of the cluster from now on), or counts a known one as a
    /// member again (a replaced member's host).
    pub(crate) fn join(&self, entry: DirectoryEntry) {
        let mut entries = self.lock();
        match entries.iter_mut().find(|e| e.name == entry.name) {
            Some(known) => *known = entry,
            None => entries.push(entry),
        }
    }

    fn update(&self, name: &str, change: impl FnOnce(&mut DirectoryEntry)) {
        if let Some(entry) = self.lock().iter_mut().find(|e| e.name == name) {
            change(entry);
        }
    }

    /// The cluster no longer counts `name` as a member (its removal is known).
    pub fn retire(&self, name: &str) {
        self.update(name, |e| e.current = false);
    }

    /// Whether `name`'s process may stop on its own: set before a removal is asked
    /// for, cleared when the cluster refused it.
    pub fn expect_exit(&self, name: &str, expected: bool) {
        self.update(name, |e| e.exit_expected = expected);
    }

    pub fn exit_expected(&self, name: &str) -> bool {
        self.entry(name).is_some_and(|e| e.exit_expected)
    }

    /// True while `name`'s process runs.
    pub fn is_running(&self, name: &str) -> bool {
        self.entry(name).is_some_and(|e| e.running)
    }

    pub(crate) fn set_running(&self, name: &str, running: bool) {
        self.update(name, |e| e.running = running);
    }

    pub(crate) fn note_exit(&self, name: &str, at: Duration) {
        self.update(name, |e| {
            e.running = false;
            e.exited_at = Some(at);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> DirectoryEntry {
        DirectoryEntry {
            name: name.into(),
            client_url: format!("http://{name}:2379"),
            peer_url: format!("http://{name}:2380"),
            peer_url_by_address: format!("http://10.0.0.{}:2380", name.len()),
            current: true,
            exit_expected: false,
            running: false,
            exited_at: None,
        }
    }

    #[test]
    fn removed_members_keep_their_endpoints() {
        let directory = Directory::new();
        directory.join(entry("n1"));
        directory.join(entry("n2"));
        directory.retire("n1");
        assert_eq!(directory.endpoints().len(), 2);
        assert_eq!(
            directory.current(),
            vec![("n2".into(), "http://n2:2379".into())]
        );
        directory.join(entry("n1"));
        assert_eq!(
            directory.current().len(),
            2,
            "a replaced member counts again"
        );
        assert_eq!(directory.len(), 2);
        assert_eq!(
            directory.name_of_url("http://n2:2380/").as_deref(),
            Some("n2")
        );
    }
}
