//! The image: what deploy/image/build.sh makes, checked against deploy/Dockerfile (which
//! cannot be built here: no base image can be pulled), and a one-member container.

use std::collections::BTreeSet;
use std::time::Instant;

use crate::harness::{
    bounded, docker, docker_blocking, docker_ok, ensure_image, free_ports, http_get, repo,
    run_blocking, secs, serial, skip,
};

/// `docker rm -f -v` of a container when dropped.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let logs = docker_blocking(&["logs", "--tail", "100", &self.0], secs(30));
            eprintln!(
                "---- logs of {} ----\n{}{}",
                self.0, logs.stdout, logs.stderr
            );
        }
        docker_blocking(&["rm", "-f", "-v", &self.0], secs(60));
    }
}

/// The runtime stage of deploy/Dockerfile: its USER, ENV, VOLUME, EXPOSE and ENTRYPOINT.
#[derive(Debug, Default)]
struct RuntimeStage {
    user: String,
    env: BTreeSet<String>,
    volumes: BTreeSet<String>,
    ports: BTreeSet<String>,
    entrypoint: Vec<String>,
    base: String,
}

/// Reads the last stage of a Dockerfile (continuation lines joined, comments dropped).
fn runtime_stage(dockerfile: &str) -> RuntimeStage {
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || trimmed.is_empty() {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(trimmed);
        lines.push(std::mem::take(&mut current));
    }
    let mut args = std::collections::HashMap::new();
    let mut stage = RuntimeStage::default();
    for line in lines {
        let (instruction, rest) = line.split_once(' ').unwrap_or((&line, ""));
        let rest = rest.trim();
        match instruction.to_ascii_uppercase().as_str() {
            "ARG" => {
                if let Some((name, value)) = rest.split_once('=') {
                    args.insert(format!("${{{name}}}"), value.to_owned());
                }
            }
            "FROM" => {
                let image = rest.split_whitespace().next().unwrap_or("");
                stage = RuntimeStage {
                    base: args.get(image).cloned().unwrap_or_else(|| image.to_owned()),
                    ..RuntimeStage::default()
                };
            }
            "USER" => stage.user = rest.to_owned(),
            "ENV" => {
                stage.env.insert(rest.to_owned());
            }
            "VOLUME" => stage
                .volumes
                .extend(rest.split_whitespace().map(str::to_owned)),
            "EXPOSE" => stage
                .ports
                .extend(rest.split_whitespace().map(|p| format!("{p}/tcp"))),
            "ENTRYPOINT" => {
                stage.entrypoint = serde_json::from_str(rest).expect("ENTRYPOINT in JSON form")
            }
            _ => {}
        }
    }
    stage
}

fn inspect(image: &str, format: &str) -> String {
    let out = docker_blocking(&["image", "inspect", "--format", format, image], secs(30));
    assert!(out.ok(), "docker image inspect {image}: {}", out.stderr);
    out.stdout.trim().to_owned()
}

