//! The key space every workload reads and writes, and the shared value.
//!
//! Key `i` of a space of `n` keys is `i` in zero-padded decimal, exactly `--key-size`
//! bytes long (`00000042`), so keys of one space sort in index order and the whole space
//! is the range `[key(0), key(n - 1) + "\0")`. This module owns that encoding and the
//! choice of the next key (random or sequential). It must never allocate per key more
//! than the key itself: keys are cut from a per-client arena, and the value is one
//! buffer that every request shares.

use bytes::{Bytes, BytesMut};
use rand::rngs::SmallRng;
use rand::{Rng, RngExt, SeedableRng};

/// Keys carved from one arena allocation before a new one is made.
const KEYS_PER_ARENA: usize = 1024;

/// The key space: `size` keys of `key_size` bytes.
#[derive(Clone, Copy, Debug)]
pub struct KeySpace {
    size: u64,
    key_size: usize,
    sequential: bool,
}

impl KeySpace {
    /// `size` keys of `key_size` bytes; `key_size` must hold the digits of `size - 1`
    /// (the command line checks it; longer indexes would keep their low digits).
    pub fn new(size: u64, key_size: usize, sequential: bool) -> Self {
        KeySpace {
            size: size.max(1),
            key_size: key_size.max(1),
            sequential,
        }
    }

    /// Key `index` (modulo the space size), as a fresh buffer.
    pub fn key(&self, index: u64) -> Bytes {
        let mut key = vec![0; self.key_size];
        write_index(&mut key, index % self.size);
        Bytes::from(key)
    }

    /// `[start, end)` covering exactly the keys of this space.
    pub fn range(&self) -> (Bytes, Bytes) {
        let start = self.key(0);
        let mut end = self.key(self.size - 1).to_vec();
        end.push(0);
        (start, Bytes::from(end))
    }

    /// A picker of keys for client `client`, with its own random generator.
    pub fn picker(&self, client: usize) -> KeyPicker {
        KeyPicker {
            space: *self,
            rng: SmallRng::seed_from_u64(rand::random::<u64>() ^ client as u64),
            arena: BytesMut::new(),
        }
    }
}

/// Chooses keys for one client: key `seq` modulo the space size with
/// `--sequential-keys`, otherwise uniformly at random.
pub struct KeyPicker {
    space: KeySpace,
    rng: SmallRng,
    arena: BytesMut,
}

impl KeyPicker {
    /// The key for operation number `seq` (numbered across all clients).
    pub fn next(&mut self, seq: u64) -> Bytes {
        let index = if self.space.size == 1 {
            0
        } else if self.space.sequential {
            seq % self.space.size
        } else {
            self.rng.random_range(0..self.space.size)
        };
        let size = self.space.key_size;
        if self.arena.capacity() < size {
            self.arena = BytesMut::with_capacity(size * KEYS_PER_ARENA);
        }
        self.arena.resize(size, 0);
        write_index(&mut self.arena[..], index);
        self.arena.split_to(size).freeze()
    }

    /// A number in `[0, 1)` from this client's generator (for read/write ratios).
    pub fn unit(&mut self) -> f64 {
        self.rng.random::<f64>()
    }
}

/// The value every write sends: `size` random bytes (random, so that a store that
/// compresses cannot flatter itself), made once.
pub fn value(size: usize) -> Bytes {
    let mut value = vec![0; size];
    rand::rng().fill_bytes(&mut value);
    Bytes::from(value)
}

/// Writes `index` as zero-padded decimal filling `out`.
fn write_index(out: &mut [u8], mut index: u64) {
    for byte in out.iter_mut().rev() {
        *byte = b'0' + (index % 10) as u8;
        index /= 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_zero_padded_indexes() {
        let space = KeySpace::new(100, 8, true);
        assert_eq!(&space.key(42)[..], b"00000042");
        let mut picker = space.picker(0);
        assert_eq!(&picker.next(7)[..], b"00000007");
        assert_eq!(&picker.next(107)[..], b"00000007");
        let (start, end) = space.range();
        assert_eq!(&start[..], b"00000000");
        assert_eq!(&end[..], b"00000099\0");
    }

    #[test]
    fn random_keys_stay_in_the_space() {
        let space = KeySpace::new(10, 3, false);
        let mut picker = space.picker(3);
        let (start, end) = space.range();
        for seq in 0..10_000 {
            let key = picker.next(seq);
            assert_eq!(key.len(), 3);
            assert!(key >= start && key < end, "{key:?}");
        }
    }

    #[test]
    fn the_value_has_its_size() {
        assert_eq!(value(0).len(), 0);
        assert_eq!(value(1000).len(), 1000);
    }
}
