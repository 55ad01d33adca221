//! Disk faults on top of power cuts: errors on chosen files, a disk that fills up, and
//! syncs that stall.
//!
//! This module owns the fault settings and the decision for each operation; the FUSE
//! layer asks it before acting. It never touches the backing tree or the durability
//! model: a failed operation changes nothing, and a stalled sync is made durable by
//! the FUSE layer once its stall is over.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The kinds of operation a fault can aim at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Reading a file's data (and mmap page faults).
    Read,
    /// Writing a file's data, or setting its size.
    Write,
    /// `fsync`/`fdatasync` of a file, or `fsync` of a directory.
    Sync,
    /// Opening or creating a file.
    Open,
}

/// Which files a fault applies to, by their path below the mount's root.
#[derive(Clone)]
pub struct FileMatch(Arc<dyn Fn(&Path) -> bool + Send + Sync>);

impl FileMatch {
    /// Files whose path satisfies `predicate`.
    pub fn new(predicate: impl Fn(&Path) -> bool + Send + Sync + 'static) -> Self {
        FileMatch(Arc::new(predicate))
    }

    /// Every file.
    pub fn any() -> Self {
        FileMatch::new(|_| true)
    }

    /// Files under `prefix` (a path below the mount's root).
    pub fn under(prefix: impl AsRef<Path>) -> Self {
        let prefix = prefix.as_ref().to_path_buf();
        FileMatch::new(move |path| path.starts_with(&prefix))
    }

    pub fn matches(&self, path: &Path) -> bool {
        (self.0)(path)
    }
}

impl fmt::Debug for FileMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FileMatch(..)")
    }
}

/// An error returned for chosen operations on chosen files.
#[derive(Clone, Debug)]
pub struct ErrorRule {
    pub op: Op,
    pub files: FileMatch,
    /// The errno, e.g. `libc::EIO`.
    pub errno: i32,
    /// How many operations fail before the rule lapses; `None`: every one.
    pub times: Option<u64>,
}

/// Syncs of chosen files that take `delay` before they complete.
#[derive(Clone, Debug)]
pub struct Stall {
    pub files: FileMatch,
    pub delay: Duration,
}

/// Reads of chosen files that return one byte with its low bit flipped, as a disk that
/// damaged a sector returns it: the byte `from_end` bytes before the file's end.
#[derive(Clone, Debug)]
pub struct Flip {
    pub files: FileMatch,
    pub from_end: u64,
}

/// Every fault in force.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    pub errors: Vec<ErrorRule>,
    pub flips: Vec<Flip>,
    /// Bytes that writes may still add past files' ends before they fail with
    /// ENOSPC; `None`: as much as the backing disk has. Freeing space does not add
    /// to it: a test gives space back by setting it again.
    pub space_left: Option<u64>,
    pub stalls: Vec<Stall>,
}

impl Faults {
    /// The errno `op` on `path` fails with, if a rule says so (counting it down).
    pub fn error_for(&mut self, op: Op, path: Option<&Path>) -> Option<i32> {
        let path = path?;
        let rule = self
            .errors
            .iter_mut()
            .find(|r| r.op == op && r.times != Some(0) && r.files.matches(path))?;
        if let Some(times) = rule.times.as_mut() {
            *times -= 1;
        }
        Some(rule.errno)
    }

    /// Takes `growth` bytes of the space left; false (ENOSPC) if there is not that much.
    pub fn take_space(&mut self, growth: u64) -> bool {
        match self.space_left.as_mut() {
            None => true,
            Some(left) if *left >= growth => {
                *left -= growth;
                true
            }
            Some(_) => false,
        }
    }

    /// The offset from the file's end of the byte a read of `path` returns flipped.
    pub fn flip_for(&self, path: Option<&Path>) -> Option<u64> {
        let path = path?;
        self.flips
            .iter()
            .find(|f| f.files.matches(path))
            .map(|f| f.from_end)
    }

    /// How long a sync of `path` stalls.
    pub fn stall_for(&self, path: Option<&Path>) -> Option<Duration> {
        let path = path?;
        self.stalls
            .iter()
            .find(|s| s.files.matches(path))
            .map(|s| s.delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_rule_counts_down_and_lapses() {
        let mut faults = Faults {
            errors: vec![ErrorRule {
                op: Op::Sync,
                files: FileMatch::under("m0"),
                errno: libc::EIO,
                times: Some(2),
            }],
            ..Faults::default()
        };
        let wal = Path::new("m0/wal/000001.log");
        assert_eq!(faults.error_for(Op::Write, Some(wal)), None);
        assert_eq!(faults.error_for(Op::Sync, Some(Path::new("m1/x"))), None);
        assert_eq!(faults.error_for(Op::Sync, Some(wal)), Some(libc::EIO));
        assert_eq!(faults.error_for(Op::Sync, Some(wal)), Some(libc::EIO));
        assert_eq!(faults.error_for(Op::Sync, Some(wal)), None);
        assert_eq!(faults.error_for(Op::Sync, None), None);
    }

    #[test]
    fn space_runs_out_and_comes_back_when_set_again() {
        let mut faults = Faults {
            space_left: Some(10),
            ..Faults::default()
        };
        assert!(faults.take_space(6));
        assert!(!faults.take_space(6));
        assert!(faults.take_space(4));
        assert!(!faults.take_space(1));
        assert!(faults.take_space(0));
        faults.space_left = None;
        assert!(faults.take_space(1 << 40));
    }
}
