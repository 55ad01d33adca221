//! Maintenance.Alarm and what alarms do: the NOSPACE cycle operators know from etcd's
//! maintenance guide (fill past `--quota-backend-bytes`, writes refused, compact,
//! defrag, `etcdctl alarm disarm`), alarms kept across restarts and the same on every
//! member, etcd's answers to odd requests, and what a CORRUPT alarm refuses.
//!
//! Written against etcd 3.4 first. Where etcd 3.4 differs from 3.5/3.6 (which
//! QuantyKube follows) the test says so and checks each target's own answer.

use std::time::Duration;

use etcd_client::proto::{PbAlarmMember, PbAlarmRequest, PbAlarmResponse, PbStatusResponse};
use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use crate::harness::{
    assert_grpc_error, current_revision, http_get, Cluster, ClusterOptions, Deadline, Target,
};
use crate::raw;
use crate::support::grpc::unary_to;
use crate::support::status::assert_code_message;

/// Small enough to fill in a few seconds.
pub const QUOTA: u64 = 8 * 1024 * 1024;
pub const NO_SPACE: &str = "etcdserver: mvcc: database space exceeded";
const CORRUPT: &str = "etcdserver: corrupt cluster";

pub mod action {
    pub const GET: i32 = 0;
    pub const ACTIVATE: i32 = 1;
    pub const DEACTIVATE: i32 = 2;
}

pub mod alarm_type {
    pub const NONE: i32 = 0;
    pub const NOSPACE: i32 = 1;
    pub const CORRUPT: i32 = 2;
}

/// One Alarm call with raw fields (etcd-client cannot send a type etcd does not name).
pub async fn alarm(
    endpoint: &str,
    action: i32,
    member_id: u64,
    alarm: i32,
) -> Result<PbAlarmResponse, tonic::Status> {
    unary_to(
        endpoint,
        "/etcdserverpb.Maintenance/Alarm",
        PbAlarmRequest {
            action,
            member_id,
            alarm,
        },
    )
    .await
}

/// The alarms one Alarm call answered with, as (member id, type), in that order.
fn listed(response: &PbAlarmResponse) -> Vec<(u64, i32)> {
    let mut alarms: Vec<(u64, i32)> = response
        .alarms
        .iter()
        .map(|a: &PbAlarmMember| (a.member_id, a.alarm))
        .collect();
    alarms.sort();
    alarms
}

async fn raw_status(endpoint: &str) -> PbStatusResponse {
    unary_to(endpoint, "/etcdserverpb.Maintenance/Status", ())
        .await
        .expect("status")
}

/// Random bytes (LZ4 cannot shrink them, so RocksDB's size follows what is written).
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Puts 256 KiB values under `fill/` until the quota refuses one; returns how many
/// went in.
pub async fn fill_until_no_space(client: &mut Client) -> usize {
    for i in 0..200 {
        match client
            .put(format!("fill/{i:03}"), noise(i, 256 * 1024), None)
            .await
        {
            Ok(_) => continue,
            Err(error) => {
                assert_code_message(
                    &crate::harness::grpc_status::<()>(Err(error)),
                    Code::ResourceExhausted,
                    NO_SPACE,
                    &format!("after {i} puts"),
                );
                return i as usize;
            }
        }
    }
    panic!("200 puts of 256 KiB never exceeded a quota of {QUOTA} bytes");
}

