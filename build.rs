//! Compiles etcd's API and QuantyKube's raft command envelope into Rust.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A vendored protoc keeps the build free of a system package.
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded; nothing reads the environment concurrently.
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    // The descriptors travel with the binary: the JSON gateway reads and writes every
    // message through them.
    let descriptors = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("descriptors.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(descriptors)
        .bytes(".")
        .generate_default_stubs(true)
        .build_client(true)
        .compile_protos(
            &[
                "proto/etcd/etcdserverpb/rpc.proto",
                "proto/etcd/leasepb/lease.proto",
                "proto/etcd/v3lockpb/v3lock.proto",
                "proto/etcd/v3electionpb/v3election.proto",
                "proto/quantykube/command.proto",
            ],
            &["proto/etcd", "proto"],
        )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
