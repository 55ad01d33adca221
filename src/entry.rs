//! The process's entry: which command the command line asks for (the server with
//! etcd's flags, or `bench`, `snapshot`, `admin`, `pod`), its logging and runtime.
//!
//! Owns the dispatch and the exit codes; never anything a member does once running
//! (`node` does). Both binaries (`quantykube`, and `quantykube-planted` for the crash
//! tests) are this and nothing else.

use std::io::Write;
use std::process::ExitCode;

use crate::config::{self, Invocation};

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    if !text.ends_with('\n') {
        let _ = out.write_all(b"\n");
    }
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Runs the command the process's arguments name.
pub fn main() -> ExitCode {
    // `quantykube bench ...` is the load generator, with flags of its own; everything
    // else is etcd's server command line.
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "bench") {
        return crate::bench::main(std::env::args_os().skip(2));
    }
    // `quantykube snapshot status|restore` works on etcd snapshot files offline.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == "snapshot")
    {
        return crate::backup::cli::main(std::env::args_os().skip(2));
    }
    // `quantykube admin members|snapshots ...`: the admin API from the shell.
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "admin") {
        return crate::admin::cli::main(std::env::args_os().skip(2));
    }
    // `quantykube migrate`: a stopped member's data dir to another release's format.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == "migrate")
    {
        return crate::migrate::main(std::env::args_os().skip(2));
    }
    // `quantykube pod start|stop|check`: a member's start logic and hooks in a
    // StatefulSet or compose.
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "pod") {
        return crate::pod::main(std::env::args_os().skip(2), shutdown_signal());
    }
    let invocation = match config::parse(std::env::args_os(), &|key| std::env::var(key).ok()) {
        Ok(invocation) => invocation,
        Err(config::ConfigError::Usage(e)) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(error) => {
            let _ = writeln!(std::io::stderr(), "quantykube: {error}");
            return ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(1));
        }
    };
    let (config, warnings) = match invocation {
        Invocation::Help(text) | Invocation::Version(text) => {
            print(&text);
            return ExitCode::SUCCESS;
        }
        Invocation::Run { config, warnings } => (config, warnings),
    };
    if let Err(error) = crate::logging::init(&config.logs) {
        let _ = writeln!(std::io::stderr(), "quantykube: {error}");
        return ExitCode::FAILURE;
    }
    if let Some(path) = &config.config_file {
        tracing::info!(
            path = %path.display(),
            "loaded server configuration, other configuration command line flags and \
             environment variables will be ignored if provided"
        );
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!(%error, "cannot start the async runtime");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(crate::server::run(*config, shutdown_signal())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "member stopped");
            ExitCode::from(error.exit_code())
        }
    }
}
