//! The durability model: what of the backing tree a power cut would keep.
//!
//! This module owns the bookkeeping of everything written since it was last made
//! durable, and the one operation that applies a power cut to the backing tree. The
//! backing tree (`<work>/root`) always holds what processes see, as the page cache
//! would; the model remembers how to go back to what the disk holds:
//!
//! - **File data**: for each file changed since its last `fsync`/`fdatasync`, the size
//!   it had then and the original bytes of every page overwritten or truncated away
//!   below that size (an undo log), plus the order in which pages were first dirtied
//!   (for torn writes). A file created since is durable at size 0.
//! - **Directory entries**: for each directory changed since its last `fsync`, its
//!   entries as they were then (name to inode). A directory created since is durable
//!   empty. An inode that such a snapshot still names but that lost its last visible
//!   name (unlink, rmdir, a rename over it) is kept in `<work>/graveyard` instead of
//!   being deleted, so that a power cut can bring it back.
//!
//! A power cut ([`Model::lose_power`]) moves every entry that its directory's snapshot
//! does not have into the graveyard, puts back every entry it has (from the graveyard,
//! or as a hard link where the inode is still visible elsewhere), rolls every file back
//! to its synced size and bytes (or, torn, keeps a prefix of its dirtied pages), and
//! empties the graveyard. This is LazyFS's model, per directory: a rename is durable in
//! each directory once that directory is synced.
//!
//! It never talks to the kernel (the FUSE layer in `fs` does) and never syncs the
//! backing tree itself: the machine running the tests does not lose power, so what
//! survives a cut is decided here alone.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, Metadata};
use std::io;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The unit of a torn write: a prefix of a file's dirtied pages survives, in the order
/// they were first dirtied.
pub const PAGE: u64 = 4096;

/// One name of an inode: its directory's inode and the name in it.
type Link = (u64, OsString);

/// An inode the model knows, by its backing inode number.
#[derive(Debug, Default)]
struct Node {
    links: Vec<Link>,
}

/// What a file held when it was last synced.
#[derive(Debug)]
struct Unsynced {
    durable_size: u64,
    /// The synced bytes of every page changed since, below `durable_size`.
    undo: BTreeMap<u64, Vec<u8>>,
    /// Pages dirtied since the sync, in the order they were first dirtied.
    dirty: Vec<u64>,
    dirty_set: HashSet<u64>,
}

impl Unsynced {
    fn new(durable_size: u64) -> Self {
        Unsynced {
            durable_size,
            undo: BTreeMap::new(),
            dirty: Vec::new(),
            dirty_set: HashSet::new(),
        }
    }

    /// Records that `[start, end)` is about to change, saving the synced bytes of the
    /// pages it touches below the synced size.
    fn touch(&mut self, file: &File, start: u64, end: u64) -> io::Result<()> {
        if end <= start {
            return Ok(());
        }
        for page in start / PAGE..=(end - 1) / PAGE {
            if self.dirty_set.insert(page) {
                self.dirty.push(page);
            }
            let page_start = page * PAGE;
            if page_start < self.durable_size && !self.undo.contains_key(&page) {
                let len = (self.durable_size - page_start).min(PAGE) as usize;
                let mut bytes = vec![0; len];
                read_up_to(file, &mut bytes, page_start)?;
                self.undo.insert(page, bytes);
            }
        }
        Ok(())
    }

    /// Puts `file` back as a power cut leaves it: the synced bytes and size, and with
    /// `keep` dirtied pages (a torn write) the first `keep` of them as written.
    fn roll_back(&self, file: &File, keep: usize) -> io::Result<u64> {
        let current = file.metadata()?.len();
        let kept: HashSet<u64> = self.dirty.iter().take(keep).copied().collect();
        let mut size = self.durable_size;
        for &page in &kept {
            size = size.max(((page + 1) * PAGE).min(current));
        }
        for (&page, bytes) in &self.undo {
            if !kept.contains(&page) {
                file.write_all_at(bytes, page * PAGE)?;
            }
        }
        // A dirtied page that is not kept reads as zeros where the file grew: the
        // disk never saw it (as ext4's ordered mode never shows stale blocks).
        for &page in self.dirty.iter().skip(keep) {
            let start = (page * PAGE).max(self.durable_size);
            let end = ((page + 1) * PAGE).min(size);
            if start < end {
                file.write_all_at(&vec![0; (end - start) as usize], start)?;
            }
        }
        file.set_len(size)?;
        Ok(current.saturating_sub(size))
    }
}

