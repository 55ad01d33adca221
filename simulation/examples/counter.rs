//! A user's program under faults: a counter built on an etcd Txn (compare-and-swap),
//! run against a three-member QuantyKube cluster while one member crashes and restarts.
//! The user's program is `count_to` (28 lines, formatted); `main` sets up the cluster
//! and its faults (15).
//!
//! `cargo run -p quantykube-simulation --example counter`

use std::time::Duration;

use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use quantykube_simulation::{client, run_until, sim_builder, SimCluster};

type Error = Box<dyn std::error::Error>;

/// Adds one to "counter" until it reaches `target`, on any member that answers.
/// Returns how many of its increments were acknowledged (at most `target`).
async fn count_to(target: u64, endpoints: Vec<String>) -> u64 {
    let mut acknowledged = 0;
    for attempt in 0.. {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let increment = async {
            let mut etcd = client::connect(&endpoints[attempt % endpoints.len()]).await?;
            let got = etcd.get("counter", None).await?;
            let kv = got.kvs().first();
            let seen: u64 = kv.map_or(Ok("0"), |kv| kv.value_str())?.parse()?;
            let unchanged = Compare::mod_revision(
                "counter",
                CompareOp::Equal,
                kv.map_or(0, |kv| kv.mod_revision()),
            );
            let put = TxnOp::put("counter", (seen + 1).to_string(), None);
            let swapped = etcd
                .txn(Txn::new().when([unchanged]).and_then([put]))
                .await?;
            Ok::<_, Error>((seen, swapped.succeeded()))
        };
        match increment.await {
            Ok((seen, _)) if seen >= target => break,
            Ok((_, true)) => acknowledged += 1,
            _ => {} // an error or a lost race: read again
        }
    }
    acknowledged
}

fn main() -> Result<(), Error> {
    let mut sim = sim_builder(7).build();
    let cluster = SimCluster::builder().nodes(3).seed(7).build(&mut sim)?;
    let endpoints = cluster.endpoints();
    sim.client("app", async move {
        let acknowledged = count_to(20, endpoints).await;
        assert!(
            acknowledged <= 20,
            "{acknowledged} acknowledged increments of 20"
        );
        Ok(())
    });
    run_until(&mut sim, Duration::from_secs(1))?; // n2 crashes at 1 s (simulated)
    cluster.crash(&mut sim, "n2")?;
    run_until(&mut sim, Duration::from_secs(2))?; // and is back, with its data, at 2 s
    cluster.restart(&mut sim, "n2")?;
    sim.run()?;
    println!("the counter reached 20 through a crash and a restart");
    Ok(())
}
