//! The checkers bite: each bug planted in the server (`quantykube::planted`) is reported
//! by the checker meant to catch it, within the fixed seeds `mutants::all` lists for it.
//! The report it prints is docs/simulation.md's coverage table
//! (`cargo test -p quantykube-simulation --test planted -- --nocapture`).
//!
//! A test binary of its own, because the switches are process-wide: they must never
//! leak into the other simulation tests, which run in another process.

mod mutants;

/// The seeds the CI seed set runs (tests/sim/seeds.rs): each passes there without bugs.
const CI_SEEDS: u64 = 64;

#[test]
fn every_planted_bug_is_caught_by_its_checker_within_its_seeds() {
    let mut missed = Vec::new();
    for mutant in mutants::all() {
        for seed in mutant.seeds {
            assert!(
                (mutant.shows)(&mutant.scenario(*seed)),
                "{:?} lists seed {seed}, whose scenario cannot show it",
                mutant.bug
            );
        }
        let verdict = mutants::run(&mutant);
        eprintln!("{}", mutants::report_line(&mutant, &verdict));
        match verdict.caught {
            None => missed.push(format!("{:?}", mutant.bug)),
            // The CI seed set runs seeds 1-64 without bugs; a seed beyond it, or a
            // targeted scenario, must pass without the bug here, or its catch would
            // show nothing.
            Some((seed, _)) if seed > CI_SEEDS || mutant.targeted.is_some() => {
                let clean = mutants::run_clean(&mutant, seed);
                assert!(
                    clean.passed(),
                    "seed {seed} fails without {:?} too: {:?}",
                    mutant.bug,
                    clean.violations
                );
            }
            Some(_) => {}
        }
    }
    assert!(
        missed.is_empty(),
        "planted bugs no checker caught: {missed:?}"
    );
}