/// What a power cut did to the backing tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PowerLossReport {
    /// Files rolled back to their synced state.
    pub files_rolled_back: usize,
    /// Bytes that the roll-backs dropped from files' ends.
    pub bytes_dropped: u64,
    /// Directory entries undone (created, or renamed in, since the directory's sync).
    pub entries_removed: usize,
    /// Directory entries put back (removed, or renamed away, since the sync).
    pub entries_restored: usize,
}

/// The model of one crash filesystem's backing tree.
#[derive(Debug)]
pub struct Model {
    root: PathBuf,
    graveyard: PathBuf,
    root_ino: u64,
    graveyard_ino: u64,
    nodes: HashMap<u64, Node>,
    /// Directories changed since their last sync: their entries as of that sync.
    dirs: HashMap<u64, BTreeMap<OsString, u64>>,
    /// Files changed since their last sync.
    files: HashMap<u64, Unsynced>,
    /// Inodes kept in the graveyard at its top level (see the module docs).
    graves: HashSet<u64>,
    next_grave: u64,
}

impl Model {
    /// The model of `<work>/root` with nothing unsynced (the disk as it is), making the
    /// two directories if they are missing and emptying the graveyard.
    pub fn open(work: &Path) -> io::Result<Model> {
        let root = work.join("root");
        let graveyard = work.join("graveyard");
        fs::create_dir_all(&root)?;
        if graveyard.exists() {
            fs::remove_dir_all(&graveyard)?;
        }
        fs::create_dir_all(&graveyard)?;
        let root_ino = fs::metadata(&root)?.ino();
        let graveyard_ino = fs::metadata(&graveyard)?.ino();
        Ok(Model {
            root,
            graveyard,
            root_ino,
            graveyard_ino,
            nodes: HashMap::new(),
            dirs: HashMap::new(),
            files: HashMap::new(),
            graves: HashSet::new(),
            next_grave: 0,
        })
    }

    /// The backing inode number of the visible root.
    pub fn root_ino(&self) -> u64 {
        self.root_ino
    }

    /// Where the inode lives in the backing tree now (through its first name).
    pub fn path(&self, ino: u64) -> Option<PathBuf> {
        self.path_within(ino, 0)
    }

    fn path_within(&self, ino: u64, depth: usize) -> Option<PathBuf> {
        if ino == self.root_ino {
            return Some(self.root.clone());
        }
        if ino == self.graveyard_ino {
            return Some(self.graveyard.clone());
        }
        // A cycle cannot happen in a tree; the bound keeps a bookkeeping slip from
        // hanging the filesystem.
        if depth > 4096 {
            return None;
        }
        let (parent, name) = self.nodes.get(&ino)?.links.first()?;
        Some(self.path_within(*parent, depth + 1)?.join(name))
    }

    /// The backing path of `name` in directory `parent`.
    pub fn child_path(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        Some(self.path(parent)?.join(name))
    }

    /// The path of `ino` below the visible root, for fault rules; `None` for inodes in
    /// the graveyard or unknown.
    pub fn visible_path(&self, ino: u64) -> Option<PathBuf> {
        let path = self.path(ino)?;
        path.strip_prefix(&self.root).ok().map(Path::to_path_buf)
    }

    /// Records that `name` in `parent` is inode `ino` (seen by a lookup or a listing).
    pub fn learn(&mut self, parent: u64, name: &OsStr, ino: u64) {
        let links = &mut self.nodes.entry(ino).or_default().links;
        if !links.iter().any(|(p, n)| *p == parent && n == name) {
            links.push((parent, name.to_owned()));
        }
    }

