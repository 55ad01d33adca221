//! The `quantykube` binary: etcd's flags in, a running member out (`quantykube::entry`).

fn main() -> std::process::ExitCode {
    quantykube::entry::main()
}
