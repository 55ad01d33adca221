//! Power losses and failing disks on real members: each member keeps its data dir on a
//! crash filesystem (`tools/crashfs`) that drops, at a power cut, everything that was
//! not synced, as a real power cut does (`kill -9` keeps the page cache). The
//! scenarios judge what clients were told against what the members hold afterwards
//! (`verdict`). They run against QuantyKube, or etcd 3.4 with `QK_TEST_TARGET=etcd`
//! (see the e2e harness).
//!
//! `QK_CRASH_ROUNDS` sets how many power losses the long scenarios take (`make
//! crash-soak`); `QK_CRASH_SEED` replays a run's choices of instants (each test prints
//! its seed).

#[path = "../e2e/harness/mod.rs"]
mod harness;
#[path = "../e2e/support/mod.rs"]
mod support;

mod disks;
mod during;
mod first_files;
mod from_etcd;
mod planted;
mod power;
mod reads;
mod recovery;
mod restore;
mod rig;
mod snapshot_files;
mod traffic;
mod upgrades;
mod verdict;
