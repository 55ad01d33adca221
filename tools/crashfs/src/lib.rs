//! crashfs: a FUSE filesystem for tests that behaves like a disk behind a page cache,
//! and can lose power.
//!
//! `kill -9` keeps the page cache: a write that was never synced survives it, so a
//! process killed that way never shows what a power cut does. A crashfs mount shows
//! processes a view of a backing directory in which every write lands at once (as in
//! the page cache) while the filesystem remembers what was made durable: file data and
//! size by `fsync`/`fdatasync` (or `O_SYNC`/`O_DSYNC` writes), directory entries
//! (creates, renames, unlinks) by an `fsync` of their directory. [`CrashFs::power_cut`]
//! freezes it at one instant: every later request fails with EIO. [`CrashFs::restart`]
//! then unmounts, rolls the backing tree back to exactly what was durable (LazyFS's
//! model, as etcd's robustness tests use it) and mounts again, as a machine that
//! rebooted. [`Torn`] keeps a prefix of each file's unsynced pages instead, as a disk
//! that lost power halfway through writing them. On top of power cuts, [`Faults`] fail
//! chosen operations with chosen errors (EIO on reads, writes or syncs of chosen files),
//! run the disk out of space after N bytes (ENOSPC), or stall syncs.
//!
//! Owns: the mount (`fs`), the durability model (`model`), the fault settings
//! (`faults`). Never: syncs the backing tree (the test machine keeps its power; what
//! survives is decided by the model alone), or runs without root and `/dev/fuse`.
//!
//! How to use it:
//!
//! ```no_run
//! # fn main() -> std::io::Result<()> {
//! use quantykube_crashfs::{CrashFs, Torn};
//! let work = tempfile::tempdir()?;
//! let mut fs = CrashFs::mount(work.path().join("state"), work.path().join("mnt"))?;
//! std::fs::write(fs.mountpoint().join("unsynced"), b"lost")?;
//! fs.power_cut(); // then kill every process that uses the mount
//! fs.restart(Torn::No)?; // the file is gone: neither it nor its directory was synced
//! # Ok(()) }
//! ```

mod faults;
mod fs;
mod model;

pub use faults::{ErrorRule, Faults, FileMatch, Flip, Op, Stall};
pub use fs::{Names, Stats};
pub use model::{PowerLossReport, PAGE};

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, MountOption, SessionACL};

use crate::fs::{CrashFilesystem, Shared};
use crate::model::Model;

/// How long [`CrashFs::restart`] waits for the last files of killed processes to be
/// released: the kernel does it after the process is reaped, on a worker of its own, so
/// it takes a moment (more on a loaded machine), but never long.
pub const RELEASE_WAIT: Duration = Duration::from_secs(30);

/// What a power cut keeps of the pages written since their file's last sync.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Torn {
    /// Nothing: every unsynced page is lost.
    No,
    /// A prefix of each file's unsynced pages, in the order they were first dirtied,
    /// of a length drawn from this seed (nothing up to all of them).
    Prefix { seed: u64 },
}

/// One mounted crash filesystem. Dropping it unmounts (lazily, if processes still
/// use it) and leaves the backing tree as processes last saw it.
pub struct CrashFs {
    shared: Arc<Shared>,
    session: Option<BackgroundSession>,
    work: PathBuf,
    mountpoint: PathBuf,
}

impl std::fmt::Debug for CrashFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashFs")
            .field("work", &self.work)
            .field("mountpoint", &self.mountpoint)
            .finish()
    }
}

