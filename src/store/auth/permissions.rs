//! One user's key permissions, merged from all of its roles into sorted, disjoint
//! intervals (etcd's `unifiedRangePermissions`), so that a check is a binary search
//! and never a scan of every permission.
//!
//! Intervals follow etcd's conventions: a permission with no range end covers its one
//! key; a range end of `"\0"` means every key from the start on; any other range end is
//! exclusive. A request is permitted when one interval covers all of it. This module
//! only answers questions; it never reads the store.

use std::cmp::Ordering;

use crate::proto::authpb::permission::Type as PermissionType;
use crate::proto::authpb::Permission;

/// `[start, end)`, where `end == None` is unbounded.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Interval {
    start: Vec<u8>,
    end: Option<Vec<u8>>,
}

/// The smallest key after `key`.
fn successor(key: &[u8]) -> Vec<u8> {
    let mut next = key.to_vec();
    next.push(0);
    next
}

impl Interval {
    /// The keys a permission (or a request) names, in etcd's conventions.
    fn of(key: &[u8], range_end: &[u8]) -> Interval {
        let end = match range_end {
            [] => Some(successor(key)),
            [0] => None,
            end => Some(end.to_vec()),
        };
        Interval {
            start: key.to_vec(),
            end,
        }
    }

    /// True when `end` lies at or beyond this interval's end.
    fn ends_before(&self, end: &Option<Vec<u8>>) -> bool {
        match (&self.end, end) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(mine), Some(theirs)) => mine < theirs,
        }
    }
}

/// Sorted, disjoint, non-adjacent intervals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct IntervalSet(Vec<Interval>);

impl IntervalSet {
    fn build(mut intervals: Vec<Interval>) -> IntervalSet {
        intervals.retain(|i| i.end.as_ref().is_none_or(|end| *end > i.start));
        intervals.sort_by(|a, b| a.start.cmp(&b.start));
        let mut merged: Vec<Interval> = Vec::with_capacity(intervals.len());
        for next in intervals {
            match merged.last_mut() {
                // Overlapping or touching: one interval.
                Some(last) if last.end.as_ref().is_none_or(|end| *end >= next.start) => {
                    if last.ends_before(&next.end) {
                        last.end = next.end;
                    }
                }
                _ => merged.push(next),
            }
        }
        IntervalSet(merged)
    }

    /// True when one interval holds all of `wanted`.
    fn covers(&self, wanted: &Interval) -> bool {
        // The last interval starting at or before the wanted start.
        let after = self
            .0
            .partition_point(|i| i.start.as_slice().cmp(&wanted.start) != Ordering::Greater);
        let Some(candidate) = after.checked_sub(1).map(|i| &self.0[i]) else {
            return false;
        };
        !candidate.ends_before(&wanted.end)
    }
}

/// What one user may read and write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserPermissions {
    read: IntervalSet,
    write: IntervalSet,
}

/// What a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Read,
    Write,
}

