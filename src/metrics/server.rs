//! etcd's `etcd_server_*` metrics that the server crate sees: leadership, commit and
//! apply progress, identity, version and quota, and lease expiries.
//!
//! Proposals pending and failed are counted where proposals are made, in the raft
//! crate's client (`quantykube_raft::metrics`). Leadership gauges follow raft's metrics
//! watch channel on one task; `has_leader` is `Node::has_leader`, sampled by the
//! member's health source (`probes::track`): the same answer `/health` gives, a leader
//! that heard from a quorum within an election timeout.

use std::sync::{Arc, LazyLock, RwLock, Weak};

use openraft::async_runtime::WatchReceiver;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry};
use quantykube_raft::metrics::{counter, counter_vec, gauge, gauge_vec};
use quantykube_raft::{NodeId, TypeConfig};

use crate::node::Node;

static HAS_LEADER: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
    )
});
static IS_LEADER: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
    )
});
static IS_LEARNER: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_server_is_learner",
        "Whether or not this member is a learner. 1 if is, 0 otherwise.",
    )
});
static LEADER_CHANGES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_leader_changes_seen_total",
        "The number of leader changes seen.",
    )
});
// etcd declares both as gauges (set to raft's commit and applied index), despite the
// `_total` suffix; dashboards rate() them all the same.
static PROPOSALS_COMMITTED: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
    )
});
static PROPOSALS_APPLIED: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
    )
});
static QUOTA_BACKEND_BYTES: LazyLock<IntGauge> = LazyLock::new(|| {
    gauge(
        "etcd_server_quota_backend_bytes",
        "Current backend storage quota size in bytes.",
    )
});
static SERVER_ID: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "etcd_server_id",
        "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
        &["server_id"],
    )
});
static VERSION: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "etcd_server_version",
        "Which version is running. 1 for 'server_version' label with current version.",
        &["server_version"],
    )
});
static CLUSTER_VERSION: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "etcd_cluster_version",
        "Which version is running. 1 for 'cluster_version' label with current cluster version",
        &["cluster_version"],
    )
});
static HEALTH_SUCCESS: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_health_success",
        "The total number of successful health checks",
    )
});
static HEALTH_FAILURES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_health_failures",
        "The total number of failed health checks",
    )
});
static LEARNER_PROMOTE_SUCCESSES: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_server_learner_promote_successes",
        "The total number of successful learner promotions while this member is leader.",
    )
});
static LEARNER_PROMOTE_FAILURES: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_server_learner_promote_failures",
        "The total number of failed learner promotions (likely learner not ready) while this member is leader.",
        &["Reason"],
    )
});
static KNOWN_PEERS: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "etcd_network_known_peers",
        "The current number of known peers.",
        &["Local", "Remote"],
    )
});
static HEALTHCHECK: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "etcd_server_healthcheck",
        "The result of each kind of healthcheck.",
        &["type", "name"],
    )
});
static HEALTHCHECKS: LazyLock<IntCounterVec> = LazyLock::new(|| {
    counter_vec(
        "etcd_server_healthchecks_total",
        "The total number of each kind of healthcheck.",
        &["type", "name", "status"],
    )
});
static FEATURE_ENABLED: LazyLock<IntGaugeVec> = LazyLock::new(|| {
    gauge_vec(
        "etcd_server_feature_enabled",
        "Whether or not a feature is enabled. 1 is enabled, 0 is not.",
        &["name", "stage"],
    )
});
static LEASE_EXPIRED: LazyLock<IntCounter> = LazyLock::new(|| {
    counter(
        "etcd_debugging_server_lease_expired_total",
        "The total number of expired leases.",
    )
});

