//! Shared by the simulation tests: logging, where data lives, and waiting in
//! simulated time.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::Duration;

use etcd_client::Client;
use quantykube_simulation::checker::{self, StoreDigest};
use quantykube_simulation::{client, History, SimCluster, SimError};

/// Logs to the test's output when `RUST_LOG` is set (e.g. `RUST_LOG=info`).
pub fn init_tracing() {
    quantykube_simulation::init_logging(true);
}

/// tmpfs when there is one: the members fsync on every append.
pub fn data_root() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// A three-member cluster on `sim`, seeded with `seed`.
pub fn three_nodes(sim: &mut turmoil::Sim<'_>, seed: u64) -> SimCluster {
    SimCluster::builder()
        .nodes(3)
        .seed(seed)
        .data_root(data_root())
        .build(sim)
        .expect("cluster")
}

/// Connects to `url`, retrying until `within` (simulated) has passed.
pub async fn connect(url: &str, within: Duration) -> Result<Client, SimError> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match client::connect(url).await {
            Ok(client) => return Ok(client),
            Err(error) if tokio::time::Instant::now() >= deadline => return Err(error),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Waits until the member at `url` knows a leader, and returns its name.
pub async fn await_leader(url: &str, within: Duration) -> Result<String, SimError> {
    let deadline = tokio::time::Instant::now() + within;
    let mut etcd = connect(url, within).await?;
    loop {
        match client::leader(&mut etcd).await {
            Ok(Some(leader)) => return Ok(leader),
            Ok(None) | Err(_) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(None) => return Err(SimError::Timeout(format!("no leader seen from {url}"))),
            Err(error) => return Err(error),
        }
    }
}

/// Steps `sim` until `done` holds; panics if the simulation fails or `limit`
/// (simulated) passes first.
pub fn step_until(sim: &mut turmoil::Sim<'_>, limit: Duration, mut done: impl FnMut() -> bool) {
    let until = sim.elapsed() + limit;
    while !done() {
        assert!(
            sim.elapsed() < until,
            "condition not reached within {limit:?} of simulated time"
        );
        sim.step().expect("simulation step");
    }
}

/// Steps `sim` for `duration` of simulated time.
pub fn step_for(sim: &mut turmoil::Sim<'_>, duration: Duration) {
    let until = sim.elapsed() + duration;
    while sim.elapsed() < until {
        sim.step().expect("simulation step");
    }
}

/// Adds a client host `name` that learns who leads (asking `url`) into the returned
/// cell, then exits.
pub fn find_leader(
    sim: &mut turmoil::Sim<'_>,
    name: &str,
    url: String,
) -> Rc<RefCell<Option<String>>> {
    let leader = Rc::new(RefCell::new(None));
    let found = leader.clone();
    sim.client(name, async move {
        let name = await_leader(&url, Duration::from_secs(10)).await?;
        *found.borrow_mut() = Some(name);
        Ok(())
    });
    leader
}

/// Steps `sim` until a probe finds the leader; returns it and the other members.
pub fn leader_and_followers(
    sim: &mut turmoil::Sim<'_>,
    cluster: &SimCluster,
) -> (String, Vec<String>) {
    let leader = find_leader(sim, "probe", cluster.endpoints()[0].clone());
    step_until(sim, Duration::from_secs(20), || leader.borrow().is_some());
    let Some(leader) = leader.borrow().clone() else {
        unreachable!("step_until returned")
    };
    let followers = cluster
        .names()
        .into_iter()
        .filter(|n| *n != leader)
        .collect();
    (leader, followers)
}

/// Adds a client host `name` that runs every check of a healed cluster over
/// `history`, failing the simulation on a violation; the digests go into the cell.
pub fn check_cluster(
    sim: &mut turmoil::Sim<'_>,
    name: &str,
    cluster: &SimCluster,
    history: &History,
) -> Rc<RefCell<Option<Vec<StoreDigest>>>> {
    let members = cluster.members();
    let history = history.clone();
    let result = Rc::new(RefCell::new(None));
    let out = result.clone();
    sim.client(name, async move {
        let operations = history.operations();
        let digests =
            checker::check_healed_cluster(&members, &operations, 1, Duration::from_secs(20))
                .await?;
        for digest in &digests {
            tracing::info!(%digest, "converged");
        }
        *out.borrow_mut() = Some(digests);
        Ok(())
    });
    result
}

/// Counts the acknowledged writes in `history`.
pub fn acknowledged(history: &History) -> usize {
    history
        .operations()
        .iter()
        .filter(|op| op.written_revision().is_some())
        .count()
}
