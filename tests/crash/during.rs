//! Power lost while something longer than a write is under way: compaction and
//! defragmentation, a raft snapshot being built (every 100 entries) and installed on a
//! lagging member, a member joining, `snapshot save`. Each cuts at random instants
//! inside the work, restarts, and ends with the power-loss verdict (or, for `snapshot
//! save`, with what the saved file must be).

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, CompactionOptions};
use quantykube_crashfs::{CrashFs, Torn};

use crate::harness::{etcdctl_binary, Target};
use crate::power::{rounds, Choices, Segments};
use crate::rig::{self, Rig, Server};
use crate::traffic::{Record, Traffic};
use crate::verdict;

const WRITES_WITHIN: Duration = Duration::from_secs(90);

/// Compacts (physically) a little below the current revision and defragments every
/// member, again and again, until `stop`.
async fn compact_and_defragment(endpoints: Vec<String>, stop: Arc<AtomicBool>) -> usize {
    let mut rounds = 0;
    while !stop.load(Ordering::SeqCst) {
        let Ok(mut client) = Client::connect(&endpoints[..1], None).await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        if let Ok(got) = client.get("any", None).await {
            let revision = got.header().map(|h| h.revision()).unwrap_or_default();
            let options = CompactionOptions::new().with_physical();
            let _ = client.compact((revision - 20).max(1), Some(options)).await;
        }
        for endpoint in &endpoints {
            if let Ok(mut member) = Client::connect([endpoint.as_str()], None).await {
                let _ = member.defragment().await;
            }
        }
        rounds += 1;
    }
    rounds
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_members_lose_power_during_compactions_defragments_and_snapshot_builds() {
    let Some(mut rig) =
        Rig::start(3, Server::Shipped, |o| o.args(["--snapshot-count", "100"])).await
    else {
        return;
    };
    let mut choices = Choices::new("during_compactions");
    let mut segments = Segments::start(&rig).await;
    let everyone: Vec<usize> = (0..3).collect();
    let rounds = rounds(3);
    let mut maintenance = 0;
    for round in 0..rounds {
        let traffic = Traffic::start(&segments.record, &rig.cluster.endpoints(), round, 4);
        traffic.wait_for_writes(100, WRITES_WITHIN).await;
        let stop = Arc::new(AtomicBool::new(false));
        let work = tokio::spawn(compact_and_defragment(
            rig.cluster.endpoints(),
            stop.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(200 + choices.below(1500))).await;
        let torn = choices.torn();
        rig.cut(&everyone, torn);
        stop.store(true, Ordering::SeqCst);
        traffic.stop().await;
        maintenance += work.await.unwrap_or_default();
        rig.cluster.start_all().await;
        segments.round_done(&rig).await;
    }
    eprintln!("{maintenance} compaction and defragment rounds");
    segments.finish(&rig).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_member_loses_power_while_it_receives_and_installs_a_snapshot() {
    let Some(mut rig) =
        Rig::start(3, Server::Shipped, |o| o.args(["--snapshot-count", "100"])).await
    else {
        return;
    };
    let mut choices = Choices::new("during_snapshot_install");
    let mut segments = Segments::start(&rig).await;
    let rounds = rounds(3);
    for round in 0..rounds {
        let leader = rig.cluster.leader_index().await;
        let lagger = (leader + 1 + choices.below(2) as usize) % 3;
        rig.cluster.kill9(lagger);
        let others: Vec<String> = (0..3)
            .filter(|&i| i != lagger)
            .map(|i| rig.cluster.endpoint(i))
            .collect();
        let traffic = Traffic::start(&segments.record, &others, round, 4);
        // Far more than the 100 entries a member keeps: the lagger needs a snapshot.
        traffic.wait_for_writes(400, WRITES_WITHIN).await;
        rig.cluster.start_member(lagger);
        tokio::time::sleep(Duration::from_millis(choices.below(2000))).await;
        let torn = choices.torn();
        rig.power_loss(&[lagger], torn).await;
        traffic.stop().await;
        segments.round_done(&rig).await;
    }
    segments.finish(&rig).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_member_loses_power_while_it_catches_up() {
    let Some(mut rig) =
        Rig::start(3, Server::Shipped, |o| o.args(["--snapshot-count", "100"])).await
    else {
        return;
    };
    let mut choices = Choices::new("during_join");
    let record = Record::new();
    let initial = rig.revision().await;
    let traffic = Traffic::start(&record, &rig.cluster.endpoints(), 0, 4);
    traffic.wait_for_writes(300, WRITES_WITHIN).await;
    rig.mount_disk(3);
    let leader = rig.cluster.leader_index().await;
    let joiner = rig.cluster.add_member(leader, false).await;
    assert_eq!(joiner, 3);
    tokio::time::sleep(Duration::from_millis(choices.below(2000))).await;
    let torn = choices.torn();
    rig.power_loss(&[joiner], torn).await;
    // And once more, everyone at once, the joiner among them.
    tokio::time::sleep(Duration::from_millis(choices.below(1000))).await;
    let torn = choices.torn();
    rig.power_loss(&[0, 1, 2, 3], torn).await;
    traffic.stop().await;
    verdict::judge(&rig, &record, 1, initial).await;
}

/// A disk of the machine that runs `snapshot save`, on its own crash filesystem.
struct ClientDisk {
    fs: CrashFs,
    _dir: tempfile::TempDir,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_snapshot_is_whole_or_absent_after_a_power_loss_and_whole_once_saved() {
    let Some(rig) = Rig::start(1, Server::Shipped, |o| o).await else {
        return;
    };
    if rig::unavailable().is_some() {
        return;
    }
    let mut client = rig.cluster.client(0).await;
    for i in 0..2000 {
        client
            .put(format!("saved/{i:05}"), vec![b'v'; 512], None)
            .await
            .expect("put");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut disk = ClientDisk {
        fs: CrashFs::mount(dir.path().join("work"), dir.path().join("mnt")).expect("mount"),
        _dir: dir,
    };
    disk.fs.set_names(rig::names());
    let mut choices = Choices::new("during_snapshot_save");
    let (mut whole, mut absent) = (0, 0);
    for round in 0..rounds(3) {
        let file = disk.fs.mountpoint().join(format!("backup-{round}.db"));
        let mut save = match Target::from_env() {
            Target::Etcd => {
                let mut c = std::process::Command::new(etcdctl_binary());
                c.env("ETCDCTL_API", "3");
                c
            }
            Target::Quantykube => std::process::Command::new(Target::Quantykube.require_binary()),
        };
        let mut child = save
            .args(["snapshot", "save"])
            .arg(&file)
            .args(["--endpoints", &rig.cluster.endpoint(0)])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("snapshot save");
        tokio::time::sleep(Duration::from_millis(choices.below(600))).await;
        disk.fs.power_cut();
        // The process had finished, or it is cut short now.
        let finished = child.try_wait().ok().flatten();
        let _ = child.kill();
        let _ = child.wait();
        disk.fs
            .restart(Torn::No)
            .expect("restart the client's disk");
        let said_saved = finished.is_some_and(|s| s.success());
        if file.exists() {
            let status = std::process::Command::new(etcdctl_binary())
                .env("ETCDCTL_API", "3")
                .args(["snapshot", "status"])
                .arg(&file)
                .output()
                .expect("etcdctl snapshot status");
            assert!(
                status.status.success(),
                "round {round}: after the power loss {} is there but damaged: {}",
                file.display(),
                String::from_utf8_lossy(&status.stderr)
            );
            whole += 1;
        } else {
            assert!(
                !said_saved,
                "round {round}: snapshot save said it saved {} but the file is gone",
                file.display()
            );
            absent += 1;
        }
    }
    eprintln!("saved files after power losses: {whole} whole, {absent} absent, none damaged");
}
