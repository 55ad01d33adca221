//! crashfs on a real mount: what a power cut keeps and loses, and the faults.
//!
//! Every test mounts its own filesystem in a temporary directory and needs root and
//! `/dev/fuse`. Without them a test prints SKIPPED and passes, except under CI (`CI`
//! set), where a machine of this project's kind has both and a skip would hide a
//! broken setup.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use quantykube_crashfs::{CrashFs, ErrorRule, FileMatch, Op, Stall, Torn, PAGE};
use tempfile::TempDir;

struct Mounted {
    fs: CrashFs,
    _dir: TempDir,
}

impl Mounted {
    fn path(&self, name: &str) -> PathBuf {
        self.fs.mountpoint().join(name)
    }
}

fn mount() -> Option<Mounted> {
    if CrashFs::skip_reason().is_some() {
        return None;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let fs = CrashFs::mount(dir.path().join("work"), dir.path().join("mnt")).expect("mount");
    Some(Mounted { fs, _dir: dir })
}

fn sync_dir(path: &Path) {
    File::open(path).unwrap().sync_all().unwrap();
}

/// Writes `data` to a new file `name`, fsyncs it and its directory.
fn write_durably(m: &Mounted, name: &str, data: &[u8]) {
    let path = m.path(name);
    let mut file = File::create(&path).unwrap();
    file.write_all(data).unwrap();
    file.sync_all().unwrap();
    sync_dir(path.parent().unwrap());
}

fn read(path: &Path) -> Option<Vec<u8>> {
    match fs::read(path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("read {}: {e}", path.display()),
    }
}

#[test]
fn a_file_synced_with_its_directory_survives_and_one_never_synced_is_gone() {
    let Some(mut m) = mount() else { return };
    write_durably(&m, "kept", b"durable");
    fs::write(m.path("lost"), b"never synced").unwrap();
    m.fs.power_cut();
    let report = m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("kept")).as_deref(), Some(&b"durable"[..]));
    assert_eq!(read(&m.path("lost")), None);
    assert_eq!(report.entries_removed, 1, "{report:?}");
}

#[test]
fn a_synced_file_whose_directory_was_not_synced_is_gone() {
    let Some(mut m) = mount() else { return };
    let mut file = File::create(m.path("orphan")).unwrap();
    file.write_all(b"data").unwrap();
    file.sync_all().unwrap();
    drop(file);
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("orphan")), None);
}

#[test]
fn a_file_whose_directory_was_synced_but_not_its_data_is_empty() {
    let Some(mut m) = mount() else { return };
    let mut file = File::create(m.path("cert.pem")).unwrap();
    sync_dir(m.fs.mountpoint());
    file.write_all(b"-----BEGIN CERTIFICATE-----").unwrap();
    drop(file);
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("cert.pem")).as_deref(), Some(&b""[..]));
}

#[test]
fn appends_and_overwrites_since_the_last_sync_are_undone() {
    let Some(mut m) = mount() else { return };
    let original: Vec<u8> = (0..3 * PAGE + 100).map(|i| (i % 251) as u8).collect();
    write_durably(&m, "log", &original);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(m.path("log"))
        .unwrap();
    file.write_all_at(&[0xAA; 5000], PAGE / 2).unwrap();
    file.write_all_at(&[0xBB; 10_000], original.len() as u64)
        .unwrap();
    assert_eq!(
        file.metadata().unwrap().len(),
        original.len() as u64 + 10_000
    );
    drop(file);
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("log")), Some(original));
}

#[test]
fn a_truncation_since_the_last_sync_is_undone() {
    let Some(mut m) = mount() else { return };
    let original = vec![7u8; 3 * PAGE as usize];
    write_durably(&m, "file", &original);
    let file = OpenOptions::new().write(true).open(m.path("file")).unwrap();
    file.set_len(10).unwrap();
    file.write_all_at(b"new", 5 * PAGE).unwrap();
    drop(file);
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("file")), Some(original));
}

