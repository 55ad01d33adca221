//! Simulation tests: real QuantyKube clusters under turmoil, with faults and checkers.
//!
//! One test binary (RocksDB makes every binary slow to link). Run with logs, stamped
//! with simulated time: `RUST_LOG=info cargo test -p quantykube-simulation -- --nocapture`.
//! `soak` is ignored by default (`QK_SIM_SEEDS=100 ... soak -- --ignored`);
//! `determinism` runs only in a `--cfg tokio_unstable` build (see the crate README).

mod basics;
mod determinism;
mod follower_restart;
mod leader_isolation;
mod soak;
mod support;
