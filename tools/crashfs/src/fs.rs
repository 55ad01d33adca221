//! The FUSE side: every request the kernel sends, answered from the backing tree with
//! the durability model and the faults consulted (the `fuser::Filesystem` entry points
//! are in `fs/kernel.rs`; the work behind them is here).
//!
//! This module owns the translation between the kernel's inode numbers and file
//! handles and the backing tree's, and the power switch: once the power is cut, every
//! request fails with EIO and nothing changes any more, so what is durable is fixed at
//! that instant. It never decides what is durable (the model does) or which request
//! fails (the faults do).
//!
//! Inode numbers are the backing tree's, except that the visible root is the kernel's
//! inode 1 (and a backing inode 1, if there is one, takes the root's number). The
//! kernel's caches are write-through (no writeback cache), so every write reaches the
//! model as it happens.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, FileTimes, Metadata, OpenOptions};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileHandle, FileType, INodeNo, ReplyEmpty, TimeOrNow};

use crate::faults::{Faults, Op};
use crate::model::{Model, PAGE};

mod kernel;

/// Counters of what the filesystem was asked to do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub writes: u64,
    pub bytes_written: u64,
    pub file_syncs: u64,
    pub dir_syncs: u64,
    /// Requests refused because of a fault (not counting those after a power cut).
    pub faults_injected: u64,
    /// Syncs that a stall held (counted when the stall begins).
    pub syncs_stalled: u64,
    /// Syncs a stall holds right now: a test can tell "while the disk stalled" by
    /// this count, not by a clock.
    pub syncs_stalling: u64,
}

/// What the mounted filesystem and its controller share.
#[derive(Debug)]
pub struct State {
    pub model: Model,
    pub faults: Faults,
    pub stats: Stats,
    pub names: Names,
}

/// When a create, rename or unlink becomes durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Names {
    /// Once its directory is fsynced, and not before (POSIX's promise, and LazyFS's).
    #[default]
    PerDirectory,
    /// With the next fsync of anything: the filesystem journals every name change in
    /// order and commits the journal on each fsync, as ext4 and XFS do.
    Journaled,
}

#[derive(Debug)]
pub struct Shared {
    state: Mutex<State>,
    powered: AtomicBool,
}

impl Shared {
    pub fn new(model: Model) -> Self {
        Shared {
            state: Mutex::new(State {
                model,
                faults: Faults::default(),
                stats: Stats::default(),
                names: Names::default(),
            }),
            powered: AtomicBool::new(true),
        }
    }

    /// The state, even if a thread panicked holding it: the model's bookkeeping stays
    /// usable, and a test should see what it holds rather than a second panic.
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn powered(&self) -> bool {
        self.powered.load(Ordering::SeqCst)
    }

    /// Cuts the power: requests under way finish (they hold the state), every later one
    /// fails.
    pub fn cut(&self) {
        let _state = self.lock();
        self.powered.store(false, Ordering::SeqCst);
    }

    pub fn restore(&self) {
        self.powered.store(true, Ordering::SeqCst);
    }
}

/// An open file or directory.
#[derive(Debug)]
struct Handle {
    ino: u64,
    /// The backing file, opened for reading and writing whatever the caller asked (the
    /// model reads pages back before they are overwritten); `None` for a directory.
    file: Option<File>,
    /// Opened with `O_SYNC` or `O_DSYNC`: each write is durable when it returns.
    sync_writes: bool,
}

/// The `fuser::Filesystem` of one mount.
#[derive(Debug)]
pub struct CrashFilesystem {
    shared: Arc<Shared>,
    root_ino: u64,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_handle: AtomicU64,
}

enum SyncTarget {
    File(u64),
    Dir(u64),
}

type Result<T> = std::result::Result<T, Errno>;

fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

impl CrashFilesystem {
    pub fn new(shared: Arc<Shared>) -> Self {
        let root_ino = shared.lock().model.root_ino();
        CrashFilesystem {
            shared,
            root_ino,
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
        }
    }

