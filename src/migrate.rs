//! `quantykube migrate`: brings a stopped member's data dir to the format of another
//! release, up or down, as `etcdutl migrate` does for etcd's storage version.
//!
//! It owns only the command line: the steps are `format`'s (each database) and
//! `membership::join`'s (`member.json`), run in the order a member's own start runs
//! them, each crash-safe and idempotent, so an interrupted migration is finished by
//! running it again (or by starting the member, for a migration up). It must never run
//! beside a member that uses the data dir: RocksDB's lock refuses that.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use crate::format;

/// `quantykube migrate`: migrate a stopped member's data dir to another release's format.
#[derive(Debug, Parser)]
#[command(name = "quantykube migrate", disable_version_flag = true)]
struct MigrateCli {
    /// Path to the data directory
    #[arg(long)]
    data_dir: PathBuf,
    /// Path to the dedicated wal directory (default: <data-dir>/wal)
    #[arg(long)]
    wal_dir: Option<PathBuf>,
    /// Release whose format to migrate to, as major.minor (for example 0.1)
    #[arg(long)]
    target_version: String,
}

/// Runs `quantykube migrate` with `args` (without the `migrate` word).
pub fn main(args: impl Iterator<Item = OsString>) -> ExitCode {
    let cli = match MigrateCli::try_parse_from(
        std::iter::once("quantykube migrate".into()).chain(args),
    ) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
    };
    match migrate(&cli) {
        Ok(report) => {
            let _ = writeln!(std::io::stdout(), "{report}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "Error: {error}");
            ExitCode::FAILURE
        }
    }
}

fn migrate(cli: &MigrateCli) -> Result<String, String> {
    let target = format::format_of(&cli.target_version).map_err(|e| e.to_string())?;
    let store_path = crate::disk::store_path(&cli.data_dir);
    let log_path = crate::disk::log_path(&cli.data_dir, cli.wal_dir.as_deref());
    // Offline, a database that is not there is a wrong path, not a new member: opening
    // would create an empty one.
    for (what, path) in [("store", &store_path), ("raft log", &log_path)] {
        if !path.join("CURRENT").exists() {
            return Err(format!("no {what} database at {}", path.display()));
        }
    }
    let (databases, found) =
        crate::disk::open_in_format(&cli.data_dir, cli.wal_dir.as_deref(), target)
            .map_err(|e| e.to_string())?;
    drop(databases);
    let identity = crate::membership::join::migrate_identity(&cli.data_dir, target)
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "migrated {} to format {target} (release {}): store from {}, raft log from {}, member.json from {}",
        cli.data_dir.display(),
        format::release_of(target).unwrap_or("?"),
        found.store,
        found.log,
        identity.map_or("none".to_owned(), |f| f.to_string()),
    ))
}