/// The build stage copies every path the workspace build reads (members, patched
/// crates, build script), and the runtime base provides every shared library the binary
/// links. Needs no Docker.
#[test]
fn dockerfile_builds_what_the_workspace_needs() {
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let manifest: String = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let copies: Vec<&str> = dockerfile
        .lines()
        .filter(|l| l.trim_start().starts_with("COPY ") && !l.contains("--from"))
        .collect();
    // A path is copied when it, or a folder holding it, is a COPY source:
    // `COPY tools tools` brings `tools/proto-lint`.
    let copied = |path: &str| {
        copies.iter().any(|l| {
            l.split_whitespace().skip(1).any(|word| {
                let word = word.trim_end_matches('/');
                path == word || path.starts_with(&format!("{word}/"))
            })
        })
    };
    // Workspace members (besides ".") and [patch] paths.
    let mut needed = vec!["Cargo.toml", "Cargo.lock", "build.rs", "src", "proto"];
    let members = manifest
        .split_once("members = [")
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .expect("workspace members");
    let member_paths: Vec<String> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty() && m != ".")
        .collect();
    needed.extend(member_paths.iter().map(String::as_str));
    let patch_paths: Vec<String> = manifest
        .split_once("\n[patch.crates-io]")
        .map(|(_, rest)| rest)
        .unwrap_or("")
        .lines()
        .take_while(|line| !line.starts_with('['))
        .filter_map(|line| line.split_once("path = \""))
        .filter_map(|(_, rest)| rest.split(['/', '"']).next().map(str::to_owned))
        .collect();
    assert!(
        !patch_paths.is_empty(),
        "no [patch.crates-io] paths found in Cargo.toml"
    );
    needed.extend(patch_paths.iter().map(String::as_str));
    for path in needed {
        assert!(
            copied(path),
            "deploy/Dockerfile does not COPY {path}, which the build reads"
        );
    }
    assert!(
        dockerfile.contains("cargo build --release --locked --bin quantykube"),
        "the build stage builds the release binary with the lockfile"
    );

    // distroless/cc-debian12: glibc, libgcc_s, libstdc++, libgomp, OpenSSL 3.
    let stage = runtime_stage(&dockerfile);
    assert_eq!(stage.base, "gcr.io/distroless/cc-debian12:nonroot");
    let provided = [
        "linux-vdso.so.1",
        "libc.so.6",
        "libm.so.6",
        "libdl.so.2",
        "libpthread.so.0",
        "librt.so.1",
        "libgcc_s.so.1",
        "libstdc++.so.6",
        "libgomp.so.1",
        "libssl.so.3",
        "libcrypto.so.3",
        "ld-linux-x86-64.so.2",
        "ld-linux-aarch64.so.1",
        "libz.so.1",
    ];
    let ldd = run_blocking(
        "ldd",
        &[crate::harness::binary().display().to_string()],
        &[],
        &repo(),
        secs(60),
    );
    assert!(ldd.ok(), "ldd: {}", ldd.stderr);
    for line in ldd.stdout.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let name = name.rsplit('/').next().unwrap_or(name);
        assert!(
            provided.contains(&name),
            "the binary links {name}, which distroless/cc does not carry: {line}"
        );
    }
}

#[test]
fn image_runs_as_nonroot_without_a_shell() {
    let _serial = serial();
    if skip(false) {
        return;
    }
    let image = ensure_image();
    let out = docker_blocking(&["run", "--rm", &image, "--version"], secs(60));
    assert!(out.ok(), "--version in the image: {}", out.stderr);
    assert!(
        out.stdout.contains("QuantyKube Version:"),
        "--version printed {}",
        out.stdout
    );
    assert_eq!(inspect(&image, "{{.Config.User}}"), "65532:65532");
    let shell = docker_blocking(
        &[
            "run",
            "--rm",
            "--entrypoint",
            "/bin/sh",
            &image,
            "-c",
            "true",
        ],
        secs(60),
    );
    assert!(!shell.ok(), "the image has a shell: {}", shell.stdout);
    println!(
        "no shell: docker run --entrypoint /bin/sh exits {:?}: {}",
        shell.code,
        shell.stderr.trim()
    );
}

/// The FROM scratch image and the Dockerfile's runtime stage agree on user, environment,
/// volume, ports and entrypoint.
#[test]
fn image_matches_the_dockerfile_runtime_stage() {
    let _serial = serial();
    if skip(false) {
        return;
    }
    let image = ensure_image();
    let dockerfile = std::fs::read_to_string(repo().join("deploy/Dockerfile")).unwrap();
    let stage = runtime_stage(&dockerfile);
    assert_eq!(inspect(&image, "{{.Config.User}}"), stage.user);
    let env: Vec<String> = serde_json::from_str(&inspect(&image, "{{json .Config.Env}}")).unwrap();
    for var in &stage.env {
        assert!(env.contains(var), "the image's env {env:?} lacks {var}");
    }
    let volumes: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&inspect(&image, "{{json .Config.Volumes}}")).unwrap();
    assert_eq!(
        volumes.keys().cloned().collect::<BTreeSet<_>>(),
        stage.volumes
    );
    let ports: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&inspect(&image, "{{json .Config.ExposedPorts}}")).unwrap();
    assert_eq!(ports.keys().cloned().collect::<BTreeSet<_>>(), stage.ports);
    let entrypoint: Vec<String> =
        serde_json::from_str(&inspect(&image, "{{json .Config.Entrypoint}}")).unwrap();
    assert_eq!(entrypoint, stage.entrypoint);
    println!("the image and deploy/Dockerfile's runtime stage agree: {stage:?}");
}

