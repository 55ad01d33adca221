//! Compiles the peer API (`proto/peer.proto`) with a vendored protoc, so a build needs
//! no system protobuf compiler.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Edition 2021: set_var is safe here, and a build script is single-threaded.
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    println!("cargo:rerun-if-changed=proto/peer.proto");
    tonic_prost_build::configure()
        // Snapshot chunks, commands and encoded raft messages stay `Bytes`: no copies
        // between the socket buffer and RocksDB or the snapshot file.
        .bytes(".quantykube.peer.v1")
        .compile_protos(&["proto/peer.proto"], &["proto"])?;
    Ok(())
}
