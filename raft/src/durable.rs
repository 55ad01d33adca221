//! Files and directories that survive a power cut: the one way QuantyKube creates,
//! replaces, renames and removes its own files (DESIGN.md's durability rules).
//!
//! A file's data is durable once it is fsynced; its name (a create, a rename, an
//! unlink) once its directory is fsynced; a new directory once its parent is. This
//! module owns those steps, in that order, for both crates (it lives in the lowest crate
//! of ours that touches the disk; it knows nothing of raft). It never writes a file in
//! place: a file is complete under its final name or not there at all. RocksDB's own
//! files are RocksDB's business, except that a database a command fills and closes
//! must be synced by its caller first.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The directory a path's name lives in: its parent, or `.` for a bare name.
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// fsyncs the directory `dir`: the names created, renamed or removed in it are durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(feature = "planted-bugs")]
    if crate::planted::is_planted(crate::planted::RaftBug::SkipDirectorySync) {
        return Ok(());
    }
    File::open(dir)?.sync_all()
}

/// Creates `dir` and any missing parents, each made durable by an fsync of its parent.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut next = Some(dir);
    while let Some(path) = next {
        if path.as_os_str().is_empty() || path.is_dir() {
            break;
        }
        missing.push(path);
        next = path.parent();
    }
    for path in missing.into_iter().rev() {
        match fs::create_dir(path) {
            Ok(()) => {}
            // Another thread made it meanwhile: it is its maker's to sync.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && path.is_dir() => continue,
            Err(e) => return Err(e),
        }
        sync_dir(parent_of(path))?;
    }
    Ok(())
}

/// The temporary name `path` is written under before it is renamed into place.
pub fn temporary_name(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Writes the file `path` whole or not at all: its content goes to a temporary name in
/// the same directory (created with `mode`, e.g. 0o600 for a private key), is fsynced,
/// renamed over `path`, and the directory is fsynced.
pub fn write_file_with(
    path: &Path,
    mode: u32,
    write: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = temporary_name(path);
    let written = (|| {
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        write(&mut file)?;
        file.flush()?;
        file.sync_all()
    })();
    if let Err(error) = written {
        let _ = fs::remove_file(&tmp);
        return Err(error);
    }
    rename(&tmp, path)
}

/// [`write_file_with`] of `bytes`, readable by others (0o644).
pub fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_file_with(path, 0o644, |file| file.write_all(bytes))
}

/// Renames `from` to `to` (replacing it) and fsyncs both directories (one, if it is
/// the same). The file's own data must already be synced.
pub fn rename(from: &Path, to: &Path) -> io::Result<()> {
    fs::rename(from, to)?;
    let (from_dir, to_dir) = (parent_of(from), parent_of(to));
    sync_dir(to_dir)?;
    if from_dir != to_dir {
        sync_dir(from_dir)?;
    }
    Ok(())
}

/// Removes the file `path` and fsyncs its directory, so that it never comes back.
pub fn remove_file(path: &Path) -> io::Result<()> {
    fs::remove_file(path)?;
    sync_dir(parent_of(path))
}

/// Removes the directory `path` with everything in it, and fsyncs its parent.
pub fn remove_dir_all(path: &Path) -> io::Result<()> {
    fs::remove_dir_all(path)?;
    sync_dir(parent_of(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_written_whole_under_its_name_and_no_temporary_stays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("member.json");
        write_file(&path, b"old").unwrap();
        write_file(&path, b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert!(!temporary_name(&path).exists());
        let failed = write_file_with(&path, 0o600, |_| Err(io::Error::other("disk full")));
        assert!(failed.is_err());
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert!(!temporary_name(&path).exists());
    }

    #[test]
    fn missing_directories_are_made_from_the_top() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("a").join("b").join("c");
        create_dir_all(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_all(&deep).unwrap();
    }

    #[test]
    fn a_bare_name_lives_in_the_current_directory() {
        assert_eq!(parent_of(Path::new("snap.db")), Path::new("."));
        assert_eq!(parent_of(Path::new("/var/snap.db")), Path::new("/var"));
    }
}
