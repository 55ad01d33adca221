//! Compiles etcd's API, QuantyKube's admin API and its raft command envelope into Rust.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A vendored protoc keeps the build free of a system package.
    if std::env::var_os("PROTOC").is_none() {
        // SAFETY: build scripts are single-threaded; nothing reads the environment concurrently.
        std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    }
    // The descriptors travel with the binary: the JSON gateway reads and writes every
    // message through them.
    // google/protobuf/timestamp.proto, which the admin API's resources import.
    let well_known = protoc_bin_vendored::include_path()?
        .to_string_lossy()
        .into_owned();
    let descriptors = std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("descriptors.bin");
    tonic_prost_build::configure()
        .file_descriptor_set_path(descriptors)
        .bytes(".")
        // The admin API's Member keeps the fields it does not know
        // (src/proto/admin/v1/member_message.rs).
        .extern_path(
            ".quantykube.admin.v1.Member",
            "crate::proto::admin::v1::Member",
        )
        // Prost's codec, with each message's buffer sized once (src/api/codec.rs).
        .codec_path("crate::api::codec::PresizedCodec")
        .generate_default_stubs(true)
        .build_client(true)
        .compile_protos(
            &[
                "proto/etcd/etcdserverpb/rpc.proto",
                "proto/etcd/leasepb/lease.proto",
                "proto/etcd/v3lockpb/v3lock.proto",
                "proto/etcd/v3electionpb/v3election.proto",
                // The raft log's envelope: internal, so outside proto/quantykube/,
                // whose files are the API of our own that the style lint checks.
                "proto/internal/command.proto",
                "proto/internal/peer_lease.proto",
                "proto/quantykube/admin/v1/admin.proto",
            ],
            &["proto/etcd", "proto", &well_known],
        )?;
    println!("cargo:rerun-if-changed=proto");
    Ok(())
}
