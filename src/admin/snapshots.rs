//! The Snapshot resource: a file in etcd's snapshot format (`backup::export`, what
//! Maintenance.Snapshot streams) kept in the creating member's `admin-snapshots`
//! folder, named by the snapshot's uid, with its record in the replicated store
//! (`store::snapshot_records`) so that every member lists and describes every
//! snapshot.
//!
//! CreateSnapshot records the snapshot (CREATING) and writes the file in the
//! background, then records READY with its revision, size and SHA-256, or FAILED. A
//! download from another member is relayed to the holder. Files without a record (a
//! delete served elsewhere, a creation cut short) are removed by the holder whenever
//! it serves a snapshot method. This module never writes records except through the
//! log.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Status};

use crate::auth::Caller;
use crate::backup::export::{self, SnapshotSink};
use crate::node::{Node, NodeError};
use crate::proto::admin_v1::admin_client::AdminClient;
use crate::proto::admin_v1::{
    CreateSnapshotRequest, DeleteSnapshotRequest, DownloadSnapshotRequest,
    DownloadSnapshotResponse, GetSnapshotRequest, ListSnapshotsRequest, ListSnapshotsResponse,
    ObjectRef, ResourceMetadata, Snapshot, SnapshotState, SnapshotStatus,
};
use crate::proto::command::change_snapshot_record::Change;
use crate::proto::command::command::Request as CommandRequest;
use crate::proto::command::command_error::Kind;
use crate::proto::command::command_result::Result as Outcome;
use crate::proto::command::{ChangeSnapshotRecord, SnapshotGuard, SnapshotRecord};
use crate::relay;
use crate::store::snapshot_records;

use super::{paging, records, resource, validate, AdminError};

/// The uids of the snapshots this process is writing: a record of this member still
/// CREATING but not here was cut short by a restart, and is recorded FAILED.
static WRITING: std::sync::LazyLock<std::sync::Mutex<std::collections::BTreeSet<String>>> =
    std::sync::LazyLock::new(Default::default);

