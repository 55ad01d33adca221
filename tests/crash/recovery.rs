//! Power lost in the middle of an operator's recovery or reconfiguration:
//! `--force-new-cluster` (the rewrite of the survivor's log into a one-member cluster)
//! and a membership change (a member removed, everyone losing power meanwhile).

use std::time::Duration;

use crate::harness::member_remove_retrying;
use crate::power::Choices;
use crate::rig::{Rig, Server};
use crate::traffic::{Record, Traffic};
use crate::verdict;

const WRITES_WITHIN: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_forced_into_a_new_cluster_loses_power_during_the_rewrite_and_keeps_everything()
{
    let Some(mut rig) = Rig::start(3, Server::Shipped, |o| o).await else {
        return;
    };
    let mut choices = Choices::new("during_force_new_cluster");
    let record = Record::new();
    let initial = rig.revision().await;
    let traffic = Traffic::start(&record, &rig.cluster.endpoints(), 0, 4);
    traffic.wait_for_writes(200, WRITES_WITHIN).await;
    traffic.stop().await;
    // The survivor has applied every write acknowledged (a linearizable read there),
    // so everything acknowledged is in its log: the recovery must keep all of it.
    let leader = rig.cluster.leader_index().await;
    let survivor = (leader + 1) % 3;
    rig.cluster
        .client(survivor)
        .await
        .get("barrier", None)
        .await
        .expect("read barrier on the survivor");
    for i in 0..3 {
        rig.cluster.kill9(i);
    }
    rig.cluster
        .set_member_flags(survivor, &["--force-new-cluster"]);
    rig.cluster.start_member(survivor);
    tokio::time::sleep(Duration::from_millis(choices.below(1500))).await;
    let torn = choices.torn();
    rig.cut(&[survivor], torn);
    // Started again with the flag still on (etcd's guide: run it until it succeeds),
    // then without.
    rig.cluster.start_member(survivor);
    rig.cluster
        .wait_member_ready(survivor, crate::harness::START_TIMEOUT)
        .await;
    rig.cluster.kill9(survivor);
    rig.cluster.set_member_flags(survivor, &[]);
    rig.cluster.start_member(survivor);
    rig.cluster
        .wait_member_ready(survivor, crate::harness::START_TIMEOUT)
        .await;
    // Alone now: the verdict reads the one running member.
    verdict::judge(&rig, &record, 1, initial).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everyone_loses_power_while_a_member_is_removed() {
    let Some(mut rig) = Rig::start(3, Server::Shipped, |o| o).await else {
        return;
    };
    let mut choices = Choices::new("during_member_remove");
    let record = Record::new();
    let initial = rig.revision().await;
    // A fourth member first, then the removal of a follower while traffic runs.
    rig.mount_disk(3);
    let leader = rig.cluster.leader_index().await;
    let added = rig.cluster.add_member(leader, false).await;
    rig.cluster
        .wait_member_ready(added, crate::harness::START_TIMEOUT)
        .await;
    let traffic = Traffic::start(&record, &rig.cluster.endpoints()[..3], 0, 4);
    traffic.wait_for_writes(100, WRITES_WITHIN).await;
    let leader = rig.cluster.leader_index().await;
    let removed = (leader + 1 + choices.below(3) as usize) % 4;
    let id = rig.cluster.member_id(removed);
    let mut client = rig.cluster.client(leader).await;
    let removal = tokio::spawn(async move { member_remove_retrying(&mut client, id).await });
    tokio::time::sleep(Duration::from_millis(choices.below(800))).await;
    let torn = choices.torn();
    rig.cut(&[0, 1, 2, 3], torn);
    traffic.stop().await;
    let _ = removal.await;
    // Everyone starts; the removed member, if the removal committed, stops by itself.
    for i in 0..4 {
        rig.cluster.start_member(i);
    }
    let members = loop {
        let mut client = rig.cluster.client((removed + 1) % 4).await;
        if let Ok(list) = client.member_list().await {
            break list.members().iter().map(|m| m.id()).collect::<Vec<_>>();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    if !members.contains(&id) {
        // The removal committed before the cut: it must stay done, and the member stop.
        assert!(
            rig.cluster
                .wait_exit(removed, Duration::from_secs(30))
                .await
                .is_some(),
            "member {removed}, removed before the power loss, runs on"
        );
    }
    let listed: Vec<usize> = (0..4)
        .filter(|i| members.contains(&rig.cluster.member_id(*i)))
        .collect();
    for i in listed {
        rig.cluster
            .wait_member_ready(i, crate::harness::START_TIMEOUT)
            .await;
    }
    eprintln!("removal committed: {}", !members.contains(&id));
    verdict::judge(&rig, &record, 1, initial).await;
}
