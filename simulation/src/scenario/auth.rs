//! The auth seeds' part of a run (see [`AUTH_PERCENT`](super::AUTH_PERCENT)): an
//! administrator taking permissions, roles and users away and giving them back while
//! its users read and write, under the seed's faults, then the key-value and auth
//! checkers. This module owns only that part of [`Scenario::drive`]; what a seed runs is
//! still decided in [`Scenario::from_seed`].

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use super::{run_for, Scenario, SeedReport};
use crate::checker;
use crate::cluster::SimCluster;
use crate::error::SimError;
use crate::faults::Injector;
use crate::history::{AuthLog, History};
use crate::leaders::LeaderWatch;
use crate::rng::mix;
use crate::workload::{AuthClient, AuthPhase, WritesInFlight};

impl Scenario {
    /// The rest of [`Scenario::drive`] for an auth seed: the administrator and its
    /// users under the seed's faults, then (auth off again) the key-value checkers on
    /// the users' requests and the auth checker on the auth log.
    pub(super) fn drive_auth(
        &self,
        sim: &mut turmoil::Sim<'_>,
        history: &History,
        report: &mut SeedReport,
        cluster: &SimCluster,
        watch: LeaderWatch,
        plan: &AuthPlan,
    ) -> Result<(), SimError> {
        report.clients = plan.users;
        report.watchers = 0;
        let run_for = run_for(&self.plan);
        let log = AuthLog::new();
        let phase = AuthPhase::new();
        let auth = AuthClient {
            users: plan.users,
            episodes: plan.episodes,
            run_for,
            ..AuthClient::new("auth-admin", cluster.directory(), mix(self.seed, 600))
        };
        for n in 1..=plan.users {
            let (user, log, history, phase) =
                (auth.clone(), log.clone(), history.clone(), phase.clone());
            sim.client(format!("auth-u{n}"), async move {
                user.user(n, log, history, phase).await?;
                Ok(())
            });
        }
        let (admin, admin_log, admin_phase) = (auth.clone(), log.clone(), phase.clone());
        sim.client("auth-admin", async move {
            admin.admin(admin_log, admin_phase).await?;
            Ok(())
        });

        let mut injector = Injector::new(cluster, watch.clone(), WritesInFlight::new(), self.seed);
        self.inject_faults(sim, &mut injector, report)?;
        let limit = run_for + Duration::from_secs(120);
        if !injector.step_until(sim, limit, || phase.admin_done())? {
            return Err(SimError::Timeout(format!(
                "the auth clients still running {limit:?} after the faults"
            )));
        }
        watch.stop();

        let verdict = Rc::new(RefCell::new(None));
        let out = verdict.clone();
        let members = cluster.members();
        let operations = history.operations();
        sim.client("checker", async move {
            let checked =
                checker::check_all(&members, &operations, 1, Duration::from_secs(30)).await;
            *out.borrow_mut() = Some(checked);
            Ok(())
        });
        sim.run().map_err(|e| SimError::Simulation(e.to_string()))?;
        let Some((digests, violations)) = verdict.take() else {
            return Err(SimError::Simulation("the checker did not finish".into()));
        };
        report.trace.extend(digests.iter().map(ToString::to_string));
        report
            .violations
            .extend(violations.iter().map(ToString::to_string));
        let admin = log.admin();
        report.auth_changes = admin.len();
        report.trace.extend(admin.iter().map(ToString::to_string));
        report
            .violations
            .extend(checker::check_auth(&log).iter().map(ToString::to_string));
        Ok(())
    }
}

/// What an auth seed runs (see [`AuthClient`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthPlan {
    /// Users, each reading and writing its own keys and the shared ones.
    pub users: usize,
    /// Times the administrator takes something away and gives it back.
    pub episodes: usize,
}
