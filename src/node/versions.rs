//! Versions as etcd reports them: this member's server version, the storage version,
//! and the cluster version, the lowest `major.minor` of the members' server versions
//! (etcd 3.6's `decideClusterVersion`). Each member publishes its server version with
//! its attributes through the log (`server::publish`), so every member decides the same
//! cluster version from its applied state.

use openraft::async_runtime::WatchReceiver;

use super::Node;
use crate::store;

/// `major.minor` of `version` (etcd's `version.Cluster`); the text itself if it has no
/// minor.
pub fn major_minor(version: &str) -> String {
    let mut parts = version.split('.');
    match (parts.next(), parts.next()) {
        (Some(major), Some(minor)) => format!("{major}.{minor}"),
        _ => version.to_owned(),
    }
}

/// The lowest `major.minor` of `versions` (compared as numbers), starting from `own`.
/// A version that does not parse is left out.
pub fn lowest<'a>(own: &str, versions: impl Iterator<Item = &'a str>) -> String {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut parts = v.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some((major, minor))
    };
    let mut lowest = major_minor(own);
    for version in versions {
        if let (Some(candidate), Some(current)) = (parse(version), parse(&lowest)) {
            if candidate < current {
                lowest = major_minor(version);
            }
        }
    }
    lowest
}

impl Node {
    /// The storage format's version as etcd 3.6 reports it (`Status.storageVersion`,
    /// `/version`'s `storage`, the Snapshot RPC's `version`): this member's
    /// `major.minor.0`.
    pub fn storage_version(&self) -> String {
        format!("{}.0", major_minor(self.etcd_version()))
    }

    /// The cluster version, `major.minor`: the lowest server version the members of
    /// the current membership published. A member that has published none yet (not
    /// started since it was added, or a build before 0.2, which published none) is left
    /// out, so it is never above this member's own.
    pub fn cluster_version(&self) -> String {
        let members: Vec<u64> = self
            .raft_server_metrics()
            .borrow_watched()
            .membership_config
            .membership()
            .nodes()
            .map(|(id, _)| *id)
            .collect();
        let published: Vec<String> = members
            .into_iter()
            .filter_map(|id| {
                store::read_member_attributes(self.store(), id)
                    .ok()
                    .flatten()
            })
            .map(|attributes| attributes.etcd_version)
            .filter(|version| !version.is_empty())
            .collect();
        lowest(self.etcd_version(), published.iter().map(String::as_str))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_version_is_the_lowest_major_minor_compared_as_numbers() {
        assert_eq!(major_minor("3.7.1"), "3.7");
        assert_eq!(major_minor("3"), "3");
        assert_eq!(lowest("3.7.1", ["3.6.9", "3.10.0"].into_iter()), "3.6");
        assert_eq!(lowest("3.10.2", ["3.9.0"].into_iter()), "3.9");
        assert_eq!(lowest("3.6.0", ["3.7.0", "garbage"].into_iter()), "3.6");
        assert_eq!(lowest("3.7.1", std::iter::empty()), "3.7");
    }
}