pub(super) fn register(registry: &Registry) -> prometheus::Result<()> {
    let collectors: [Box<dyn Collector>; 19] = [
        Box::new(HEALTHCHECK.clone()),
        Box::new(HEALTHCHECKS.clone()),
        Box::new(FEATURE_ENABLED.clone()),
        Box::new(KNOWN_PEERS.clone()),
        Box::new(ClusterVersionGauge),
        Box::new(HEALTH_SUCCESS.clone()),
        Box::new(HEALTH_FAILURES.clone()),
        Box::new(LEARNER_PROMOTE_SUCCESSES.clone()),
        Box::new(LEARNER_PROMOTE_FAILURES.clone()),
        Box::new(HAS_LEADER.clone()),
        Box::new(IS_LEADER.clone()),
        Box::new(IS_LEARNER.clone()),
        Box::new(LEADER_CHANGES.clone()),
        Box::new(PROPOSALS_COMMITTED.clone()),
        Box::new(PROPOSALS_APPLIED.clone()),
        Box::new(QUOTA_BACKEND_BYTES.clone()),
        Box::new(SERVER_ID.clone()),
        Box::new(VERSION.clone()),
        Box::new(LEASE_EXPIRED.clone()),
    ];
    for collector in collectors {
        registry.register(collector)?;
    }
    Ok(())
}

/// Whether this member knows a leader that holds a quorum (`Node::has_leader`, set by the health source `probes::track`).
pub fn set_has_leader(has_leader: bool) {
    HAS_LEADER.set(i64::from(has_leader));
}

/// `/health` answered: healthy or not (etcd 3.4's counters of its `/health`).
pub fn health_checked(healthy: bool) {
    if healthy {
        HEALTH_SUCCESS.inc();
    } else {
        HEALTH_FAILURES.inc();
    }
}

/// One check of `/livez` or `/readyz` ran (`probe`: `livez` or `readyz`; `check`: its
/// name, as `serializable_read`): etcd 3.6's gauge of its last result and count of
/// results.
pub fn health_check_ran(probe: &str, check: &str, passed: bool) {
    HEALTHCHECK
        .with_label_values(&[probe, check])
        .set(i64::from(passed));
    let status = if passed { "success" } else { "error" };
    HEALTHCHECKS
        .with_label_values(&[probe, check, status])
        .inc();
}

/// The member's feature gates, each 1 if on (etcd's `addFeatureGateMetrics`, once at
/// start).
pub fn show_feature_gates(gates: &crate::config::FeatureGates) {
    for gate in gates.each() {
        FEATURE_ENABLED
            .with_label_values(&[gate.name, gate.stage])
            .set(i64::from(gate.enabled));
    }
}

/// This leader promoted a learner, or refused to (`reason`: the error's text as etcd
/// labels it, e.g. "can only promote a learner member which is in sync with leader").
pub fn learner_promoted(refused: Option<&str>) {
    match refused {
        None => LEARNER_PROMOTE_SUCCESSES.inc(),
        Some(reason) => LEARNER_PROMOTE_FAILURES.with_label_values(&[reason]).inc(),
    }
}

/// A lease ran out and its revocation was applied (counted by the leader's lessor).
pub fn lease_expired() {
    LEASE_EXPIRED.inc();
}

/// This member's identity series: its id in hex, its version, and the quota as etcd
/// sets the gauge (the flag, 2 GiB for 0; a negative flag, which disables the quota,
/// stays negative).
pub(super) fn describe(id: NodeId, version: &str, quota: i64) {
    SERVER_ID.reset();
    SERVER_ID
        .with_label_values(&[&quantykube_raft::metrics::peer_label(id)])
        .set(1);
    VERSION.reset();
    VERSION.with_label_values(&[version]).set(1);
    // etcd's `version.Cluster`: major.minor, until a member is observed
    // (`observe_cluster_version`).
    let cluster = crate::node::major_minor(version);
    CLUSTER_VERSION.reset();
    CLUSTER_VERSION.with_label_values(&[&cluster]).set(1);
    QUOTA_BACKEND_BYTES.set(quota);
}

/// The member whose cluster version `etcd_cluster_version` shows when scraped; weak, so
/// that a stopped member goes.
static CLUSTER_OF: RwLock<Option<Weak<Node>>> = RwLock::new(None);

/// `etcd_cluster_version` follows `node`'s cluster version (the lowest of the members',
/// as `/version` reports it) from now on.
pub(super) fn observe_cluster_version(node: &Arc<Node>) {
    *CLUSTER_OF.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::downgrade(node));
}

/// `etcd_cluster_version`, decided when scraped: one series, the observed member's
/// cluster version.
struct ClusterVersionGauge;

