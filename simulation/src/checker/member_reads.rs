//! A member never goes back (`member-monotonic`): of two reads one member answered,
//! the later one (invoked after the earlier completed) carries a store revision at
//! least the earlier's. A member applies the log in order and replaces its store only
//! with a newer snapshot, whole, so even a serializable read, which may be stale,
//! never shows an older store than a read the same member answered before. (In the
//! simulation a crashed member keeps every RocksDB write it made, so a restart does not
//! go back either; a replaced member comes back under a new id.)
//!
//! This module owns [`check_member_reads`]; it reads operations only, never the
//! cluster.

use std::collections::BTreeMap;

use super::Violation;
use crate::history::{Op, Operation, Outcome};

/// The first read, in invocation order, that shows its member older than a read the
/// member answered before it was invoked.
pub fn check_member_reads(operations: &[Operation]) -> Result<(), Violation> {
    let mut by_member: BTreeMap<u64, Vec<(&Operation, i64)>> = BTreeMap::new();
    for op in operations {
        if let (Op::Get { .. }, Outcome::Read { revision, .. }, Some(member)) =
            (&op.op, &op.outcome, op.member)
        {
            by_member.entry(member).or_default().push((op, *revision));
        }
    }
    for reads in by_member.values_mut() {
        reads.sort_by_key(|(op, _)| op.invoked);
        // The newest revision among the reads completed so far, with its read.
        let mut completed: Vec<(&Operation, i64)> = reads.clone();
        completed.sort_by_key(|(op, _)| op.completed);
        let mut seen = 0;
        let mut newest: Option<(&Operation, i64)> = None;
        for (read, revision) in reads.iter() {
            while let Some((done, done_revision)) = completed.get(seen) {
                if done.completed >= read.invoked {
                    break;
                }
                if newest.is_none_or(|(_, r)| *done_revision > r) {
                    newest = Some((done, *done_revision));
                }
                seen += 1;
            }
            if let Some((earlier, earlier_revision)) = newest {
                if *revision < earlier_revision {
                    return Err(Violation::new(
                        "member-monotonic",
                        format!(
                            "{read} answered at revision {revision}, after the same member \
                             answered {earlier} at revision {earlier_revision}"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn read(invoked: u64, completed: u64, member: u64, revision: i64) -> Operation {
        Operation {
            client: "c".into(),
            op: Op::Get {
                key: "k".into(),
                serializable: true,
            },
            invoked: Duration::from_millis(invoked),
            completed: Duration::from_millis(completed),
            outcome: Outcome::Read {
                revision,
                value: None,
            },
            member: Some(member),
        }
    }

    #[test]
    fn a_member_that_goes_back_is_caught() {
        let ops = [read(0, 10, 1, 50), read(20, 30, 1, 1)];
        let violation = check_member_reads(&ops).unwrap_err();
        assert_eq!(violation.property, "member-monotonic");
    }

    #[test]
    fn overlapping_reads_other_members_and_equal_revisions_pass() {
        let ops = [
            read(0, 10, 1, 50),
            // Overlaps the first: either order is possible.
            read(5, 30, 1, 40),
            // Another member may be behind.
            read(20, 30, 2, 10),
            read(40, 50, 1, 50),
            read(60, 70, 1, 51),
        ];
        assert_eq!(check_member_reads(&ops), Ok(()));
    }
}
