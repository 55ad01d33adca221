//! Transfer files are checked whole before they are sent or installed: a damaged one
//! (a torn tail, a flipped byte) is refused by name and the store stays as it was.

use std::os::unix::fs::FileExt;

use super::tests::Harness;
use super::*;

/// A store with three keys and its transfer file.
fn exported() -> (Harness, tempfile::TempDir, std::path::PathBuf) {
    let mut h = Harness::new();
    h.put("a", "1");
    h.put("b", "2");
    h.put("c", "3");
    let dir = tempfile::tempdir().unwrap();
    let file = h.store.current_snapshot(dir.path(), true).unwrap().unwrap();
    (h, dir, file.path)
}

fn refused(path: &std::path::Path) -> String {
    match verify_transfer_file(path) {
        Err(StoreError::Corrupt(why)) => why,
        other => panic!("a damaged file was {other:?}"),
    }
}

#[test]
fn a_whole_transfer_file_passes_its_check() {
    let (_h, _dir, path) = exported();
    verify_transfer_file(&path).unwrap();
}

#[test]
fn a_torn_or_flipped_transfer_file_is_refused_by_name() {
    let (_h, _dir, path) = exported();
    let whole = std::fs::read(&path).unwrap();
    for cut in [whole.len() - 1, whole.len() - 12, whole.len() / 2, 10] {
        std::fs::write(&path, &whole[..cut]).unwrap();
        let why = refused(&path);
        assert!(why.contains(&path.display().to_string()), "{why}");
    }
    for at in [8, whole.len() / 2, whole.len() - 14, whole.len() - 1] {
        let mut flipped = whole.clone();
        flipped[at] ^= 0x01;
        std::fs::write(&path, &flipped).unwrap();
        refused(&path);
    }
}

#[test]
fn an_install_of_a_damaged_file_leaves_the_store_as_it_was() {
    let (_h, _dir, path) = exported();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    let len = file.metadata().unwrap().len();
    file.write_all_at(b"X", len / 2).unwrap();
    let mut other = Harness::new();
    other.put("mine", "kept");
    let revision = other.store.current_revision().unwrap();
    assert!(matches!(
        other.store.install_snapshot(&path),
        Err(StoreError::Corrupt(_))
    ));
    assert_eq!(other.get("mine").unwrap().value, super::tests::b("kept"));
    assert_eq!(other.store.current_revision().unwrap(), revision);
}

#[test]
fn a_damaged_file_is_never_sent_but_exported_again() {
    let (h, dir, path) = exported();
    let whole = std::fs::read(&path).unwrap();
    std::fs::write(&path, &whole[..whole.len() - 3]).unwrap();
    let sent = h.store.current_snapshot(dir.path(), true).unwrap().unwrap();
    verify_transfer_file(&sent.path).unwrap();
}
