//! HashKV agreement after healing: once every fault is healed and the members have
//! caught up, etcd's corruption check must find nothing.
//!
//! This module owns [`await_hash_agreement`]. It polls every member's `HashKV` at
//! revision 0 (the current one) until all report the same current revision, the same
//! hash revision, the same compact revision and the same hash, then compares `HashKV`
//! at earlier revisions too (the oldest one not compacted, and halfway to the current
//! one), which covers the history a member keeps, not only its current key space.
//! Members that never agree within the bound are a violation, whatever the reason (a
//! member that does not answer included). It only reads.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::Client;

use super::Violation;
use crate::client;

/// One member's answer: (current revision, hash revision, compact revision, hash).
type Hashed = (i64, i64, i64, u32);

async fn hash_kv(
    clients: &mut BTreeMap<String, Client>,
    name: &str,
    url: &str,
    revision: i64,
) -> Result<Hashed, String> {
    let client = match clients.get_mut(name) {
        Some(client) => client,
        None => {
            let client = client::connect(url).await.map_err(|e| e.to_string())?;
            clients.entry(name.to_owned()).or_insert(client)
        }
    };
    match client.hash_kv(revision).await {
        Ok(response) => Ok((
            response.header().map_or(0, |h| h.revision()),
            response.hash_revision(),
            response.compact_version(),
            response.hash(),
        )),
        Err(error) => {
            // Re-dial next time: the connection may be the one that hangs.
            clients.remove(name);
            Err(error.to_string())
        }
    }
}

/// Polls until every member in `members` (name, client URL) agrees on `HashKV` at the
/// current revision and at earlier ones (see the module docs); a `hashkv-agreement`
/// violation if they still differ after `within`. Must run inside a turmoil host, once
/// faults are healed.
pub async fn await_hash_agreement(
    members: &[(String, String)],
    within: Duration,
) -> Result<(), Violation> {
    let deadline = tokio::time::Instant::now() + within;
    let mut clients: BTreeMap<String, Client> = BTreeMap::new();
    loop {
        let seen = agreement(&mut clients, members).await;
        match seen {
            Ok(()) => return Ok(()),
            Err(seen) if tokio::time::Instant::now() >= deadline => {
                return Err(Violation::new(
                    "hashkv-agreement",
                    format!("members still differ after {within:?}: {seen}"),
                ))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// One round: `Err` says what differed.
async fn agreement(
    clients: &mut BTreeMap<String, Client>,
    members: &[(String, String)],
) -> Result<(), String> {
    let current = hash_everywhere(clients, members, 0).await?;
    let (revision, _, compacted, _) = current;
    // The oldest revision a read can still reach, and one halfway to the current.
    let oldest = compacted.max(0) + 1;
    for at in [oldest, oldest + (revision - oldest) / 2] {
        if at < revision {
            let hashed = hash_everywhere(clients, members, at).await?;
            if hashed.0 != revision {
                // A write landed meanwhile: start the round again.
                return Err(format!("the store moved on from revision {revision}"));
            }
        }
    }
    Ok(())
}

/// `HashKV(revision)` on every member, if all answer alike.
async fn hash_everywhere(
    clients: &mut BTreeMap<String, Client>,
    members: &[(String, String)],
    revision: i64,
) -> Result<Hashed, String> {
    let mut answers = Vec::with_capacity(members.len());
    for (name, url) in members {
        let answer = hash_kv(clients, name, url, revision).await;
        answers.push((name, answer));
    }
    let show = || {
        answers
            .iter()
            .map(|(name, answer)| match answer {
                Ok((current, at, compacted, hash)) => format!(
                    "{name}: HashKV({revision}) at rev {current}: hash {hash:08x} of rev {at}, \
                     compacted {compacted}"
                ),
                Err(error) => format!("{name}: HashKV({revision}): {error}"),
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut first = None;
    for (_, answer) in &answers {
        match (answer, first) {
            (Err(_), _) => return Err(show()),
            (Ok(hashed), None) => first = Some(*hashed),
            (Ok(hashed), Some(expected)) if *hashed != expected => return Err(show()),
            (Ok(_), Some(_)) => {}
        }
    }
    first.ok_or_else(|| "no member to hash".to_owned())
}
