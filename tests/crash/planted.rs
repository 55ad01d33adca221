//! Every durability guard's planted bug is caught by a power-loss or disk scenario.
//!
//! The scenarios above pass on the server as shipped; here each runs on
//! `quantykube-planted` with one guard removed (`QK_PLANTED_BUGS`), and must fail. A
//! scenario fails by panicking (a violation, a member that no longer starts), so each
//! runs on a task of its own and a panic is the catch. The registry is the table in
//! docs/durability.md; the guard of the vote's sync is caught by the log store's own
//! power-loss test (raft/tests/power_loss.rs), which runs the store in-process.

use std::future::Future;
use std::pin::Pin;

use crate::disks::{self, Role};
use crate::harness::Target;
use crate::rig::{self, Server};
use crate::{first_files, from_etcd, power, reads, restore, snapshot_files};

type Scenario = fn(Server) -> Pin<Box<dyn Future<Output = ()> + Send>>;

/// One planted bug, the guard it removes and the scenario that must catch it.
struct Case {
    bug: &'static str,
    guard: &'static str,
    scenario: &'static str,
    run: Scenario,
}

const CASES: &[Case] = &[
    Case {
        bug: "LogAcksBeforeSync",
        guard: "appended entries count (a leader's quorum, a follower's answer) only once \
                the log's fsync completed",
        scenario: "all members lose power at once under traffic (6 power losses)",
        run: |server| Box::pin(power::all_members_lose_power(server, 2)),
    },
    Case {
        bug: "RestoreWithoutSync",
        guard: "snapshot restore syncs the store it filled before the data dir is renamed \
                into place",
        scenario: "a power loss right after a restore",
        run: |server| Box::pin(restore::restored_keys_survive(server)),
    },
    Case {
        bug: "ConvertWithoutSync",
        guard: "a member converting etcd's data dir syncs the store it built before it \
                renames member.json (the conversion's commit point) into place",
        scenario: "a power loss right after a member converted etcd's data dir",
        run: |server| Box::pin(from_etcd::converted_keys_survive(server)),
    },
    Case {
        bug: "ServesBeforeCatchingUp",
        guard: "a restarted member serves clients only once it has applied everything \
                committed before it started",
        scenario: "serializable reads right after all members lost power",
        run: |server| Box::pin(reads::no_member_reads_lower_after_all_lose_power(server)),
    },
    Case {
        bug: "TransferFileUnchecked",
        guard: "a raft snapshot transfer file is checked against its trailer (length, \
                CRC-32C) before it is sent and before an install empties the store",
        scenario: "a lagging member whose disk reads its received snapshot back damaged",
        run: |server| Box::pin(snapshot_files::damaged_snapshot_never_installed(server)),
    },
    Case {
        bug: "SkipDirectorySync",
        guard: "every create, rename and removal of our files is followed by an fsync of \
                its directory (a new directory: of its parent)",
        scenario: "a power loss after an admin snapshot was recorded READY",
        run: |server| Box::pin(first_files::admin_snapshot_survives(server)),
    },
    Case {
        bug: "AppendWaitsForDisk",
        guard: "raft's core never waits for the log's disk: every write of the log is \
                made on its writer thread, so heartbeats go on while an fsync stalls",
        scenario: "the leader's syncs stall for 2-10 s under traffic (an election follows)",
        run: |server| Box::pin(disks::syncs_stall(server, Role::Leader)),
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_durability_bug_is_caught_by_a_power_loss_scenario() {
    if Target::from_env() == Target::Etcd {
        eprintln!("planted bugs are QuantyKube's: nothing to run against etcd");
        return;
    }
    if rig::unavailable().is_some() {
        return;
    }
    let mut missed = Vec::new();
    for case in CASES {
        let outcome = tokio::spawn((case.run)(Server::Planted(case.bug))).await;
        match outcome {
            Err(error) if error.is_panic() => {
                eprintln!("{} caught by {}", case.bug, case.scenario);
            }
            _ => missed.push(format!(
                "{} (guard: {}) was not caught by {}",
                case.bug, case.guard, case.scenario
            )),
        }
    }
    assert!(
        missed.is_empty(),
        "planted bugs not caught:\n{}",
        missed.join("\n")
    );
}
