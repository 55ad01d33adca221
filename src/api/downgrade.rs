//! Maintenance.Downgrade as etcd 3.6 answers it for a cluster with no older version to
//! go to: QuantyKube has one storage format, so no target version is valid.
//!
//! etcd's order of checks is kept (server/etcdserver/v3_server.go `Downgrade`,
//! server/etcdserver/version): the action, the target's format, a linearizable read,
//! then the target. CANCEL with no downgrade in progress only logs etcd's
//! `no inflight downgrade job` and answers with the cluster version, as etcd 3.6 does.
//! This module never changes anything: there is no downgrade state to change.

use tonic::Status;

use super::status;
use crate::node::Node;
use crate::proto::etcdserverpb::downgrade_request::DowngradeAction;
use crate::proto::etcdserverpb::{DowngradeRequest, DowngradeResponse};

/// etcd's `convertToClusterVersion`: a semantic version, or `major.minor`, kept as
/// (major, minor).
fn target_version(text: &str) -> Option<(i64, i64)> {
    parse_semver(text).or_else(|| parse_semver(&format!("{text}.0")))
}

/// coreos/go-semver's `NewVersion`: `major.minor.patch[-pre][+meta]`, each number what
/// Go's `strconv.ParseInt` reads, each identifier `[0-9A-Za-z-]+` separated by dots.
fn parse_semver(text: &str) -> Option<(i64, i64)> {
    let (rest, metadata) = match text.split_once('+') {
        Some((rest, metadata)) => (rest, Some(metadata)),
        None => (text, None),
    };
    let (core, pre_release) = match rest.split_once('-') {
        Some((core, pre)) => (core, Some(pre)),
        None => (rest, None),
    };
    let identifier_ok = |id: Option<&str>| {
        id.is_none_or(|id| {
            id.is_empty()
                || id.split('.').all(|part| {
                    !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                })
        })
    };
    if !identifier_ok(pre_release) || !identifier_ok(metadata) {
        return None;
    }
    let parts: Vec<&str> = core.splitn(3, '.').collect();
    let [major, minor, patch] = parts.as_slice() else {
        return None;
    };
    let number = |s: &str| -> Option<i64> {
        // ParseInt takes an optional sign; '+' and '-' were split off above.
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    number(patch)?;
    Some((number(major)?, number(minor)?))
}

/// Answers a Downgrade request; the caller fills in the header.
pub async fn downgrade(
    node: &Node,
    request: &DowngradeRequest,
) -> Result<DowngradeResponse, Status> {
    let action = DowngradeAction::try_from(request.action).map_err(|_| status::unknown_method())?;
    match action {
        DowngradeAction::Validate | DowngradeAction::Enable => {
            let Some(target) = target_version(&request.version) else {
                tracing::warn!(version = %request.version, ?action, "reject downgrade request: wrong target version format");
                return Err(status::wrong_downgrade_version_format());
            };
            node.read_barrier().await?;
            tracing::warn!(
                target = %format!("{}.{}", target.0, target.1),
                ?action,
                "reject downgrade request: QuantyKube has no older version to downgrade to"
            );
            Err(status::invalid_downgrade_target_version())
        }
        DowngradeAction::Cancel => {
            node.read_barrier().await?;
            tracing::warn!(
                error = "etcdserver: no inflight downgrade job",
                "failed to cancel downgrade"
            );
            Ok(DowngradeResponse {
                header: None,
                version: node.cluster_version(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::target_version;

    #[test]
    fn target_versions_parse_as_etcd_reads_them() {
        assert_eq!(target_version("3.5"), Some((3, 5)));
        assert_eq!(target_version("3.5.0"), Some((3, 5)));
        assert_eq!(target_version("3.5.17"), Some((3, 5)));
        assert_eq!(target_version("3.5.0-rc.1+build.7"), Some((3, 5)));
        assert_eq!(target_version("03.05"), Some((3, 5)));
        // go-semver accepts an empty pre-release.
        assert_eq!(target_version("3.5.0-"), Some((3, 5)));
        for bad in ["", "3", "v3.5", "3.5.x", "three", "3..5", "3.5.0.1"] {
            assert_eq!(target_version(bad), None, "{bad:?}");
        }
    }
}
