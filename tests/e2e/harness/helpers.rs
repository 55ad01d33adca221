//! Small helpers of the tests: a polling loop's [`Deadline`], Range answers as strings,
//! and the store's current revision.

use std::time::{Duration, Instant};

use etcd_client::{Client, GetResponse, KeyValue, ResponseHeader};

/// A deadline for a polling loop: call `tick` after each unsuccessful check.
pub struct Deadline {
    end: Instant,
    timeout: Duration,
    what: String,
}

impl Deadline {
    pub fn after(timeout: Duration, what: impl Into<String>) -> Deadline {
        Deadline {
            end: Instant::now() + timeout,
            timeout,
            what: what.into(),
        }
    }

    /// Panics if the deadline has passed; otherwise sleeps a little.
    pub async fn tick(&self) {
        if Instant::now() >= self.end {
            panic!(
                "timed out after {:?} waiting for: {}",
                self.timeout, self.what
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The keys of a Range response, as strings.
pub fn keys(resp: &GetResponse) -> Vec<String> {
    resp.kvs().iter().map(|kv| lossy(kv.key())).collect()
}

/// The key/value pairs of a Range response, as strings.
pub fn pairs(resp: &GetResponse) -> Vec<(String, String)> {
    resp.kvs()
        .iter()
        .map(|kv| (lossy(kv.key()), lossy(kv.value())))
        .collect()
}

/// A key-value's (create_revision, mod_revision, version).
pub fn revs(kv: &KeyValue) -> (i64, i64, i64) {
    (kv.create_revision(), kv.mod_revision(), kv.version())
}

/// The revision in a response header (panics if the header is missing).
pub fn header_rev(header: Option<&ResponseHeader>) -> i64 {
    header.expect("response header").revision()
}

pub fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The store's current revision, by a linearizable Range on `client`.
pub async fn current_revision(client: &mut Client) -> i64 {
    let resp = client
        .get("qk-e2e-revision-probe", None)
        .await
        .expect("range for the current revision");
    header_rev(resp.header())
}