#[test]
fn data_synced_after_the_last_change_survives_whole() {
    let Some(mut m) = mount() else { return };
    write_durably(&m, "file", b"one");
    let mut file = OpenOptions::new()
        .append(true)
        .open(m.path("file"))
        .unwrap();
    file.write_all(b" two").unwrap();
    file.sync_data().unwrap();
    file.write_all(b" three").unwrap();
    drop(file);
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("file")).as_deref(), Some(&b"one two"[..]));
}

#[test]
fn a_rename_over_a_file_is_undone_without_a_directory_sync_and_kept_with_one() {
    let Some(mut m) = mount() else { return };
    write_durably(&m, "member.json", b"old");
    // The temp file is synced, its rename is not: both names come back as they were.
    let mut tmp = File::create(m.path("member.json.tmp")).unwrap();
    tmp.write_all(b"new").unwrap();
    tmp.sync_all().unwrap();
    drop(tmp);
    sync_dir(m.fs.mountpoint());
    fs::rename(m.path("member.json.tmp"), m.path("member.json")).unwrap();
    assert_eq!(read(&m.path("member.json")).as_deref(), Some(&b"new"[..]));
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("member.json")).as_deref(), Some(&b"old"[..]));
    assert_eq!(
        read(&m.path("member.json.tmp")).as_deref(),
        Some(&b"new"[..])
    );
    // The same with the directory synced after the rename: the new file is in place.
    fs::rename(m.path("member.json.tmp"), m.path("member.json")).unwrap();
    sync_dir(m.fs.mountpoint());
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("member.json")).as_deref(), Some(&b"new"[..]));
    assert_eq!(read(&m.path("member.json.tmp")), None);
}

#[test]
fn an_unlink_without_a_directory_sync_is_undone() {
    let Some(mut m) = mount() else { return };
    write_durably(&m, "snapshot", b"contents");
    fs::remove_file(m.path("snapshot")).unwrap();
    assert_eq!(read(&m.path("snapshot")), None);
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("snapshot")).as_deref(), Some(&b"contents"[..]));
    fs::remove_file(m.path("snapshot")).unwrap();
    sync_dir(m.fs.mountpoint());
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("snapshot")), None);
}

#[test]
fn a_directory_made_and_filled_without_syncing_its_parent_is_gone() {
    let Some(mut m) = mount() else { return };
    fs::create_dir(m.path("db")).unwrap();
    write_durably(&m, "db/CURRENT", b"MANIFEST-000001\n");
    m.fs.restart(Torn::No).unwrap();
    assert!(!m.path("db").exists());
    // With the parent synced, the directory and its synced file survive.
    fs::create_dir(m.path("db")).unwrap();
    sync_dir(m.fs.mountpoint());
    write_durably(&m, "db/CURRENT", b"MANIFEST-000001\n");
    fs::write(m.path("db/LOG"), b"not synced").unwrap();
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(
        read(&m.path("db/CURRENT")).as_deref(),
        Some(&b"MANIFEST-000001\n"[..])
    );
    assert_eq!(read(&m.path("db/LOG")), None);
}

#[test]
fn a_directory_renamed_into_place_needs_its_parent_synced() {
    let Some(mut m) = mount() else { return };
    // A restore's pattern: fill a staging directory, then rename it into place.
    fs::create_dir(m.path("staging")).unwrap();
    sync_dir(m.fs.mountpoint());
    write_durably(&m, "staging/member.json", b"{}");
    fs::rename(m.path("staging"), m.path("data")).unwrap();
    m.fs.restart(Torn::No).unwrap();
    assert!(!m.path("data").exists());
    assert_eq!(
        read(&m.path("staging/member.json")).as_deref(),
        Some(&b"{}"[..])
    );
    fs::rename(m.path("staging"), m.path("data")).unwrap();
    sync_dir(m.fs.mountpoint());
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(
        read(&m.path("data/member.json")).as_deref(),
        Some(&b"{}"[..])
    );
    assert!(!m.path("staging").exists());
}