fn writing() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<String>> {
    WRITING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The chunks a download streams.
const CHUNK_BYTES: usize = 64 * 1024;
const CHUNKS_IN_FLIGHT: usize = 8;

pub type DownloadStream =
    Pin<Box<dyn Stream<Item = Result<DownloadSnapshotResponse, Status>> + Send + 'static>>;

fn not_found(name: &str) -> AdminError {
    AdminError::NotFound {
        kind: "snapshot",
        name: name.to_string(),
    }
}

fn file_of(node: &Node, record: &SnapshotRecord) -> PathBuf {
    node.admin_snapshot_dir().join(format!("{}.db", record.uid))
}

async fn all_records(node: &Node) -> Result<Vec<SnapshotRecord>, AdminError> {
    node.read_barrier().await?;
    Ok(node
        .read_store(snapshot_records::read_snapshot_records)
        .await?)
}

async fn record(node: &Node, name: &str) -> Result<SnapshotRecord, AdminError> {
    all_records(node)
        .await?
        .into_iter()
        .find(|r| r.name == name)
        .ok_or_else(|| not_found(name))
}

/// The resources of `records`, each naming its holder by the holder's member name.
async fn resources(node: &Node, records: Vec<SnapshotRecord>) -> Result<Vec<Snapshot>, AdminError> {
    let members = records::current_members(node).await?;
    let holder = |id: u64| {
        members
            .iter()
            .find(|m| m.record.member_id == id)
            .map(|m| m.record.name.clone())
            // A member removed since: named as the member records name the unnamed.
            .unwrap_or_else(|| format!("member-{id:016x}"))
    };
    Ok(records
        .into_iter()
        .map(|record| Snapshot {
            metadata: Some(ResourceMetadata {
                atespace: String::new(),
                name: record.name.clone(),
                uid: record.uid.clone(),
                version: record.version,
                create_time: Some(resource::timestamp(record.create_time_unix_nanos)),
                update_time: Some(resource::timestamp(record.update_time_unix_nanos)),
            }),
            status: Some(SnapshotStatus {
                state: record.state,
                revision: record.revision,
                size: record.size,
                sha256: record.sha256.clone(),
                member: Some(ObjectRef {
                    atespace: String::new(),
                    name: holder(record.member_id),
                }),
                error_reason: record.error_reason.clone(),
            }),
        })
        .collect())
}

async fn one(node: &Node, record: SnapshotRecord) -> Result<Snapshot, AdminError> {
    let name = record.name.clone();
    resources(node, vec![record])
        .await?
        .pop()
        .ok_or_else(|| not_found(&name))
}

/// Proposes `change` and returns the record it applied to.
async fn change(node: &Node, change: Change) -> Result<Option<SnapshotRecord>, AdminError> {
    let command = CommandRequest::ChangeSnapshotRecord(ChangeSnapshotRecord {
        time_unix_nanos: records::unix_nanos(node),
        change: Some(change),
    });
    let outcome = node.propose(command).await?;
    node.read_barrier().await?;
    match outcome {
        Some(Outcome::ChangeSnapshotRecord(result)) => Ok(result.record),
        _ => Ok(None),
    }
}

pub async fn get(
    node: &Node,
    request: Request<GetSnapshotRequest>,
) -> Result<Snapshot, AdminError> {
    let name = validate::object_ref("snapshot", request.get_ref().snapshot.as_ref())?;
    sweep(node).await;
    one(node, record(node, &name).await?).await
}

pub async fn list(
    node: &Node,
    request: Request<ListSnapshotsRequest>,
) -> Result<ListSnapshotsResponse, AdminError> {
    let request = request.into_inner();
    let size = paging::page_size(request.page_size)?;
    let after = paging::start_after(&request.page_token)?;
    sweep(node).await;
    let (page, next_page_token) = paging::page(
        all_records(node).await?,
        |r| r.name.as_str(),
        size,
        after.as_deref(),
    );
    Ok(ListSnapshotsResponse {
        snapshots: resources(node, page).await?,
        next_page_token,
    })
}

pub async fn create(
    node: &Arc<Node>,
    request: Request<CreateSnapshotRequest>,
) -> Result<Snapshot, AdminError> {
    let snapshot = request.get_ref().snapshot.as_ref();
    let snapshot = snapshot.ok_or_else(|| AdminError::invalid("snapshot", "is required"))?;
    let name = validate::identity("snapshot.metadata", snapshot.metadata.as_ref())?;
    sweep(node).await;
    let uid = uuid::Uuid::new_v4().hyphenated().to_string();
    let create = Change::Create(SnapshotRecord {
        name: name.clone(),
        uid: uid.clone(),
        member_id: node.id(),
        ..Default::default()
    });
    // Before the record exists, so that no sweep takes it for one cut short.
    writing().insert(uid.clone());
    let proposed = change(node, create).await;
    if !matches!(proposed, Ok(Some(_))) {
        writing().remove(&uid);
    }
    let created = match proposed {
        Err(AdminError::Node(NodeError::Command(Kind::ResourceExists))) => {
            return Err(AdminError::AlreadyExists {
                kind: "snapshot",
                name,
            })
        }
        other => other?.ok_or_else(|| not_found(&name))?,
    };
    let writer = node.clone();
    let record = created.clone();
    tokio::spawn(async move {
        write_and_record(&writer, record.clone()).await;
        writing().remove(&record.uid);
    });
    one(node, created).await
}

/// Writes `record`'s file and records how that went.
async fn write_and_record(node: &Arc<Node>, record: SnapshotRecord) {
    let path = file_of(node, &record);
    let written = write_file(node, &path).await;
    let finish = match &written {
        Ok(file) => SnapshotRecord {
            state: SnapshotState::Ready as i32,
            revision: file.revision,
            size: file.size,
            sha256: file.sha256.clone(),
            ..record.clone()
        },
        Err(reason) => {
            tracing::warn!(snapshot = %record.name, %reason, "admin snapshot failed");
            let _ = std::fs::remove_file(&path);
            SnapshotRecord {
                state: SnapshotState::Failed as i32,
                error_reason: reason.clone(),
                ..record.clone()
            }
        }
    };
    if let Err(error) = change(node, Change::Finish(finish)).await {
        tracing::warn!(snapshot = %record.name, %error, "could not record the snapshot's state");
    }
}

/// What a written file holds.
struct Written {
    revision: i64,
    size: i64,
    sha256: String,
}

/// Hashes what passes to the file, for the SHA-256 of the whole file.
struct HashingFile {
    file: std::io::BufWriter<std::fs::File>,
    sha: Sha256,
    bytes: u64,
}

impl Write for HashingFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.sha.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl SnapshotSink for HashingFile {}

async fn write_file(node: &Node, path: &Path) -> Result<Written, String> {
    let store = node.store().clone();
    let alarms = store.alarm_bucket();
    let no_install = store.readable().await;
    let path = path.to_path_buf();
    let work = move || -> Result<Written, String> {
        let export = store.export(&no_install).map_err(|e| e.to_string())?;
        drop(no_install);
        let dir = path.parent().ok_or("no folder")?;
        quantykube_raft::durable::create_dir_all(dir).map_err(|e| e.to_string())?;
        let part = path.with_extension("db.part");
        let file = std::fs::File::create(&part).map_err(|e| e.to_string())?;
        let mut out = HashingFile {
            file: std::io::BufWriter::new(file),
            sha: Sha256::new(),
            bytes: 0,
        };
        let (written, digest) =
            export::write_database(&export, alarms, &mut out).map_err(|e| e.to_string())?;
        out.write_all(&digest).map_err(|e| e.to_string())?;
        out.flush().map_err(|e| e.to_string())?;
        let HashingFile { file, sha, bytes } = out;
        file.into_inner()
            .map_err(|e| e.to_string())?
            .sync_all()
            .map_err(|e| e.to_string())?;
        // READY goes into the log once this returns: the name must be on disk first.
        quantykube_raft::durable::rename(&part, &path).map_err(|e| e.to_string())?;
        Ok(Written {
            revision: written.revision,
            size: i64::try_from(bytes).unwrap_or(i64::MAX),
            sha256: sha.finalize().iter().map(|b| format!("{b:02x}")).collect(),
        })
    };
    node.offload().run(work).await.map_err(|e| e.to_string())?
}

pub async fn delete(
    node: &Node,
    request: Request<DeleteSnapshotRequest>,
) -> Result<Snapshot, AdminError> {
    let name = validate::object_ref("snapshot", request.get_ref().snapshot.as_ref())?;
    let options = request.get_ref().options.clone().unwrap_or_default();
    validate::guards("options", &options.uid, options.version)?;
    let guard = SnapshotGuard {
        name: name.clone(),
        uid: options.uid.clone(),
        version: options.version,
    };
    let deleted = match change(node, Change::Delete(guard)).await {
        Err(AdminError::Node(NodeError::Command(Kind::VersionMismatch))) => {
            let guard = if options.uid.is_empty() {
                "version"
            } else {
                "uid or version"
            };
            return Err(AdminError::Aborted {
                kind: "snapshot",
                name,
                guard,
            });
        }
        Err(AdminError::Node(NodeError::Command(Kind::ResourceNotFound))) => {
            return Err(not_found(&name))
        }
        other => other?.ok_or_else(|| not_found(&name))?,
    };
    // The holder removes the file now if it serves this; otherwise at its next sweep.
    sweep(node).await;
    one(node, deleted).await
}

/// Removes this member's snapshot files that no record holds any more, and records
/// FAILED the snapshots it was writing when it stopped.
async fn sweep(node: &Node) {
    let dir = node.admin_snapshot_dir().to_path_buf();
    let Ok(records) = node
        .read_store(snapshot_records::read_snapshot_records)
        .await
    else {
        return;
    };
    let id = node.id();
    let creating = SnapshotState::Creating as i32;
    let mine: Vec<&SnapshotRecord> = records.iter().filter(|r| r.member_id == id).collect();
    let cut_short: Vec<SnapshotRecord> = {
        let writing = writing();
        mine.iter()
            .filter(|r| r.state == creating && !writing.contains(&r.uid))
            .map(|r| SnapshotRecord {
                state: SnapshotState::Failed as i32,
                error_reason: "the member restarted while writing it".into(),
                ..(*r).clone()
            })
            .collect()
    };
    for failed in cut_short {
        if let Err(error) = change(node, Change::Finish(failed)).await {
            tracing::warn!(%error, "could not record a snapshot cut short");
        }
    }
    // A ready snapshot's file, and whatever a writer running here has on disk.
    let ready = SnapshotState::Ready as i32;
    let kept: Vec<String> = {
        let writing = writing();
        mine.iter()
            .flat_map(|r| match (r.state == ready, writing.contains(&r.uid)) {
                (_, true) => vec![format!("{}.db", r.uid), format!("{}.db.part", r.uid)],
                (true, false) => vec![format!("{}.db", r.uid)],
                (false, false) => Vec::new(),
            })
            .collect()
    };
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        if !kept.contains(&file) {
            if let Err(error) = std::fs::remove_file(entry.path()) {
                tracing::warn!(file, %error, "could not remove a deleted snapshot's file");
            }
        }
    }
}

