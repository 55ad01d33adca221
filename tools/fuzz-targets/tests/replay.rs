//! Every fuzz target over its corpus (`fuzz/corpus/<target>/`) and its regressions
//! (`fuzz/regressions/<target>/`, one file per finding, named after it): seconds in
//! `make test`, so that a finding once fixed fails CI if it comes back. A target that
//! panics fails the test; each target bounds its own work.

use std::path::{Path, PathBuf};

use quantykube_fuzz_targets::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect(),
        Err(_) => Vec::new(),
    };
    files.sort();
    files
}

#[test]
fn every_target_has_a_seed_corpus_and_a_fuzz_target_file() {
    for (name, _) in TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(name));
        assert!(!corpus.is_empty(), "fuzz/corpus/{name} has no seed");
        let target = fuzz_dir().join("fuzz_targets").join(format!("{name}.rs"));
        assert!(target.is_file(), "{} is missing", target.display());
    }
}

#[test]
fn every_corpus_and_regression_replays_without_a_finding() {
    for (name, target) in TARGETS {
        let mut count = 0;
        for kind in ["corpus", "regressions"] {
            for file in inputs(&fuzz_dir().join(kind).join(name)) {
                let data = std::fs::read(&file).expect("corpus file reads");
                let outcome = std::panic::catch_unwind(|| target(&data));
                assert!(outcome.is_ok(), "{name}: {} panicked", file.display());
                count += 1;
            }
        }
        println!("{name}: {count} inputs replayed");
    }
}