impl CrashFs {
    /// Whether this machine can mount one: root and `/dev/fuse`. The reason if not.
    pub fn available() -> Result<(), String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("crashfs mounts need root".into());
        }
        if !Path::new("/dev/fuse").exists() {
            return Err("crashfs mounts need /dev/fuse".into());
        }
        Ok(())
    }

    /// For tests: `None` where crash filesystems mount; else the reason, after printing
    /// `SKIPPED: <reason>`. Under CI (`CI` set), whose machines have root and
    /// `/dev/fuse`, a panic instead: a skip there would hide a broken setup.
    pub fn skip_reason() -> Option<String> {
        let why = Self::available().err()?;
        assert!(
            std::env::var_os("CI").is_none(),
            "crash filesystems cannot mount under CI: {why}"
        );
        eprintln!("SKIPPED: {why}");
        Some(why)
    }

    /// Mounts a crash filesystem at `mountpoint` (made if missing) over the backing
    /// tree `<work>/root` (made if missing; `<work>/graveyard` is its own). Everything
    /// already in the backing tree counts as durable.
    pub fn mount(work: impl AsRef<Path>, mountpoint: impl AsRef<Path>) -> io::Result<CrashFs> {
        let work = work.as_ref().to_path_buf();
        let mountpoint = mountpoint.as_ref().to_path_buf();
        std::fs::create_dir_all(&mountpoint)?;
        let model = Model::open(&work)?;
        let mut crash = CrashFs {
            shared: Arc::new(Shared::new(model)),
            session: None,
            work,
            mountpoint,
        };
        crash.session = Some(crash.start_session()?);
        Ok(crash)
    }

    fn start_session(&self) -> io::Result<BackgroundSession> {
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("crashfs".into()),
            MountOption::Subtype("crashfs".into()),
            MountOption::RW,
        ];
        // Other users' processes (a member dropping privileges) may use it too.
        config.acl = SessionACL::All;
        // Two loops, so that a long request (a stalled sync is answered from a thread
        // of its own anyway) never holds up every other process.
        config.n_threads = Some(2);
        fuser::spawn_mount(
            CrashFilesystem::new(self.shared.clone()),
            &self.mountpoint,
            &config,
        )
    }

    /// Where the filesystem is mounted.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The backing tree (what processes see through the mount; after a restart, what
    /// was durable).
    pub fn backing(&self) -> PathBuf {
        self.work.join("root")
    }

    /// Cuts the power at this instant: requests under way complete, every later one
    /// fails with EIO, and nothing written from now on counts. Kill the processes that
    /// use the mount, then [`CrashFs::restart`].
    pub fn power_cut(&self) {
        self.shared.cut();
    }

    /// Whether the power is on.
    pub fn is_powered(&self) -> bool {
        self.shared.powered()
    }

    /// A reboot after a power cut (cutting it now if it is still on): unmounts, rolls
    /// the backing tree back to what was durable (or torn, as `torn` says), and mounts
    /// again with the power on. Faults stay as they were set. Waits up to
    /// [`RELEASE_WAIT`] for the mount to be let go of (the kernel closes a killed
    /// process's files after it has been reaped), then fails with `EBUSY`, changing
    /// nothing, while a process still uses the mount.
    pub fn restart(&mut self, torn: Torn) -> io::Result<PowerLossReport> {
        self.restart_within(torn, RELEASE_WAIT)
    }

    /// [`CrashFs::restart`], waiting at most `wait` for the mount to be let go of.
    pub fn restart_within(&mut self, torn: Torn, wait: Duration) -> io::Result<PowerLossReport> {
        self.shared.cut();
        let deadline = Instant::now() + wait;
        loop {
            match self.unmount() {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => {
                    other?;
                    break;
                }
            }
        }
        let report = {
            let mut state = self.shared.lock();
            match torn {
                Torn::No => state.model.lose_power(None)?,
                Torn::Prefix { seed } => {
                    let mut rng = SplitMix(seed);
                    let mut choose = |n: usize| (rng.next() % (n as u64 + 1)) as usize;
                    state.model.lose_power(Some(&mut choose))?
                }
            }
        };
        self.shared.restore();
        self.session = Some(self.start_session()?);
        Ok(report)
    }

    fn unmount(&mut self) -> io::Result<()> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        let path = CString::new(self.mountpoint.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `path` is a valid NUL-terminated string.
        if unsafe { libc::umount2(path.as_ptr(), 0) } != 0 {
            let error = io::Error::last_os_error();
            self.session = Some(session);
            return Err(error);
        }
        // Unmounted. The session's loops end as they read the closed connection: with
        // ENODEV, or with ECONNABORTED when the kernel aborted requests still queued,
        // which is the same ending.
        match session.join() {
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(()),
            other => other,
        }
    }

    /// Makes everything durable, as `sync` and an fsync of every directory would.
    pub fn sync_everything(&self) -> io::Result<()> {
        self.shared.lock().model.sync_everything()
    }

    /// Changes the faults in force.
    pub fn set_faults(&self, change: impl FnOnce(&mut Faults)) {
        change(&mut self.shared.lock().faults);
    }

    /// Chooses when name changes (creates, renames, unlinks) become durable.
    pub fn set_names(&self, names: Names) {
        self.shared.lock().names = names;
    }

    /// Removes every fault.
    pub fn clear_faults(&self) {
        self.shared.lock().faults = Faults::default();
    }

    /// What the filesystem was asked to do so far.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats
    }

    /// How many files and directories hold changes that a power cut would undo.
    pub fn pending(&self) -> (usize, usize) {
        self.shared.lock().model.pending()
    }
}

impl Drop for CrashFs {
    fn drop(&mut self) {
        if self.session.is_none() {
            return;
        }
        let Ok(path) = CString::new(self.mountpoint.as_os_str().as_bytes()) else {
            return;
        };
        // SAFETY: `path` is a valid NUL-terminated string. A lazy unmount never fails
        // on a busy mount; the session ends once the last user lets go.
        let detached = unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } == 0;
        if let Some(session) = self.session.take() {
            if detached {
                drop(session);
            } else {
                std::mem::forget(session);
            }
        }
    }
}

/// splitmix64: a seeded, dependency-free source of torn-write lengths.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}
