//! The image and the compose cluster on a real Docker engine, with chaos under load.
//!
//! `cargo test --test docker -- --test-threads=1 --nocapture`. Every test prints
//! `SKIPPED: docker not available: ...` and passes when `docker info` fails (set
//! `QK_REQUIRE_DOCKER=1` to fail instead). The image `quantykube:dev` (or
//! `QK_TEST_IMAGE`) is built from this build's binary by deploy/image/build.sh when it
//! holds another one. Each test runs its own compose project (`qkdt<pid>-<name>`,
//! containers `qkdt<pid>-<name>-qk-N`, free loopback ports) and removes it, volumes
//! included, when it ends, failed or not (and what a killed run left, at the next run);
//! the tests run one at a time whatever `--test-threads` says.

mod chaos;
mod cluster;
mod compose;
mod harness;
mod image;
mod load;
mod scenarios;
