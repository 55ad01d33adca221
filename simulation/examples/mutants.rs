//! The planted-bug coverage report: every bug the server can plant, run on its listed
//! seeds, printed as caught (by which checker, at which seed) or missed.
//!
//! ```sh
//! cargo run -p quantykube-simulation --example mutants                 # the report; exits 1 if any bug is missed
//! cargo run -p quantykube-simulation --example mutants -- --search 40  # for each bug, the first of 40 seeds that can show it to catch it
//! cargo run -p quantykube-simulation --example mutants -- --only Keepalive --search 40 --first 65
//! cargo run -p quantykube-simulation --example mutants -- --only ExpiryIgnoresTerm --clean 10
//! ```
//!
//! `--search N` tries up to N seeds from `--first` (default 1) that can show each bug,
//! instead of its listed ones: how the seed to list for a new bug is found. `--clean N`
//! runs N seeds from `--first` as each bug's test runs them, but without the bug (a
//! targeted scenario's conditions still planted), and exits 1 if any fails: a
//! scenario's catches show something only if it passes clean. `--only` keeps the bugs
//! whose name contains the text. `--trace` prints, for each clean run, the faults as
//! injected and the run's trace (membership notes included). With `RUST_LOG` set
//! (`RUST_LOG=info`), the members' and clients' logs go to standard error, stamped
//! with simulated time.

#[path = "../tests/planted/mutants.rs"]
mod mutants;

struct Args {
    search: Option<usize>,
    clean: Option<u64>,
    first: u64,
    only: Option<String>,
    trace: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        search: None,
        clean: None,
        first: 1,
        only: None,
        trace: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match flag.as_str() {
            "--search" => {
                let v = value("--search")?;
                args.search = Some(v.parse().map_err(|e| format!("--search {v}: {e}"))?);
            }
            "--clean" => {
                let v = value("--clean")?;
                args.clean = Some(v.parse().map_err(|e| format!("--clean {v}: {e}"))?);
            }
            "--first" => {
                let v = value("--first")?;
                args.first = v.parse().map_err(|e| format!("--first {v}: {e}"))?;
            }
            "--only" => args.only = Some(value("--only")?),
            "--trace" => args.trace = true,
            "-h" | "--help" => return Err(
                "usage: mutants [--search N | --clean N] [--first SEED] [--only TEXT] [--trace]"
                    .into(),
            ),
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    Ok(args)
}

fn main() {
    quantykube_simulation::init_logging(false);
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    let mut missed = 0;
    for mutant in mutants::all() {
        let name = format!("{:?}", mutant.bug);
        if args.only.as_ref().is_some_and(|only| !name.contains(only)) {
            continue;
        }
        if let Some(seeds) = args.clean {
            for seed in args.first..args.first + seeds {
                let report = mutants::run_clean(&mutant, seed);
                if args.trace {
                    report
                        .faults
                        .iter()
                        .for_each(|line| println!("  fault: {line}"));
                    report
                        .trace
                        .iter()
                        .for_each(|line| println!("  trace: {line}"));
                }
                match report.passed() {
                    true => println!("{name} seed {seed} without the bug: passed"),
                    false => {
                        missed += 1;
                        println!(
                            "{name} seed {seed} without the bug: FAILED {:?}",
                            report.violations
                        );
                    }
                }
            }
            continue;
        }
        let verdict = match args.search {
            Some(limit) => mutants::search(&mutant, args.first, limit),
            None => mutants::run(&mutant),
        };
        println!("{}", mutants::report_line(&mutant, &verdict));
        if verdict.caught.is_none() {
            missed += 1;
        }
    }
    if missed > 0 {
        println!("{missed} planted bug(s) missed, or clean seed(s) failed");
        std::process::exit(1);
    }
}