#[test]
fn a_torn_cut_keeps_a_prefix_of_the_unsynced_pages() {
    let Some(mut m) = mount() else { return };
    write_durably(&m, "wal", &[1; PAGE as usize]);
    let pages = 16;
    let appended: Vec<u8> = (0..pages * PAGE).map(|i| (i / PAGE) as u8 + 10).collect();
    let mut sizes = Vec::new();
    for seed in 0..6 {
        let mut file = OpenOptions::new().append(true).open(m.path("wal")).unwrap();
        file.write_all(&appended).unwrap();
        drop(file);
        m.fs.restart(Torn::Prefix { seed }).unwrap();
        let now = read(&m.path("wal")).unwrap();
        assert!(
            now.len() as u64 >= PAGE,
            "seed {seed}: the synced page went"
        );
        assert_eq!(
            &now[..PAGE as usize],
            &[1; PAGE as usize][..],
            "seed {seed}"
        );
        assert_eq!(
            &now[PAGE as usize..],
            &appended[..now.len() - PAGE as usize],
            "seed {seed}"
        );
        sizes.push(now.len());
        // Back to the synced page for the next seed.
        let file = OpenOptions::new().write(true).open(m.path("wal")).unwrap();
        file.set_len(PAGE).unwrap();
        file.sync_all().unwrap();
    }
    sizes.sort_unstable();
    sizes.dedup();
    assert!(
        sizes.len() > 1,
        "every seed kept the same prefix: {sizes:?}"
    );
}

#[test]
fn after_a_cut_every_request_fails_and_a_busy_mount_is_not_restarted() {
    let Some(mut m) = mount() else { return };
    write_durably(&m, "file", b"x");
    let mut open = OpenOptions::new()
        .append(true)
        .open(m.path("file"))
        .unwrap();
    m.fs.power_cut();
    assert!(!m.fs.is_powered());
    let error = open.write_all(b"after the cut").unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    assert_eq!(
        fs::read(m.path("file")).unwrap_err().raw_os_error(),
        Some(libc::EIO)
    );
    let busy = m.fs.restart_within(Torn::No, Duration::ZERO).unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::EBUSY));
    drop(open);
    m.fs.restart(Torn::No).unwrap();
    assert!(m.fs.is_powered());
    assert_eq!(read(&m.path("file")).as_deref(), Some(&b"x"[..]));
}

#[test]
fn errors_hit_only_the_chosen_files_and_operations() {
    let Some(m) = mount() else { return };
    write_durably(&m, "good", b"fine");
    write_durably(&m, "bad.sst", b"block");
    m.fs.set_faults(|f| {
        f.errors.push(ErrorRule {
            op: Op::Read,
            files: FileMatch::new(|p| p.extension().is_some_and(|e| e == "sst")),
            errno: libc::EIO,
            times: None,
        });
        f.errors.push(ErrorRule {
            op: Op::Sync,
            files: FileMatch::under("good"),
            errno: libc::EIO,
            times: Some(1),
        });
    });
    let mut buf = Vec::new();
    let error = File::open(m.path("bad.sst"))
        .unwrap()
        .read_to_end(&mut buf)
        .unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    assert_eq!(read(&m.path("good")).as_deref(), Some(&b"fine"[..]));
    let good = OpenOptions::new().write(true).open(m.path("good")).unwrap();
    assert_eq!(good.sync_all().unwrap_err().raw_os_error(), Some(libc::EIO));
    good.sync_all().unwrap();
    m.fs.clear_faults();
    assert_eq!(read(&m.path("bad.sst")).as_deref(), Some(&b"block"[..]));
    // The kernel may retry a failed read (readahead, then the read itself).
    assert!(m.fs.stats().faults_injected >= 2);
}

#[test]
fn the_disk_fills_after_the_bytes_it_was_given() {
    let Some(m) = mount() else { return };
    m.fs.set_faults(|f| f.space_left = Some(10_000));
    let mut file = File::create(m.path("big")).unwrap();
    file.write_all(&[0; 8_000]).unwrap();
    let error = file.write_all(&[0; 4_000]).unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    // Overwriting in place needs no new space.
    file.write_all_at(&[1; 8_000], 0).unwrap();
    m.fs.set_faults(|f| f.space_left = None);
    file.write_all(&[0; 4_000]).unwrap();
}

