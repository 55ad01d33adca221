//! The async runtime openraft runs on: tokio, with randomness a simulation can seed.
//!
//! This module owns [`RaftRuntime`], openraft's `AsyncRuntime` for QuantyKube, and
//! [`with_seed`]. Everything is tokio's (tasks, timers, channels); only the random
//! numbers differ. openraft draws its election timeouts and the first tick offset from
//! `AsyncRuntime::thread_rng()`. Inside [`with_seed`], those numbers come from the seed,
//! and every task openraft spawns from there inherits a seed derived from its parent's,
//! so a deterministic simulation elects the same leader at the same instant in every
//! run of a seed. Outside of it (production) every draw is seeded from the operating
//! system, as tokio's own runtime does.
//!
//! It must never change anything but where random numbers come from, and it must never
//! panic for lack of a seed: code that runs outside [`with_seed`] simply gets
//! unpredictable numbers.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use openraft::async_runtime::{Select2, Select3, Select4};
use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};
use rand::rngs::SmallRng;
use rand::SeedableRng;

tokio::task_local! {
    static SEED: Cell<u64>;
}

/// Runs `future` with openraft's randomness seeded by `seed`: every election timeout
/// drawn by a raft started inside it, and by the tasks that raft spawns, follows from
/// the seed.
pub fn with_seed<F: Future>(seed: u64, future: F) -> impl Future<Output = F::Output> {
    SEED.scope(Cell::new(seed), future)
}

/// SplitMix64's finaliser with a chosen increment; different increments give
/// independent sequences (one for the parent's next draw, one for a child's seed).
fn splitmix64(seed: u64, gamma: u64) -> u64 {
    let z = seed.wrapping_add(gamma);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

const CHILD_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;
const NEXT_GAMMA: u64 = 0x6a09_e667_f3bc_c908;

/// The current task's seed, advanced; `None` outside [`with_seed`].
fn take_seed() -> Option<u64> {
    SEED.try_with(|cell| {
        let seed = cell.get();
        cell.set(splitmix64(seed, NEXT_GAMMA));
        seed
    })
    .ok()
}

/// openraft's runtime for QuantyKube: [`TokioRuntime`] with seedable randomness.
#[derive(Debug)]
pub struct RaftRuntime {
    inner: TokioRuntime,
}

impl AsyncRuntime for RaftRuntime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = SmallRng;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        match take_seed() {
            Some(seed) => {
                TokioRuntime::spawn(SEED.scope(Cell::new(splitmix64(seed, CHILD_GAMMA)), future))
            }
            None => TokioRuntime::spawn(future),
        }
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn select2<A, B>(
        a: A,
        b: B,
    ) -> impl Future<Output = Select2<A::Output, B::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
    {
        TokioRuntime::select2(a, b)
    }

    fn select3<A, B, C>(
        a: A,
        b: B,
        c: C,
    ) -> impl Future<Output = Select3<A::Output, B::Output, C::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
        C: Future + OptionalSend,
    {
        TokioRuntime::select3(a, b, c)
    }

    fn select4<A, B, C, D>(
        a: A,
        b: B,
        c: C,
        d: D,
    ) -> impl Future<Output = Select4<A::Output, B::Output, C::Output, D::Output>> + OptionalSend
    where
        A: Future + OptionalSend,
        B: Future + OptionalSend,
        C: Future + OptionalSend,
        D: Future + OptionalSend,
    {
        TokioRuntime::select4(a, b, c, d)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        match take_seed() {
            Some(seed) => SmallRng::seed_from_u64(seed),
            None => SmallRng::seed_from_u64(rand::random()),
        }
    }

    type Mpsc = <TokioRuntime as AsyncRuntime>::Mpsc;
    type Watch = <TokioRuntime as AsyncRuntime>::Watch;
    type Oneshot = <TokioRuntime as AsyncRuntime>::Oneshot;
    type Mutex<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::Mutex<T>;

    fn new(threads: usize) -> Self {
        RaftRuntime {
            inner: TokioRuntime::new(threads),
        }
    }

    fn block_on<F, T>(&mut self, future: F) -> T
    where
        F: Future<Output = T>,
    {
        self.inner.block_on(future)
    }
}

#[cfg(test)]
mod tests {
    use rand::RngExt;

    use super::*;

    fn draws() -> Vec<u64> {
        (0..4)
            .map(|_| RaftRuntime::thread_rng().random_range(150..300))
            .collect()
    }

    #[tokio::test]
    async fn a_seed_fixes_the_draws_of_a_task_and_its_children() {
        let run = |seed| {
            with_seed(seed, async {
                let mut seen = draws();
                let child = RaftRuntime::spawn(async { draws() }).await.unwrap();
                seen.extend(child);
                seen
            })
        };
        let first = run(7).await;
        assert_eq!(first, run(7).await);
        assert_ne!(first, run(8).await);
    }

    #[tokio::test]
    async fn without_a_seed_draws_still_work() {
        let child = RaftRuntime::spawn(async { draws() }).await.unwrap();
        assert!(child.iter().all(|d| (150..300).contains(d)));
        assert_eq!(draws().len(), 4);
    }
}
