//! The harness's own seeded randomness: which faults a seed injects and when, and what
//! each workload client asks for.
//!
//! This module owns [`SimRng`], a SplitMix64 generator, and [`mix`], which derives
//! unrelated seeds from a seed and a stream number. It is independent of turmoil's and
//! tokio's generators on purpose: choosing a fault or an operation must not shift the
//! network's random draws, and the same seed must give the same choices on every
//! platform and in every version of the dependencies. It must never read the clock or
//! the OS's entropy.

use std::ops::Range;
use std::time::Duration;

/// SplitMix64 of `a` and `b`: distinct inputs give unrelated seeds.
pub fn mix(a: u64, b: u64) -> u64 {
    let z = a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small deterministic generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// The generator of stream `stream` of `seed` (e.g. one stream per client).
    pub fn new(seed: u64, stream: u64) -> Self {
        SimRng {
            state: mix(seed, stream),
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.state, 0)
    }

    /// A number in `range` (`range.start` if it is empty).
    pub fn below(&mut self, range: Range<u64>) -> u64 {
        let span = range.end.saturating_sub(range.start);
        if span == 0 {
            return range.start;
        }
        range.start + self.next_u64() % span
    }

    /// An index into a collection of `len` items (0 if it is empty).
    pub fn index(&mut self, len: usize) -> usize {
        // usize fits in u64 on every platform Rust supports.
        self.below(0..len as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(0..100) < percent
    }

    /// A duration in `[min, max)` with millisecond steps.
    pub fn millis(&mut self, min: u64, max: u64) -> Duration {
        Duration::from_millis(self.below(min..max))
    }

    /// One of `items`, or `None` if there are none.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.index(items.len()))
    }

    /// The index of a weighted choice: `weights[i]` out of their sum (0 if all are 0).
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let total: u64 = weights.iter().sum();
        let mut draw = self.below(0..total);
        for (i, weight) in weights.iter().enumerate() {
            if draw < *weight {
                return i;
            }
            draw -= weight;
        }
        0
    }

    /// Shuffles `items` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.index(i + 1);
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_of_one_seed_differ_and_repeat() {
        let a: Vec<u64> = (0..4).map(|_| SimRng::new(7, 1).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(SimRng::new(7, 1).next_u64(), SimRng::new(7, 2).next_u64());
    }

    #[test]
    fn choices_stay_in_bounds() {
        let mut rng = SimRng::new(1, 0);
        for _ in 0..1000 {
            assert!((3..9).contains(&rng.below(3..9)));
            assert!(rng.weighted(&[0, 5, 0, 1]) % 2 == 1);
        }
        assert_eq!(rng.below(4..4), 4);
        assert_eq!(rng.pick::<u8>(&[]), None);
        let mut items = [1, 2, 3, 4, 5];
        rng.shuffle(&mut items);
        items.sort_unstable();
        assert_eq!(items, [1, 2, 3, 4, 5]);
    }
}
