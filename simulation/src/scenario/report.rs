//! [`SeedReport`]: what came of one seed, as the CI seed set, the soak and the planted
//! test print it. It only holds and formats what the run found; it never judges.

use std::fmt;
use std::time::Duration;

use super::replay_command;
use crate::faults::FaultPlan;
use crate::workload::MembershipStep;

/// What came of one seed.
#[derive(Clone, Debug)]
pub struct SeedReport {
    pub seed: u64,
    pub plan: FaultPlan,
    /// The membership client's plan (empty: none).
    pub membership: Vec<MembershipStep>,
    pub clients: usize,
    pub watchers: usize,
    /// Leases the lease client was granted.
    pub leases: usize,
    /// Membership changes the membership client asked for (0 without one).
    pub membership_changes: usize,
    /// Administrative auth requests sent (0 in a seed without auth).
    pub auth_changes: usize,
    /// The faults as injected, one line each with its simulated time and target.
    pub faults: Vec<String>,
    /// How many faults were injected.
    pub injected: usize,
    /// Operations recorded (and checked).
    pub operations: usize,
    /// Of those, how many had an unknown outcome.
    pub unknown: usize,
    /// Events the watchers got (and the watch checker judged).
    pub watch_events: usize,
    /// Snapshot files fetched complete (and checked), and calls that failed.
    pub snapshots: usize,
    pub snapshots_failed: usize,
    /// Every violated property and every failure of the run; empty if the seed passed.
    pub violations: Vec<String>,
    /// Findings of the server bugs the run knows of ([`KnownIssues`](super::KnownIssues)): reported, not
    /// failing the seed.
    pub known: Vec<String>,
    /// Every event: operations with outcomes and simulated times, faults, final
    /// digests, each watcher's digest, the simulated end.
    pub trace: Vec<String>,
    /// FNV-1a of `trace`: equal for two runs of a seed that replays exactly.
    pub trace_hash: u64,
    /// Simulated time the seed took.
    pub simulated: Duration,
    /// Real time it took.
    pub real: Duration,
}

impl SeedReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }

    /// One line: seed, size, counts, times, verdict.
    pub fn summary(&self) -> String {
        format!(
            "seed {}: {} members, {} clients, {} watchers, {} leases, {} membership changes, {}{} \
             faults, {} ops ({} unknown), {} watch events, {} snapshots ({} failed), {:.1}s \
             simulated in {:.1}s, {}{}",
            self.seed,
            self.plan.nodes,
            self.clients,
            self.watchers,
            self.leases,
            self.membership_changes,
            if self.auth_changes > 0 {
                format!("{} auth changes, ", self.auth_changes)
            } else {
                String::new()
            },
            self.injected,
            self.operations,
            self.unknown,
            self.watch_events,
            self.snapshots,
            self.snapshots_failed,
            self.simulated.as_secs_f64(),
            self.real.as_secs_f64(),
            if self.passed() { "ok" } else { "FAILED" },
            if self.known.is_empty() {
                String::new()
            } else {
                format!(" ({} findings of known server bugs)", self.known.len())
            }
        )
    }
}

impl fmt::Display for SeedReport {
    /// The summary; for a failed seed also its plan, its faults as injected, its
    /// violations and the command that replays it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary())?;
        if self.passed() {
            return Ok(());
        }
        writeln!(f, "  plan: {}", self.plan)?;
        if !self.membership.is_empty() {
            let steps: Vec<String> = self.membership.iter().map(|s| s.op.to_string()).collect();
            writeln!(f, "  membership: {}", steps.join(", "))?;
        }
        for fault in &self.faults {
            writeln!(f, "  fault {fault}")?;
        }
        for violation in &self.violations {
            writeln!(f, "  VIOLATION {violation}")?;
        }
        writeln!(f, "  replay: {}", replay_command(self.seed))
    }
}
