//! Every background task of a member, in one owner: started here, stopped together when
//! the member stops (or aborted when the owner is dropped). No task is detached.

use std::future::Future;
use std::sync::Arc;

use tokio::task::JoinSet;
use tonic_health::pb::health_server::{Health, HealthServer};

use super::start::Member;
use crate::config::Config;
use crate::node::Node;

/// The background tasks of one member.
pub(super) struct Tasks {
    running: JoinSet<()>,
}

impl Tasks {
    pub(super) fn new() -> Self {
        Tasks {
            running: JoinSet::new(),
        }
    }

    fn spawn(&mut self, name: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        self.running.spawn(async move {
            task.await;
            tracing::debug!(task = name, "background task ended");
        });
    }

    /// What runs from the start, before the member publishes itself: the metrics that
    /// follow raft, and the health source that gRPC health serves (returned).
    pub(super) fn start_observers(
        &mut self,
        node: &Arc<Node>,
        config: &Config,
    ) -> HealthServer<impl Health> {
        let election_timeout = config.election_timeout;
        crate::metrics::server::show_feature_gates(&config.feature_gates);
        self.spawn("metrics", crate::metrics::follow(node.clone()));
        let (reporter, service) = tonic_health::server::health_reporter();
        let (verdicts, serving) = tokio::sync::watch::channel(None);
        self.spawn(
            "health source",
            crate::probes::track(node.clone(), election_timeout, verdicts),
        );
        self.spawn("grpc health", crate::api::health::report(serving, reporter));
        service
    }

    /// The member's upkeep, once it has started: following the membership, carrying out
    /// membership changes, leases, compaction, the quota, corruption checks.
    pub(super) fn start_background(&mut self, member: &Member, config: &Config) {
        let node = &member.node;
        let beside = &member.beside;
        self.spawn(
            "follow membership",
            super::publish::follow_membership(node.clone()),
        );
        {
            let changes = beside.changes.clone();
            let node = node.clone();
            self.spawn("membership steward", async move {
                changes.steward(node).await;
            });
        }
        self.spawn(
            "lessor",
            crate::lessor::run(
                node.clone(),
                beside.lessor.clone(),
                config.lease_checkpoint_interval,
            ),
        );
        if let Some(policy) = config.auto_compaction {
            self.spawn("compactor", crate::compactor::run(node.clone(), policy));
        }
        self.spawn("quota", crate::quota::watch(node.clone()));
        self.spawn(
            "physical compaction",
            crate::store::run_physical_compaction(node.store().clone(), node.offload()),
        );
        self.spawn(
            "latest index upkeep",
            crate::store::run_latest_upkeep(node.store().clone(), node.offload()),
        );
        self.spawn(
            "corruption check",
            crate::corruption::run_periodic(node.clone(), config.corrupt_check_time),
        );
        if let Some(period) = config.compact_hash_check {
            use crate::corruption::compaction_hash;
            let hashes = beside.compaction_hashes.clone();
            self.spawn(
                "compaction hash recorder",
                compaction_hash::record(node.clone(), hashes.clone()),
            );
            self.spawn(
                "compaction hash check",
                compaction_hash::run_check(node.clone(), hashes, period),
            );
        }
    }

    /// Stops every task and waits until each has.
    pub(super) async fn stop(mut self) {
        self.running.shutdown().await;
    }
}