/// `etcdctl alarm list` on member `i`, sorted.
async fn alarm_list(cluster: &Cluster, i: usize) -> Vec<String> {
    let out = cluster.etcdctl_on(i, &["alarm", "list"]).await;
    out.assert_success();
    let mut lines: Vec<String> = out.stdout.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

/// Waits until every member's alarm list is the same, non-empty, and unchanged since
/// the poll before (a raise may still be on its way through the log).
async fn agreed_alarms(cluster: &Cluster) -> Vec<String> {
    let deadline = Deadline::after(Duration::from_secs(10), "members agree on alarms");
    let mut previous = Vec::new();
    loop {
        let mut lists = Vec::new();
        for i in 0..cluster.size() {
            lists.push(alarm_list(cluster, i).await);
        }
        if !lists[0].is_empty() && lists.iter().all(|l| *l == lists[0]) {
            if lists[0] == previous {
                return previous;
            }
            previous = lists.swap_remove(0);
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        deadline.tick().await;
    }
}

/// etcdctl's answer to a write while NOSPACE is active.
fn assert_no_space(out: &crate::harness::CmdOutput, what: &str) {
    assert!(!out.success(), "{what} succeeded: {out:?}");
    assert!(
        out.stderr.contains(&format!("Error: {NO_SPACE}"))
            || out
                .stderr
                .contains(&format!("Error: failed to grant lease ({NO_SPACE})")),
        "{what}: {}",
        out.stderr
    );
}

/// `/health` as etcd 3.4 (`{"health":"false"}`) or 3.5+ (with the alarm's reason)
/// answers while an alarm is active.
async fn assert_health_alarm(cluster: &Cluster, i: usize, reason: &str) {
    let answer = http_get(&format!("{}/health", cluster.endpoint(i)), None).await;
    assert_eq!(answer.status, 503, "{answer:?}");
    let body: serde_json::Value = serde_json::from_str(answer.body.trim()).expect("json");
    assert_eq!(body["health"], "false", "{body}");
    match cluster.target() {
        // etcd 3.4 gives no reason.
        Target::Etcd => assert!(body.get("reason").is_none(), "{body}"),
        Target::Quantykube => assert_eq!(body["reason"], reason, "{body}"),
    }
}

#[tokio::test]
async fn nospace_cycle_with_etcdctl_on_three_members() {
    let mut cluster =
        Cluster::start_with(ClusterOptions::new(3).arg(format!("--quota-backend-bytes={QUOTA}")))
            .await;
    let mut client = cluster.client(0).await;
    client.put("small", "1", None).await.expect("put");
    let lease = client.lease_grant(600, None).await.expect("grant").id();
    let filled = fill_until_no_space(&mut client).await;
    assert!(
        filled >= 8,
        "only {filled} puts of 256 KiB fit in {QUOTA} bytes"
    );

    // A NOSPACE alarm is up, and every member lists the same. The member that refused
    // the write raises one, and (in etcd and QuantyKube alike) every member also checks
    // its own quota when it applies a write, so any of them may have raised it first;
    // once one is up, writes are refused before anyone checks the quota again.
    let first = agreed_alarms(&cluster).await;
    let ids: Vec<u64> = (0..3).map(|i| cluster.member_id(i)).collect();
    assert!(!first.is_empty(), "no alarm listed");
    for alarm in &first {
        assert!(
            ids.iter()
                .any(|id| *alarm == format!("memberID:{id} alarm:NOSPACE ")),
            "{alarm:?} is not a NOSPACE alarm of a member ({ids:?})"
        );
    }

    // Every member refuses what grows the store, through etcdctl...
    for i in 0..3 {
        assert_no_space(&cluster.etcdctl_on(i, &["put", "k", "v"]).await, "put");
        assert_no_space(
            &cluster.etcdctl_on(i, &["lease", "grant", "60"]).await,
            "grant",
        );
    }
    let txn = cluster
        .etcdctl_with_stdin(&["txn"], "\nput k v\n\nput k w\n\n")
        .await;
    assert_no_space(&txn, "txn with a put");
    // ... and through the client, also a small put that fits the quota: the alarm
    // refuses it at apply time, not the size.
    let mut follower = cluster.client(2).await;
    assert_grpc_error(
        follower.put("tiny", "", None).await,
        Code::ResourceExhausted,
        NO_SPACE,
    );
    // Reads, deletes, delete-only transactions, compaction and revokes still work.
    let got = cluster
        .etcdctl_on(1, &["get", "small", "--print-value-only"])
        .await;
    assert_eq!(got.assert_success().stdout.trim(), "1");
    cluster.etcdctl(&["del", "small"]).await.assert_success();
    client
        .txn(
            Txn::new()
                .when([Compare::version("fill/000", CompareOp::Greater, 0)])
                .and_then([TxnOp::delete("fill/000", None)]),
        )
        .await
        .expect("delete-only txn");
    client.lease_revoke(lease).await.expect("revoke");
    let revision = current_revision(&mut client).await;
    cluster
        .etcdctl(&["compact", &revision.to_string()])
        .await
        .assert_success();

    // Each member whose own quota check refused a write raised NOSPACE for itself
    // (etcd's too), so the list may have grown; it is the same everywhere.
    let alarms = agreed_alarms(&cluster).await;
    for line in &alarms {
        assert!(
            (0..3).any(|i| *line == format!("memberID:{} alarm:NOSPACE ", cluster.member_id(i))),
            "{line:?}"
        );
    }

    // gRPC health stays SERVING, as etcd's: the member still serves reads.
    let mut health = HealthClient::new(raw::channel(&cluster.endpoint(1)).await);
    let serving = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check")
        .into_inner();
    assert_eq!(serving.status(), ServingStatus::Serving);

    // Reported everywhere: endpoint status errors, /health.
    let status = cluster.etcdctl(&["endpoint", "status", "-w", "json"]).await;
    let members: serde_json::Value =
        serde_json::from_str(status.assert_success().stdout.trim()).expect("json");
    for member in members.as_array().expect("array") {
        let mut errors: Vec<String> = member["Status"]["errors"]
            .as_array()
            .unwrap_or_else(|| panic!("no errors in {member}"))
            .iter()
            .map(|e| e.as_str().unwrap_or_default().to_owned())
            .collect();
        errors.sort();
        assert_eq!(errors, alarms, "{member}");
    }
    for i in 0..3 {
        assert_health_alarm(&cluster, i, "ALARM NOSPACE").await;
        // etcd 3.4 already had `?exclude=`.
        let excluded = http_get(
            &format!("{}/health?exclude=NOSPACE", cluster.endpoint(i)),
            None,
        )
        .await;
        assert_eq!(excluded.status, 200, "{excluded:?}");
    }

    // Sticky: a restart of every member keeps the alarm, and the refusals.
    cluster.restart_all().await;
    assert_eq!(agreed_alarms(&cluster).await, alarms);
    let mut client = cluster.client(1).await;
    assert_grpc_error(
        client.put("k", "v", None).await,
        Code::ResourceExhausted,
        NO_SPACE,
    );

    // The documented recovery: free space, compact, defrag, disarm.
    cluster
        .etcdctl(&["del", "fill/", "--prefix"])
        .await
        .assert_success();
    let revision = current_revision(&mut client).await;
    cluster
        .etcdctl(&["compact", &revision.to_string(), "--physical"])
        .await
        .assert_success();
    let defrag = cluster.etcdctl_on(0, &["defrag", "--cluster"]).await;
    assert_eq!(
        defrag
            .assert_success()
            .stdout
            .matches("Finished defragmenting etcd member")
            .count(),
        3,
        "{defrag:?}"
    );
    for i in 0..3 {
        let db_size = raw_status(&cluster.endpoint(i)).await.db_size;
        assert!(
            (db_size as u64) < QUOTA / 2,
            "member {i}: {db_size} bytes after compact and defrag"
        );
    }
    let alarms = agreed_alarms(&cluster).await;
    let disarm = cluster.etcdctl(&["alarm", "disarm"]).await;
    let mut disarmed: Vec<String> = disarm
        .assert_success()
        .stdout
        .lines()
        .map(str::to_owned)
        .collect();
    disarmed.sort();
    assert_eq!(disarmed, alarms);
    for i in 0..3 {
        assert!(alarm_list(&cluster, i).await.is_empty(), "member {i}");
        cluster
            .etcdctl_on(i, &["put", &format!("after/{i}"), "ok"])
            .await
            .assert_success();
        let health = http_get(&format!("{}/health", cluster.endpoint(i)), None).await;
        assert_eq!(health.status, 200, "{health:?}");
    }
    cluster
        .etcdctl(&["lease", "grant", "60"])
        .await
        .assert_success();
}

#[tokio::test]
async fn alarm_requests_get_etcds_answers() {
    let cluster = Cluster::start(1).await;
    let endpoint = cluster.endpoint(0);
    let me = cluster.member_id(0);
    let nobody = 0x1234_5678_u64;
    use action::*;
    use alarm_type::*;

    let get_all = || alarm(&endpoint, GET, 0, NONE);
    assert!(get_all().await.expect("get").alarms.is_empty());
    // ACTIVATE answers with the alarm; a member that does not exist, or 0, is taken
    // as given (etcd never checks the id).
    for member in [nobody, 0] {
        let raised = alarm(&endpoint, ACTIVATE, member, NOSPACE)
            .await
            .expect("activate");
        assert_eq!(listed(&raised), vec![(member, NOSPACE)]);
    }
    // Raising it again answers the same and changes nothing.
    let again = alarm(&endpoint, ACTIVATE, nobody, NOSPACE)
        .await
        .expect("activate");
    assert_eq!(listed(&again), vec![(nobody, NOSPACE)]);
    // A type etcd does not name is stored as sent (etcd 3.4 and 3.6; 3.5 panics).
    let odd = alarm(&endpoint, ACTIVATE, me, 7).await.expect("activate 7");
    assert_eq!(listed(&odd), vec![(me, 7)]);
    // GET lists by type and ignores the member id.
    let all = vec![(0, NOSPACE), (nobody, NOSPACE), (me, 7)];
    let mut sorted_all = all.clone();
    sorted_all.sort();
    assert_eq!(listed(&get_all().await.expect("get")), sorted_all);
    assert_eq!(
        listed(&alarm(&endpoint, GET, me, NONE).await.expect("get")),
        sorted_all
    );
    assert_eq!(
        listed(&alarm(&endpoint, GET, me, NOSPACE).await.expect("get")),
        vec![(0, NOSPACE), (nobody, NOSPACE)]
    );
    assert!(alarm(&endpoint, GET, 0, CORRUPT)
        .await
        .expect("get")
        .alarms
        .is_empty());
    // Status.errors: Go's text form of each AlarmMember (a zero id is left out, the
    // unnamed type is its number).
    let mut errors = raw_status(&endpoint).await.errors;
    errors.sort();
    let mut expected = vec![
        "alarm:NOSPACE ".to_owned(),
        format!("memberID:{nobody} alarm:NOSPACE "),
        format!("memberID:{me} alarm:7 "),
    ];
    expected.sort();
    assert_eq!(errors, expected);
    // etcd 3.6's etcd_debugging_server_alarms (etcd 3.4 has no alarm metric).
    if cluster.target() == Target::Quantykube {
        let metrics = http_get(&format!("{endpoint}/metrics"), None).await;
        for (member, kind) in [(nobody, "NOSPACE"), (me, "7")] {
            let series = format!(
                "etcd_debugging_server_alarms{{alarm_type=\"{kind}\",server_id=\"{member:x}\"}} 1"
            );
            assert!(metrics.body.contains(&series), "no {series} in /metrics");
        }
    }
    // /health names the first alarm it meets; excluding by name leaves the others.
    let health = http_get(&format!("{endpoint}/health?exclude=NOSPACE"), None).await;
    assert_eq!(health.status, 503, "{health:?}");
    if cluster.target() == Target::Quantykube {
        assert!(health.body.contains("ALARM UNKNOWN"), "{health:?}");
    }
    let health = http_get(
        &format!("{endpoint}/health?exclude=NOSPACE&exclude=7"),
        None,
    )
    .await;
    assert_eq!(health.status, 200, "{health:?}");

    // ACTIVATE of NONE: etcd 3.4 stores a NONE alarm; 3.5+ (and QuantyKube) ignore it.
    let none = alarm(&endpoint, ACTIVATE, me, NONE)
        .await
        .expect("activate none");
    match cluster.target() {
        Target::Etcd => {
            assert_eq!(listed(&none), vec![(me, NONE)]);
            let gone = alarm(&endpoint, DEACTIVATE, me, NONE)
                .await
                .expect("deactivate");
            assert_eq!(listed(&gone), vec![(me, NONE)]);
        }
        Target::Quantykube => assert!(none.alarms.is_empty(), "{none:?}"),
    }
    // DEACTIVATE answers with what it removed, or nothing; NONE removes nothing.
    assert!(alarm(&endpoint, DEACTIVATE, me, NOSPACE)
        .await
        .expect("deactivate")
        .alarms
        .is_empty());
    assert!(alarm(&endpoint, DEACTIVATE, 0, NONE)
        .await
        .expect("deactivate")
        .alarms
        .is_empty());
    for (member, kind) in all {
        let removed = alarm(&endpoint, DEACTIVATE, member, kind)
            .await
            .expect("deactivate");
        assert_eq!(listed(&removed), vec![(member, kind)]);
    }
    assert!(get_all().await.expect("get").alarms.is_empty());
    assert!(raw_status(&endpoint).await.errors.is_empty());
    // etcd 3.4 answers Alarm without a header; 3.6 (and QuantyKube) fill it.
    if cluster.target() == Target::Quantykube {
        let header = get_all().await.expect("get").header.expect("header");
        assert_eq!(header.member_id, me);
    }
}

#[tokio::test]
async fn corrupt_alarm_refuses_changes_and_serves_reads() {
    let cluster = Cluster::start(3).await;
    let mut client = cluster.client(0).await;
    client.put("a", "1", None).await.expect("put");
    let lease = client.lease_grant(600, None).await.expect("grant").id();
    // Raising CORRUPT is the corruption checks' job; the Alarm RPC raises it here.
    let raised = alarm(
        &cluster.endpoint(1),
        action::ACTIVATE,
        cluster.member_id(1),
        alarm_type::CORRUPT,
    )
    .await
    .expect("activate corrupt");
    assert_eq!(
        listed(&raised),
        vec![(cluster.member_id(1), alarm_type::CORRUPT)]
    );

    // Every member refuses every change, as etcd's applierV3Corrupt.
    for i in 0..3 {
        let mut client = cluster.client(i).await;
        assert_grpc_error(client.put("b", "2", None).await, Code::DataLoss, CORRUPT);
        assert_grpc_error(client.delete("a", None).await, Code::DataLoss, CORRUPT);
        assert_grpc_error(
            client
                .txn(Txn::new().and_then([TxnOp::delete("a", None)]))
                .await,
            Code::DataLoss,
            CORRUPT,
        );
        assert_grpc_error(client.compact(1, None).await, Code::DataLoss, CORRUPT);
        assert_grpc_error(client.lease_grant(60, None).await, Code::DataLoss, CORRUPT);
        assert_grpc_error(client.lease_revoke(lease).await, Code::DataLoss, CORRUPT);
        // Reads never reach the log: linearizable, serializable, read-only txns.
        let got = client.get("a", None).await.expect("get");
        assert_eq!(got.kvs()[0].value(), b"1");
        let serializable = etcd_client::GetOptions::new().with_serializable();
        client
            .get("a", Some(serializable))
            .await
            .expect("serializable get");
        client
            .txn(Txn::new().and_then([TxnOp::get("a", None)]))
            .await
            .expect("read-only txn");
        assert_health_alarm(&cluster, i, "ALARM CORRUPT").await;
    }
    let out = cluster.etcdctl(&["put", "c", "3"]).await;
    assert!(out.stderr.contains(&format!("Error: {CORRUPT}")), "{out:?}");
    // etcd 3.6's /readyz fails its data_corruption check (etcd 3.4 has no /readyz).
    if cluster.target() == Target::Quantykube {
        let ready = http_get(&format!("{}/readyz", cluster.endpoint(2)), None).await;
        assert_eq!(ready.status, 503, "{ready:?}");
        assert!(
            ready
                .body
                .contains("[-]data_corruption failed: alarm activated: CORRUPT"),
            "{ready:?}"
        );
        let live = http_get(&format!("{}/livez", cluster.endpoint(2)), None).await;
        assert_eq!(live.status, 200, "{live:?}");
    }
    cluster.etcdctl(&["alarm", "disarm"]).await.assert_success();
    client.put("b", "2", None).await.expect("put after disarm");
    client
        .lease_revoke(lease)
        .await
        .expect("revoke after disarm");
}

#[tokio::test]
async fn an_alarm_raised_while_a_member_was_down_reaches_it_by_snapshot() {
    // QuantyKube keeps few log entries with `--snapshot-count 50`, so the member that
    // missed 1 000 entries catches up by snapshot, alarms included; etcd 3.4 keeps 5 000
    // entries and replays them instead.
    let mut cluster =
        Cluster::start_with(ClusterOptions::new(3).args(["--snapshot-count", "50"])).await;
    let leader = cluster.leader_index().await;
    let down = (leader + 1) % 3;
    cluster.kill9(down);
    let client = cluster.client(leader).await;
    let raised = alarm(
        &cluster.endpoint(leader),
        action::ACTIVATE,
        cluster.member_id(leader),
        alarm_type::NOSPACE,
    )
    .await
    .expect("activate");
    assert_eq!(raised.alarms.len(), 1);
    // Entries that NOSPACE lets through: deletes (of nothing, so no revision), from
    // eight writers at once, many snapshots' worth.
    let writers = (0..8).map(|w| {
        let mut client = client.clone();
        async move {
            for i in (w..1000).step_by(8) {
                client
                    .delete(format!("none/{i}"), None)
                    .await
                    .expect("delete");
            }
        }
    });
    futures::future::join_all(writers).await;
    cluster.start_member(down);
    cluster
        .wait_member_ready(down, crate::harness::START_TIMEOUT)
        .await;
    // Status.errors and /health read the member's own store.
    let expected = vec![format!(
        "memberID:{} alarm:NOSPACE ",
        cluster.member_id(leader)
    )];
    let deadline = Deadline::after(Duration::from_secs(20), "the alarm reaches the member");
    while raw_status(&cluster.endpoint(down)).await.errors != expected {
        deadline.tick().await;
    }
    assert_health_alarm(&cluster, down, "ALARM NOSPACE").await;
    if cluster.target() == Target::Quantykube {
        let log = std::fs::read_to_string(cluster.log_path(down)).expect("member log");
        assert!(log.contains("installed snapshot"), "no snapshot install");
    }
    let mut client = cluster.client(down).await;
    assert_grpc_error(
        client.put("k", "v", None).await,
        Code::ResourceExhausted,
        NO_SPACE,
    );
}

#[tokio::test]
async fn a_member_whose_own_store_reached_its_quota_raises_nospace_for_itself() {
    // Member 0 admits every write (a large quota); members 1 and 2 reach theirs by
    // applying what member 0 proposed, and raise NOSPACE for themselves, as etcd's
    // apply-time quota check does. Then the whole cluster refuses growing writes.
    let cluster = Cluster::start_with(ClusterOptions::new(3).member_args(|spec| {
        let quota = if spec.index == 0 { 8 * QUOTA } else { QUOTA };
        vec![format!("--quota-backend-bytes={quota}")]
    }))
    .await;
    let mut client = cluster.client(0).await;
    fill_until_no_space(&mut client).await;
    let alarms = agreed_alarms(&cluster).await;
    let others: Vec<String> = (1..3)
        .map(|i| format!("memberID:{} alarm:NOSPACE ", cluster.member_id(i)))
        .collect();
    assert!(
        alarms.iter().all(|a| others.contains(a)),
        "only members 1 and 2 reached a quota: {alarms:?}"
    );
    assert_grpc_error(
        client.put("k", "v", None).await,
        Code::ResourceExhausted,
        NO_SPACE,
    );
}