pub async fn download(
    node: &Node,
    request: Request<DownloadSnapshotRequest>,
) -> Result<DownloadStream, AdminError> {
    let caller = Caller::of(&request);
    let name = validate::object_ref("snapshot", request.get_ref().snapshot.as_ref())?;
    let record = record(node, &name).await?;
    if record.state != SnapshotState::Ready as i32 {
        return Err(AdminError::FailedPrecondition(format!(
            "snapshot {name:?} is not ready"
        )));
    }
    if record.member_id != node.id() {
        if relay::is_relayed(&request) {
            return Err(AdminError::FailedPrecondition(format!(
                "snapshot {name:?} is not on this member"
            )));
        }
        let channel = relay::to_member(node, record.member_id)
            .await
            .map_err(|_| {
                AdminError::FailedPrecondition(format!(
                    "the member holding snapshot {name:?} cannot be reached"
                ))
            })?;
        let stream = AdminClient::new(channel)
            .max_decoding_message_size(usize::MAX)
            .download_snapshot(relay::request(request.into_inner(), &caller))
            .await?
            .into_inner();
        return Ok(Box::pin(stream));
    }
    let path = file_of(node, &record);
    let file = std::fs::File::open(&path).map_err(|e| {
        tracing::warn!(path = %path.display(), error = %e, "a ready snapshot's file is missing");
        AdminError::FailedPrecondition(format!("snapshot {name:?} has no file on its member"))
    })?;
    let (queue, received) = mpsc::channel(CHUNKS_IN_FLIGHT);
    tokio::task::spawn_blocking(move || send_file(file, &queue));
    Ok(Box::pin(ReceiverStream::new(received)))
}

fn send_file(
    mut file: std::fs::File,
    queue: &mpsc::Sender<Result<DownloadSnapshotResponse, Status>>,
) {
    loop {
        let mut chunk = vec![0u8; CHUNK_BYTES];
        let message = match file.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                chunk.truncate(n);
                Ok(DownloadSnapshotResponse {
                    chunk: chunk.into(),
                })
            }
            Err(error) => Err(Status::internal(format!(
                "reading the snapshot file: {error}"
            ))),
        };
        let failed = message.is_err();
        if queue.blocking_send(message).is_err() || failed {
            return;
        }
    }
}
