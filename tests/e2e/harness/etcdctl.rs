//! Running etcdctl (API v3) against a cluster's members, with the harness's TLS flags
//! or exactly the arguments a test gives, and its output ([`CmdOutput`]).

use std::fmt;
use std::process::{ExitStatus, Stdio};

use super::*;

/// The output of one etcdctl run.
#[derive(Debug)]
pub struct CmdOutput {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl CmdOutput {
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// Panics with the full output unless the command succeeded.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.status.success(),
            "etcdctl failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.status,
            self.stdout,
            self.stderr
        );
        self
    }
}

impl Cluster {
    /// Runs etcdctl (API v3) against all running members with the given arguments.
    pub async fn etcdctl(&self, args: &[&str]) -> CmdOutput {
        self.etcdctl_with_stdin(args, "").await
    }

    /// Runs etcdctl (API v3) against all running members, feeding `stdin`.
    pub async fn etcdctl_with_stdin(&self, args: &[&str], stdin: &str) -> CmdOutput {
        let endpoints: Vec<String> = (0..self.members.len())
            .filter(|&i| self.is_running(i))
            .map(|i| self.endpoint(i))
            .collect();
        run_etcdctl(&endpoints.join(","), &self.tls_args(args), stdin).await
    }

    /// `args` after the harness's TLS flags for etcdctl, if any.
    fn tls_args(&self, args: &[&str]) -> Vec<String> {
        let mut all = self
            .client_tls
            .as_ref()
            .map(ClientTls::etcdctl_flags)
            .unwrap_or_default();
        all.extend(args.iter().map(|a| a.to_string()));
        all
    }

    /// Runs etcdctl (API v3) against member `i` only.
    pub async fn etcdctl_on(&self, i: usize, args: &[&str]) -> CmdOutput {
        run_etcdctl(&self.endpoint(i), &self.tls_args(args), "").await
    }
}

/// `header.member_id` of etcdctl's `-w json` answer.
pub(super) fn json_member_id(stdout: &str) -> Option<u64> {
    let value: serde_json::Value = serde_json::from_str(stdout.trim()).ok()?;
    value.get("header")?.get("member_id")?.as_u64()
}

/// Runs etcdctl (API v3) against `endpoints` with exactly `args` (no harness TLS flags),
/// for tests of what a client with other credentials sees.
pub async fn etcdctl_raw(endpoints: &str, args: &[&str]) -> CmdOutput {
    run_etcdctl(endpoints, args, "").await
}

async fn run_etcdctl<S: AsRef<str> + fmt::Debug>(
    endpoints: &str,
    args: &[S],
    stdin: &str,
) -> CmdOutput {
    use tokio::io::AsyncWriteExt;

    let mut cmd = tokio::process::Command::new(etcdctl_binary());
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=5s")
        .arg("--command-timeout=15s")
        .args(args.iter().map(AsRef::as_ref))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        let key_str = key.to_string_lossy();
        if key_str.starts_with("ETCDCTL_") && key_str != "ETCDCTL_API" {
            cmd.env_remove(key);
        }
    }
    let mut child = cmd.spawn().expect("spawn etcdctl");
    let mut child_stdin = child.stdin.take().expect("etcdctl stdin");
    let input = stdin.to_owned();
    let writer = tokio::spawn(async move {
        let _ = child_stdin.write_all(input.as_bytes()).await;
        // Dropping closes stdin, which ends an interactive `etcdctl txn`.
    });
    let output = tokio::time::timeout(ETCDCTL_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("etcdctl {args:?} did not finish within {ETCDCTL_TIMEOUT:?}"))
        .expect("wait for etcdctl");
    let _ = writer.await;
    CmdOutput {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}
