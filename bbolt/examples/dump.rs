//! Prints every bucket and entry of a bbolt database (an etcd data dir's
//! `member/snap/db`, or a snapshot file), keys and values as escaped text: a debugging
//! aid for the codec and for etcd's schema.
//!
//! `cargo run -p quantykube-bbolt --example dump -- <file> [bucket]`

use std::process::ExitCode;

fn shown(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(path) = args.next() else {
        eprintln!("usage: dump <file> [bucket]");
        return ExitCode::from(2);
    };
    let only = args.next();
    let run = || -> Result<(), Box<dyn std::error::Error>> {
        let file = std::fs::File::open(&path)?;
        let len = file.metadata()?.len();
        // A snapshot file's SHA-256 trailer lies past the database's last page.
        let db = quantykube_bbolt::Database::open(file, len - len % 512)?;
        for name in db.buckets()? {
            if only
                .as_deref()
                .is_some_and(|b| b.as_bytes() != name.as_slice())
            {
                continue;
            }
            let Some(bucket) = db.bucket(&name)? else {
                continue;
            };
            println!("[{}] inline={}", shown(&name), bucket.is_inline());
            for entry in bucket.entries().take(20) {
                let (k, v) = entry?;
                println!("  {} = {}", shown(&k), shown(&v[..v.len().min(200)]));
            }
        }
        Ok(())
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dump: {error}");
            ExitCode::FAILURE
        }
    }
}
