//! The admin API's Snapshot resource: created on the serving member's disk in etcd's
//! snapshot format (etcdctl 3.4 reads the downloaded file), described alike by every
//! member, downloaded through any member, deleted with guards. etcd has no such API,
//! so against etcd these tests say so and pass.

use std::time::Duration;

use quantykube::proto::admin_v1::admin_client::AdminClient;
use quantykube::proto::admin_v1::{
    CreateSnapshotRequest, DeleteOptions, DeleteSnapshotRequest, DownloadSnapshotRequest,
    GetSnapshotRequest, ListSnapshotsRequest, ResourceMetadata, Snapshot, SnapshotState,
};
use sha2::{Digest, Sha256};
use tonic::transport::Channel;
use tonic::Code;

use crate::admin_support::{admin, assert_code, etcd_has_none, named};
use crate::harness::{Cluster, Deadline};

fn create(name: &str) -> CreateSnapshotRequest {
    CreateSnapshotRequest {
        snapshot: Some(Snapshot {
            metadata: Some(ResourceMetadata {
                name: name.into(),
                ..Default::default()
            }),
            status: None,
        }),
    }
}

async fn get(client: &mut AdminClient<Channel>, name: &str) -> Result<Snapshot, tonic::Status> {
    client
        .get_snapshot(GetSnapshotRequest {
            snapshot: named(name),
        })
        .await
        .map(|r| r.into_inner())
}

fn state(snapshot: &Snapshot) -> SnapshotState {
    snapshot.status.as_ref().expect("status").state()
}

/// Creates `name` through `client` and waits until it is READY.
async fn create_ready(client: &mut AdminClient<Channel>, name: &str) -> Snapshot {
    let created = client
        .create_snapshot(create(name))
        .await
        .expect("CreateSnapshot")
        .into_inner();
    assert!(
        matches!(
            state(&created),
            SnapshotState::Creating | SnapshotState::Ready
        ),
        "{created:?}"
    );
    let deadline = Deadline::after(Duration::from_secs(30), format!("snapshot {name} ready"));
    loop {
        let seen = get(client, name).await.expect("GetSnapshot");
        match state(&seen) {
            SnapshotState::Ready => return seen,
            SnapshotState::Creating => deadline.tick().await,
            other => panic!("snapshot {name} is {other:?}: {seen:?}"),
        }
    }
}

async fn download(client: &mut AdminClient<Channel>, name: &str) -> Result<Vec<u8>, tonic::Status> {
    let mut stream = client
        .download_snapshot(DownloadSnapshotRequest {
            snapshot: named(name),
        })
        .await?
        .into_inner();
    let mut bytes = Vec::new();
    while let Some(message) = stream.message().await? {
        bytes.extend_from_slice(&message.chunk);
    }
    Ok(bytes)
}

