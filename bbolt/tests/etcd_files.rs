//! Files etcd 3.4 itself writes: a real member on loopback is written to with etcdctl
//! (puts, big values, deletes, leases, a compaction), then `etcdctl snapshot save` gives a
//! snapshot file and the stopped member leaves its `member/snap/db`. Our reader must agree
//! with `etcdctl snapshot status` on both, and the `key` bucket must hold what
//! `etcdctl get` shows.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use quantykube_bbolt::{write_database, Database};
use sha2::{Digest, Sha256};

/// etcd 3.4's backend buckets (mvcc, lease, auth, membership, alarm, meta).
const ETCD_BUCKETS: [&str; 10] = [
    "alarm",
    "auth",
    "authRoles",
    "authUsers",
    "cluster",
    "key",
    "lease",
    "members",
    "members_removed",
    "meta",
];

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    endpoint: String,
}

impl Etcd {
    fn start(dir: &Path) -> Etcd {
        Etcd::start_on(dir, &dir.join("data"), "m1", free_port())
    }

    /// A member `name` with data dir `data` and peer port `peer`; its log goes to `dir`.
    fn start_on(dir: &Path, data: &Path, name: &str, peer: u16) -> Etcd {
        let client = free_port();
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let child = Command::new("etcd")
            .arg(format!("--name={name}"))
            .arg(format!("--data-dir={}", data.display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster={name}={peer_url}"))
            .arg("--max-txn-ops=10000")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (install etcd 3.4: deploy/local/install-deps.sh)");
        let etcd = Etcd {
            child: Some(child),
            dir: dir.to_path_buf(),
            endpoint,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = etcd
                .ctl()
                .args(["endpoint", "health"])
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                return etcd;
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not become healthy; see {}",
                dir.join("etcd.log").display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn ctl(&self) -> Command {
        let mut c = etcdctl();
        c.arg(format!("--endpoints={}", self.endpoint));
        c
    }

    /// Runs etcdctl with `args`, `stdin` as its input; returns stdout.
    fn run(&self, args: &[&str], stdin: &[u8]) -> String {
        let mut child = self
            .ctl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// SIGTERM, so that etcd commits its backend and closes it.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while child.try_wait().unwrap().is_none() {
                if Instant::now() > deadline {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.wait();
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = &self.dir;
    }
}

/// The standard alphabet with padding, as Go's encoding/json writes []byte.
fn base64(s: &str) -> Vec<u8> {
    let val = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    let chars: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    for chunk in chars.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= u32::from(val(c)) << (18 - 6 * i);
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..chunk.len() - 1]);
    }
    out
}

/// mvccpb.KeyValue, the value of a `key` bucket entry.
#[derive(Debug, Default, PartialEq, Eq, Clone)]
struct Kv {
    key: Vec<u8>,
    create_revision: u64,
    mod_revision: u64,
    version: u64,
    value: Vec<u8>,
    lease: u64,
}

fn varint(b: &[u8], i: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let c = b[*i];
        *i += 1;
        v |= u64::from(c & 0x7f) << shift;
        if c & 0x80 == 0 {
            break;
        }
    }
    v
}

fn decode_kv(b: &[u8]) -> Kv {
    let mut kv = Kv::default();
    let mut i = 0;
    while i < b.len() {
        let tag = varint(b, &mut i);
        match (tag >> 3, tag & 7) {
            (f, 0) => {
                let v = varint(b, &mut i);
                match f {
                    2 => kv.create_revision = v,
                    3 => kv.mod_revision = v,
                    4 => kv.version = v,
                    6 => kv.lease = v,
                    _ => {}
                }
            }
            (f, 2) => {
                let n = varint(b, &mut i) as usize;
                let bytes = b[i..i + n].to_vec();
                i += n;
                match f {
                    1 => kv.key = bytes,
                    5 => kv.value = bytes,
                    _ => {}
                }
            }
            other => panic!("unexpected protobuf field {other:?}"),
        }
    }
    kv
}

/// The live keys as the `key` bucket says: every revision applied in order.
fn live_keys(db: &Database) -> BTreeMap<Vec<u8>, Kv> {
    let mut live = BTreeMap::new();
    for e in db.bucket(b"key").unwrap().unwrap().entries() {
        let (rev, value) = e.unwrap();
        assert!(
            rev.len() == 17 || (rev.len() == 18 && rev[17] == b't'),
            "revision key {rev:?}"
        );
        let kv = decode_kv(&value);
        if rev.len() == 18 {
            live.remove(&kv.key);
        } else {
            live.insert(kv.key.clone(), kv);
        }
    }
    live
}

fn etcdctl_get_all(etcd: &Etcd) -> BTreeMap<Vec<u8>, Kv> {
    let out = etcd.run(&["get", "", "--prefix", "-w", "json"], b"");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut m = BTreeMap::new();
    for kv in v["kvs"].as_array().cloned().unwrap_or_default() {
        let kv = Kv {
            key: base64(kv["key"].as_str().unwrap()),
            create_revision: kv["create_revision"].as_u64().unwrap(),
            mod_revision: kv["mod_revision"].as_u64().unwrap(),
            version: kv["version"].as_u64().unwrap(),
            value: kv["value"].as_str().map(base64).unwrap_or_default(),
            lease: kv["lease"].as_u64().unwrap_or(0),
        };
        m.insert(kv.key.clone(), kv);
    }
    m
}

/// Our reader against etcdctl's status; returns the database.
fn check_file(path: &Path, len: u64) -> Database {
    let db = open(path, len);
    assert_eq!(db.page_size(), 4096);
    let names: Vec<String> = db
        .buckets()
        .unwrap()
        .into_iter()
        .map(|n| String::from_utf8(n).unwrap())
        .collect();
    assert_eq!(names, ETCD_BUCKETS);
    assert_eq!(read_status(&db), etcdctl_status(path), "{}", path.display());
    db
}

#[test]
fn read_what_etcd_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut etcd = Etcd::start(tmp.path());
    let mut rng = Rng::new(34);

