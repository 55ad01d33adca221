//! Power lost right after a member converted etcd's data dir in place
//! (docs/operations.md, "Migrate from etcd, in place"): etcdctl 3.4 restores a snapshot
//! of [`KEYS`] keys onto a crash filesystem (an etcd data dir, as etcd's runbooks make
//! them), the member starts on it and converts it, and the power goes before anything
//! else opened it. It must start again with every key. With `QK_TEST_TARGET=etcd`, etcd 3.4 itself starts on
//! the restored dir: the oracle.

use etcd_client::GetOptions;
use quantykube_crashfs::Torn;

use crate::first_files::commit_metadata;
use crate::harness::{restore_command, run, Target};
use crate::restore::{saved_keys, KEYS};
use crate::rig::{self, Rig, Server};

/// Every `converted/` key member 0 serves: (how many, the revision answered).
async fn served(rig: &Rig) -> (usize, i64) {
    let mut client = rig.cluster.client(0).await;
    let got = client
        .get("converted/", Some(GetOptions::new().with_prefix()))
        .await
        .expect("read the converted keys");
    for (i, kv) in got.kvs().iter().enumerate() {
        assert_eq!(kv.value_str().ok(), Some(format!("value-{i}").as_str()));
    }
    (
        got.kvs().len(),
        got.header().map(|h| h.revision()).unwrap_or_default(),
    )
}

/// Starts member 0 and waits until it has converted its data dir (QuantyKube logs it,
/// then pauses), or, for etcd, until it serves.
async fn wait_for_conversion(rig: &mut Rig, target: Target) {
    if target == Target::Etcd {
        rig.cluster.start_all().await;
        assert_eq!(served(rig).await.0, KEYS, "etcd serves the restored keys");
        return;
    }
    rig.cluster.start_member(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(rig.cluster.log_path(0))
        .is_ok_and(|log| log.contains("converted etcd's data dir in place"))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the member did not convert etcd's data dir"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// The scenario for `server`; panics with what it found.
pub async fn converted_keys_survive(server: Server) {
    if rig::unavailable().is_some() {
        return;
    }
    let (_dir, file, revision) = saved_keys(Target::Etcd, "converted/").await;

    // The cut comes in the pause after the conversion; the member then starts as
    // shipped (or with the bug alone).
    let target_binary = Target::from_env().require_binary();
    let (paused, after_the_cut) = match server {
        Server::Shipped if Target::from_env() == Target::Etcd => (server, target_binary),
        Server::Shipped => (Server::Planted("PausedAfterConversion"), target_binary),
        Server::Planted(bugs) => (
            Server::Planted(Box::leak(
                format!("{bugs},PausedAfterConversion").into_boxed_str(),
            )),
            crate::rig::planted_binary(),
        ),
    };
    let Some(mut rig) = Rig::start(1, paused, |o| o.unstarted()).await else {
        return;
    };
    // etcd's own restore, whatever the target: the data dir is etcd's.
    run(restore_command(
        Target::Etcd,
        &file,
        &rig.cluster.member_spec(0),
    ));
    // What etcdctl made is on disk before the member first starts: this tests the
    // conversion, not etcdctl (tests/crash/restore.rs does).
    commit_metadata(rig.disks[0].mountpoint());
    // The first start converts the data dir and the power goes before the member opens
    // it (QuantyKube's member pauses there, `PausedAfterConversion`, so the cut comes
    // exactly then): nothing but the conversion itself made the store durable. etcd
    // 3.4 is cut once it serves.
    let target = Target::from_env();
    wait_for_conversion(&mut rig, target).await;
    rig.cut(&[0], Torn::No);
    rig.cluster.set_binary(after_the_cut);
    rig.cluster.start_all().await;
    let (kept, answered) = served(&rig).await;
    assert_eq!(
        kept, KEYS,
        "{target} kept {kept} of the {KEYS} keys it converted (answering at revision \
         {answered}, etcd's {revision})"
    );
    assert!(
        answered >= revision,
        "{target} answers at revision {answered}, below etcd's {revision}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_converted_from_etcd_keeps_every_key_through_a_power_loss() {
    converted_keys_survive(Server::Shipped).await;
}
