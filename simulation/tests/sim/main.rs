//! Simulation tests: real QuantyKube clusters under turmoil, with faults and checkers.
//!
//! One test binary (RocksDB makes every binary slow to link). Run with logs, stamped
//! with simulated time: `RUST_LOG=info cargo test -p quantykube-simulation -- --nocapture`.
//! `seeds` is the CI seed set; `replay` replays the seed in `QK_SIM_SEED`;
//! `determinism` runs only in a `--cfg tokio_unstable` build (the workspace's default,
//! see `.cargo/config.toml`). The long soak is `examples/soak.rs`.

mod basics;
mod determinism;
mod follower_restart;
mod leader_isolation;
mod membership;
mod replay;
mod seeds;
mod support;
mod watch;
