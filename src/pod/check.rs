//! `quantykube pod check`: what `helm test` runs against a release. Through every
//! member's client URL it writes, reads back linearizably and deletes a key of its
//! own, and it checks that MemberList shows the wanted number of started voters and
//! no learner. It prints one line per check and fails on the first that does not hold.

use std::time::Duration;

use tonic::transport::Channel;

use super::cluster::{self, Reach};
use super::PodError;
use crate::proto::etcdserverpb::kv_client::KvClient;
use crate::proto::etcdserverpb::{DeleteRangeRequest, PutRequest, RangeRequest};

/// Runs the checks against `endpoints`, expecting `replicas` voters.
pub async fn run(reach: &Reach, endpoints: &[String], replicas: u32) -> Result<(), PodError> {
    let failed = |what: String| PodError::Check(what);
    let key = format!("quantykube-pod-check/{}", std::process::id()).into_bytes();
    for (n, endpoint) in endpoints.iter().enumerate() {
        let mut kv = kv_client(reach, endpoint).await?;
        let value = format!("written through {endpoint}").into_bytes();
        let put = kv
            .put(PutRequest {
                key: key.clone().into(),
                value: value.clone().into(),
                ..Default::default()
            })
            .await
            .map_err(|e| failed(format!("{endpoint}: put: {}", e.message())))?;
        let revision = put.into_inner().header.map_or(0, |h| h.revision);
        // Read back from the next member: a write through one is seen through another.
        let reader = &endpoints[(n + 1) % endpoints.len()];
        let range = kv_client(reach, reader)
            .await?
            .range(RangeRequest {
                key: key.clone().into(),
                ..Default::default()
            })
            .await
            .map_err(|e| failed(format!("{reader}: range: {}", e.message())))?
            .into_inner();
        let read = range.kvs.first().map(|kv| kv.value.to_vec());
        if read.as_deref() != Some(value.as_slice()) {
            return Err(failed(format!(
                "{reader} did not read the value written through {endpoint} at revision {revision}"
            )));
        }
        println!("ok: write through {endpoint} (revision {revision}) read through {reader}");
    }
    if let Some(endpoint) = endpoints.first() {
        if let Ok(mut kv) = kv_client(reach, endpoint).await {
            let _ = kv
                .delete_range(DeleteRangeRequest {
                    key: key.clone().into(),
                    ..Default::default()
                })
                .await;
        }
        let members = cluster::list(reach, endpoint)
            .await
            .map_err(|e| failed(format!("{endpoint}: member list: {e}")))?;
        let voters = members.iter().filter(|m| !m.is_learner).count();
        let unstarted = members.iter().filter(|m| m.name.is_empty()).count();
        let learners = members.len() - voters;
        if voters != replicas as usize || learners != 0 || unstarted != 0 {
            return Err(failed(format!(
                "member list: {voters} voters, {learners} learners, {unstarted} not started; wanted {replicas} started voters"
            )));
        }
        println!("ok: {voters} started voters, no learner");
    }
    Ok(())
}

/// A KV client on `endpoint`, with the member's own TLS.
async fn kv_client(reach: &Reach, endpoint: &str) -> Result<KvClient<Channel>, PodError> {
    let failed = |what: String| PodError::Check(what);
    let channel = crate::client::endpoint(endpoint, Duration::from_secs(5))
        .map_err(|e| failed(format!("{endpoint}: {e}")))?
        .timeout(Duration::from_secs(10));
    let channel = reach
        .clients
        .dial(channel)
        .await
        .map_err(|e| failed(format!("{endpoint}: cannot connect: {e}")))?;
    Ok(KvClient::new(channel))
}
