//! What a compose cluster looks like from the host: readiness, membership, the leader.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::harness::{eventually, http_get, secs, Project};

/// The member's `/readyz` on its metrics port answers 200.
pub async fn ready(project: &Project, ordinal: usize) -> Result<(), String> {
    match http_get(&project.metrics_addr(ordinal), "/readyz").await {
        Some((200, _)) => Ok(()),
        Some((code, body)) => Err(format!("qk-{ordinal} /readyz {code}: {}", body.trim())),
        None => Err(format!("qk-{ordinal} /readyz: no answer")),
    }
}

pub async fn wait_ready(project: &Project, ordinal: usize, deadline: Duration) {
    eventually(&format!("qk-{ordinal} ready"), deadline, || {
        ready(project, ordinal)
    })
    .await;
}

/// Names, learner flags and ids of the members as `ordinal` reports them.
pub async fn members_seen_by(
    project: &Project,
    ordinal: usize,
) -> Result<Vec<(String, bool, u64)>, String> {
    let mut client = project.try_client(ordinal).await?;
    let list = tokio::time::timeout(secs(5), client.member_list())
        .await
        .map_err(|_| format!("qk-{ordinal} member list timed out"))?
        .map_err(|e| format!("qk-{ordinal} member list: {e}"))?;
    Ok(list
        .members()
        .iter()
        .map(|m| (m.name().to_owned(), m.is_learner(), m.id()))
        .collect())
}

/// Every member in `members` is ready, each one lists exactly `members` as started voters
/// (no learner, no unstarted or extra member), and they agree on one leader.
pub async fn wait_cluster(project: &Project, members: &[usize], deadline: Duration) {
    let want: BTreeSet<String> = members.iter().map(|m| format!("qk-{m}")).collect();
    eventually(&format!("a healthy cluster of {want:?}"), deadline, || {
        let want = want.clone();
        async move {
            let mut leaders = BTreeSet::new();
            for &member in members {
                ready(project, member).await?;
                let seen = members_seen_by(project, member).await?;
                let names: BTreeSet<String> =
                    seen.iter().map(|(name, _, _)| name.clone()).collect();
                if names != want || seen.len() != want.len() {
                    return Err(format!("qk-{member} lists {seen:?}"));
                }
                if let Some(learner) = seen.iter().find(|(_, learner, _)| *learner) {
                    return Err(format!("qk-{member} lists {} as a learner", learner.0));
                }
                let (_, leader) = status(project, member).await?;
                leaders.insert(leader);
            }
            if leaders.len() == 1 && !leaders.contains(&0) {
                Ok(())
            } else {
                Err(format!("leaders reported: {leaders:?}"))
            }
        }
    })
    .await;
}

/// The member's own id and the leader it reports.
pub async fn status(project: &Project, ordinal: usize) -> Result<(u64, u64), String> {
    let mut client = project.try_client(ordinal).await?;
    let status = tokio::time::timeout(secs(5), client.status())
        .await
        .map_err(|_| format!("qk-{ordinal} status timed out"))?
        .map_err(|e| format!("qk-{ordinal} status: {e}"))?;
    let id = status
        .header()
        .map(|h| h.member_id())
        .ok_or_else(|| format!("qk-{ordinal} status without header"))?;
    Ok((id, status.leader()))
}

/// The ordinal of the member whose status names itself as leader.
pub async fn leader(project: &Project, members: &[usize]) -> usize {
    eventually("a member that is the leader", secs(30), || async move {
        let mut states = Vec::new();
        for &member in members {
            match status(project, member).await {
                Ok((id, leader)) if id == leader => return Ok(member),
                Ok(state) => states.push(format!("qk-{member}: {state:?}")),
                Err(e) => states.push(e),
            }
        }
        Err(states.join("; "))
    })
    .await
}