    /// The kernel's inode number and the backing tree's map onto each other by one
    /// swap, which is its own inverse.
    fn swap(&self, ino: u64) -> u64 {
        if ino == INodeNo::ROOT.0 {
            self.root_ino
        } else if ino == self.root_ino {
            INodeNo::ROOT.0
        } else {
            ino
        }
    }

    fn backing(&self, ino: INodeNo) -> u64 {
        self.swap(ino.0)
    }

    fn powered(&self) -> Result<()> {
        if self.shared.powered() {
            Ok(())
        } else {
            Err(Errno::EIO)
        }
    }

    /// The state, once the power is known to be on (checked again under the lock, so
    /// that nothing changes after a cut).
    fn state(&self) -> Result<MutexGuard<'_, State>> {
        let state = self.shared.lock();
        self.powered()?;
        Ok(state)
    }

    fn attr(&self, meta: &Metadata) -> FileAttr {
        let time = |secs: i64, nanos: i64| {
            if secs >= 0 {
                UNIX_EPOCH + Duration::new(secs as u64, nanos as u32)
            } else {
                UNIX_EPOCH
            }
        };
        FileAttr {
            ino: INodeNo(self.swap(meta.ino())),
            size: meta.len(),
            blocks: meta.blocks(),
            atime: time(meta.atime(), meta.atime_nsec()),
            mtime: time(meta.mtime(), meta.mtime_nsec()),
            ctime: time(meta.ctime(), meta.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind: FileType::from_std(meta.file_type()).unwrap_or(FileType::RegularFile),
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev() as u32,
            blksize: PAGE as u32,
            flags: 0,
        }
    }

    fn handle(&self, fh: FileHandle) -> Result<Arc<Handle>> {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    fn add_handle(&self, handle: Handle) -> FileHandle {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, Arc::new(handle));
        FileHandle(fh)
    }

    fn path(&self, state: &State, ino: u64) -> Result<PathBuf> {
        state.model.path(ino).ok_or(Errno::ENOENT)
    }

    /// Fails `op` on `ino` if a fault rule says so.
    fn fault(&self, state: &mut State, op: Op, ino: u64) -> Result<()> {
        if state.faults.errors.is_empty() {
            return Ok(());
        }
        let path = state.model.visible_path(ino);
        match state.faults.error_for(op, path.as_deref()) {
            Some(code) => {
                state.stats.faults_injected += 1;
                Err(Errno::from_i32(code))
            }
            None => Ok(()),
        }
    }

    fn entry(&self, parent: INodeNo, name: &OsStr) -> Result<FileAttr> {
        let mut state = self.state()?;
        let parent = self.backing(parent);
        let path = state.model.child_path(parent, name).ok_or(Errno::ENOENT)?;
        let meta = fs::symlink_metadata(&path).map_err(errno)?;
        state.model.learn(parent, name, meta.ino());
        Ok(self.attr(&meta))
    }

    fn getattr_of(&self, ino: INodeNo, fh: Option<FileHandle>) -> Result<FileAttr> {
        let state = self.state()?;
        if let Some(handle) = fh.and_then(|fh| self.handle(fh).ok()) {
            if let Some(file) = &handle.file {
                return file.metadata().map(|m| self.attr(&m)).map_err(errno);
            }
        }
        let path = self.path(&state, self.backing(ino))?;
        fs::symlink_metadata(path)
            .map(|m| self.attr(&m))
            .map_err(errno)
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr_of(
        &self,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        fh: Option<FileHandle>,
    ) -> Result<FileAttr> {
        let mut state = self.state()?;
        let ino = self.backing(ino);
        let path = self.path(&state, ino)?;
        if let Some(size) = size {
            self.fault(&mut state, Op::Write, ino)?;
            let handle = fh
                .and_then(|fh| self.handle(fh).ok())
                .filter(|h| h.file.is_some());
            let opened;
            let file = match &handle {
                Some(handle) => handle.file.as_ref().ok_or(Errno::EBADF)?,
                None => {
                    opened = OpenOptions::new()
                        .read(true)
                        .write(true)
                        .open(&path)
                        .map_err(errno)?;
                    &opened
                }
            };
            let growth = size.saturating_sub(file.metadata().map_err(errno)?.len());
            if !state.faults.take_space(growth) {
                state.stats.faults_injected += 1;
                return Err(Errno::ENOSPC);
            }
            state.model.truncate(ino, file, size).map_err(errno)?;
        }
        set_metadata(&path, mode, uid, gid, atime, mtime).map_err(errno)?;
        fs::symlink_metadata(&path)
            .map(|m| self.attr(&m))
            .map_err(errno)
    }

    fn open_file(&self, ino: INodeNo, flags: i32) -> Result<FileHandle> {
        let mut state = self.state()?;
        let ino = self.backing(ino);
        self.fault(&mut state, Op::Open, ino)?;
        let path = self.path(&state, ino)?;
        let file = open_backing(&path, flags).map_err(errno)?;
        Ok(self.add_handle(Handle {
            ino,
            file: Some(file),
            sync_writes: flags & (libc::O_SYNC | libc::O_DSYNC) != 0,
        }))
    }

    fn read_data(&self, fh: FileHandle, offset: u64, size: u32) -> Result<Vec<u8>> {
        let handle = self.handle(fh)?;
        let flip = {
            let mut state = self.state()?;
            self.fault(&mut state, Op::Read, handle.ino)?;
            if state.faults.flips.is_empty() {
                None
            } else {
                let path = state.model.visible_path(handle.ino);
                state.faults.flip_for(path.as_deref())
            }
        };
        let file = handle.file.as_ref().ok_or(Errno::EISDIR)?;
        let mut buf = vec![0; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match std::os::unix::fs::FileExt::read_at(file, &mut buf[done..], offset + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(errno(e)),
            }
        }
        buf.truncate(done);
        if let Some(from_end) = flip {
            let len = file.metadata().map_err(errno)?.len();
            if let Some(at) = len.checked_sub(from_end + 1) {
                if (offset..offset + done as u64).contains(&at) {
                    buf[(at - offset) as usize] ^= 0x01;
                    self.shared.lock().stats.faults_injected += 1;
                }
            }
        }
        Ok(buf)
    }

    fn write_data(&self, fh: FileHandle, offset: u64, data: &[u8]) -> Result<u32> {
        let handle = self.handle(fh)?;
        let file = handle.file.as_ref().ok_or(Errno::EISDIR)?;
        let mut state = self.state()?;
        self.fault(&mut state, Op::Write, handle.ino)?;
        let end = offset + data.len() as u64;
        let growth = end.saturating_sub(file.metadata().map_err(errno)?.len());
        if !state.faults.take_space(growth) {
            state.stats.faults_injected += 1;
            return Err(Errno::ENOSPC);
        }
        state
            .model
            .write(handle.ino, file, offset, data)
            .map_err(errno)?;
        if handle.sync_writes {
            state.model.sync_file(handle.ino);
        }
        state.stats.writes += 1;
        state.stats.bytes_written += data.len() as u64;
        Ok(data.len() as u32)
    }

    /// An fsync: refused by a fault, stalled, or made durable at once.
    fn sync(&self, target: SyncTarget, reply: ReplyEmpty) {
        let ino = match target {
            SyncTarget::File(ino) | SyncTarget::Dir(ino) => ino,
        };
        let stall = {
            let mut state = match self.state() {
                Ok(state) => state,
                Err(e) => return reply.error(e),
            };
            if let Err(e) = self.fault(&mut state, Op::Sync, ino) {
                return reply.error(e);
            }
            let path = state.model.visible_path(ino);
            match state.faults.stall_for(path.as_deref()) {
                Some(delay) => {
                    state.stats.syncs_stalled += 1;
                    state.stats.syncs_stalling += 1;
                    delay
                }
                None => return reply_result(finish_sync(&mut state, target), reply),
            }
        };
        // The stall holds only this request: others (and other syncs) go on.
        let shared = self.shared.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + stall;
            while shared.powered() {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(Duration::from_millis(10)));
            }
            let mut state = shared.lock();
            state.stats.syncs_stalling -= 1;
            if !shared.powered() {
                return reply.error(Errno::EIO);
            }
            reply_result(finish_sync(&mut state, target), reply);
        });
    }

    fn list(&self, ino: INodeNo) -> Result<Vec<(u64, FileType, std::ffi::OsString)>> {
        let mut state = self.state()?;
        let dir = self.backing(ino);
        let path = self.path(&state, dir)?;
        let mut entries = Vec::new();
        for entry in fs::read_dir(&path).map_err(errno)? {
            let entry = entry.map_err(errno)?;
            let kind = entry
                .file_type()
                .ok()
                .and_then(FileType::from_std)
                .unwrap_or(FileType::RegularFile);
            let child = std::os::unix::fs::DirEntryExt::ino(&entry);
            state.model.learn(dir, &entry.file_name(), child);
            entries.push((self.swap(child), kind, entry.file_name()));
        }
        entries.sort_by(|a, b| a.2.cmp(&b.2));
        entries.insert(0, (ino.0, FileType::Directory, "..".into()));
        entries.insert(0, (ino.0, FileType::Directory, ".".into()));
        Ok(entries)
    }

    fn statfs_of(&self) -> Result<libc::statvfs> {
        let state = self.state()?;
        let root = self.path(&state, self.root_ino)?;
        let c_root =
            std::ffi::CString::new(root.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
        let mut out: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c_root` is a valid NUL-terminated path and `out` a valid statvfs.
        if unsafe { libc::statvfs(c_root.as_ptr(), &mut out) } != 0 {
            return Err(errno(io::Error::last_os_error()));
        }
        if let Some(left) = state.faults.space_left {
            let blocks = left / out.f_frsize.max(1);
            out.f_bfree = out.f_bfree.min(blocks);
            out.f_bavail = out.f_bavail.min(blocks);
        }
        Ok(out)
    }
}

fn finish_sync(state: &mut State, target: SyncTarget) -> io::Result<()> {
    if state.names == Names::Journaled {
        state.model.sync_every_name()?;
    }
    match target {
        SyncTarget::File(ino) => {
            state.model.sync_file(ino);
            state.stats.file_syncs += 1;
            Ok(())
        }
        SyncTarget::Dir(ino) => {
            state.stats.dir_syncs += 1;
            state.model.sync_dir(ino)
        }
    }
}

fn reply_result(result: io::Result<()>, reply: ReplyEmpty) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(e)),
    }
}

/// Opens the backing file for reading and writing (the model reads pages back before
/// they change), without the flags this filesystem carries out itself: appends come
/// with their offsets, syncs are the model's, and direct I/O would need alignment.
fn open_backing(path: &Path, flags: i32) -> io::Result<File> {
    let passed = flags
        & !(libc::O_ACCMODE
            | libc::O_APPEND
            | libc::O_CREAT
            | libc::O_EXCL
            | libc::O_TRUNC
            | libc::O_SYNC
            | libc::O_DSYNC
            | libc::O_DIRECT);
    match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(passed)
        .open(path)
    {
        Ok(file) => Ok(file),
        Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Err(e),
        Err(_) => OpenOptions::new()
            .read(true)
            .custom_flags(passed)
            .open(path),
    }
}

fn set_metadata(
    path: &Path,
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    atime: Option<TimeOrNow>,
    mtime: Option<TimeOrNow>,
) -> io::Result<()> {
    if let Some(mode) = mode {
        fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o7777))?;
    }
    if uid.is_some() || gid.is_some() {
        std::os::unix::fs::lchown(path, uid, gid)?;
    }
    if atime.is_some() || mtime.is_some() {
        let when = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => SystemTime::now(),
        };
        let mut times = FileTimes::new();
        if let Some(t) = atime {
            times = times.set_accessed(when(t));
        }
        if let Some(t) = mtime {
            times = times.set_modified(when(t));
        }
        File::open(path)?.set_times(times)?;
    }
    Ok(())
}