    fn forget_link(&mut self, parent: u64, name: &OsStr, ino: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.links.retain(|(p, n)| !(*p == parent && n == name));
        }
    }

    /// Remembers `dir`'s entries as they are now, before its first change since its
    /// last sync.
    fn before_dir_change(&mut self, dir: u64) -> io::Result<()> {
        if self.dirs.contains_key(&dir) {
            return Ok(());
        }
        let path = self.path(dir).ok_or_else(stale)?;
        let mut entries = BTreeMap::new();
        for entry in fs::read_dir(&path)? {
            let entry = entry?;
            entries.insert(entry.file_name(), entry.ino());
        }
        for (name, ino) in &entries {
            self.learn(dir, name, *ino);
        }
        self.dirs.insert(dir, entries);
        Ok(())
    }

    fn referenced(&self) -> HashSet<u64> {
        self.dirs
            .values()
            .flat_map(|e| e.values().copied())
            .collect()
    }

    /// Takes away the name `name` of `ino` in `parent` (already remembered by
    /// `before_dir_change`): a plain unlink, unless it was the inode's last name and a
    /// directory's snapshot still names it, in which case it moves to the graveyard.
    fn drop_name(&mut self, parent: u64, name: &OsStr, ino: u64, is_dir: bool) -> io::Result<()> {
        let path = self.child_path(parent, name).ok_or_else(stale)?;
        self.forget_link(parent, name, ino);
        let last = self.nodes.get(&ino).is_none_or(|n| n.links.is_empty());
        if last && self.referenced().contains(&ino) {
            let grave = self.bury(ino, &path)?;
            self.learn(self.graveyard_ino, &grave, ino);
            return Ok(());
        }
        if is_dir {
            fs::remove_dir(&path)?;
        } else {
            fs::remove_file(&path)?;
        }
        if last {
            self.nodes.remove(&ino);
            self.files.remove(&ino);
            self.dirs.remove(&ino);
        }
        Ok(())
    }

    /// Moves what is at `path` into the graveyard; returns its name there.
    fn bury(&mut self, ino: u64, path: &Path) -> io::Result<OsString> {
        self.next_grave += 1;
        let grave = OsString::from(format!("{ino}.{}", self.next_grave));
        fs::rename(path, self.graveyard.join(&grave))?;
        self.graves.insert(ino);
        Ok(grave)
    }

    /// A new file, directory or symlink `name` in `parent`: made by `make` on its
    /// backing path, durable empty (a file at size 0, a directory without entries) and
    /// visible in `parent` only once `parent` is synced.
    pub fn create<T>(
        &mut self,
        parent: u64,
        name: &OsStr,
        make: impl FnOnce(&Path) -> io::Result<T>,
    ) -> io::Result<(T, Metadata)> {
        self.before_dir_change(parent)?;
        let path = self.child_path(parent, name).ok_or_else(stale)?;
        let made = make(&path)?;
        let meta = fs::symlink_metadata(&path)?;
        let ino = meta.ino();
        // A reused inode number starts afresh.
        self.nodes.remove(&ino);
        self.files.remove(&ino);
        self.dirs.remove(&ino);
        self.graves.remove(&ino);
        self.learn(parent, name, ino);
        if meta.is_dir() {
            self.dirs.insert(ino, BTreeMap::new());
        } else if meta.is_file() {
            self.files.insert(ino, Unsynced::new(0));
        }
        Ok((made, meta))
    }

    /// A hard link `newname` in `newparent` to `ino`.
    pub fn link(&mut self, ino: u64, newparent: u64, newname: &OsStr) -> io::Result<Metadata> {
        self.before_dir_change(newparent)?;
        let from = self.path(ino).ok_or_else(stale)?;
        let to = self.child_path(newparent, newname).ok_or_else(stale)?;
        fs::hard_link(&from, &to)?;
        self.learn(newparent, newname, ino);
        fs::symlink_metadata(&to)
    }

    /// Removes the file (or symlink) `name` from `parent`.
    pub fn unlink(&mut self, parent: u64, name: &OsStr) -> io::Result<()> {
        let path = self.child_path(parent, name).ok_or_else(stale)?;
        let meta = fs::symlink_metadata(&path)?;
        if meta.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        self.before_dir_change(parent)?;
        self.drop_name(parent, name, meta.ino(), false)
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&mut self, parent: u64, name: &OsStr) -> io::Result<()> {
        let path = self.child_path(parent, name).ok_or_else(stale)?;
        let meta = fs::symlink_metadata(&path)?;
        if !meta.is_dir() {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        if fs::read_dir(&path)?.next().is_some() {
            return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY));
        }
        self.before_dir_change(parent)?;
        self.drop_name(parent, name, meta.ino(), true)
    }

    /// Renames `name` in `parent` to `newname` in `newparent`, replacing what is there
    /// unless `noreplace`.
    pub fn rename(
        &mut self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        noreplace: bool,
    ) -> io::Result<()> {
        let from = self.child_path(parent, name).ok_or_else(stale)?;
        let to = self.child_path(newparent, newname).ok_or_else(stale)?;
        let moved = fs::symlink_metadata(&from)?;
        let replaced = match fs::symlink_metadata(&to) {
            Ok(meta) => Some(meta),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if let Some(target) = &replaced {
            if target.ino() == moved.ino() {
                return Ok(());
            }
            if noreplace {
                return Err(io::Error::from_raw_os_error(libc::EEXIST));
            }
            match (moved.is_dir(), target.is_dir()) {
                (true, false) => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
                (false, true) => return Err(io::Error::from_raw_os_error(libc::EISDIR)),
                (true, true) if fs::read_dir(&to)?.next().is_some() => {
                    return Err(io::Error::from_raw_os_error(libc::ENOTEMPTY))
                }
                _ => {}
            }
        }
        self.before_dir_change(parent)?;
        self.before_dir_change(newparent)?;
        if let Some(target) = replaced {
            self.drop_name(newparent, newname, target.ino(), target.is_dir())?;
        }
        fs::rename(&from, &to)?;
        self.forget_link(parent, name, moved.ino());
        self.learn(newparent, newname, moved.ino());
        Ok(())
    }

    /// Writes `data` at `offset` of inode `ino` through its open backing `file`.
    pub fn write(&mut self, ino: u64, file: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        self.before_data_change(ino, file, offset, offset + data.len() as u64)?;
        file.write_all_at(data, offset)
    }

    /// Sets inode `ino`'s size through its open backing `file`.
    pub fn truncate(&mut self, ino: u64, file: &File, size: u64) -> io::Result<()> {
        // Growing changes no page the disk holds; the synced size still bounds what a
        // power cut keeps.
        let current = file.metadata()?.len();
        self.before_data_change(ino, file, size, current)?;
        file.set_len(size)
    }

    fn before_data_change(
        &mut self,
        ino: u64,
        file: &File,
        start: u64,
        end: u64,
    ) -> io::Result<()> {
        // An inode with no name left that no snapshot names is gone at a power cut
        // whatever it holds.
        if !self.nodes.contains_key(&ino) {
            return Ok(());
        }
        let unsynced = match self.files.entry(ino) {
            std::collections::hash_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(Unsynced::new(file.metadata()?.len()))
            }
        };
        unsynced.touch(file, start, end)
    }

    /// `fsync`/`fdatasync` of a file: its data and size are durable.
    pub fn sync_file(&mut self, ino: u64) {
        self.files.remove(&ino);
    }

    /// `fsync` of a directory: its entries are durable. Inodes in the graveyard that
    /// no snapshot names any longer are deleted for good.
    pub fn sync_dir(&mut self, ino: u64) -> io::Result<()> {
        if self.dirs.remove(&ino).is_none() {
            return Ok(());
        }
        self.collect_graves(false)
    }

    /// Every directory's entries are durable (a journal commit), file data as it was.
    pub fn sync_every_name(&mut self) -> io::Result<()> {
        if self.dirs.is_empty() {
            return Ok(());
        }
        self.dirs.clear();
        self.collect_graves(true)
    }

    /// What `sync(2)` followed by an `fsync` of every directory would make durable:
    /// everything.
    pub fn sync_everything(&mut self) -> io::Result<()> {
        self.files.clear();
        self.dirs.clear();
        self.collect_graves(true)
    }

    fn collect_graves(&mut self, all: bool) -> io::Result<()> {
        let referenced = self.referenced();
        let graves: Vec<u64> = self.graves.iter().copied().collect();
        for ino in graves {
            if referenced.contains(&ino) {
                continue;
            }
            let Some(path) = self.path(ino) else {
                self.graves.remove(&ino);
                continue;
            };
            let meta = fs::symlink_metadata(&path)?;
            // A directory may hold inodes that snapshots name elsewhere: it stays until
            // a power cut sorts it out, unless everything is durable.
            if meta.is_dir() {
                if !all {
                    continue;
                }
                fs::remove_dir_all(&path)?;
            } else {
                fs::remove_file(&path)?;
            }
            self.graves.remove(&ino);
            self.nodes.remove(&ino);
            self.files.remove(&ino);
        }
        Ok(())
    }

    /// Bytes and entries not yet durable, for tests and reports.
    pub fn pending(&self) -> (usize, usize) {
        (self.files.len(), self.dirs.len())
    }

    /// Applies a power cut to the backing tree: afterwards it holds exactly what was
    /// durable. `torn` chooses, for each file with unsynced pages, how many of them (in
    /// the order they were dirtied) survive anyway; `None` keeps none. Call it only
    /// while nothing has the backing tree open.
    pub fn lose_power(
        &mut self,
        mut torn: Option<&mut dyn FnMut(usize) -> usize>,
    ) -> io::Result<PowerLossReport> {
        let mut report = PowerLossReport::default();
        let dirs: Vec<(u64, BTreeMap<OsString, u64>)> = self.dirs.drain().collect();
        // 1. Entries their directory's snapshot lacks go to the graveyard.
        for (dir, durable) in &dirs {
            let Some(path) = self.path(*dir) else {
                continue;
            };
            let mut current = Vec::new();
            for entry in fs::read_dir(&path)? {
                let entry = entry?;
                current.push((entry.file_name(), entry.ino()));
            }
            for (name, ino) in current {
                if durable.get(&name) != Some(&ino) {
                    self.learn(*dir, &name, ino);
                    let grave = self.bury(ino, &path.join(&name))?;
                    self.forget_link(*dir, &name, ino);
                    self.learn(self.graveyard_ino, &grave, ino);
                    report.entries_removed += 1;
                }
            }
        }
        // 2. Entries the snapshots have and the directories lack come back.
        for (dir, durable) in &dirs {
            let Some(path) = self.path(*dir) else {
                continue;
            };
            for (name, &ino) in durable {
                let target = path.join(name);
                if fs::symlink_metadata(&target).is_ok() {
                    continue;
                }
                let Some(from) = self.path(ino) else {
                    return Err(io::Error::other(format!(
                        "crashfs: inode {ino}, durable as {}, was lost",
                        target.display()
                    )));
                };
                let visible_elsewhere = !from.starts_with(&self.graveyard);
                if visible_elsewhere && !fs::symlink_metadata(&from)?.is_dir() {
                    fs::hard_link(&from, &target)?;
                } else {
                    fs::rename(&from, &target)?;
                    if let Some(node) = self.nodes.get_mut(&ino) {
                        node.links.clear();
                    }
                    self.graves.remove(&ino);
                }
                self.learn(*dir, name, ino);
                report.entries_restored += 1;
            }
        }
        // 3. Files go back to their synced bytes.
        let files: Vec<(u64, Unsynced)> = self.files.drain().collect();
        for (ino, unsynced) in files {
            let Some(path) = self.path(ino) else {
                continue;
            };
            if path.starts_with(&self.graveyard) {
                continue;
            }
            let file = File::options().read(true).write(true).open(&path)?;
            let keep = match torn.as_mut() {
                Some(choose) => choose(unsynced.dirty.len()).min(unsynced.dirty.len()),
                None => 0,
            };
            report.bytes_dropped += unsynced.roll_back(&file, keep)?;
            report.files_rolled_back += 1;
        }
        // 4. What is left in the graveyard was never durable anywhere.
        fs::remove_dir_all(&self.graveyard)?;
        fs::create_dir_all(&self.graveyard)?;
        self.graveyard_ino = fs::metadata(&self.graveyard)?.ino();
        self.graves.clear();
        self.nodes.clear();
        Ok(report)
    }
}

fn stale() -> io::Error {
    io::Error::from_raw_os_error(libc::ESTALE)
}

/// Reads as much of `buf` as the file holds at `offset`, leaving the rest zero.
fn read_up_to(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
