//! Hand-written histories: sound ones (some only in one order), classic violations,
//! unknown outcomes either way, and large generated ones for speed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::*;
use crate::history::{Op, Operation, Outcome};

fn op(client: &str, op: Op, t: (u64, u64), outcome: Outcome) -> Operation {
    Operation {
        client: client.to_owned(),
        op,
        invoked: Duration::from_millis(t.0),
        completed: Duration::from_millis(t.1),
        outcome,
        member: None,
    }
}

fn put(c: &str, key: &str, value: &str, t: (u64, u64), revision: i64) -> Operation {
    let put = Op::Put {
        key: key.into(),
        value: value.into(),
    };
    op(c, put, t, Outcome::Written { revision })
}

fn get(c: &str, key: &str, t: (u64, u64), revision: i64, seen: Option<(&str, i64)>) -> Operation {
    let get = Op::Get {
        key: key.into(),
        serializable: false,
    };
    let value = seen.map(|(v, m)| (v.to_owned(), m));
    op(c, get, t, Outcome::Read { revision, value })
}

fn delete(c: &str, key: &str, t: (u64, u64), revision: i64, deleted: i64) -> Operation {
    let delete = Op::Delete { key: key.into() };
    op(c, delete, t, Outcome::Deleted { revision, deleted })
}

#[allow(clippy::too_many_arguments)]
fn cas(
    c: &str,
    key: &str,
    expected: i64,
    value: &str,
    t: (u64, u64),
    revision: i64,
    succeeded: bool,
) -> Operation {
    let cas = Op::Cas {
        key: key.into(),
        expected,
        value: value.into(),
    };
    let outcome = Outcome::Swapped {
        revision,
        succeeded,
    };
    op(c, cas, t, outcome)
}

fn unknown(mut operation: Operation) -> Operation {
    operation.outcome = Outcome::Unknown("timeout".into());
    operation
}

const BUDGET: u64 = 1_000_000;

fn order(ops: &[Operation]) -> Vec<usize> {
    match analyze(ops, 1, BUDGET) {
        Verdict::Linearizable { order, .. } => order,
        other => panic!("expected linearizable, got {other:?}"),
    }
}

