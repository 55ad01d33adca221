//! Member and cluster ids, computed exactly as etcd computes them for a static
//! bootstrap, so that every member derives the same ids from the same flags.
//!
//! A member's id is the first 8 bytes (big-endian) of SHA-1 over its sorted peer URLs
//! joined together and the cluster token; the cluster id is the same over the sorted
//! member ids. This module only computes; it never persists.

use sha1::{Digest, Sha1};

fn first_u64(digest: &[u8]) -> u64 {
    let mut be = [0u8; 8];
    be.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(be)
}

/// etcd's `ComputeMemberID` without a timestamp (static bootstrap).
pub fn member_id(peer_urls: &[String], cluster_token: &str) -> u64 {
    let mut urls: Vec<&str> = peer_urls.iter().map(String::as_str).collect();
    urls.sort_unstable();
    let mut hasher = Sha1::new();
    hasher.update(urls.concat().as_bytes());
    hasher.update(cluster_token.as_bytes());
    first_u64(&hasher.finalize())
}

/// etcd's cluster id: a hash of the sorted member ids.
pub fn cluster_id(member_ids: impl IntoIterator<Item = u64>) -> u64 {
    let mut ids: Vec<u64> = member_ids.into_iter().collect();
    ids.sort_unstable();
    let mut hasher = Sha1::new();
    for id in ids {
        hasher.update(id.to_be_bytes());
    }
    first_u64(&hasher.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_do_not_depend_on_url_or_member_order() {
        let a = member_id(&["http://b:2380".into(), "http://a:2380".into()], "t");
        let b = member_id(&["http://a:2380".into(), "http://b:2380".into()], "t");
        assert_eq!(a, b);
        assert_ne!(a, member_id(&["http://a:2380".into()], "t"));
        assert_ne!(
            a,
            member_id(&["http://a:2380".into(), "http://b:2380".into()], "u")
        );
        assert_eq!(cluster_id([1, 2, 3]), cluster_id([3, 1, 2]));
    }

    #[test]
    fn matches_etcds_default_member_id() {
        // etcd's well-known id of the default single member (`etcd` with no flags).
        let id = member_id(&["http://localhost:2380".into()], "etcd-cluster");
        assert_eq!(format!("{id:x}"), "8e9e05c52164694d");
    }
}
