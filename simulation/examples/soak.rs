//! The long soak: many seeds of the CI set's scenario (3- and 5-member clusters, mixed
//! faults, concurrent clients, every checker), with a progress bar on a terminal and a
//! summary at the end.
//!
//! ```sh
//! cargo run -p quantykube-simulation --release --example soak -- --seeds 1000
//! cargo run -p quantykube-simulation --release --example soak -- --first 5000 --seeds 200 --jobs 4
//! ```
//!
//! Seeds run `first..first+seeds` (default 1 and 100) on `jobs` threads (default: the
//! machine's cores); with `--membership`, only those of them whose scenario has a
//! membership client. Each failing seed is printed as it fails, with its plan, faults,
//! violations and replay command; the process exits with status 1 if any failed.
//! Without a terminal (in CI) the bar is replaced by one summary line per seed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use quantykube_simulation::{Scenario, SeedReport};

struct Args {
    first: u64,
    seeds: u64,
    jobs: usize,
    /// Only seeds with a membership client.
    membership: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        first: 1,
        seeds: 100,
        jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
        membership: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| format!("{name} needs a value"))
                .and_then(|v| v.parse::<u64>().map_err(|e| format!("{name} {v}: {e}")))
        };
        match flag.as_str() {
            "--seeds" => args.seeds = value("--seeds")?,
            "--first" => args.first = value("--first")?,
            "--jobs" => args.jobs = usize::try_from(value("--jobs")?.max(1)).unwrap_or(1),
            "--membership" => args.membership = true,
            "-h" | "--help" => {
                return Err(
                    "usage: soak [--seeds N] [--first SEED] [--jobs J] [--membership]".into(),
                );
            }
            other => return Err(format!("unknown argument {other:?}; try --help")),
        }
    }
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2);
        }
    };
    quantykube_simulation::init_logging(false);

    let started = Instant::now();
    let bar = ProgressBar::new(args.seeds);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40.cyan/blue}] {pos}/{len} seeds, eta {eta} {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(500));

    let next = AtomicU64::new(args.first);
    let end = args.first.saturating_add(args.seeds);
    let (sender, receiver) = mpsc::channel::<Option<SeedReport>>();
    let mut totals = Totals::default();
    std::thread::scope(|scope| {
        for _ in 0..args.jobs {
            let sender = sender.clone();
            let next = &next;
            let membership = args.membership;
            scope.spawn(move || loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= end {
                    return;
                }
                let scenario = Scenario::from_seed(seed);
                let report =
                    (!membership || !scenario.membership.is_empty()).then(|| scenario.run());
                if sender.send(report).is_err() {
                    return;
                }
            });
        }
        drop(sender);
        for report in receiver {
            let Some(report) = report else {
                totals.skipped += 1;
                bar.inc(1);
                continue;
            };
            totals.add(&report);
            if bar.is_hidden() {
                // Not a terminal (a CI log): the bar draws nothing, not even println.
                print!("{report}");
            } else if !report.passed() {
                bar.println(report.to_string().trim_end());
            }
            bar.set_message(totals.short());
            bar.inc(1);
        }
    });
    bar.finish_and_clear();

    println!(
        "soak: {} seeds ({} with 3 members, {} with 5) in {:.0?} on {} threads",
        totals.seeds,
        totals.three,
        totals.five,
        started.elapsed(),
        args.jobs
    );
    println!(
        "      {} operations checked ({} with unknown outcome), {} faults injected, \
         {:.0}s simulated",
        totals.operations, totals.unknown, totals.faults, totals.simulated
    );
    println!(
        "      {} seeds with a membership client, {} membership changes{}",
        totals.with_membership,
        totals.membership_changes,
        if totals.skipped > 0 {
            format!(" ({} seeds without one skipped)", totals.skipped)
        } else {
            String::new()
        }
    );
    if totals.failed.is_empty() {
        println!("      no violations");
    } else {
        totals.failed.sort_unstable();
        println!(
            "      {} seeds with violations: {:?}",
            totals.failed.len(),
            totals.failed
        );
        std::process::exit(1);
    }
}

#[derive(Default)]
struct Totals {
    seeds: u64,
    three: u64,
    five: u64,
    operations: usize,
    unknown: usize,
    faults: usize,
    simulated: f64,
    with_membership: u64,
    membership_changes: usize,
    skipped: u64,
    failed: Vec<u64>,
}

impl Totals {
    fn add(&mut self, report: &SeedReport) {
        self.seeds += 1;
        if report.plan.nodes == 3 {
            self.three += 1;
        } else {
            self.five += 1;
        }
        self.operations += report.operations;
        self.unknown += report.unknown;
        self.faults += report.injected;
        self.simulated += report.simulated.as_secs_f64();
        if !report.membership.is_empty() {
            self.with_membership += 1;
            self.membership_changes += report.membership_changes;
        }
        if !report.passed() {
            self.failed.push(report.seed);
        }
    }

    fn short(&self) -> String {
        format!(
            "| {} ops, {} faults, {} violations",
            self.operations,
            self.faults,
            self.failed.len()
        )
    }
}
