//! A healthy three-member cluster: it elects a leader, accepts writes on every member
//! and serves linearizable reads of them from every member.

use std::time::Duration;

use etcd_client::GetOptions;
use quantykube_simulation::sim_builder;

use crate::support::{self, await_leader, connect, three_nodes};

#[test]
fn three_members_elect_a_leader_and_serve_writes_from_every_member() {
    support::init_tracing();
    let seed = 1;
    let mut sim = sim_builder(seed).build();
    let cluster = three_nodes(&mut sim, seed);
    let endpoints = cluster.endpoints();

    sim.client("c1", async move {
        let leader = await_leader(&endpoints[0], Duration::from_secs(10)).await?;
        tracing::info!(%leader, "leader elected");

        // A write through every member: followers forward to the leader.
        let mut revisions = Vec::new();
        for (i, url) in endpoints.iter().enumerate() {
            let mut etcd = connect(url, Duration::from_secs(5)).await?;
            let put = etcd
                .put(format!("key{i}"), format!("value{i}"), None)
                .await?;
            revisions.push(put.header().map_or(0, |h| h.revision()));
        }
        // A fresh store is at revision 1; each put makes one more.
        assert_eq!(revisions, [2, 3, 4]);

        // Every member reads every write, linearizably and at the latest revision.
        for url in &endpoints {
            let mut etcd = connect(url, Duration::from_secs(5)).await?;
            let all = etcd
                .get("key", Some(GetOptions::new().with_prefix()))
                .await?;
            assert_eq!(all.header().map(|h| h.revision()), Some(4), "{url}");
            let values: Vec<&[u8]> = all.kvs().iter().map(|kv| kv.value()).collect();
            assert_eq!(values, [&b"value0"[..], b"value1", b"value2"], "{url}");
        }
        Ok(())
    });

    sim.run().expect("simulation");
}

/// The read-snapshot checker holds a read to its own header revision: against a real
/// cluster it accepts the reads the cluster gave and rejects a read whose value or
/// revision was altered, as a member serving a torn or mislabelled snapshot would.
#[test]
fn read_snapshot_check_rejects_a_read_that_is_not_its_revisions_state() {
    use quantykube_simulation::checker;
    use quantykube_simulation::history::{Op, Operation, Outcome};

    support::init_tracing();
    let seed = 2;
    let mut sim = sim_builder(seed).build();
    let cluster = three_nodes(&mut sim, seed);
    let endpoints = cluster.endpoints();

    sim.client("c1", async move {
        await_leader(&endpoints[0], Duration::from_secs(10)).await?;
        let mut etcd = connect(&endpoints[1], Duration::from_secs(5)).await?;
        etcd.put("k", "v1", None).await?; // revision 2
        etcd.put("k", "v2", None).await?; // revision 3
        let read = |revision, value: Option<(&str, i64)>| Operation {
            client: "r".into(),
            op: Op::Get {
                key: "k".into(),
                serializable: true,
            },
            invoked: Duration::ZERO,
            completed: Duration::ZERO,
            outcome: Outcome::Read {
                revision,
                value: value.map(|(v, m)| (v.to_owned(), m)),
            },
            member: None,
        };
        let sound = [
            read(1, None),
            read(2, Some(("v1", 2))),
            read(3, Some(("v2", 3))),
        ];
        assert_eq!(
            checker::check_read_snapshots(&mut etcd, "n2", &sound).await,
            Ok(())
        );
        for torn in [
            read(3, Some(("v1", 2))), // an older value under a newer header
            read(2, Some(("v2", 3))), // a value from after its header
            read(2, None),            // a key missing from its revision
            read(9, Some(("v2", 3))), // a revision the store never reached
        ] {
            let verdict =
                checker::check_read_snapshots(&mut etcd, "n2", std::slice::from_ref(&torn)).await;
            assert_eq!(
                verdict.map_err(|v| v.property),
                Err("read-snapshot"),
                "{torn}"
            );
        }
        Ok(())
    });
    sim.run().expect("simulation");
}