impl Collector for ClusterVersionGauge {
    fn desc(&self) -> Vec<&Desc> {
        CLUSTER_VERSION.desc()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let node = CLUSTER_OF
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(Weak::upgrade);
        if let Some(node) = node {
            CLUSTER_VERSION.reset();
            CLUSTER_VERSION
                .with_label_values(&[&node.cluster_version()])
                .set(1);
        }
        CLUSTER_VERSION.collect()
    }
}

/// What the raft-derived gauges hold, and how the leader-change count moves.
#[derive(Default)]
pub(super) struct RaftView {
    leader: Option<NodeId>,
    /// The members (this one included, learners too) `etcd_network_known_peers` holds
    /// at 1, as of the membership log id beside them.
    known: Option<(Option<quantykube_raft::LogId>, Vec<NodeId>)>,
}

impl RaftView {
    /// Sets the gauges from one metrics snapshot. A change counts, as etcd counts it,
    /// whenever a leader becomes known that is not the one last known (so losing the
    /// leader and finding the same one again counts once more).
    pub(super) fn update(&mut self, id: NodeId, metrics: &openraft::RaftMetrics<TypeConfig>) {
        if metrics.current_leader.is_some() && metrics.current_leader != self.leader {
            LEADER_CHANGES.inc();
        }
        self.leader = metrics.current_leader;
        let leads = metrics.current_leader == Some(id) && metrics.state.is_leader();
        IS_LEADER.set(i64::from(leads));
        let learner = metrics
            .membership_config
            .membership()
            .learner_ids()
            .any(|learner| learner == id);
        IS_LEARNER.set(i64::from(learner));
        let index = |log_id: Option<&quantykube_raft::LogId>| {
            log_id.map_or(0, |l| i64::try_from(l.index).unwrap_or(i64::MAX))
        };
        PROPOSALS_COMMITTED.set(index(metrics.local_committed.as_ref()));
        PROPOSALS_APPLIED.set(index(metrics.last_applied.as_ref()));
        self.follow_membership(id, metrics);
    }

    /// etcd's known peers: 1 for every member of the membership (this one included),
    /// 0 for one removed since. Only when the membership changed, so an update costs
    /// nothing between changes.
    fn follow_membership(&mut self, id: NodeId, metrics: &openraft::RaftMetrics<TypeConfig>) {
        let config = &metrics.membership_config;
        let log_id = config.log_id().to_owned();
        if self.known.as_ref().is_some_and(|(seen, _)| *seen == log_id) {
            return;
        }
        let members: Vec<NodeId> = config.membership().nodes().map(|(node, _)| *node).collect();
        let local = quantykube_raft::metrics::peer_label(id);
        let previous = self
            .known
            .take()
            .map(|(_, known)| known)
            .unwrap_or_default();
        for gone in previous.iter().filter(|p| !members.contains(p)) {
            KNOWN_PEERS
                .with_label_values(&[&local, &quantykube_raft::metrics::peer_label(*gone)])
                .set(0);
        }
        for member in &members {
            KNOWN_PEERS
                .with_label_values(&[&local, &quantykube_raft::metrics::peer_label(*member)])
                .set(1);
        }
        self.known = Some((log_id, members));
    }
}

/// Follows raft's metrics until raft stops.
pub(super) async fn follow_raft(
    id: NodeId,
    mut metrics: openraft::type_config::alias::WatchReceiverOf<
        TypeConfig,
        openraft::RaftMetrics<TypeConfig>,
    >,
) {
    let mut view = RaftView::default();
    loop {
        // Read in place: the metrics change with every append, and a clone each time
        // would copy the membership and replication maps on the write path's heels.
        view.update(id, &metrics.borrow_watched());
        if metrics.changed().await.is_err() {
            return;
        }
        // Raft sends new metrics on every append, commit and apply: several times per
        // write batch under load. Gauges read by a scraper every few seconds need one
        // update per interval, not one task wake-up per batch; the update after the
        // pause reads the newest state, so nothing stays stale longer than this. A
        // leader lost and found again within it would not be counted, but that takes
        // an election, which takes longer.
        tokio::time::sleep(RAFT_METRICS_COALESCING).await;
    }
}

/// How long raft's metrics changes are gathered before the gauges follow them.
const RAFT_METRICS_COALESCING: std::time::Duration = std::time::Duration::from_millis(10);
