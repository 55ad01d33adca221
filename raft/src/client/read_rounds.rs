//! Read-index rounds: a follower asks its leader for a read index once for every read
//! that is waiting, not once per read, as etcd's linearizable read loop does.
//!
//! This file owns [`ReadRounds`]: the reads waiting for the next round and whether a
//! round runner is active. A round starts only after every read it serves was asked
//! for, so the leader's answer (its commit index, confirmed by a quorum after the round
//! began) is a valid read index for each of them. It must never give a read the answer
//! of a round that began before the read arrived: a read that arrives while a round is
//! in flight waits for the next one.
//!
//! The rounds run on a task of their own, so a read whose caller gives up (a client
//! that hangs up) never strands the reads that joined it.

use std::sync::{Mutex, MutexGuard};

use openraft::raft::linearizable_read::Linearizer;
use tokio::sync::oneshot;

use super::{Attempt, ReadError};
use crate::types::{Member, NodeId, TypeConfig};

/// What one round tells each read it served.
pub(super) type RoundAnswer = Attempt<Linearizer<TypeConfig>, ReadError>;

/// One read waiting for a round: the leader it would ask, and where its answer goes.
pub(super) struct WaitingRead {
    pub leader: NodeId,
    pub member: Member,
    pub answer: oneshot::Sender<RoundAnswer>,
}

/// The reads waiting for the next round.
#[derive(Default)]
pub(super) struct ReadRounds {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    waiting: Vec<WaitingRead>,
    runner_active: bool,
    /// The last round's answer, kept only for the planted `ReadTakesEarlierRound`.
    #[cfg(feature = "planted-bugs")]
    last: Option<RoundAnswer>,
}

impl ReadRounds {
    /// Queues `read` for the next round. Returns true if no runner is active: the
    /// caller must start one.
    pub fn join(&self, read: WaitingRead) -> bool {
        let mut state = self.state();
        state.waiting.push(read);
        !std::mem::replace(&mut state.runner_active, true)
    }

    /// The reads the next round serves; `None` (and the runner is done) when none wait.
    pub fn next_round(&self) -> Option<Vec<WaitingRead>> {
        let mut state = self.state();
        if state.waiting.is_empty() {
            state.runner_active = false;
            return None;
        }
        Some(std::mem::take(&mut state.waiting))
    }

    /// Keeps a round's answer for the planted `ReadTakesEarlierRound`.
    #[cfg(feature = "planted-bugs")]
    pub fn remember(&self, answer: &RoundAnswer) {
        self.state().last = Some(answer.clone());
    }

    /// The last round's answer, for the planted `ReadTakesEarlierRound`.
    #[cfg(feature = "planted-bugs")]
    pub fn last_answer(&self) -> Option<RoundAnswer> {
        self.state().last.clone()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every change under this lock is one push, take or flag write: a panic cannot
        // leave it half-done.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(leader: NodeId) -> (WaitingRead, oneshot::Receiver<RoundAnswer>) {
        let (answer, answered) = oneshot::channel();
        let member = Member {
            name: format!("n{leader}"),
            peer_urls: Vec::new(),
            client_urls: Vec::new(),
        };
        (
            WaitingRead {
                leader,
                member,
                answer,
            },
            answered,
        )
    }

    #[test]
    fn a_read_arriving_during_a_round_waits_for_the_next() {
        let rounds = ReadRounds::default();
        let (first, _a) = read(1);
        assert!(rounds.join(first), "the first read starts the runner");
        let (second, _b) = read(1);
        assert!(!rounds.join(second), "a runner is already active");
        let round = rounds.next_round().map(|r| r.len());
        assert_eq!(round, Some(2), "one round serves every read waiting");

        // In flight now: a read arriving goes to the next round, not this one.
        let (late, _c) = read(2);
        assert!(!rounds.join(late));
        let next = rounds.next_round();
        assert_eq!(next.as_ref().map(|r| r[0].leader), Some(2));
        assert!(rounds.next_round().is_none(), "no reads: the runner stops");
        let (again, _d) = read(1);
        assert!(rounds.join(again), "the next read starts a new runner");
    }
}