/// One member in a container: etcd's API and /livez through published loopback ports,
/// the process running as 65532, its data in the volume owned by 65532.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_member_container_serves_etcd() {
    let _serial = serial();
    if skip(false) {
        return;
    }
    bounded(async {
        let started = Instant::now();
        let image = ensure_image();
        let name = format!("{}-one-member", crate::harness::run_tag());
        docker_blocking(&["rm", "-f", "-v", &name], secs(60));
        let ports = free_ports(2);
        let guard = Container(name.clone());
        docker_ok(&[
            "run",
            "-d",
            "--name",
            &name,
            "--hostname",
            "one",
            "--read-only",
            "--cap-drop",
            "ALL",
            "-p",
            &format!("127.0.0.1:{}:2379", ports[0]),
            "-p",
            &format!("127.0.0.1:{}:2381", ports[1]),
            &image,
            "--name",
            "one",
            "--listen-client-urls",
            "http://0.0.0.0:2379",
            "--advertise-client-urls",
            &format!("http://127.0.0.1:{}", ports[0]),
            "--listen-metrics-urls",
            "http://0.0.0.0:2381",
        ])
        .await;
        let metrics = format!("127.0.0.1:{}", ports[1]);
        crate::harness::eventually("/livez 200", secs(60), || async {
            match http_get(&metrics, "/livez").await {
                Some((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;

        let endpoint = format!("http://127.0.0.1:{}", ports[0]);
        let mut client = crate::harness::connect(
            std::slice::from_ref(&endpoint),
            crate::harness::client_options(),
        )
        .await;
        let put = tokio::time::timeout(secs(10), client.put("docker/key", "in a container", None))
            .await
            .expect("put timed out")
            .expect("put");
        let got = client.get("docker/key", None).await.expect("get");
        assert_eq!(got.kvs()[0].value(), b"in a container");
        assert_eq!(
            got.kvs()[0].mod_revision(),
            put.header().unwrap().revision()
        );

        // The process runs as 65532 (ps on the daemon's side).
        let top = docker_ok(&["top", &name, "-eo", "pid,uid,gid,comm"]).await;
        let row = top
            .lines()
            .find(|l| l.contains("quantykube"))
            .unwrap_or_else(|| panic!("no quantykube process in docker top: {top}"));
        let ids: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&ids[1..3], &["65532", "65532"], "docker top: {row}");

        // The data directory is the image's volume (the put above was written there by uid
        // 65532, so the image's directory ownership reached the new volume).
        let mounts = docker_ok(&[
            "inspect",
            "--format",
            "{{range .Mounts}}{{.Destination}} {{.Type}}{{end}}",
            &name,
        ])
        .await;
        assert_eq!(mounts.trim(), "/var/lib/quantykube volume");

        let livez = http_get(&format!("127.0.0.1:{}", ports[0]), "/livez").await;
        assert!(
            matches!(livez, Some((200, _))),
            "/livez on the client port: {livez:?}"
        );
        let out = docker(&["stop", "-t", "20", &name]).await;
        assert!(out.ok(), "docker stop: {}", out.stderr);
        let exit = docker_ok(&["inspect", "--format", "{{.State.ExitCode}}", &name]).await;
        assert_eq!(
            exit.trim(),
            "0",
            "the member did not exit cleanly on SIGTERM"
        );
        drop(guard);
        println!(
            "one member in a container: put/get, /livez, uid 65532, clean stop: {:.1?}",
            started.elapsed()
        );
    })
    .await;
}
