//! [`SnapshotClient`]: an operator taking backups (`etcdctl snapshot save`) while the
//! cluster is written, faulted and compacted: Maintenance.Snapshot on a seed-chosen
//! member every so often, the whole stream read into memory.
//!
//! The client's seed fixes the pauses and the members. A call is bounded by a
//! deadline; a stream that fails or ends in an error is recorded as failed, never
//! retried (the next call goes to another member anyway). Every call goes into the
//! [`SnapshotLog`]. It must never judge what it fetched (the snapshot checker does)
//! and never inject faults.

use std::time::Duration;

use crate::client::{self, ClientOptions};
use crate::cluster::Directory;
use crate::error::SimError;
use crate::history::{self, SnapshotLog, SnapshotRecord};
use crate::rng::SimRng;

/// A client fetching snapshot files; see the module docs.
#[derive(Clone, Debug)]
pub struct SnapshotClient {
    /// The client's name in the log (its turmoil host name, by convention).
    pub name: String,
    /// Where the members are (removed ones stay, as in a client's stale list).
    pub directory: Directory,
    pub seed: u64,
    /// No call starts once this much simulated time has passed since `run` began.
    pub run_for: Duration,
    /// Pause before each call, drawn from `[min, max]` milliseconds.
    pub pause: (u64, u64),
    /// Deadline of one whole call, the stream included.
    pub deadline: Duration,
    pub options: ClientOptions,
}

impl SnapshotClient {
    /// A client named `name` calling every 0.4 to 1.5 s for 10 simulated seconds.
    pub fn new(name: impl Into<String>, directory: Directory, seed: u64) -> Self {
        SnapshotClient {
            name: name.into(),
            directory,
            seed,
            run_for: Duration::from_secs(10),
            pause: (400, 1500),
            deadline: Duration::from_secs(5),
            options: ClientOptions::default(),
        }
    }

    /// Runs to `run_for`. Must run inside a turmoil host.
    pub async fn run(self, log: SnapshotLog) -> Result<(), SimError> {
        let mut rng = SimRng::new(self.seed, 0x5a9);
        let start = history::now();
        loop {
            tokio::time::sleep(rng.millis(self.pause.0, self.pause.1)).await;
            if history::now().saturating_sub(start) >= self.run_for {
                return Ok(());
            }
            let members = self.directory.all_members();
            let Some((member, url)) = rng.pick(&members).cloned() else {
                continue;
            };
            let invoked = history::now();
            let result = match tokio::time::timeout(self.deadline, fetch(&url, &self.options)).await
            {
                Ok(result) => result,
                Err(_) => Err(format!("no complete stream within {:?}", self.deadline)),
            };
            log.record(SnapshotRecord {
                client: self.name.clone(),
                member,
                invoked,
                completed: history::now(),
                result,
            });
        }
    }
}

/// One Snapshot call to `url`: the blobs of a stream that ended cleanly.
async fn fetch(url: &str, options: &ClientOptions) -> Result<Vec<u8>, String> {
    let mut etcd = client::connect_with(url, options)
        .await
        .map_err(|e| e.to_string())?;
    let mut stream = etcd.snapshot().await.map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    while let Some(message) = stream.message().await.map_err(|e| e.to_string())? {
        bytes.extend_from_slice(message.blob());
    }
    Ok(bytes)
}
