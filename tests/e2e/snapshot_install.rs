//! A member that catches up by snapshot never serves a read from a half-installed
//! store: every read it answers during the install shows the state before it or after
//! it. With `--snapshot-count 50` the leader keeps few log entries, so a member that
//! missed a few thousand writes receives a snapshot; meanwhile a reader hammers it with
//! serializable reads and checks each one against the shape of the writes (every
//! revision wrote one `a/` and one `b/` key, in one Txn, so a revision `r` has exactly
//! `r - base` of each, and revisions never go back). Also run against etcd 3.4,
//! where the member catches up from the log instead (etcd keeps 5 000 entries for
//! that), so only the reads' consistency is checked there.

use std::time::Duration;

use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse};

use crate::harness::{Cluster, ClusterOptions, Deadline, Target};

const PAIRS: usize = 4000;

#[tokio::test]
async fn reads_during_a_snapshot_install_see_before_or_after_never_a_mix() {
    let mut cluster =
        Cluster::start_with(ClusterOptions::new(3).args(["--snapshot-count", "50"])).await;
    let leader = cluster.leader_index().await;
    let lagging = (leader + 1) % 3;
    let mut writer = cluster.client(leader).await;
    let base = writer
        .put("start", "", None)
        .await
        .expect("first put")
        .header()
        .map(|h| h.revision())
        .unwrap_or_default();

    cluster.kill9(lagging);
    // Values big enough that installing the snapshot takes a while to read through;
    // eight writers at once, so that writing them does not.
    let value = "v".repeat(1024);
    let writers = (0..8).map(|w| {
        let mut writer = writer.clone();
        let value = value.clone();
        async move {
            for i in (w..PAIRS).step_by(8) {
                let txn = Txn::new().and_then([
                    TxnOp::put(format!("a/{i:05}"), value.as_str(), None),
                    TxnOp::put(format!("b/{i:05}"), value.as_str(), None),
                ]);
                writer.txn(txn).await.expect("paired write");
            }
        }
    });
    futures::future::join_all(writers).await;
    cluster.start_member(lagging);

    let deadline = Deadline::after(Duration::from_secs(60), "the lagging member catches up");
    let give_up = std::time::Instant::now() + Duration::from_secs(60);
    let mut reader = None;
    let mut answered = 0usize;
    let mut last_revision = 0i64;
    let final_revision = base + PAIRS as i64;
    loop {
        if reader.is_none() {
            reader = etcd_client::Client::connect([cluster.endpoint(lagging)], None)
                .await
                .ok();
        }
        let Some(client) = reader.as_mut() else {
            deadline.tick().await;
            continue;
        };
        // Both counts come from one read of the store (a read-only Txn), tiny answers,
        // so that many reads land inside the install.
        let count = |prefix: &str| {
            TxnOp::get(
                prefix,
                Some(
                    GetOptions::new()
                        .with_prefix()
                        .with_count_only()
                        .with_serializable(),
                ),
            )
        };
        let got = match client
            .txn(Txn::new().and_then([count("a/"), count("b/")]))
            .await
        {
            Ok(got) => got,
            Err(_) => {
                reader = None;
                deadline.tick().await;
                continue;
            }
        };
        answered += 1;
        let revision = got.header().map(|h| h.revision()).unwrap_or_default();
        assert!(
            revision >= last_revision,
            "revision went back from {last_revision} to {revision}"
        );
        last_revision = revision;
        let counts: Vec<i64> = got
            .op_responses()
            .into_iter()
            .map(|op| match op {
                TxnOpResponse::Get(get) => get.count(),
                other => panic!("a get answered {other:?}"),
            })
            .collect();
        let pairs = revision.saturating_sub(base).max(0);
        assert_eq!(
            counts,
            [pairs, pairs],
            "a read at revision {revision} shows {counts:?} a- and b-keys, where that \
             revision has {pairs} of each"
        );
        if revision >= final_revision {
            break;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "the lagging member reached only revision {revision} of {final_revision}"
        );
        tokio::task::yield_now().await;
    }
    eprintln!("{answered} reads answered while the member caught up");
    if cluster.target() == Target::Quantykube {
        let log = std::fs::read_to_string(cluster.log_path(lagging)).expect("member log");
        assert!(
            log.contains("installed snapshot"),
            "the lagging member caught up by snapshot, as this test needs"
        );
    }
}
