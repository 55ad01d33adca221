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