/// Sections 3.1-3.3, 3.5, 7 and 8 for snapshots, and the download's file.
#[tokio::test]
async fn sections_3_1_to_3_5_7_and_8_for_snapshots() {
    if etcd_has_none("snapshots as resources") {
        return;
    }
    let cluster = Cluster::start(3).await;
    let mut kv = cluster.client(0).await;
    let mut last = 0;
    for i in 0..100 {
        last = kv
            .put(format!("key-{i:03}"), format!("value-{i}"), None)
            .await
            .expect("put")
            .header()
            .expect("header")
            .revision();
    }
    let mut holder = admin(&cluster, 1).await;
    let mut other = admin(&cluster, 2).await;
    assert_code(
        holder.create_snapshot(create("Bad_Name")).await,
        Code::InvalidArgument,
        "snapshot.metadata.name",
    );
    assert_code(
        holder
            .create_snapshot(CreateSnapshotRequest { snapshot: None })
            .await,
        Code::InvalidArgument,
        "snapshot",
    );
    let ready = create_ready(&mut holder, "s1").await;
    let meta = ready.metadata.clone().expect("metadata");
    let status = ready.status.clone().expect("status");
    assert_eq!(
        uuid::Uuid::parse_str(&meta.uid).unwrap().get_version_num(),
        4
    );
    assert!(status.revision >= last, "{status:?}");
    assert_eq!(status.member.as_ref().map(|m| m.name.as_str()), Some("m1"));
    assert_eq!(status.sha256.len(), 64);
    assert_code(
        holder.create_snapshot(create("s1")).await,
        Code::AlreadyExists,
        "s1",
    );

    // Every member describes it alike; the download through another member is the
    // holder's file, with the size and SHA-256 the status gives.
    let seen = get(&mut other, "s1").await.expect("GetSnapshot elsewhere");
    assert_eq!(seen, ready);
    let bytes = download(&mut other, "s1").await.expect("DownloadSnapshot");
    assert_eq!(bytes.len() as i64, status.size);
    let sha: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sha, status.sha256);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s1.db");
    std::fs::write(&file, &bytes).expect("write");
    let etcd_view = crate::snapshot::etcdctl_status(&file);
    assert_eq!(
        etcd_view["revision"].as_i64(),
        Some(status.revision),
        "{etcd_view}"
    );

    // 3.2: paging over three snapshots.
    create_ready(&mut holder, "s2").await;
    create_ready(&mut other, "s3").await;
    let mut names = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = holder
            .list_snapshots(ListSnapshotsRequest {
                page_size: 2,
                page_token: token,
            })
            .await
            .expect("ListSnapshots")
            .into_inner();
        pages += 1;
        names.extend(
            page.snapshots
                .iter()
                .map(|s| s.metadata.as_ref().unwrap().name.clone()),
        );
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(
        (names, pages),
        (vec!["s1".to_string(), "s2".into(), "s3".into()], 2)
    );
    assert_code(
        holder
            .list_snapshots(ListSnapshotsRequest {
                page_size: -5,
                page_token: String::new(),
            })
            .await,
        Code::InvalidArgument,
        "page_size",
    );

    // 3.5 and 7: guards, then the delete, served by a member that does not hold the
    // file; the holder removes it when it next serves a snapshot method.
    let delete = |uid: &str, version: i64| DeleteSnapshotRequest {
        snapshot: named("s1"),
        options: Some(DeleteOptions {
            version,
            uid: uid.into(),
        }),
    };
    assert_code(
        other.delete_snapshot(delete("", meta.version + 1)).await,
        Code::Aborted,
        "version",
    );
    assert_code(
        other.delete_snapshot(delete("x", 0)).await,
        Code::InvalidArgument,
        "options.uid",
    );
    assert_code(
        other.delete_snapshot(delete("", -1)).await,
        Code::InvalidArgument,
        "options.version",
    );
    assert_code(
        other
            .delete_snapshot(delete(&uuid::Uuid::new_v4().to_string(), 0))
            .await,
        Code::Aborted,
        "uid",
    );
    let deleted = other
        .delete_snapshot(delete(&meta.uid, meta.version))
        .await
        .expect("DeleteSnapshot")
        .into_inner();
    assert_eq!(deleted.metadata.as_ref().unwrap().uid, meta.uid);
    assert_code(get(&mut holder, "s1").await, Code::NotFound, "s1");
    assert_code(download(&mut other, "s1").await, Code::NotFound, "s1");
    let held = cluster
        .data_dir(1)
        .join("admin-snapshots")
        .join(format!("{}.db", meta.uid));
    assert!(!held.exists(), "{} outlived its snapshot", held.display());
    assert_code(
        other.delete_snapshot(delete("", 0)).await,
        Code::NotFound,
        "s1",
    );

    // The ABA case: the name again is another snapshot; the old uid is refused.
    let again = create_ready(&mut holder, "s1").await;
    assert_ne!(again.metadata.as_ref().unwrap().uid, meta.uid);
    assert_code(
        holder.delete_snapshot(delete(&meta.uid, 0)).await,
        Code::Aborted,
        "uid",
    );
}