#[test]
fn a_stalled_sync_takes_its_delay_and_holds_up_nothing_else() {
    let Some(mut m) = mount() else { return };
    write_durably(&m, "slow", b"a");
    write_durably(&m, "fast", b"b");
    let delay = Duration::from_millis(1500);
    m.fs.set_faults(|f| {
        f.stalls.push(Stall {
            files: FileMatch::under("slow"),
            delay,
        })
    });
    let slow_path = m.path("slow");
    let started = Instant::now();
    let stalled = std::thread::spawn(move || {
        let mut file = OpenOptions::new().append(true).open(slow_path).unwrap();
        file.write_all(b"b").unwrap();
        file.sync_all()
    });
    // While it stalls, other files write and sync (bounded by the stall, not by time).
    let mut fast = OpenOptions::new()
        .append(true)
        .open(m.path("fast"))
        .unwrap();
    for _ in 0..5 {
        fast.write_all(b"c").unwrap();
        fast.sync_all().unwrap();
    }
    assert!(
        !stalled.is_finished(),
        "the stalled sync returned before the fast ones"
    );
    while m.fs.stats().syncs_stalled < 1 {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(m.fs.stats().syncs_stalling, 1, "one sync is held now");
    stalled.join().unwrap().unwrap();
    assert!(started.elapsed() >= delay);
    assert_eq!(m.fs.stats().syncs_stalling, 0, "and none once it returned");
    // A cut during a stall fails the sync, and the data it was to sync is lost.
    let slow_path = m.path("slow");
    let cut_during = std::thread::spawn(move || {
        let mut file = OpenOptions::new().append(true).open(slow_path).unwrap();
        file.write_all(b"c").unwrap();
        file.sync_all()
    });
    while m.fs.stats().syncs_stalled < 2 {
        std::thread::sleep(Duration::from_millis(5));
    }
    m.fs.power_cut();
    let error = cut_during.join().unwrap().unwrap_err();
    assert_eq!(error.raw_os_error(), Some(libc::EIO));
    drop(fast);
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("slow")).as_deref(), Some(&b"ab"[..]));
    assert_eq!(read(&m.path("fast")).as_deref(), Some(&b"bccccc"[..]));
}

#[test]
fn with_journaled_names_any_sync_makes_every_earlier_name_change_durable() {
    let Some(mut m) = mount() else { return };
    m.fs.set_names(quantykube_crashfs::Names::Journaled);
    fs::create_dir(m.path("data")).unwrap();
    fs::write(m.path("data/unsynced"), b"gone").unwrap();
    let mut log = File::create(m.path("data/log")).unwrap();
    log.write_all(b"entry").unwrap();
    log.sync_data().unwrap();
    fs::write(m.path("data/after"), b"not journaled yet").unwrap();
    drop(log);
    m.fs.restart(Torn::No).unwrap();
    assert_eq!(read(&m.path("data/log")).as_deref(), Some(&b"entry"[..]));
    // Named by the journal commit, but its data was never synced.
    assert_eq!(read(&m.path("data/unsynced")).as_deref(), Some(&b""[..]));
    assert_eq!(read(&m.path("data/after")), None);
}

#[test]
fn a_flipped_byte_is_read_where_it_was_asked_and_nowhere_else() {
    let Some(m) = mount() else { return };
    let data: Vec<u8> = (0..3 * PAGE).map(|i| (i % 200) as u8).collect();
    write_durably(&m, "snap", &data);
    write_durably(&m, "other", &data);
    m.fs.set_faults(|f| {
        f.flips.push(quantykube_crashfs::Flip {
            files: FileMatch::under("snap"),
            from_end: 10,
        })
    });
    let read_back = read(&m.path("snap")).unwrap();
    let at = data.len() - 11;
    assert_eq!(read_back[at], data[at] ^ 0x01);
    assert_eq!(read_back[..at], data[..at]);
    assert_eq!(read_back[at + 1..], data[at + 1..]);
    assert_eq!(read(&m.path("other")), Some(data.clone()));
    m.fs.clear_faults();
    assert_eq!(read(&m.path("snap")), Some(data));
}
