//! Every metric family etcd exports, diffed against what a member serves: names,
//! types, help texts and label names, after the same workload on three members.
//!
//! Two lists are the reference, both in `tests/e2e/etcd_metrics/`:
//! - `v3.4.23.tsv`: etcd 3.4.23's live `/metrics` after [`workload`], written by this
//!   test itself run against etcd (`QK_TEST_TARGET=etcd QK_WRITE_ETCD_METRICS=1 cargo
//!   test --test e2e -- metrics_catalogue`); against etcd, without the variable, the
//!   test checks that the file is still what etcd serves.
//! - `source.tsv`: every family etcd's server declares, taken from its source (3.6,
//!   3.7 and the 3.8 development line) by `extract_source.py`. A labelled family shows
//!   in an exposition only once it has a series, so the live diff below covers the
//!   families this workload gives series; `metrics::tests` checks every family of
//!   the list against the registry after recording each once.
//!
//! Families with no meaning without a Go runtime are the documented exceptions
//! ([`NOT_EXPORTED`], docs/metrics.md).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use etcd_client::{Compare, CompareOp, EventType, Txn, TxnOp, WatchOptions};

use crate::harness::{Cluster, ClusterOptions, Target};
use crate::metrics::scrape;
use crate::prometheus_text::Exposition;

/// Go's runtime and `promhttp`'s own families: no Go runtime serves QuantyKube.
const NOT_EXPORTED: &[&str] = &["go_gc_duration_seconds", "go_info", "go_memstats_"];

/// One reference family: type, sorted label names, help text.
#[derive(Clone, Debug, PartialEq)]
struct Reference {
    kind: String,
    labels: Vec<String>,
    help: String,
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2e/etcd_metrics")
        .join(name)
}

/// A TSV of `name, type, labels, help[, ...]`, `#` lines skipped.
fn read_reference(name: &str) -> BTreeMap<String, Reference> {
    let text = std::fs::read_to_string(fixture(name))
        .unwrap_or_else(|e| panic!("read {}: {e}", fixture(name).display()));
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert!(fields.len() >= 4, "{name}: short line {line:?}");
            let mut labels: Vec<String> = fields[2]
                .split(',')
                .filter(|l| !l.is_empty())
                .map(str::to_owned)
                .collect();
            labels.sort();
            let reference = Reference {
                kind: fields[1].to_owned(),
                labels,
                help: fields[3].replace("\\n", "\n"),
            };
            (fields[0].to_owned(), reference)
        })
        .collect()
}

/// What an exposition holds, in the reference's shape.
fn served(metrics: &Exposition) -> BTreeMap<String, Reference> {
    metrics
        .families
        .iter()
        .map(|(name, family)| {
            let reference = Reference {
                kind: family.kind.clone(),
                labels: metrics.label_names(name),
                help: family.help.clone(),
            };
            (name.clone(), reference)
        })
        .collect()
}

/// Writes, reads, deletes, a transaction, a lease granted, renewed and revoked, a
/// watch that sees an event, a compaction, a defragmentation, a hash and a status.
async fn workload(cluster: &Cluster) {
    let mut client = cluster.client(0).await;
    let mut watch_client = cluster.client(1).await;
    let mut events = watch_client
        .watch("catalogue/", Some(WatchOptions::new().with_prefix()))
        .await
        .expect("watch");
    for i in 0..5 {
        client
            .put(format!("catalogue/{i}"), "value", None)
            .await
            .expect("put");
    }
    client.get("catalogue/1", None).await.expect("get");
    client.delete("catalogue/2", None).await.expect("delete");
    let txn = Txn::new()
        .when([Compare::value("catalogue/1", CompareOp::Equal, "value")])
        .and_then([
            TxnOp::put("catalogue/txn", "1", None),
            TxnOp::get("catalogue/1", None),
        ]);
    client.txn(txn).await.expect("txn");
    let lease = client.lease_grant(60, None).await.expect("grant");
    let (mut keeper, mut answers) = client
        .lease_keep_alive(lease.id())
        .await
        .expect("keepalive");
    keeper.keep_alive().await.expect("send keepalive");
    answers.message().await.expect("keepalive answer");
    client.lease_revoke(lease.id()).await.expect("revoke");
    // The first answer is the watch's creation; then the events.
    let seen = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let response = events
                .message()
                .await
                .expect("watch stream")
                .expect("watch response");
            if !response.events().is_empty() {
                return response;
            }
        }
    })
    .await
    .expect("a watch event within 10 s");
    assert!(seen
        .events()
        .iter()
        .any(|e| e.event_type() == EventType::Put));
    let revision = client
        .get("catalogue/1", None)
        .await
        .expect("get")
        .header()
        .expect("header")
        .revision();
    client.compact(revision, None).await.expect("compact");
    client.defragment().await.expect("defragment");
    client.hash_kv(0).await.expect("hash kv");
    client.status().await.expect("status");
}

