//! `quantykube` with the planted bugs compiled in, for the crash tests only: the bugs
//! that `QK_PLANTED_BUGS` names (comma-separated, e.g. `RestoreWithoutSync`) are on
//! in this process, everything else is the server as shipped. Built only with the
//! `planted-bugs` feature (`make test` builds it); never shipped.

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    if let Err(unknown) = quantykube::planted::plant_from_env() {
        let _ = writeln!(std::io::stderr(), "quantykube-planted: {unknown}");
        return ExitCode::from(2);
    }
    quantykube::entry::main()
}