fn violation(ops: &[Operation]) -> String {
    match analyze(ops, 1, BUDGET) {
        Verdict::Violated { detail, .. } => detail,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[test]
fn a_sequential_history_of_every_kind_is_linearizable() {
    let ops = vec![
        put("a", "k", "v1", (0, 1), 2),
        get("a", "k", (2, 3), 2, Some(("v1", 2))),
        put("a", "j", "w1", (4, 5), 3),
        delete("a", "k", (6, 7), 4, 1),
        get("a", "k", (8, 9), 4, None),
        delete("a", "k", (10, 11), 4, 0),
        cas("a", "j", 3, "w2", (12, 13), 5, true),
        cas("a", "j", 3, "w3", (14, 15), 5, false),
        cas("a", "k", 0, "v2", (16, 17), 6, true),
        op(
            "a",
            Op::Compact { revision: 4 },
            (18, 19),
            Outcome::Compacted { revision: 6 },
        ),
        get("a", "j", (20, 21), 6, Some(("w2", 5))),
        // Serializable reads are not checked here, however stale.
        op(
            "a",
            Op::Get {
                key: "k".into(),
                serializable: true,
            },
            (22, 23),
            Outcome::Read {
                revision: 1,
                value: None,
            },
        ),
    ];
    assert_eq!(order(&ops), (0..11).collect::<Vec<_>>());
    assert_eq!(check(&ops, 1), Ok(()));
}

#[test]
fn concurrent_operations_are_ordered_by_their_answers() {
    // Two concurrent puts: their revisions fix the order, the later one first.
    let ops = vec![
        put("a", "k", "a", (0, 10), 3),
        put("b", "k", "b", (0, 10), 2),
        get("c", "k", (11, 12), 3, Some(("a", 3))),
    ];
    assert_eq!(order(&ops), vec![1, 0, 2]);
    // A read concurrent with both sees the first and not the second: only one order.
    let ops = vec![
        put("a", "k", "a", (0, 10), 3),
        put("b", "k", "b", (0, 10), 2),
        get("c", "k", (0, 10), 2, Some(("b", 2))),
    ];
    assert_eq!(order(&ops), vec![1, 2, 0]);
    // Concurrent CASes on the same expected revision: one wins, the other sees its
    // write and fails at the winner's revision.
    let ops = vec![
        put("a", "k", "v", (0, 1), 2),
        cas("a", "k", 2, "x", (5, 10), 3, false),
        cas("b", "k", 2, "y", (5, 10), 3, true),
    ];
    assert_eq!(order(&ops), vec![0, 2, 1]);
    // Operations that touch at one instant count as concurrent (tick-granular time).
    let ops = vec![
        put("a", "k", "a", (0, 10), 2),
        get("b", "k", (10, 12), 1, None),
    ];
    assert_eq!(order(&ops), vec![1, 0]);
}

#[test]
fn a_stale_read_after_an_acknowledged_write_is_caught() {
    let ops = vec![
        put("a", "k", "v1", (0, 10), 2),
        put("a", "k", "v2", (11, 20), 3),
        get("b", "k", (21, 30), 2, Some(("v1", 2))),
    ];
    let detail = violation(&ops);
    assert!(detail.contains("#2"), "{detail}");
    assert!(detail.contains("k=v2@3"), "{detail}");
    let error = check(&ops, 1).map_err(|v| v.property);
    assert_eq!(error, Err("linearizability"));
}

#[test]
fn two_cas_succeeding_on_one_expected_revision_are_caught() {
    let ops = vec![
        put("a", "k", "v", (0, 1), 2),
        cas("a", "k", 2, "x", (5, 10), 3, true),
        cas("b", "k", 2, "y", (5, 10), 4, true),
    ];
    violation(&ops);
}

#[test]
fn a_read_of_a_value_never_written_is_caught() {
    let ops = vec![
        put("a", "k", "v", (0, 1), 2),
        get("b", "k", (5, 10), 2, Some(("ghost", 2))),
    ];
    let detail = violation(&ops);
    assert!(detail.contains("no operation wrote that value"), "{detail}");
}

#[test]
fn a_lost_write_is_caught() {
    // Acknowledged, then a later read finds the key missing.
    let ops = vec![
        put("a", "k", "v", (0, 10), 2),
        get("b", "k", (20, 30), 2, None),
    ];
    violation(&ops);
    // Acknowledged, then overwritten by a put that reports the same revision.
    let ops = vec![
        put("a", "k", "v", (0, 10), 2),
        put("b", "j", "w", (20, 30), 2),
    ];
    violation(&ops);
}

#[test]
fn revisions_going_backwards_are_caught() {
    let ops = vec![
        put("a", "k", "v", (0, 10), 3),
        put("a", "j", "w", (20, 30), 2),
    ];
    violation(&ops);
    let ops = vec![
        put("a", "k", "v", (0, 10), 2),
        get("b", "j", (20, 30), 2, None),
        get("b", "j", (40, 50), 1, None),
    ];
    violation(&ops);
}

#[test]
fn a_delete_of_nothing_must_not_bump_the_revision() {
    let ops = vec![delete("a", "k", (0, 10), 2, 0)];
    violation(&ops);
    let ops = vec![delete("a", "k", (0, 10), 1, 1)];
    violation(&ops);
}

#[test]
fn a_compact_changes_nothing() {
    let compact = |t, revision| {
        op(
            "a",
            Op::Compact { revision: 2 },
            t,
            Outcome::Compacted { revision },
        )
    };
    let ops = vec![put("a", "k", "v", (0, 1), 2), compact((2, 3), 2)];
    order(&ops);
    let ops = vec![put("a", "k", "v", (0, 1), 2), compact((2, 3), 3)];
    violation(&ops);
}

#[test]
fn unknown_writes_may_or_may_not_take_effect() {
    let lost = || unknown(put("a", "k", "v", (0, 10), 0));
    // Took effect.
    order(&[lost(), get("b", "k", (20, 30), 2, Some(("v", 2)))]);
    // Did not.
    order(&[lost(), get("b", "k", (20, 30), 1, None)]);
    // Took effect long after the client gave up: it sat in the log.
    order(&[
        lost(),
        get("b", "k", (20, 30), 1, None),
        get("b", "k", (40, 50), 2, Some(("v", 2))),
    ]);
    // But never before it was invoked.
    violation(&[
        get("b", "k", (0, 10), 2, Some(("v", 2))),
        unknown(put("a", "k", "v", (20, 30), 0)),
    ]);
    // A revision gap between acknowledged writes must be an unknown write, one each.
    let ops = [
        put("a", "k", "v1", (0, 10), 2),
        unknown(put("b", "j", "w", (11, 12), 0)),
        put("a", "k", "v2", (20, 30), 4),
    ];
    assert_eq!(order(&ops), vec![0, 1, 2]);
    let ops = [
        put("a", "k", "v1", (0, 10), 2),
        unknown(put("b", "j", "w", (11, 12), 0)),
        put("a", "k", "v2", (20, 30), 5),
    ];
    violation(&ops);
    // Unknown deletes and CASes, either way.
    let base = || put("a", "k", "v", (0, 1), 2);
    let del = || unknown(delete("b", "k", (2, 3), 0, 0));
    order(&[base(), del(), get("c", "k", (4, 5), 3, None)]);
    order(&[base(), del(), get("c", "k", (4, 5), 2, Some(("v", 2)))]);
    let swap = || unknown(cas("b", "k", 2, "x", (2, 3), 0, false));
    order(&[base(), swap(), get("c", "k", (4, 5), 3, Some(("x", 3)))]);
    order(&[base(), swap(), get("c", "k", (4, 5), 2, Some(("v", 2)))]);
    // An unknown CAS whose compare cannot hold cannot write.
    let doomed = unknown(cas("b", "k", 7, "x", (2, 3), 0, false));
    violation(&[base(), doomed, get("c", "k", (4, 5), 3, Some(("x", 3)))]);
    // Unknown reads say nothing.
    let blind = unknown(get("c", "k", (0, 1), 0, None));
    order(&[blind]);
}

#[test]
fn malformed_operations_are_reported() {
    let ops = vec![op(
        "a",
        Op::Put {
            key: "k".into(),
            value: "v".into(),
        },
        (0, 1),
        Outcome::Compacted { revision: 1 },
    )];
    assert!(violation(&ops).contains("another kind"));
}

#[test]
fn the_budget_makes_a_search_inconclusive() {
    let ops = vec![
        put("a", "k", "v1", (0, 10), 2),
        put("a", "k", "v2", (11, 20), 3),
    ];
    assert_eq!(
        analyze(&ops, 1, 1),
        Verdict::Inconclusive {
            steps: 1,
            detail: None
        }
    );
    let error = check_within(&ops, 1, 1).map_err(|v| v.property);
    assert_eq!(error, Err("linearizability-inconclusive"));
    assert_eq!(check_within(&ops, 1, 100), Ok(()));
}

/// A seeded generator (splitmix64): no dependency, same history every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A linearizable history of `count` operations by `clients` concurrent clients on
/// `keys` keys, `unknown_percent` of them with unknown outcomes (half of those took
/// effect), made by running a plain store (not the model) at random instants inside
/// each operation's interval.
fn generated(
    seed: u64,
    count: usize,
    clients: usize,
    keys: usize,
    unknown_percent: u64,
) -> Vec<Operation> {
    let mut rng = Rng(seed);
    // (instant of effect, client, request, interval, unknown, takes effect if unknown)
    let mut planned = Vec::new();
    let mut free_at = vec![0u64; clients];
    for i in 0..count {
        let client = i % clients;
        let invoked = free_at[client] + rng.below(5);
        let effect = invoked + rng.below(20);
        let completed = effect + rng.below(20);
        free_at[client] = completed + 1;
        let key = format!("k{}", rng.below(keys as u64));
        let value = format!("c{client}-{i}");
        let request = match rng.below(10) {
            0..=3 => Op::Put { key, value },
            4..=6 => Op::Get {
                key,
                serializable: false,
            },
            7 => Op::Delete { key },
            // The expected revision is filled in at the instant of effect.
            _ => Op::Cas {
                key,
                expected: -1,
                value,
            },
        };
        let lost = rng.below(100) < unknown_percent;
        let applies = rng.below(2) == 0;
        planned.push((effect, client, request, (invoked, completed), lost, applies));
    }
    planned.sort_by_key(|p| p.0);
    let mut revision = 1;
    let mut store: BTreeMap<String, (String, i64)> = BTreeMap::new();
    let mut ops = Vec::new();
    for (_, client, mut request, t, lost, applies) in planned {
        let run = !lost || applies;
        let outcome = match &mut request {
            Op::Put { key, value } => {
                if run {
                    revision += 1;
                    store.insert(key.clone(), (value.clone(), revision));
                }
                Outcome::Written { revision }
            }
            Op::Get { key, .. } => Outcome::Read {
                revision,
                value: store.get(key).cloned(),
            },
            Op::Delete { key } => {
                let deleted = if run && store.remove(key).is_some() {
                    revision += 1;
                    1
                } else {
                    0
                };
                Outcome::Deleted { revision, deleted }
            }
            Op::Cas {
                key,
                expected,
                value,
            } => {
                let current = store.get(key).map_or(0, |(_, m)| *m);
                // Mostly the current revision, sometimes a stale one.
                *expected = if rng.below(3) == 0 {
                    current.saturating_sub(1)
                } else {
                    current
                };
                let succeeded = current == *expected;
                if run && succeeded {
                    revision += 1;
                    store.insert(key.clone(), (value.clone(), revision));
                }
                Outcome::Swapped {
                    revision,
                    succeeded,
                }
            }
            Op::Compact { .. } => Outcome::Compacted { revision },
            Op::LeaseGrant { .. }
            | Op::LeaseKeepAlive { .. }
            | Op::LeaseRevoke { .. }
            | Op::PutWithLease { .. } => unreachable!("the generator makes no lease requests"),
        };
        let outcome = if lost {
            Outcome::Unknown("timeout".into())
        } else {
            outcome
        };
        ops.push(op(&format!("c{client}"), request, t, outcome));
    }
    ops.sort_by_key(|o| o.completed);
    ops
}

fn timed(ops: &[Operation]) -> (Verdict, Duration) {
    let start = Instant::now();
    let verdict = analyze(ops, 1, 50_000_000);
    (verdict, start.elapsed())
}

#[test]
fn large_sound_histories_are_checked_fast() {
    for (count, clients, unknown_percent) in [(300, 3, 0), (500, 5, 5), (2000, 8, 5), (1000, 5, 20)]
    {
        for seed in 0..5 {
            let ops = generated(seed, count, clients, 5, unknown_percent);
            let (verdict, took) = timed(&ops);
            let Verdict::Linearizable { steps, .. } = verdict else {
                panic!("seed {seed}: {verdict:?}");
            };
            eprintln!(
                "{count} ops, {clients} clients, {unknown_percent}% unknown, seed {seed}: \
                 linearizable in {steps} steps, {took:?}"
            );
            assert!(steps < DEFAULT_STEP_BUDGET / 10, "{steps} steps");
        }
    }
}

#[test]
fn large_histories_with_one_stale_read_are_refuted_fast() {
    for (count, clients, unknown_percent) in [(500, 5, 5), (1000, 8, 10), (2000, 8, 5)] {
        for seed in 0..3 {
            let mut ops = generated(seed, count, clients, 5, unknown_percent);
            // Make one read half-way through stale: the key as it was at the start.
            let half = ops.len() / 2;
            let Some(i) = ops[half..]
                .iter()
                .position(|o| matches!(&o.outcome, Outcome::Read { value: Some(_), .. }))
            else {
                continue;
            };
            if let Outcome::Read { value, .. } = &mut ops[half + i].outcome {
                *value = None;
            }
            let (verdict, took) = timed(&ops);
            let Verdict::Violated { steps, detail } = verdict else {
                panic!("seed {seed}: {verdict:?}");
            };
            eprintln!(
                "{count} ops, {clients} clients, {unknown_percent}% unknown, seed {seed}, \
                 stale read #{}: refuted in {steps} steps, {took:?}",
                half + i
            );
            assert!(detail.contains(&format!("#{} ", half + i)), "{detail}");
            assert!(steps < DEFAULT_STEP_BUDGET, "{steps} steps");
        }
    }
}

/// Every order, by brute force: the verdict the search must agree with.
fn brute_force(ops: &[Operation], initial_revision: i64) -> bool {
    let Ok(prepared) = Prepared::new(ops) else {
        return false;
    };
    let calls = &prepared.calls;
    fn go(calls: &[search::Call], requests: &[Input], done: &mut Vec<bool>, state: &State) -> bool {
        let open: Vec<usize> = (0..calls.len()).filter(|&c| !done[c]).collect();
        if open.iter().all(|&c| calls[c].output.is_none()) {
            return true;
        }
        // Real time: no open answered operation completed before the next one began.
        let first_return = open
            .iter()
            .filter(|&&c| calls[c].output.is_some())
            .map(|&c| calls[c].completed)
            .min()
            .unwrap_or(Duration::MAX);
        for &c in &open {
            if calls[c].invoked > first_return {
                continue;
            }
            let next = match state.step(requests[c], calls[c].output) {
                model::Step::Impossible => continue,
                model::Step::Same => state.clone(),
                model::Step::Next(next) => next,
            };
            done[c] = true;
            let found = go(calls, requests, done, &next);
            done[c] = false;
            if found {
                return true;
            }
        }
        false
    }
    let state = State::initial(initial_revision, prepared.keys.len());
    go(
        calls,
        &prepared.requests,
        &mut vec![false; calls.len()],
        &state,
    )
}

#[test]
fn the_search_agrees_with_brute_force_on_small_histories() {
    let (mut sound, mut unsound) = (0, 0);
    for seed in 0..5000u64 {
        let mut rng = Rng(seed ^ 0x5eed);
        let mut ops = generated(seed, 4 + (seed % 5) as usize, 4, 2, 30);
        // Corrupt one answer in most histories: a revision, a value or a flag.
        if rng.below(4) != 0 {
            let i = rng.below(ops.len() as u64) as usize;
            let nudge = if rng.below(2) == 0 { 1 } else { -1 };
            match &mut ops[i].outcome {
                Outcome::Written { revision }
                | Outcome::Deleted { revision, .. }
                | Outcome::Compacted { revision }
                | Outcome::Revoked { revision } => *revision += nudge,
                Outcome::Granted { .. } | Outcome::KeptAlive { .. } => {}
                Outcome::Read { revision, value } => match rng.below(3) {
                    0 => *revision += nudge,
                    1 => *value = None,
                    _ => *value = Some(("c0-0".into(), 2)),
                },
                Outcome::Swapped { succeeded, .. } => *succeeded = !*succeeded,
                Outcome::Unknown(_) => {}
            }
        }
        let expected = brute_force(&ops, 1);
        let verdict = analyze(&ops, 1, BUDGET);
        let linearizable = matches!(verdict, Verdict::Linearizable { .. });
        assert_eq!(
            linearizable,
            expected,
            "seed {seed}: {verdict:?}\n{}",
            ops.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
        if expected {
            sound += 1;
        } else {
            unsound += 1;
        }
    }
    eprintln!("agreed on {sound} linearizable and {unsound} other histories");
    assert!(sound > 500 && unsound > 500);
}

fn lease_put(key: &str, lease: i64, t: (u64, u64), revision: i64) -> Operation {
    let put = Op::PutWithLease {
        key: key.into(),
        value: format!("{key}@{lease}"),
        lease,
    };
    op("l", put, t, Outcome::Written { revision })
}

#[test]
fn a_lease_expiry_fills_the_revision_it_took() {
    // Lease 7's two keys go together at revision 4, which no client made; lease 8's
    // key is still there.
    let ops = vec![
        lease_put("l/a", 7, (0, 10), 2),
        lease_put("l/b", 7, (10, 20), 3),
        lease_put("l/c", 8, (20, 30), 5),
        get("c", "l/a", (40, 50), 5, None),
        get("c", "l/c", (50, 60), 5, Some(("l/c@8", 5))),
        put("c", "k", "v", (60, 70), 6),
    ];
    assert_eq!(order(&ops).len(), ops.len());
    // One expiry deletes both keys in one revision: a revision between them is not
    // explained.
    let split = vec![
        lease_put("l/a", 7, (0, 10), 2),
        lease_put("l/b", 7, (10, 20), 3),
        get("c", "l/a", (40, 50), 4, None),
        get("c", "l/b", (50, 60), 5, None),
    ];
    violation(&split);
    // An expiry before the key was put cannot delete it.
    let early = vec![
        get("c", "l/a", (0, 5), 1, None),
        put("c", "k", "v", (6, 8), 3),
        lease_put("l/a", 7, (10, 20), 2),
    ];
    violation(&early);
}

#[test]
fn an_answered_revoke_takes_a_revision_only_with_keys() {
    let revoke = |id, t, revision| {
        op(
            "l",
            Op::LeaseRevoke { id },
            t,
            Outcome::Revoked { revision },
        )
    };
    let ops = vec![
        lease_put("l/a", 7, (0, 10), 2),
        revoke(7, (20, 30), 3),
        revoke(9, (40, 50), 3),
        get("c", "l/a", (60, 70), 3, None),
    ];
    assert_eq!(order(&ops).len(), ops.len());
    // A revoke of a lease with no key of ours makes no revision (and lease 7's
    // expiry cannot have made it: its key is still there).
    let invented = vec![
        lease_put("l/a", 7, (0, 10), 2),
        revoke(9, (20, 30), 3),
        get("c", "l/a", (40, 50), 3, Some(("l/a@7", 2))),
    ];
    violation(&invented);
}

#[test]
fn expiries_proven_by_reads_do_not_compete_with_unknown_writes() {
    // Six leases' keys, then twelve writes of unknown outcome and six expiries that
    // share the last revisions (12 + 6 candidates for 10 gaps): reads at the end find
    // every lease key gone. Left to the pool, the expiries would be tried after every
    // subset of the earlier unknown writes.
    let mut ops = Vec::new();
    for lease in 0..6u64 {
        ops.push(lease_put(
            &format!("l/{lease}"),
            lease as i64,
            (lease * 10, lease * 10 + 5),
            2 + lease as i64,
        ));
    }
    for i in 0..12u64 {
        ops.push(unknown(put(
            "c",
            &format!("k{i}"),
            &format!("v{i}"),
            (100 + i, 200),
            0,
        )));
    }
    // Every lease is seen alive after the unknown writes were sent: their expiries
    // come last in the pool.
    for lease in 0..6u64 {
        let key = format!("l/{lease}");
        let value = format!("{key}@{lease}");
        ops.push(get(
            "r",
            &key,
            (300 + lease, 305 + lease),
            7,
            Some((&value, 2 + lease as i64)),
        ));
    }
    // Revisions 2..=7 were the lease puts; the store ends at 17: 4 unknown puts and
    // the 6 expiries.
    for lease in 0..6u64 {
        ops.push(get(
            "r",
            &format!("l/{lease}"),
            (1_000 + lease, 1_010 + lease),
            17,
            None,
        ));
    }
    let Verdict::Linearizable { steps, .. } = analyze(&ops, 1, BUDGET) else {
        panic!("expected linearizable: {:?}", analyze(&ops, 1, BUDGET));
    };
    // Without the bound: no verdict within a million steps.
    assert!(steps < 1_000, "{steps} steps");
}