/// The union of what the three members serve (a leader and followers differ).
async fn scrape_all(cluster: &Cluster) -> BTreeMap<String, Reference> {
    let mut all = BTreeMap::new();
    for i in 0..3 {
        let url = cluster.metrics_url(i).expect("metrics url");
        for (name, reference) in served(&scrape(&url).await) {
            all.entry(name).or_insert(reference);
        }
    }
    all
}

fn write_reference(name: &str, families: &BTreeMap<String, Reference>, source: &str) {
    let mut text = format!("# {source}\n# name\ttype\tlabels\thelp\n");
    for (family, r) in families {
        let help = r.help.replace('\n', "\\n");
        text.push_str(&format!(
            "{family}\t{}\t{}\t{help}\n",
            r.kind,
            r.labels.join(",")
        ));
    }
    std::fs::write(fixture(name), text).expect("write the reference list");
}

/// Left out on purpose ([`NOT_EXPORTED`]) or not exported yet (`not_yet_exported.txt`,
/// the list `metrics::tests` keeps honest).
fn excepted(name: &str) -> bool {
    let not_yet = std::fs::read_to_string(fixture("not_yet_exported.txt"))
        .expect("read not_yet_exported.txt");
    NOT_EXPORTED.iter().any(|prefix| name.starts_with(prefix))
        || not_yet.lines().any(|line| line == name)
}

#[tokio::test]
async fn metrics_catalogue_is_etcds() {
    let cluster = ClusterOptions::new(3).metrics_urls().start().await;
    workload(&cluster).await;
    // Scrape after the workload's answers: counters of every member are in place once
    // the last request (a status) was answered, and the apply on followers catches up
    // within a heartbeat or two; the families, not the values, are compared.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let served = scrape_all(&cluster).await;
    let live = "v3.4.23.tsv";
    if cluster.target() == Target::Etcd {
        if std::env::var_os("QK_WRITE_ETCD_METRICS").is_some() {
            write_reference(
                live,
                &served,
                "etcd 3.4.23's live /metrics on three members after metrics_catalogue's workload",
            );
            return;
        }
        // The families without labels always show; a labelled one may show in one run
        // and not another (a peer's send failure at startup), so those are compared
        // where they show.
        let reference = read_reference(live);
        let unlabelled = |families: &BTreeMap<String, Reference>| -> Vec<String> {
            families
                .iter()
                .filter(|(_, r)| r.labels.is_empty())
                .map(|(name, _)| name.clone())
                .collect()
        };
        assert_eq!(
            unlabelled(&served),
            unlabelled(&reference),
            "etcd's families are not {live}'s any more: write it again"
        );
        for (name, family) in &served {
            if let Some(expected) = reference.get(name) {
                assert_eq!(family, expected, "{name} is not as {live} has it");
            }
        }
        return;
    }
    let mut wrong = Vec::new();
    // A labelled family shows only once something gave it a series (a peer's send
    // failure, say, which one run has and another not): those absent here are checked
    // by metrics::tests against the registry.
    let mut check = |list: &str, reference: &BTreeMap<String, Reference>| {
        for (name, expected) in reference {
            if excepted(name) {
                continue;
            }
            match served.get(name) {
                Some(ours) => {
                    // Help texts of the process collector are the prometheus crate's.
                    let same_help = ours.help == expected.help || name.starts_with("process_");
                    if ours.kind != expected.kind || ours.labels != expected.labels || !same_help {
                        wrong.push(format!(
                            "{list}: {name}: ours {ours:?}, etcd's {expected:?}"
                        ));
                    }
                }
                None if !expected.labels.is_empty() => {}
                None => wrong.push(format!("{list}: {name}: not served")),
            }
        }
    };
    check(live, &read_reference(live));
    check("source.tsv", &read_reference("source.tsv"));
    assert!(
        wrong.is_empty(),
        "{} families differ from etcd's:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
