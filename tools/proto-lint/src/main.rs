//! `proto-lint [--include DIR] PATH...`: checks every .proto file under each PATH (a
//! file or a folder, inside the include folder, `proto` by default) against the style
//! guide, prints each violation with the section it breaks, and exits 1 if there is any.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn protos(path: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for entry in entries {
            protos(&entry, found)?;
        }
    } else if path.extension().is_some_and(|e| e == "proto") {
        found.push(path.to_path_buf());
    }
    Ok(())
}

fn main() -> ExitCode {
    let mut include = PathBuf::from("proto");
    let mut paths = Vec::new();
    let mut args = std::env::args_os().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--include" {
            match args.next() {
                Some(dir) => include = PathBuf::from(dir),
                None => {
                    eprintln!("proto-lint: --include needs a folder");
                    return ExitCode::from(2);
                }
            }
        } else {
            paths.push(PathBuf::from(arg));
        }
    }
    let mut files = Vec::new();
    for path in &paths {
        if let Err(error) = protos(path, &mut files) {
            eprintln!("proto-lint: {}: {error}", path.display());
            return ExitCode::from(2);
        }
    }
    let relative: Vec<PathBuf> = files
        .iter()
        .map(|f| f.strip_prefix(&include).unwrap_or(f).to_path_buf())
        .collect();
    if relative.is_empty() {
        eprintln!("proto-lint: no .proto file under {paths:?}");
        return ExitCode::from(2);
    }
    let set = match proto_lint::compile(&include, &relative) {
        Ok(set) => set,
        Err(error) => {
            eprintln!("proto-lint: protoc: {error}");
            return ExitCode::from(2);
        }
    };
    let checked: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let violations: Vec<_> = proto_lint::lint(&set)
        .into_iter()
        .filter(|v| checked.contains(&v.file))
        .collect();
    for violation in &violations {
        println!("{}/{violation}", include.display());
    }
    if violations.is_empty() {
        println!("proto-lint: {} files follow the style guide", checked.len());
        ExitCode::SUCCESS
    } else {
        println!("proto-lint: {} violations", violations.len());
        ExitCode::FAILURE
    }
}