    // Small puts, overwrites and deletes.
    for i in 0..20 {
        etcd.run(&["put", &format!("/small/{i:02}"), &format!("v{i}")], b"");
    }
    etcd.run(&["put", "/small/03", "again"], b"");
    etcd.run(&["del", "/small/05"], b"");
    // 3000 puts in one transaction: the key bucket needs several levels of pages.
    let mut txn = b"\n".to_vec();
    for i in 0..3000 {
        writeln!(txn, "put /many/{i:05} value-{}", rng.next()).unwrap();
    }
    txn.extend_from_slice(b"\n\n");
    etcd.run(&["txn"], &txn);
    // Big values from stdin: overflow pages.
    for (i, n) in [5000usize, 300_000, 1_000_000].into_iter().enumerate() {
        let v: Vec<u8> = (0..n).map(|j| b'a' + ((j * 7 + i) % 26) as u8).collect();
        etcd.run(&["put", &format!("/big/{i}")], &v);
    }
    // A lease with a key attached.
    let granted = etcd.run(&["lease", "grant", "600"], b"");
    let lease = granted.split_whitespace().nth(1).unwrap().to_string();
    etcd.run(&["put", "/leased", "x", &format!("--lease={lease}")], b"");
    // A compaction at the current revision, then more history.
    let status = etcd.run(&["endpoint", "status", "-w", "json"], b"");
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let rev = v[0]["Status"]["header"]["revision"].as_i64().unwrap();
    etcd.run(&["compact", &rev.to_string(), "--physical"], b"");
    etcd.run(&["del", "/many/00", "--prefix"], b"");
    etcd.run(&["put", "/small/00", "after compaction"], b"");

    let want = etcdctl_get_all(&etcd);
    assert!(want.len() > 2000);

    // The snapshot file: the db followed by its SHA-256.
    let snap = tmp.path().join("snap.db");
    etcd.run(&["snapshot", "save", snap.to_str().unwrap()], b"");
    let bytes = std::fs::read(&snap).unwrap();
    assert_eq!(bytes.len() % 512, 32, "a snapshot file ends in a SHA-256");
    let len = bytes.len() as u64 - 32;
    assert_eq!(
        Sha256::digest(&bytes[..len as usize]).as_slice(),
        &bytes[len as usize..]
    );
    let db = check_file(&snap, len);
    assert_eq!(db.size(), len, "a snapshot is exactly Tx.Size() bytes");
    assert!(db.bucket(b"key").unwrap().unwrap().depth().unwrap() >= 2);
    assert_eq!(live_keys(&db), want);
    // What surprised: etcd's small buckets are inline, and with NoFreelistSync there is
    // no freelist page.
    for name in ["alarm", "cluster", "members", "meta"] {
        let b = db.bucket(name.as_bytes()).unwrap().unwrap();
        eprintln!("snapshot bucket {name}: inline {}", b.is_inline());
    }
    eprintln!("snapshot freelist page: {:?}", db.freelist_page());
    // The same file read with its trailer counted in: still fine, etcdctl too.
    let db_trailer = open(&snap, bytes.len() as u64);
    assert_eq!(read_status(&db_trailer), etcdctl_status(&snap));

    // Read by us, written again by us: the same status (but for the size), and etcd
    // restores it and serves the same keys at the same revisions.
    let dump = read_all(&db);
    let mut src = MemSource::default();
    for (name, entries) in &dump {
        src.buckets
            .insert(name.clone(), entries.iter().cloned().collect());
    }
    let rewritten = tmp.path().join("rewritten.db");
    let mut out = std::fs::File::create(&rewritten).unwrap();
    let summary = write_database(&src, &mut out, 4096).unwrap();
    let ours = etcdctl_status(&rewritten);
    let theirs = etcdctl_status(&snap);
    assert_eq!(
        (ours.hash, ours.revision, ours.total_key, ours.total_size),
        (
            theirs.hash,
            theirs.revision,
            theirs.total_key,
            summary.bytes
        )
    );
    let sha = Sha256::digest(std::fs::read(&rewritten).unwrap());
    out.write_all(&sha).unwrap();
    drop(out);
    let peer = free_port();
    let restored = tmp.path().join("restored");
    let out = etcdctl()
        .args(["snapshot", "restore"])
        .arg(&rewritten)
        .arg("--name=m2")
        .arg(format!("--data-dir={}", restored.display()))
        .arg(format!("--initial-cluster=m2=http://127.0.0.1:{peer}"))
        .arg(format!(
            "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
        ))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "etcdctl snapshot restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    {
        let mut m2 = Etcd::start_on(tmp.path(), &restored, "m2", peer);
        assert_eq!(etcdctl_get_all(&m2), want, "the restored member's keys");
        m2.stop();
    }

    // The stopped member's backend.
    etcd.stop();
    let member_db = tmp.path().join("data/member/snap/db");
    let member_len = std::fs::metadata(&member_db).unwrap().len();
    let db = check_file(&member_db, member_len);
    assert!(db.size() <= member_len);
    assert_eq!(live_keys(&db), want);
    eprintln!(
        "member db: {} bytes, Tx.Size {} bytes, freelist {:?}, txid {}",
        member_len,
        db.size(),
        db.freelist_page(),
        db.txid()
    );
    assert!(db.bucket(b"meta").unwrap().unwrap().entries().count() >= 1);
}
