//! Which server the tests run against (`QK_TEST_TARGET`), and where its binary and
//! etcdctl are.

use std::fmt;
use std::path::PathBuf;

/// Which server the tests run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Quantykube,
    Etcd,
}

impl Target {
    /// The target named by `QK_TEST_TARGET` (default `quantykube`).
    pub fn from_env() -> Target {
        match std::env::var("QK_TEST_TARGET").as_deref() {
            Ok("etcd") => Target::Etcd,
            Ok("quantykube") | Ok("") | Err(_) => Target::Quantykube,
            Ok(other) => panic!("QK_TEST_TARGET={other}: expected `quantykube` or `etcd`"),
        }
    }

    /// The binary to run for this target, or `None` if it cannot be found.
    pub fn binary(self) -> Option<PathBuf> {
        match self {
            Target::Quantykube => std::env::var_os("QK_BIN")
                .map(PathBuf::from)
                .or_else(|| option_env!("CARGO_BIN_EXE_quantykube").map(PathBuf::from))
                .filter(|p| p.is_file()),
            Target::Etcd => std::env::var_os("QK_ETCD_BIN")
                .map(PathBuf::from)
                .filter(|p| p.is_file())
                .or_else(|| find_on_path("etcd")),
        }
    }

    pub fn require_binary(self) -> PathBuf {
        self.binary().unwrap_or_else(|| match self {
            Target::Quantykube => panic!(
                "no quantykube binary: set QK_BIN, build the `quantykube` bin, \
                 or run against etcd with QK_TEST_TARGET=etcd"
            ),
            Target::Etcd => {
                panic!("no etcd binary: install Debian's etcd-server package or set QK_ETCD_BIN")
            }
        })
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Target::Quantykube => "quantykube",
            Target::Etcd => "etcd",
        })
    }
}

/// Looks `name` up on `PATH`.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The etcdctl binary: `QK_ETCDCTL_BIN` or `etcdctl` on `PATH`.
pub fn etcdctl_binary() -> PathBuf {
    std::env::var_os("QK_ETCDCTL_BIN")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| find_on_path("etcdctl"))
        .expect("etcdctl not found: install Debian's etcd-client package or set QK_ETCDCTL_BIN")
}
