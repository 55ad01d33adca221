//! A user's program under faults: a counter built on an etcd Txn (compare-and-swap),
//! run against a three-member QuantyKube cluster while one member crashes and restarts.
//!
//! `cargo run -p quantykube-simulation --example counter`

use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use quantykube_simulation::{client, sim_builder, SimCluster};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut sim = sim_builder(7).build();
    let cluster = SimCluster::builder().nodes(3).seed(7).build(&mut sim)?;
    let endpoints = cluster.endpoints();

    // The user's program: add one to "counter" 20 times, retrying on conflicts and errors.
    sim.client("app", async move {
        let mut done = 0;
        while done < 20 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let Ok(mut etcd) = client::connect(&endpoints[done % 3]).await else {
                continue;
            };
            let Ok(got) = etcd.get("counter", None).await else {
                continue;
            };
            let (value, rev) = got.kvs().first().map_or((0, 0), |kv| {
                (
                    kv.value_str().unwrap_or("0").parse().unwrap_or(0),
                    kv.mod_revision(),
                )
            });
            let cas = Txn::new()
                .when([Compare::mod_revision("counter", CompareOp::Equal, rev)])
                .and_then([TxnOp::put("counter", (value + 1).to_string(), None)]);
            if matches!(etcd.txn(cas).await, Ok(r) if r.succeeded()) {
                done += 1;
            }
        }
        println!("counter incremented {done} times");
        Ok(())
    });

    // The faults: crash n2 after one simulated second, restart it a second later.
    while sim.elapsed() < Duration::from_secs(1) {
        sim.step()?;
    }
    cluster.crash(&mut sim, "n2")?;
    while sim.elapsed() < Duration::from_secs(2) {
        sim.step()?;
    }
    cluster.restart(&mut sim, "n2")?;
    sim.run()?;
    Ok(())
}