impl UserPermissions {
    /// Merges every permission of a user's roles.
    pub fn merge<'p>(permissions: impl IntoIterator<Item = &'p Permission>) -> UserPermissions {
        let mut read = Vec::new();
        let mut write = Vec::new();
        for permission in permissions {
            let interval = Interval::of(&permission.key, &permission.range_end);
            match PermissionType::try_from(permission.perm_type) {
                Ok(PermissionType::Read) => read.push(interval),
                Ok(PermissionType::Write) => write.push(interval),
                Ok(PermissionType::Readwrite) => {
                    read.push(interval.clone());
                    write.push(interval);
                }
                // A type etcd does not name grants nothing.
                Err(_) => {}
            }
        }
        UserPermissions {
            read: IntervalSet::build(read),
            write: IntervalSet::build(write),
        }
    }

    /// True when `need` is granted over every key of `key`..`range_end` (etcd's
    /// conventions: empty end is the one key, `"\0"` is every key from `key` on).
    pub fn allows(&self, need: Need, key: &[u8], range_end: &[u8]) -> bool {
        let set = match need {
            Need::Read => &self.read,
            Need::Write => &self.write,
        };
        let wanted = Interval::of(key, range_end);
        if wanted.end.as_ref().is_some_and(|end| *end <= wanted.start) {
            // An empty range reads nothing, but etcd still asks about its first key.
            return set.covers(&Interval::of(key, &[]));
        }
        set.covers(&wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(kind: PermissionType, key: &str, end: &[u8]) -> Permission {
        Permission {
            perm_type: kind as i32,
            key: key.as_bytes().to_vec().into(),
            range_end: end.to_vec().into(),
        }
    }

    #[test]
    fn a_single_key_covers_only_itself() {
        let p = UserPermissions::merge(&[perm(PermissionType::Read, "a", b"")]);
        assert!(p.allows(Need::Read, b"a", b""));
        assert!(!p.allows(Need::Read, b"ab", b""));
        assert!(!p.allows(Need::Read, b"a", b"b"));
        assert!(p.allows(Need::Read, b"a", b"a\0"));
        assert!(!p.allows(Need::Write, b"a", b""));
    }

    #[test]
    fn a_prefix_covers_its_keys_and_sub_ranges_only() {
        let p = UserPermissions::merge(&[perm(PermissionType::Readwrite, "app/", b"app0")]);
        assert!(p.allows(Need::Write, b"app/x", b""));
        assert!(p.allows(Need::Read, b"app/", b"app0"));
        assert!(p.allows(Need::Read, b"app/a", b"app/b"));
        assert!(!p.allows(Need::Read, b"app/", b"app1"));
        assert!(!p.allows(Need::Read, b"app", b""));
        assert!(!p.allows(Need::Read, b"app0", b""));
        assert!(!p.allows(Need::Read, b"app/", b"\0"));
    }

    #[test]
    fn from_key_is_unbounded() {
        let p = UserPermissions::merge(&[perm(PermissionType::Read, "m", b"\0")]);
        assert!(p.allows(Need::Read, b"m", b"\0"));
        assert!(p.allows(Need::Read, b"zzz", b""));
        assert!(p.allows(Need::Read, b"n", b"\0"));
        assert!(!p.allows(Need::Read, b"l", b"\0"));
        assert!(!p.allows(Need::Read, b"l", b""));
        let all = UserPermissions::merge(&[perm(PermissionType::Read, "", b"\0")]);
        assert!(all.allows(Need::Read, b"\0", b"\0"));
        assert!(all.allows(Need::Read, b"anything", b""));
    }

    #[test]
    fn touching_and_overlapping_grants_merge_across_roles() {
        let p = UserPermissions::merge(&[
            perm(PermissionType::Read, "a", b"c"),
            perm(PermissionType::Readwrite, "c", b"e"),
            perm(PermissionType::Read, "d", b"f"),
        ]);
        assert!(p.allows(Need::Read, b"a", b"f"));
        assert!(!p.allows(Need::Read, b"a", b"g"));
        assert!(p.allows(Need::Write, b"c", b"e"));
        assert!(!p.allows(Need::Write, b"b", b"e"));
        // A hole between grants is not covered.
        let holes = UserPermissions::merge(&[
            perm(PermissionType::Read, "a", b"b"),
            perm(PermissionType::Read, "c", b"d"),
        ]);
        assert!(!holes.allows(Need::Read, b"a", b"d"));
        assert!(holes.allows(Need::Read, b"c", b""));
        assert!(!holes.allows(Need::Read, b"b", b""));
    }

    #[test]
    fn nothing_granted_allows_nothing() {
        let p = UserPermissions::merge(&[]);
        assert!(!p.allows(Need::Read, b"a", b""));
        assert!(!p.allows(Need::Write, b"", b"\0"));
        // A grant whose end is before its key is empty.
        let empty = UserPermissions::merge(&[perm(PermissionType::Read, "b", b"a")]);
        assert!(!empty.allows(Need::Read, b"b", b""));
    }
}
